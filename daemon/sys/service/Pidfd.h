// pidfd_open(2): a file descriptor that pins one process. It becomes readable when the process
// exits, and it keeps meaning that process even if its pid number is reused later, so the daemon
// watches client lifetimes with it instead of polling /proc or trusting pids.
#pragma once

#include <sys/types.h>

#include "core/Result.h"

namespace tt::sys {

// An owned pidfd; closes on destruction. Movable.
class Pidfd {
 public:
  Pidfd() = default;
  explicit Pidfd(int fd) : fd_(fd) {}
  Pidfd(Pidfd&& other) noexcept : fd_(other.release()) {}
  Pidfd& operator=(Pidfd&& other) noexcept;
  Pidfd(const Pidfd&) = delete;
  Pidfd& operator=(const Pidfd&) = delete;
  ~Pidfd();

  [[nodiscard]] int fd() const { return fd_; }
  [[nodiscard]] bool valid() const { return fd_ >= 0; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

// pidfd_open(pid, 0), close-on-exec. ESRCH when the process has already gone.
[[nodiscard]] Result<Pidfd> openPidfd(pid_t pid);

// True when the process behind the pidfd has exited (poll for POLLIN without waiting).
[[nodiscard]] Result<bool> pidfdExited(const Pidfd& pidfd);

}  // namespace tt::sys
