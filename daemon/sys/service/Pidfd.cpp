#include "sys/service/Pidfd.h"

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <string>

namespace tt::sys {

Pidfd& Pidfd::operator=(Pidfd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

Pidfd::~Pidfd() {
  if (fd_ >= 0) ::close(fd_);
}

Result<Pidfd> openPidfd(pid_t pid) {
  // glibc 2.36 has pidfd_open(), but the raw syscall works with any libc. pidfds are always
  // close-on-exec.
  const long fd = ::syscall(SYS_pidfd_open, pid, 0);
  if (fd < 0) return errnoError("pidfd_open pid " + std::to_string(pid));
  return Pidfd(static_cast<int>(fd));
}

Result<bool> pidfdExited(const Pidfd& pidfd) {
  pollfd p{pidfd.fd(), POLLIN, 0};
  const int n = ::poll(&p, 1, 0);
  if (n < 0) return errnoError("poll pidfd");
  return n > 0;
}

}  // namespace tt::sys
