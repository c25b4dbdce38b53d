// systemd integration (libsystemd's sd-daemon): readiness, watchdog keep-alives, status lines and
// socket activation. Every call is a no-op returning false when the daemon does not run under
// systemd (NOTIFY_SOCKET / LISTEN_FDS unset), so the same binary runs in the foreground.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/Result.h"

namespace tt::sys {

// sd_notify("READY=1\nSTATUS=<status>"). Returns whether systemd was told.
bool notifyReady(const std::string& status);
bool notifyReloading();  // RELOADING=1 (then notifyReady again)
bool notifyStopping();   // STOPPING=1
bool notifyStatus(const std::string& status);
bool notifyWatchdog();   // WATCHDOG=1

// The watchdog interval systemd expects keep-alives within (sd_watchdog_enabled), 0 = none.
[[nodiscard]] uint64_t watchdogIntervalUs();

// Listening AF_UNIX stream sockets passed by socket activation (sd_listen_fds, fds from 3 on);
// empty when not socket-activated. Unsets LISTEN_FDS so children do not inherit them.
[[nodiscard]] Result<std::vector<int>> activationSockets();

}  // namespace tt::sys
