// The identity of the process at the other end of a Unix socket, from the kernel (SO_PEERCRED):
// the only identity the daemon trusts. No message carries a pid or uid the daemon believes.
#pragma once

#include <sys/types.h>

#include "core/Result.h"

namespace tt::sys {

struct PeerCredentials {
  pid_t pid = 0;  // the connecting process's tgid at connect() time
  uid_t uid = 0;
  gid_t gid = 0;
};

// getsockopt(SO_PEERCRED) on a connected AF_UNIX socket.
[[nodiscard]] Result<PeerCredentials> peerCredentials(int socketFd);

}  // namespace tt::sys
