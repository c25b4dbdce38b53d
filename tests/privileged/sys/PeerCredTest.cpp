// The peer of a Unix socket as the daemon takes it at accept: its credentials and a pidfd that
// names the process that connected and no other, also after that process has exited and its pid
// has gone to another process (handed out through ns_last_pid, as CRIU does). And who a process
// runs as later, which the daemon checks against those credentials (sys::processOwner).
#include "sys/service/PeerCred.h"

#include <grp.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include "support/ChildProcess.h"
#include "sys/service/ProcessMaps.h"
#include "support/TestSupport.h"

namespace {

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

bool kernelHasPeerPidfd() {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return false;
  int fd = -1;
  socklen_t len = sizeof fd;
  const bool has = ::getsockopt(sv[0], SOL_SOCKET, SO_PEERPIDFD, &fd, &len) == 0;
  if (fd >= 0) ::close(fd);
  ::close(sv[0]);
  ::close(sv[1]);
  return has;
}

class PeerCredTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TT_REQUIRE_ROOT();
    dir_ = std::filesystem::temp_directory_path() / ("tt-peercred-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    addr_.sun_family = AF_UNIX;
    const std::string path = (dir_ / "s").string();
    std::strncpy(addr_.sun_path, path.c_str(), sizeof addr_.sun_path - 1);
    listener_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(listener_, 0);
    ASSERT_EQ(::bind(listener_, reinterpret_cast<sockaddr*>(&addr_), sizeof addr_), 0) << std::strerror(errno);
    ASSERT_EQ(::listen(listener_, 4), 0);
  }
  void TearDown() override {
    if (listener_ >= 0) ::close(listener_);
    std::filesystem::remove_all(dir_);
  }
  // A child that connects and then waits for a byte on `hold` (or exits at once without one).
  pid_t connectingChild(int hold) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
      if (::connect(s, reinterpret_cast<sockaddr*>(&addr_), sizeof addr_) != 0) std::_Exit(1);
      char b;
      if (hold >= 0) (void)!::read(hold, &b, 1);
      std::_Exit(0);
    }
    return pid;
  }
  // Accepts the connection waiting on the listener and checks that SO_PEERCRED names `peer`; -1
  // (and a test failure) otherwise.
  int acceptFrom(pid_t peer) {
    const int conn = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    EXPECT_GE(conn, 0) << std::strerror(errno);
    auto cred = tt::sys::peerCredentials(conn);
    EXPECT_TRUE(cred.ok()) << cred.error().message();
    if (conn < 0 || !cred.ok() || cred->pid != peer) {
      ADD_FAILURE() << "the connection is not from pid " << peer;
      if (conn >= 0) ::close(conn);
      return -1;
    }
    return conn;
  }
  std::filesystem::path dir_;
  sockaddr_un addr_{};
  int listener_ = -1;
};

TEST_F(PeerCredTest, ThePidfdNamesTheLivePeerAndSaysWhenItExits) {
  int hold[2];
  ASSERT_EQ(::pipe(hold), 0);
  const pid_t child = connectingChild(hold[0]);
  ASSERT_GT(child, 0);
  const int conn = acceptFrom(child);
  ASSERT_GE(conn, 0);
  auto pidfd = tt::sys::peerPidfd(conn, child);
  ASSERT_TRUE(pidfd.ok()) << pidfd.error().message();
  auto gone = tt::sys::pidfdExited(*pidfd);
  ASSERT_TRUE(gone.ok());
  EXPECT_FALSE(*gone);
  (void)!::write(hold[1], "x", 1);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  gone = tt::sys::pidfdExited(*pidfd);
  ASSERT_TRUE(gone.ok());
  EXPECT_TRUE(*gone);
  ::close(conn);
  ::close(hold[0]);
  ::close(hold[1]);
}

// The peer connected, exited and was reaped before the accept, and its pid now belongs to another
// process. No pidfd may name that process (pidfd_open of the pid would): kernels 6.5-6.15 refuse
// SO_PEERPIDFD for a reaped peer (ESRCH from peerPidfd), later ones hand out a pidfd of the dead
// peer, which says it exited.
TEST_F(PeerCredTest, APeerReapedBeforeTheAcceptGetsNoPidfdOfTheProcessThatTookItsPid) {
  if (!kernelHasPeerPidfd()) {
    GTEST_SKIP() << "this kernel has no SO_PEERPIDFD (before 6.5): the daemon falls back to pidfd_open of the "
                    "peer's pid, which cannot tell a reused pid (documented in sys/service/PeerCred.h)";
  }
  const pid_t child = connectingChild(-1);
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child could not connect";
  int hold[2];
  ASSERT_EQ(::pipe(hold), 0);
  const pid_t victim = tt::test::forkWithPid(child, hold[0]);
  ASSERT_EQ(victim, child) << "no process got pid " << child << " in 20 tries (other processes took it)";
  const int conn = acceptFrom(child);
  ASSERT_GE(conn, 0);
  auto pidfd = tt::sys::peerPidfd(conn, child);
  if (pidfd.ok()) {
    auto gone = tt::sys::pidfdExited(*pidfd);
    ASSERT_TRUE(gone.ok());
    EXPECT_TRUE(*gone) << "the pidfd names pid " << child << "'s new process, not the peer that connected";
  } else {
    EXPECT_EQ(pidfd.error().code, ESRCH) << pidfd.error().message();
  }
  (void)!::write(hold[1], "x", 1);
  ::waitpid(victim, nullptr, 0);
  ::close(conn);
  ::close(hold[0]);
  ::close(hold[1]);
}

}  // namespace

