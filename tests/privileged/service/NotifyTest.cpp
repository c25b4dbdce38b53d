// The sd_notify protocol of the real tensortierd, without systemd: the test plays PID 1's part. It
// binds an AF_UNIX datagram socket, starts the daemon with NOTIFY_SOCKET / WATCHDOG_USEC /
// WATCHDOG_PID pointing at it (as systemd does for Type=notify + WatchdogSec), and reads what
// arrives, with the sender's credentials (SO_PASSCRED) so NotifyAccess=main is checked too: every
// message must come from the daemon's own PID.
//
// What systemd/tensortierd.service promises and is asserted here:
//   - READY=1 once the client socket is served: a connect() right after READY=1 succeeds;
//   - WATCHDOG=1 keep-alives, at least every WATCHDOG_USEC/2 (sd_watchdog_enabled(3));
//     none when WATCHDOG_PID names another process;
//   - STOPPING=1 on SIGTERM, then exit status 0;
//   - READY=1 even when sources cannot attach (the daemon degrades and logs why).
#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/TestSupport.h"

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// One datagram from the daemon and the PID the kernel says sent it.
struct Notification {
  std::string text;
  pid_t senderPid = 0;
  Clock::time_point at;
  [[nodiscard]] bool has(const std::string& line) const {
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);)
      if (l == line) return true;
    return false;
  }
};

// The "systemd" end: a datagram socket in a temp dir, plus the daemon it started.
class FakeSystemd {
 public:
  FakeSystemd() {
    char tmpl[] = "/tmp/tt-notify-XXXXXX";
    const char* d = ::mkdtemp(tmpl);
    dir_ = d ? d : "";
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, notifyPath().c_str(), sizeof addr.sun_path - 1);
    const int on = 1;
    bound_ = !dir_.empty() && fd_ >= 0 &&
             ::setsockopt(fd_, SOL_SOCKET, SO_PASSCRED, &on, sizeof on) == 0 &&
             ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~FakeSystemd() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) ::close(fd_);
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  FakeSystemd(const FakeSystemd&) = delete;
  FakeSystemd& operator=(const FakeSystemd&) = delete;

  [[nodiscard]] bool bound() const { return bound_; }
  [[nodiscard]] std::string notifyPath() const { return dir_ + "/notify"; }
  [[nodiscard]] std::string clientSocket() const { return dir_ + "/tt.sock"; }
  [[nodiscard]] std::string configPath() const { return dir_ + "/tensortierd.conf"; }
  [[nodiscard]] pid_t pid() const { return pid_; }

  void writeConfig(const std::string& text) const { std::ofstream(configPath()) << text; }

  struct StartOptions {
    uint64_t watchdogUsec = 0;             // 0: no WATCHDOG_USEC
    bool watchdogPidIsDaemon = true;       // false: WATCHDOG_PID names another process (PID 1)
    std::vector<int> dropCapabilities;     // removed from the bounding set before exec
  };

  // Forks and execs `tensortierd --config .. --socket .. --foreground` with the environment
  // systemd gives a Type=notify service.
  void start(const StartOptions& o) {
    const std::string logPath = dir_ + "/daemon.log";
    pid_ = ::fork();
    if (pid_ != 0) return;
    const int log = ::open(logPath.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log >= 0) {
      ::dup2(log, 1);
      ::dup2(log, 2);
    }
    ::unsetenv("LISTEN_FDS");
    ::unsetenv("LISTEN_PID");
    ::unsetenv("LISTEN_FDNAMES");
    ::setenv("NOTIFY_SOCKET", notifyPath().c_str(), 1);
    if (o.watchdogUsec > 0) {
      ::setenv("WATCHDOG_USEC", std::to_string(o.watchdogUsec).c_str(), 1);
      // systemd sets WATCHDOG_PID to the main PID; the exec keeps ours.
      ::setenv("WATCHDOG_PID", std::to_string(o.watchdogPidIsDaemon ? ::getpid() : 1).c_str(), 1);
    } else {
      ::unsetenv("WATCHDOG_USEC");
      ::unsetenv("WATCHDOG_PID");
    }
    for (int cap : o.dropCapabilities) {
      if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) {
        std::fprintf(stderr, "NotifyTest: PR_CAPBSET_DROP %d: %s\n", cap, std::strerror(errno));
        std::_Exit(126);
      }
    }
    const std::string config = configPath(), sock = clientSocket();
    ::execl(TT_TENSORTIERD, "tensortierd", "--config", config.c_str(), "--socket", sock.c_str(), "--foreground",
            static_cast<char*>(nullptr));
    std::_Exit(127);
  }

  // The next datagram, or nullopt when none arrives within `timeout`.
  [[nodiscard]] std::optional<Notification> receive(milliseconds timeout) const {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return std::nullopt;
      pollfd p{fd_, POLLIN, 0};
      const int r = ::poll(&p, 1, static_cast<int>(left));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return std::nullopt;
      char buf[4096];
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred))];
      iovec iov{buf, sizeof buf};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      const ssize_t n = ::recvmsg(fd_, &msg, MSG_DONTWAIT);
      if (n < 0) continue;
      Notification note;
      note.at = Clock::now();
      note.text.assign(buf, static_cast<size_t>(n));
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
          ucred cred{};
          std::memcpy(&cred, CMSG_DATA(c), sizeof cred);
          note.senderPid = cred.pid;
        }
      }
      return note;
    }
  }

  // Reads until a datagram carrying `line` arrives; everything read on the way goes to `seen`.
  [[nodiscard]] std::optional<Notification> waitFor(const std::string& line, milliseconds timeout,
                                                    std::vector<Notification>* seen = nullptr) const {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      auto n = receive(std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
      if (!n) return std::nullopt;
      if (seen) seen->push_back(*n);
      if (n->has(line)) return n;
    }
    return std::nullopt;
  }

  [[nodiscard]] bool clientSocketAccepts() const {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, clientSocket().c_str(), sizeof addr.sun_path - 1);
    const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    ::close(fd);
    return ok;
  }

  // The exit code, or nullopt on timeout or death by a signal.
  [[nodiscard]] std::optional<int> waitExit(milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        if (WIFEXITED(status)) return WEXITSTATUS(status);
        return std::nullopt;
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
    return std::nullopt;
  }

  [[nodiscard]] std::string log() const {
    std::ifstream in(dir_ + "/daemon.log");
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  std::string dir_;
  int fd_ = -1;
  bool bound_ = false;
  pid_t pid_ = -1;
};

