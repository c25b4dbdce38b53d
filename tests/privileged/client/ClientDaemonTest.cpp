// The client library (C++, C, Python) against the real tensortierd, started here on a private
// socket. Privileged: the daemon runs as root on this host (sources, pagemap, move_pages).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <numaif.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "support/TestSupport.h"
#include "tensortier/client.hpp"
#include "tensortier/v1/protocol.pb.h"

namespace {

using namespace std::chrono_literals;
namespace pb = tensortier::v1;
using tensortier::Client;
using tensortier::RegionKind;

bool waitUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return done();
}

// tensortierd --config FILE --socket PATH --foreground, its log in the test's folder.
class Daemon {
 public:
  Daemon(std::string dir, std::string config) : dir_(std::move(dir)), config_(std::move(config)) {}
  ~Daemon() { stop(); }
  std::string socket() const { return dir_ + "/tensortierd.sock"; }
  std::string log() const { return dir_ + "/tensortierd.log"; }
  pid_t pid() const { return pid_; }

  // Starts it and waits until it is ready (accepting is not serving: the socket listens before the
  // sources are open, and a client's 500 ms hello would time out); false (with the log) if not.
  ::testing::AssertionResult start() {
    ++starts_;
    const std::string cfg = dir_ + "/tensortierd.conf";
    std::ofstream(cfg) << config_;
    pid_ = fork();
    if (pid_ == 0) {
      const int fd = open(log().c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      execl(TT_TENSORTIERD, TT_TENSORTIERD, "--config", cfg.c_str(), "--socket", socket().c_str(), "--foreground",
            static_cast<char*>(nullptr));
      _exit(127);
    }
    const bool up = waitUntil([&] {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) return true;  // exited: reported below
      const int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_un a{};
      a.sun_family = AF_UNIX;
      std::strncpy(a.sun_path, socket().c_str(), sizeof a.sun_path - 1);
      const bool ok = connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
      close(s);
      if (!ok) return false;
      std::ifstream in(log());  // one "ready" line per start: the log is appended to
      int ready = 0;
      for (std::string line; std::getline(in, line);) ready += line.find(" ready: serving ") != std::string::npos ? 1 : 0;
      return ready >= starts_;
    });
    if (up && kill(pid_, 0) == 0) return ::testing::AssertionSuccess();
    pid_ = -1;
    return ::testing::AssertionFailure() << "tensortierd did not come up on " << socket() << "; its log:\n"
                                         << tt::test::readFileOrFail(log());
  }

  void stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    if (!waitUntil([&] { return waitpid(pid_, nullptr, WNOHANG) == pid_; }, 15s)) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    pid_ = -1;
  }

 private:
  std::string dir_, config_;
  pid_t pid_ = -1;
  int starts_ = 0;
};

// The daemon's own view of a process, through the admin ProcessesRequest (root may ask).
std::optional<pb::ProcessEntry> processEntry(const std::string& socketPath, pid_t pid) {
  const int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, socketPath.c_str(), sizeof a.sun_path - 1);
  if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(s);
    return std::nullopt;
  }
  auto send = [&](const pb::ClientMessage& m) {
    std::string payload = m.SerializeAsString(), frame(4, '\0');
    for (int i = 0; i < 4; ++i) frame[static_cast<size_t>(i)] = static_cast<char>((payload.size() >> (8 * i)) & 0xff);
    frame += payload;
    return ::send(s, frame.data(), frame.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(frame.size());
  };
  auto receive = [&](pb::DaemonMessage& m) {
    unsigned char h[4];
    if (recv(s, h, 4, MSG_WAITALL) != 4) return false;
    const uint32_t n = h[0] | (h[1] << 8) | (h[2] << 16) | (static_cast<uint32_t>(h[3]) << 24);
    std::string payload(n, '\0');
    if (n > 0 && recv(s, payload.data(), n, MSG_WAITALL) != static_cast<ssize_t>(n)) return false;
    return m.ParseFromString(payload);
  };
  timeval tv{5, 0};
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  pb::ClientMessage hello, req;
  hello.set_seq(1);
  hello.mutable_hello()->add_versions(1);
  hello.mutable_hello()->set_client_name("client-daemon-test admin");
  req.set_seq(2);
  req.mutable_processes();
  pb::DaemonMessage r1, r2;
  std::optional<pb::ProcessEntry> out;
  if (send(hello) && receive(r1) && r1.has_hello_reply() && send(req) && receive(r2) && r2.has_processes())
    for (const auto& p : r2.processes().processes())
      if (p.pid() == pid) out = p;
  close(s);
  return out;
}

class ClientDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TT_REQUIRE_ROOT();
    char tmpl[] = "/tmp/tt-client-daemon-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    daemon_ = std::make_unique<Daemon>(dir_, "# built-in defaults\n");
    ASSERT_TRUE(daemon_->start());
  }
  void TearDown() override {
    daemon_.reset();
    if (HasFailure() && !dir_.empty()) {
      std::ifstream log(dir_ + "/tensortierd.log");
      std::cerr << "---- tensortierd log ----\n" << log.rdbuf() << "\n";
    }
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  tensortier::ClientOptions options() const {
    tensortier::ClientOptions o;
    o.socketPath = daemon_->socket();
    o.clientName = "client-daemon-test";
    o.reconnectInitial = 20ms;
    o.reconnectMax = 200ms;
    return o;
  }
  char* touchedPages(size_t pages) {
    bytes_ = pages * 4096;
    auto* p = static_cast<char*>(mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    EXPECT_NE(p, MAP_FAILED);
    std::memset(p, 1, bytes_);
    map_ = p;
    return p;
  }
  ~ClientDaemonTest() override {
    if (map_ != nullptr) munmap(map_, bytes_);
  }

  std::string dir_;
  std::unique_ptr<Daemon> daemon_;
  char* map_ = nullptr;
  size_t bytes_ = 0;
};

TEST_F(ClientDaemonTest, CppClientRegistersQueriesAndMarksAgainstTensortierd) {
  auto client = Client::create(options());
  ASSERT_TRUE(client->connected());
  EXPECT_EQ(client->protocolVersion(), 1u);
  char* buf = touchedPages(64);
  auto w = client->registerRegion(buf, 32 * 4096, "weights", RegionKind::Weight);
  auto g = client->registerRegion(buf + 32 * 4096, 32 * 4096, "grads", RegionKind::Gradient);
  ASSERT_TRUE(w.ok()) << w.status().message();
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto overlap = client->registerRegion(buf + 4096, 4096, "overlap", RegionKind::Other);
  EXPECT_EQ(overlap.status().code(), TENSORTIER_ERR_DAEMON_REGION_OVERLAPS) << overlap.status().message();

  auto placement = client->queryPlacement();
  ASSERT_TRUE(placement.ok()) << placement.status().message();
  ASSERT_EQ(placement->size(), 2u);
  for (const auto& p : *placement) {
    EXPECT_TRUE(p.handle == *w || p.handle == *g);
    EXPECT_EQ(p.length, 32u * 4096);
    uint64_t resident = 0;
    for (const auto& nb : p.bytesPerNode) resident += nb.bytes;
    EXPECT_EQ(resident + p.unmappedBytes, p.length) << p.name;
    EXPECT_EQ(p.sampleStride, 1u) << p.name << ": within the budget every page is asked";
    EXPECT_EQ(p.unmappedBytes, 0u) << p.name << ": every page was touched";
  }

  for (uint64_t step = 1; step <= 5; ++step) {
    EXPECT_TRUE(client->stepBegin(step));
    EXPECT_TRUE(client->phaseBegin(step, "forward"));
    EXPECT_TRUE(client->stepEnd(step));
  }
  ASSERT_TRUE(waitUntil([&] {
    auto e = processEntry(daemon_->socket(), getpid());
    return e && e->last_step() == 5;
  })) << "the daemon never saw step 5";
  auto entry = processEntry(daemon_->socket(), getpid());
  ASSERT_TRUE(entry.has_value());
  EXPECT_EQ(entry->regions(), 2u);
  EXPECT_EQ(entry->client_name(), "client-daemon-test");
  EXPECT_TRUE(entry->accepts_mbind());

  EXPECT_TRUE(client->unregisterRegion(*g).ok());
  entry = processEntry(daemon_->socket(), getpid());
  ASSERT_TRUE(entry.has_value());
  EXPECT_EQ(entry->regions(), 1u);
}

TEST_F(ClientDaemonTest, DaemonRestartReRegistersEveryLiveRegion) {
  auto client = Client::create(options());
  ASSERT_TRUE(client->connected());
  char* buf = touchedPages(16);
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(client->registerRegion(buf + i * 4096, 4096, "r" + std::to_string(i), RegionKind::Weight).ok());
  daemon_->stop();
  ASSERT_TRUE(waitUntil([&] { return !client->connected(); }));
  auto late = client->registerRegion(buf + 8 * 4096, 4096, "late", RegionKind::Activation);
  ASSERT_TRUE(late.ok());  // queued while the daemon is down
  ASSERT_TRUE(daemon_->start());
  ASSERT_TRUE(waitUntil([&] { return client->stats().regionsBound == 4; }))
      << "bound " << client->stats().regionsBound << " of 4 after the restart";
  auto placement = client->queryPlacement();
  ASSERT_TRUE(placement.ok()) << placement.status().message();
  std::vector<std::string> names;
  for (const auto& p : *placement) names.push_back(p.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"late", "r0", "r1", "r2"}));
  auto entry = processEntry(daemon_->socket(), getpid());
  ASSERT_TRUE(entry.has_value());
  EXPECT_EQ(entry->regions(), 4u);
}

int runWithEnv(const std::vector<std::string>& argv, const std::vector<std::string>& env, const std::string& stdinText) {
  int in[2];
  if (pipe(in) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(in[0], 0);
    close(in[1]);
    for (const auto& e : env) putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(in[0]);
  if (!stdinText.empty() && write(in[1], stdinText.data(), stdinText.size()) < 0) {
  }
  close(in[1]);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1000 + WTERMSIG(status);
}

TEST_F(ClientDaemonTest, CProgramRegistersAndQueriesThroughTheCAbi) {
  // The same C program as the unit test, now against tensortierd; "quit" is already on its stdin.
  EXPECT_EQ(runWithEnv({TT_C_ABI_PROGRAM, "connected"}, {"TENSORTIER_SOCKET=" + daemon_->socket()}, "quit\n"), 0)
      << "nonzero = the source line of the failed check in tests/unit/client/c_abi_program.c (mod 256)";
}

TEST_F(ClientDaemonTest, PythonTinyModelRegistersParamsGradsAndAdamState) {
  EXPECT_EQ(runWithEnv({TT_PYTHON3, TT_PY_CHECK},
                       {"TENSORTIER_SOCKET=" + daemon_->socket(), std::string("TENSORTIER_LIB=") + TT_TENSORTIER_LIB,
                        std::string("PYTHONPATH=") + TT_PYTHONPATH, "PYTHONDONTWRITEBYTECODE=1"},
                       ""),
            0)
      << "see the script's output above (tests/privileged/client/python_client_check.py)";
}

}  // namespace
