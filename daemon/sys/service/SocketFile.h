// The socket's file-system side: its directory, a stale file left by a crashed daemon, and its
// group and mode (who may connect). Binding itself is Boost.Asio's (daemon/ipc).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include "core/Result.h"

namespace tt::sys {

// Removes `socketPath` if it is a socket nobody listens on (connect gives ECONNREFUSED); refuses
// (EADDRINUSE) when a daemon is still serving there, and leaves non-socket files alone (EEXIST).
[[nodiscard]] Result<void> removeStaleSocket(const std::string& socketPath);

// chown(path, -1, gid) when gid is set, then chmod(path, mode).
[[nodiscard]] Result<void> setSocketAccess(const std::string& socketPath, std::optional<gid_t> gid, mode_t mode);

// Removes the socket file on shutdown if it is still ours.
void unlinkSocket(const std::string& socketPath);

}  // namespace tt::sys