// Epochs of 1 s, so the keep-alives between epochs (not only those at each epoch's end) count.
std::string config() { return "service {\n  socket_group: \"\"\n  epoch_ms: 1000\n  metrics_port: 0\n}\n"; }

constexpr milliseconds kStartTimeout{20000};
constexpr uint64_t kWatchdogUsec = 400000;

FakeSystemd::StartOptions withWatchdog() {
  FakeSystemd::StartOptions o;
  o.watchdogUsec = kWatchdogUsec;
  return o;
}

class ServiceNotifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TT_REQUIRE_ROOT();
    ASSERT_TRUE(systemd.bound()) << "cannot bind the notify socket " << systemd.notifyPath() << ": "
                                 << std::strerror(errno);
    systemd.writeConfig(config());
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << "--- daemon log ---\n" << systemd.log();
  }
  // Every notification must come from the main PID (the unit has NotifyAccess=main).
  void expectFromMainPid(const std::vector<Notification>& seen) const {
    for (const auto& n : seen)
      EXPECT_EQ(n.senderPid, systemd.pid()) << "notification '" << n.text << "' not sent by the main PID";
  }
  FakeSystemd systemd;
};

TEST_F(ServiceNotifyTest, ReadyIsSentOnlyOnceTheClientSocketAcceptsConnections) {
  systemd.start({});
  std::vector<Notification> seen;
  auto ready = systemd.waitFor("READY=1", kStartTimeout, &seen);
  ASSERT_TRUE(ready) << "no READY=1 within " << kStartTimeout.count() << " ms";
  // Immediately: a client systemd lets start after READY=1 must find the socket served.
  EXPECT_TRUE(systemd.clientSocketAccepts()) << "READY=1 arrived before " << systemd.clientSocket() << " accepted";
  // The sources attached before READY=1: their status lines are already logged.
  EXPECT_NE(systemd.log().find("sources: "), std::string::npos) << "READY=1 before the sources were opened";
  EXPECT_TRUE(ready->text.find("STATUS=") != std::string::npos) << ready->text;
  expectFromMainPid(seen);
}

