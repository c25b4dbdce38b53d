#include "support/ChildProcess.h"

#include <gtest/gtest.h>
#include <grp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

namespace tt::test {

pid_t forkWithPid(pid_t wanted, int holdFd) {
  pid_t child = -1;
  for (int attempt = 0; attempt < 20 && child != wanted; ++attempt) {
    if (child > 0) {
      ::kill(child, SIGKILL);
      ::waitpid(child, nullptr, 0);
    }
    {
      std::ofstream last("/proc/sys/kernel/ns_last_pid");
      last << wanted - 1;
    }
    child = ::fork();
    if (child < 0) return -1;
    if (child == 0) {
      char b;
      (void)!::read(holdFd, &b, 1);
      std::_Exit(0);
    }
  }
  if (child == wanted) return child;
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  return -1;
}

std::string outputOfChild(const std::function<std::string()>& fn) {
  int fds[2];
  if (pipe(fds) != 0) return std::string("pipe: ") + std::strerror(errno);
  const pid_t pid = fork();
  if (pid < 0) return std::string("fork: ") + std::strerror(errno);
  if (pid == 0) {
    close(fds[0]);
    const std::string out = fn();
    if (!out.empty() && write(fds[1], out.data(), out.size()) < 0) _exit(2);
    _exit(0);
  }
  close(fds[1]);
  std::string out;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "child failed";
  return out;
}

TouchingChild::TouchingChild(size_t bytes, std::optional<uid_t> runAs) : bytes_(bytes) {
  int fds[2];
  if (pipe(fds) != 0) {
    ADD_FAILURE() << "pipe: " << std::strerror(errno);
    return;
  }
  pid_ = fork();
  if (pid_ < 0) {
    ADD_FAILURE() << "fork: " << std::strerror(errno);
    return;
  }
  if (pid_ == 0) {
    close(fds[0]);
    void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) _exit(10);
    (void)madvise(mem, bytes, MADV_NOHUGEPAGE);
    std::memset(mem, 0x5a, bytes);
    if (runAs) {
      if (setgroups(0, nullptr) != 0 || setgid(*runAs) != 0 || setuid(*runAs) != 0) _exit(12);
      if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0) _exit(13);
    }
    const auto addr = reinterpret_cast<uintptr_t>(mem);
    if (write(fds[1], &addr, sizeof addr) != sizeof addr) _exit(11);
    for (;;) pause();
  }
  close(fds[1]);
  if (read(fds[0], &address_, sizeof address_) != sizeof address_) ADD_FAILURE() << "child did not report its buffer";
  close(fds[0]);
}

void TouchingChild::kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

TouchingChild::~TouchingChild() { kill(); }

}  // namespace tt::test