namespace {

// Who a process runs as, as the daemon's identity check reads it from procfs: its effective ids,
// and whether the kernel lets other processes of its uid read its memory map (dumpable). A
// process that drops root's ids without an exec is not dumpable until it says so (commit_creds
// sets it to fs.suid_dumpable, 0 by default), and a process may make itself not dumpable.
TEST(ProcessOwnerTest, SaysTheEffectiveIdsAndWhetherTheProcessIsDumpable) {
  TT_REQUIRE_ROOT();
  int step[2], ack[2];
  ASSERT_EQ(::pipe(step), 0);
  ASSERT_EQ(::pipe(ack), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Each byte from the parent: do the next step, then say so.
    char b;
    if (::setgroups(0, nullptr) != 0 || ::setresgid(4242, 4343, 4242) != 0 || ::setresuid(4141, 4040, 4141) != 0)
      std::_Exit(2);
    (void)!::write(ack[1], "1", 1);
    if (::read(step[0], &b, 1) != 1 || ::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0) std::_Exit(3);
    (void)!::write(ack[1], "2", 1);
    if (::read(step[0], &b, 1) != 1 || ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) std::_Exit(4);
    (void)!::write(ack[1], "3", 1);
    (void)!::read(step[0], &b, 1);
    std::_Exit(0);
  }
  const tt::sys::Fs procfs("/proc");
  char b = 0;
  ASSERT_EQ(::read(ack[0], &b, 1), 1) << "the child could not change its ids";
  auto owner = tt::sys::processOwner(procfs, child);
  ASSERT_TRUE(owner.ok()) << owner.error().message();
  // The effective ids (4040, 4343), not the real or saved ones; dropped from root: not dumpable.
  EXPECT_EQ(*owner, (tt::sys::ProcessOwner{4040, 4343, false}));
  (void)!::write(step[1], "n", 1);
  ASSERT_EQ(::read(ack[0], &b, 1), 1);
  owner = tt::sys::processOwner(procfs, child, true);
  ASSERT_TRUE(owner.ok()) << owner.error().message();
  EXPECT_EQ(*owner, (tt::sys::ProcessOwner{4040, 4343, true}));
  (void)!::write(step[1], "n", 1);
  ASSERT_EQ(::read(ack[0], &b, 1), 1);
  owner = tt::sys::processOwner(procfs, child);
  ASSERT_TRUE(owner.ok()) << owner.error().message();
  EXPECT_EQ(*owner, (tt::sys::ProcessOwner{4040, 4343, false}));
  (void)!::write(step[1], "n", 1);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  owner = tt::sys::processOwner(procfs, child);
  ASSERT_FALSE(owner.ok());
  EXPECT_EQ(owner.error().code, ESRCH);
  for (int fd : {step[0], step[1], ack[0], ack[1]}) ::close(fd);
}

// A process whose first thread exited while another runs: its /proc/PID files are root's (the
// leader has no mm left), though the process is dumpable; another thread's tell.
TEST(ProcessOwnerTest, AProcessWhoseFirstThreadExitedIsStillDumpable) {
  TT_REQUIRE_ROOT();
  int ready[2], hold[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(hold), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setresgid(4242, 4242, 4242) != 0 || ::setresuid(4141, 4141, 4141) != 0 ||
        ::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0)
      std::_Exit(2);
    pthread_t waiter;
    static int holdFd = hold[0];
    if (::pthread_create(&waiter, nullptr, [](void*) -> void* {
          char b;
          (void)!::read(holdFd, &b, 1);
          std::_Exit(0);
        }, nullptr) != 0)
      std::_Exit(3);
    (void)!::write(ready[1], "r", 1);
    // The process lives on in `waiter`. The thread's own exit(2), not pthread_exit, whose unwind
    // gtest's handlers in this forked copy would catch.
    ::syscall(SYS_exit, 0);
  }
  char b = 0;
  ASSERT_EQ(::read(ready[0], &b, 1), 1) << "the child could not start its thread";
  const std::string status = "/proc/" + std::to_string(child) + "/status";
  bool leaderGone = false;
  for (int i = 0; i < 250 && !leaderGone; ++i) {
    struct stat st{};
    leaderGone = ::stat(status.c_str(), &st) == 0 && st.st_uid == 0;
    if (!leaderGone) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(leaderGone) << status << " did not turn root's after the first thread exited";
  auto owner = tt::sys::processOwner(tt::sys::Fs("/proc"), child);
  ASSERT_TRUE(owner.ok()) << owner.error().message();
  EXPECT_EQ(*owner, (tt::sys::ProcessOwner{4141, 4242, true}));
  (void)!::write(hold[1], "x", 1);
  int st = 0;
  ASSERT_EQ(::waitpid(child, &st, 0), child);
  for (int fd : {ready[0], ready[1], hold[0], hold[1]}) ::close(fd);
}

}  // namespace
