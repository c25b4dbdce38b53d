#include "sys/service/PeerCred.h"

#include <sys/socket.h>

#include <cerrno>
#include <string>

// Linux 6.5's uapi value; Debian 12's headers predate it.
#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

namespace tt::sys {

Result<PeerCredentials> peerCredentials(int socketFd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(socketFd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
    return errnoError("getsockopt SO_PEERCRED fd " + std::to_string(socketFd));
  if (cred.pid <= 0) return logicError("SO_PEERCRED fd " + std::to_string(socketFd) + ": no peer process");
  return PeerCredentials{cred.pid, cred.uid, cred.gid};
}

Result<Pidfd> peerPidfd(int socketFd, pid_t pid) {
  int fd = -1;
  socklen_t len = sizeof fd;
  const int rc = ::getsockopt(socketFd, SOL_SOCKET, SO_PEERPIDFD, &fd, &len);
  if (rc == 0 && fd >= 0) return Pidfd(fd);
  // Only a kernel without SO_PEERPIDFD (ENOPROTOOPT, before 6.5) falls back to the pid. A kernel
  // with it says EINVAL or ESRCH when the peer has been reaped: its pid may be another process's
  // by now, which pidfd_open would hand out.
  if (rc == 0) return systemError(ESRCH, "SO_PEERPIDFD fd " + std::to_string(socketFd) + ": no peer process");
  if (errno == EINVAL || errno == ESRCH)
    return systemError(ESRCH, "SO_PEERPIDFD fd " + std::to_string(socketFd) + ": the peer has exited");
  if (errno != ENOPROTOOPT) return errnoError("getsockopt SO_PEERPIDFD fd " + std::to_string(socketFd));
  return openPidfd(pid);
}

}  // namespace tt::sys
