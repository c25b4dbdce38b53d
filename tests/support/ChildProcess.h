// A child process that maps and touches a buffer and then waits: the target of tests that act on
// another process's pages (move_pages on a pid, /proc/PID/*, BPF filtered by tgid).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace tt::test {

// Runs `fn` in a forked child of this process and returns what it returned, carried back through
// a pipe; "child failed" when the child did not exit cleanly. For what must not change this
// process: an environment variable a library reads once, dropped capabilities.
[[nodiscard]] std::string outputOfChild(const std::function<std::string()>& fn);

// Forks a child that gets pid `wanted` (free now: its process exited and was reaped), through
// /proc/sys/kernel/ns_last_pid as CRIU does (root), and waits until a byte arrives on `holdFd` (or
// it closes). Tries up to 20 times, killing children that got another pid; returns the child's pid,
// or -1 when other processes kept taking `wanted`. The caller reaps it.
[[nodiscard]] pid_t forkWithPid(pid_t wanted, int holdFd);

class TouchingChild {
 public:
  // Forks; the child mmaps `bytes` (4 KiB pages, THP off), writes every page, reports the address,
  // and sleeps until killed. Test failures are raised if anything goes wrong. With `runAs`, the
  // child then becomes that user (uid and gid), dumpable as a process started by that user is, so
  // its /proc files are that user's (a set-uid child would have them root's).
  explicit TouchingChild(size_t bytes, std::optional<uid_t> runAs = std::nullopt);
  ~TouchingChild();
  TouchingChild(const TouchingChild&) = delete;
  TouchingChild& operator=(const TouchingChild&) = delete;

  [[nodiscard]] pid_t pid() const { return pid_; }
  [[nodiscard]] uintptr_t address() const { return address_; }
  [[nodiscard]] size_t bytes() const { return bytes_; }
  // Kills and reaps the child now.
  void kill();

 private:
  pid_t pid_ = -1;
  uintptr_t address_ = 0;
  size_t bytes_ = 0;
};

}  // namespace tt::test
