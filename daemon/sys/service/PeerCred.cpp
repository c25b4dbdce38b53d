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
  // ENOPROTOOPT: a kernel before 6.5. (ESRCH there: the peer is gone; pidfd_open says so too.)
  if (rc != 0 && errno != ENOPROTOOPT && errno != EINVAL && errno != ESRCH)
    return errnoError("getsockopt SO_PEERPIDFD fd " + std::to_string(socketFd));
  return openPidfd(pid);
}

}  // namespace tt::sys
