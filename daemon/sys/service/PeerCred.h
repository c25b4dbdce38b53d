// The identity of the process at the other end of a Unix socket, from the kernel (SO_PEERCRED):
// the only identity the daemon trusts. No message carries a pid or uid the daemon believes.
#pragma once

#include <sys/types.h>

#include "core/Result.h"
#include "sys/service/Pidfd.h"

namespace tt::sys {

struct PeerCredentials {
  pid_t pid = 0;  // the connecting process's tgid at connect() time
  uid_t uid = 0;
  gid_t gid = 0;
};

// getsockopt(SO_PEERCRED) on a connected AF_UNIX socket.
[[nodiscard]] Result<PeerCredentials> peerCredentials(int socketFd);

// A pidfd of the process that connected: SO_PEERPIDFD (Linux 6.5+), which the kernel took at
// connect() and so cannot name another process (for a peer reaped since, 6.5-6.15 say ESRCH and
// later kernels give a pidfd that says it exited); before 6.5,
// pidfd_open of `pid` (SO_PEERCRED's), which names another process if the peer exited and its pid
// was handed out again between its connect() and now (the daemon asks at accept).
[[nodiscard]] Result<Pidfd> peerPidfd(int socketFd, pid_t pid);

}  // namespace tt::sys