TEST_F(ServiceNotifyTest, WatchdogKeepAlivesArriveAtLeastEveryHalfInterval) {
  systemd.start(withWatchdog());
  std::vector<Notification> seen;
  ASSERT_TRUE(systemd.waitFor("READY=1", kStartTimeout, &seen)) << "no READY=1";
  constexpr milliseconds kWindow{2000};
  const auto begin = Clock::now();
  int keepAlives = 0;
  auto last = begin;
  milliseconds longestGap{0};
  while (Clock::now() - begin < kWindow) {
    auto n = systemd.receive(std::chrono::duration_cast<milliseconds>(kWindow - (Clock::now() - begin)));
    if (!n) break;
    seen.push_back(*n);
    if (!n->has("WATCHDOG=1")) continue;
    ++keepAlives;
    longestGap = std::max(longestGap, std::chrono::duration_cast<milliseconds>(n->at - last));
    last = n->at;
  }
  // sd_watchdog_enabled(3) asks for a keep-alive every WATCHDOG_USEC/2: 2 s / 200 ms = 10; one
  // less for where the window's edges fall.
  const int expected = static_cast<int>(kWindow.count() * 1000 / (kWatchdogUsec / 2)) - 1;
  std::cout << "WATCHDOG_USEC=" << kWatchdogUsec << ": " << keepAlives << " keep-alives in " << kWindow.count()
            << " ms, longest gap " << longestGap.count() << " ms\n";
  EXPECT_GE(keepAlives, expected) << "WATCHDOG_USEC=" << kWatchdogUsec << ": " << keepAlives
                                  << " keep-alives in " << kWindow.count() << " ms, longest gap "
                                  << longestGap.count() << " ms";
  expectFromMainPid(seen);
}

TEST_F(ServiceNotifyTest, NoKeepAlivesWhenWatchdogPidNamesAnotherProcess) {
  auto options = withWatchdog();
  options.watchdogPidIsDaemon = false;
  systemd.start(options);
  ASSERT_TRUE(systemd.waitFor("READY=1", kStartTimeout)) << "no READY=1";
  // The watchdog is for PID 1 here, not for the daemon: the daemon must not claim it.
  auto keepAlive = systemd.waitFor("WATCHDOG=1", milliseconds(4 * kWatchdogUsec / 1000));
  EXPECT_FALSE(keepAlive) << "WATCHDOG=1 sent although WATCHDOG_PID is not the daemon's PID";
}

TEST_F(ServiceNotifyTest, SigtermSendsStoppingAndExitsZero) {
  systemd.start(withWatchdog());
  std::vector<Notification> seen;
  ASSERT_TRUE(systemd.waitFor("READY=1", kStartTimeout, &seen)) << "no READY=1";
  const pid_t daemonPid = systemd.pid();
  ASSERT_EQ(::kill(daemonPid, SIGTERM), 0);
  // The unit's TimeoutStopSec is 20 s.
  auto stopping = systemd.waitFor("STOPPING=1", milliseconds(20000), &seen);
  EXPECT_TRUE(stopping) << "no STOPPING=1 after SIGTERM";
  for (const auto& n : seen) EXPECT_EQ(n.senderPid, daemonPid) << n.text;
  EXPECT_EQ(systemd.waitExit(milliseconds(20000)), std::optional<int>(0)) << "tensortierd did not exit 0 on SIGTERM";
}

TEST_F(ServiceNotifyTest, ReadyEvenWhenSourcesCannotAttach) {
  // Without CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN no BPF program loads and no system-wide perf
  // event opens, on any host: the fault-trace and sampling sources cannot attach (as under a unit
  // whose CapabilityBoundingSet lacks them). The daemon must still serve and say READY=1.
  FakeSystemd::StartOptions options;
  options.dropCapabilities = {CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN};
  systemd.start(options);
  std::vector<Notification> seen;
  auto ready = systemd.waitFor("READY=1", kStartTimeout, &seen);
  ASSERT_TRUE(ready) << "no READY=1 with sources that cannot attach";
  EXPECT_TRUE(systemd.clientSocketAccepts());
  const std::string log = systemd.log();
  // Precondition: some source really failed, with its reason in the log.
  const size_t unavailable = log.find("fault-trace: unavailable: ");
  ASSERT_NE(unavailable, std::string::npos) << "the fault-trace source attached without CAP_BPF: this test "
                                               "cannot make a source fail here";
  const size_t lineEnd = log.find('\n', unavailable);
  EXPECT_GT(lineEnd - unavailable, std::strlen("fault-trace: unavailable: ")) << "no reason logged";
  std::cout << log.substr(unavailable, lineEnd - unavailable) << "\n";
  expectFromMainPid(seen);
}

}  // namespace
