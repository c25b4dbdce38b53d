#include "sys/service/PeerCred.h"

#include <sys/socket.h>

#include <string>

namespace tt::sys {

Result<PeerCredentials> peerCredentials(int socketFd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(socketFd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
    return errnoError("getsockopt SO_PEERCRED fd " + std::to_string(socketFd));
  if (cred.pid <= 0) return logicError("SO_PEERCRED fd " + std::to_string(socketFd) + ": no peer process");
  return PeerCredentials{cred.pid, cred.uid, cred.gid};
}

}  // namespace tt::sys
