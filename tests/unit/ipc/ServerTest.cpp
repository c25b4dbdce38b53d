// The Unix-socket server on a real socket and event loop (no privilege needed): how it shares the
// loop between connections.
#include "ipc/Server.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <poll.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <future>
#include <mutex>
#include <stdexcept>
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

// The fake address space, except that a probe of a range starting at kWaitingProbe waits until the
// test opens the gate: a process whose exec (or mmap lock) keeps the kernel from answering; and
// that one of a range starting at kThrowingProbe throws (a bug, or std::bad_alloc).
class WaitingAddressSpace final : public tt::registry::AddressSpaceInspector {
 public:
  static constexpr uint64_t kWaitingProbe = 0x30000000;
  static constexpr uint64_t kThrowingProbe = 0x40000000;
  explicit WaitingAddressSpace(tt::test::FakeAddressSpace& inner) : inner_(inner) {}
  ~WaitingAddressSpace() override { open(); }

  void open() {
    std::call_once(opened_, [this] { gate_.set_value(); });
  }
  // Whether a probe is waiting at the gate now (or has).
  std::future<void> reached() { return reached_.get_future(); }

  tt::Result<bool> rangeMapped(pid_t pid, uid_t uid, uint64_t start, uint64_t end, bool mayOpen) override {
    if (!mayOpen) return inner_.rangeMapped(pid, uid, start, end, false);  // nothing pinned: EWOULDBLOCK
    if (start == kWaitingProbe) {
      reached_.set_value();
      gateOpen_.wait();
      return true;
    }
    if (start == kThrowingProbe) {
      ++thrown;
      throw std::runtime_error("the probe failed in a way nobody expected");
    }
    return inner_.rangeMapped(pid, uid, start, end, mayOpen);
  }
  bool pinsAddressSpace(pid_t pid) override { return inner_.pinsAddressSpace(pid); }
  std::atomic<int> thrown{0};
  tt::Result<bool> replacedAddressSpace(pid_t pid) override { return inner_.replacedAddressSpace(pid); }
  tt::Result<bool> runsAs(pid_t pid, uid_t uid, gid_t gid, bool afterExec) override {
    return inner_.runsAs(pid, uid, gid, afterExec);
  }

