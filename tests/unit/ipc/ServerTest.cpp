// The Unix-socket server on a real socket and event loop (no privilege needed): how it shares the
// loop between connections.
#include "ipc/Server.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "fakes/migrate/FakePageMover.h"
#include "fakes/registry/FakeAddressSpace.h"
#include "ipc/FrameCodec.h"

namespace {

namespace pb = tensortier::v1;

// Records which session each admin request came from, in the order the loop handled them.
class OrderRecordingAdmin final : public tt::ipc::AdminHandler {
 public:
  void handleAdmin(const tt::ipc::Session& s, const pb::ClientMessage&, pb::DaemonMessage& reply) override {
    order.push_back(s.id);
    reply.mutable_status()->set_daemon_version("fake");
  }
  std::vector<uint64_t> order;  // loop thread only; read after the loop stopped
};

// A blocking client socket speaking raw frames.
class RawClient {
 public:
  explicit RawClient(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ADD_FAILURE() << "connect " << path << ": " << std::strerror(errno);
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~RawClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool sendAll(const std::string& bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = ::write(fd_, bytes.data() + sent, bytes.size() - sent);
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }
  // Reads whole frames until `count` replies have come; false on EOF or error.
  bool receive(size_t count, std::vector<pb::DaemonMessage>* out = nullptr) {
    std::string_view frame;
    size_t got = 0;
    char buffer[65536];
    while (got < count) {
      while (got < count && decoder_.next(1 << 20, frame) == tt::ipc::FrameDecoder::Status::Frame) {
        pb::DaemonMessage m;
        if (!m.ParseFromArray(frame.data(), static_cast<int>(frame.size()))) return false;
        if (out) out->push_back(std::move(m));
        ++got;
      }
      if (got == count) break;
      const ssize_t n = ::read(fd_, buffer, sizeof buffer);
      if (n <= 0) return false;
      decoder_.append(buffer, static_cast<size_t>(n));
    }
    return true;
  }

 private:
  int fd_ = -1;
  tt::ipc::FrameDecoder decoder_;
};

std::string frames(const pb::ClientMessage& m, size_t times) {
  std::string out;
  for (size_t i = 0; i < times; ++i) EXPECT_TRUE(tt::ipc::appendFrame(m, out));
  return out;
}

pb::ClientMessage helloMessage() {
  pb::ClientMessage m;
  m.set_seq(1);
  m.mutable_hello()->add_versions(1);
  m.mutable_hello()->set_client_name("server-test");
  return m;
}

pb::ClientMessage statusMessage() {
  pb::ClientMessage m;
  m.set_seq(2);
  m.mutable_status();
  return m;
}

class ServerTest : public ::testing::Test {
 protected:
  ServerTest()
      : registry(space, {}),
        reader(mover),
        handler(registry, reader, nullptr, &admin, "9.9"),
        server(io, registry, handler, {}),
        work(boost::asio::make_work_guard(io)) {}

  void SetUp() override {
    dir = std::filesystem::temp_directory_path() / ("tt-server-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    ASSERT_TRUE(server.listen((dir / "sock").string()).ok());
    loop = std::thread([this] { io.run(); });
  }
  void TearDown() override {
    boost::asio::post(io, [this] { server.stop(); });
    work.reset();
    if (loop.joinable()) loop.join();
    std::filesystem::remove_all(dir);
  }

  tt::test::FakeAddressSpace space;
  tt::registry::Registry registry;
  tt::fakes::FakePageMover mover;
  tt::ipc::PlacementReader reader;
  OrderRecordingAdmin admin;
  tt::ipc::ProtocolHandler handler;
  boost::asio::io_context io;
  tt::ipc::Server server;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work;
  std::filesystem::path dir;
  std::thread loop;
};

// One connection's burst (1000 small requests in one read) does not hold the loop until it is all
// served: another connection's request, ready at the same time, is served after at most a turn's
// worth of the burst.
TEST_F(ServerTest, ABurstOfRequestsDoesNotKeepOtherConnectionsWaitingForAllOfIt) {
  RawClient burst((dir / "sock").string()), single((dir / "sock").string());
  for (RawClient* c : {&burst, &single}) {
    ASSERT_TRUE(c->sendAll(frames(helloMessage(), 1)));
    ASSERT_TRUE(c->receive(1)) << "no Hello reply";
  }
  // Both sessions known: the first admin request of each names it. Then hold the loop while both
  // are written, so that both are ready when it runs again, the burst first.
  ASSERT_TRUE(burst.sendAll(frames(statusMessage(), 1)));
  ASSERT_TRUE(burst.receive(1));
  ASSERT_TRUE(single.sendAll(frames(statusMessage(), 1)));
  ASSERT_TRUE(single.receive(1));
  std::promise<void> release;
  std::promise<void> held;
  boost::asio::post(io, [&] {
    held.set_value();
    release.get_future().wait();
  });
  held.get_future().wait();
  constexpr size_t kBurst = 1000;
  ASSERT_TRUE(burst.sendAll(frames(statusMessage(), kBurst)));
  ASSERT_TRUE(single.sendAll(frames(statusMessage(), 1)));
  release.set_value();
  ASSERT_TRUE(single.receive(1)) << "the single request got no reply";
  ASSERT_TRUE(burst.receive(kBurst)) << "the burst got fewer replies than requests";

  std::promise<std::vector<uint64_t>> order;
  boost::asio::post(io, [&] { order.set_value(admin.order); });
  const std::vector<uint64_t> handled = order.get_future().get();
  ASSERT_EQ(handled.size(), kBurst + 3);
  const uint64_t burstSession = handled[0], singleSession = handled[1];
  ASSERT_NE(burstSession, singleSession);
  size_t before = 0;  // burst requests handled before the single one
  for (size_t i = 2; i < handled.size() && handled[i] != singleSession; ++i) ++before;
  EXPECT_LE(before, tt::ipc::Server::kFramesPerTurn)
      << "the single request waited for " << before << " of the burst's " << kBurst << " requests";
  EXPECT_GT(before, 0u) << "the burst, ready first, was not served first";
}

}  // namespace
