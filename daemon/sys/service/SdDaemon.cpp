#include "sys/service/SdDaemon.h"

#include <sys/socket.h>
#include <systemd/sd-daemon.h>

namespace tt::sys {

bool notifyReady(const std::string& status) {
  return ::sd_notify(0, ("READY=1\nSTATUS=" + status).c_str()) > 0;
}
bool notifyReloading() { return ::sd_notify(0, "RELOADING=1") > 0; }
bool notifyStopping() { return ::sd_notify(0, "STOPPING=1") > 0; }
bool notifyStatus(const std::string& status) { return ::sd_notify(0, ("STATUS=" + status).c_str()) > 0; }
bool notifyWatchdog() { return ::sd_notify(0, "WATCHDOG=1") > 0; }

uint64_t watchdogIntervalUs() {
  uint64_t usec = 0;
  return ::sd_watchdog_enabled(0, &usec) > 0 ? usec : 0;
}

Result<std::vector<int>> activationSockets() {
  const int n = ::sd_listen_fds(1);
  if (n < 0) return systemError(-n, "sd_listen_fds");
  std::vector<int> fds;
  for (int fd = SD_LISTEN_FDS_START; fd < SD_LISTEN_FDS_START + n; ++fd) {
    const int r = ::sd_is_socket_unix(fd, SOCK_STREAM, 1, nullptr, 0);
    if (r < 0) return systemError(-r, "sd_is_socket_unix fd " + std::to_string(fd));
    if (r == 0) return logicError("socket activation: fd " + std::to_string(fd) + " is not a listening AF_UNIX stream socket");
    fds.push_back(fd);
  }
  return fds;
}

}  // namespace tt::sys