 private:
  tt::test::FakeAddressSpace& inner_;
  std::promise<void> gate_;
  std::shared_future<void> gateOpen_ = gate_.get_future().share();
  std::once_flag opened_;
  std::promise<void> reached_;
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
  // Reads whole frames until `count` replies have come; false on EOF or error, or when nothing
  // came for `within`.
  bool receive(size_t count, std::vector<pb::DaemonMessage>* out = nullptr,
               std::chrono::milliseconds within = std::chrono::seconds(60)) {
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
      pollfd ready{fd_, POLLIN, 0};
      if (::poll(&ready, 1, static_cast<int>(within.count())) != 1) return false;
      const ssize_t n = ::read(fd_, buffer, sizeof buffer);
      if (n <= 0) return false;
      decoder_.append(buffer, static_cast<size_t>(n));
    }
    return true;
  }
  // Whether the server closed the connection within `within`: true at end of file, false when a
  // frame came first or nothing came.
  bool closedWithin(std::chrono::milliseconds within) {
    char buffer[4096];
    pollfd ready{fd_, POLLIN, 0};
    if (::poll(&ready, 1, static_cast<int>(within.count())) != 1) return false;
    return ::read(fd_, buffer, sizeof buffer) == 0;
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

pb::ClientMessage registerMessage(uint64_t seq, uint64_t address) {
  pb::ClientMessage m;
  m.set_seq(seq);
  m.mutable_register_region()->set_address(address);
  m.mutable_register_region()->set_length(1 << 20);
  m.mutable_register_region()->set_kind(pb::WEIGHT);
  return m;
}

pb::ClientMessage markMessage(uint64_t seq) {
  pb::ClientMessage m;
  m.set_seq(seq);
  m.mutable_iteration_mark()->set_type(pb::IterationMark::STEP_BEGIN);
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
  explicit ServerTest(tt::ipc::ServerOptions options = {})
      : waiting(space),
        registry(waiting, {}),
        reader(mover),
        handler(registry, reader, nullptr, &admin, "9.9"),
        server(io, registry, handler, options),
        work(boost::asio::make_work_guard(io)) {}

  void SetUp() override {
    dir = std::filesystem::temp_directory_path() / ("tt-server-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    ASSERT_TRUE(server.listen((dir / "sock").string()).ok());
    loop = std::thread([this] { io.run(); });
  }
  void TearDown() override {
    waiting.open();  // a test that failed with a probe at the gate: let the workers stop
    boost::asio::post(io, [this] { server.stop(); });
    work.reset();
    if (loop.joinable()) loop.join();
    std::filesystem::remove_all(dir);
  }

  tt::test::FakeAddressSpace space;
  WaitingAddressSpace waiting;
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

tt::ipc::ServerOptions oneRequestThread() {
  tt::ipc::ServerOptions o;
  o.requestThreads = 1;
  o.requestThreadsPerUid = 1;
  return o;
}

class OneRequestThreadServerTest : public ServerTest {
 protected:
  OneRequestThreadServerTest() : ServerTest(oneRequestThread()) {}

  // Waits up to 30 s for the request work queued to become `count`.
  bool queuedBecomes(size_t count) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (server.requestLoad().queued != count) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }
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

// A registration whose probe waits on its process (an exec in progress, its mmap lock) holds up
// neither the loop nor the other connections: another connection is answered meanwhile. The
// waiting connection's next request is answered after it, in order.
TEST_F(ServerTest, ARegistrationWaitingOnItsProcessHoldsUpOnlyItsOwnConnection) {
  space.map(::getpid(), 0x10000000, 0x20000000);
  RawClient waiter((dir / "sock").string()), other((dir / "sock").string());
  ASSERT_TRUE(waiter.sendAll(frames(helloMessage(), 1)));
  ASSERT_TRUE(waiter.receive(1)) << "no Hello reply";
  auto reached = waiting.reached();
  std::string both = frames(registerMessage(2, WaitingAddressSpace::kWaitingProbe), 1);
  both += frames(markMessage(3), 1);
  ASSERT_TRUE(waiter.sendAll(both));
  ASSERT_EQ(reached.wait_for(std::chrono::seconds(30)), std::future_status::ready) << "the probe never ran";

  // The probe is waiting: another connection says Hello and registers, and is answered.
  ASSERT_TRUE(other.sendAll(frames(helloMessage(), 1)));
  std::vector<pb::DaemonMessage> replies;
  ASSERT_TRUE(other.receive(1, &replies, std::chrono::seconds(10)))
      << "no Hello reply while another connection's probe waited: the loop waited with it";
  ASSERT_TRUE(other.sendAll(frames(registerMessage(4, 0x10000000), 1)));
  ASSERT_TRUE(other.receive(1, &replies, std::chrono::seconds(10))) << "no registration reply";
  ASSERT_TRUE(replies.back().has_register_region_reply()) << replies.back().DebugString();
  std::vector<pb::DaemonMessage> held;
  EXPECT_FALSE(waiter.receive(1, &held, std::chrono::milliseconds(200)))
      << "the waiting connection was answered before its probe: " << held.front().DebugString();

  waiting.open();
  ASSERT_TRUE(waiter.receive(2, &held, std::chrono::seconds(30)));
  ASSERT_EQ(held.size(), 2u);
  EXPECT_EQ(held[0].seq(), 2u);
  EXPECT_TRUE(held[0].has_register_region_reply()) << held[0].DebugString();
  EXPECT_EQ(held[1].seq(), 3u);
  EXPECT_TRUE(held[1].has_ack()) << held[1].DebugString();
}

// Work that throws on a request worker takes neither the daemon down nor the other connections:
// the connection it answered is closed (nothing can answer it: the work's state is unknown), and
// the others are served as before.
TEST_F(ServerTest, RequestWorkThatThrowsClosesOnlyItsOwnConnection) {
  space.map(::getpid(), 0x10000000, 0x20000000);
  RawClient thrower((dir / "sock").string()), other((dir / "sock").string());
  for (RawClient* c : {&thrower, &other}) {
    ASSERT_TRUE(c->sendAll(frames(helloMessage(), 1)));
    ASSERT_TRUE(c->receive(1)) << "no Hello reply";
  }
  ASSERT_TRUE(thrower.sendAll(frames(registerMessage(2, WaitingAddressSpace::kThrowingProbe), 1)));
  EXPECT_TRUE(thrower.closedWithin(std::chrono::seconds(30))) << "the connection whose work threw stayed open";
  EXPECT_EQ(waiting.thrown.load(), 1) << "the work did not run the probe that throws";

  std::vector<pb::DaemonMessage> replies;
  ASSERT_TRUE(other.sendAll(frames(registerMessage(3, 0x10000000), 1)));
  ASSERT_TRUE(other.receive(1, &replies, std::chrono::seconds(10))) << "the other connection was not served";
  EXPECT_TRUE(replies.back().has_register_region_reply()) << replies.back().DebugString();
  RawClient later((dir / "sock").string());
  ASSERT_TRUE(later.sendAll(frames(helloMessage(), 1)));
  EXPECT_TRUE(later.receive(1, nullptr, std::chrono::seconds(10))) << "a new connection was not served";
}

// Work still queued when its connection closes (here: its process exits) is dropped at once: it
// does not wait behind its uid's slow work, holding the connection, for a thread to skip it.
TEST_F(OneRequestThreadServerTest, QueuedWorkOfAConnectionThatClosesIsDropped) {
  space.map(::getpid(), 0x10000000, 0x20000000);
  const std::string path = (dir / "sock").string();
  RawClient waiter(path);
  ASSERT_TRUE(waiter.sendAll(frames(helloMessage(), 1)));
  ASSERT_TRUE(waiter.receive(1)) << "no Hello reply";
  auto reached = waiting.reached();
  ASSERT_TRUE(waiter.sendAll(frames(registerMessage(2, WaitingAddressSpace::kWaitingProbe), 1)));
  ASSERT_EQ(reached.wait_for(std::chrono::seconds(30)), std::future_status::ready) << "the probe never ran";

  // A child process of the same uid says Hello and registers: its work queues behind the probe
  // that holds the only request thread. It exits when the test closes `go`.
  const std::string request = frames(helloMessage(), 1) + frames(registerMessage(2, 0x10000000), 1);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  int go[2];
  ASSERT_EQ(::pipe2(go, O_CLOEXEC), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Only async-signal-safe calls: the parent has threads.
    ::close(go[1]);
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) ::_exit(2);
    if (::write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) ::_exit(3);
    char byte;
    (void)::read(go[0], &byte, 1);
    ::_exit(0);
  }
  ::close(go[0]);
  const bool queued = queuedBecomes(1);
  ::close(go[1]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child could not send its request: " << status;
  ASSERT_TRUE(queued) << "the child's registration was never queued: the case this test is about did not arise";

  EXPECT_TRUE(queuedBecomes(0)) << "the exited process's work stayed queued behind the waiting probe";
  EXPECT_EQ(server.requestLoad().running, 1u) << "the probe no longer holds the thread: the test proves nothing";
  waiting.open();
  std::vector<pb::DaemonMessage> replies;
  ASSERT_TRUE(waiter.receive(1, &replies, std::chrono::seconds(30)));
  EXPECT_TRUE(replies.front().has_register_region_reply()) << replies.front().DebugString();
}

}  // namespace
