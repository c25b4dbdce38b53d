#include "sys/service/SocketFile.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

namespace tt::sys {

Result<void> removeStaleSocket(const std::string& socketPath) {
  struct stat st {};
  if (::lstat(socketPath.c_str(), &st) != 0) {
    if (errno == ENOENT) return {};
    return errnoError("stat " + socketPath);
  }
  if (!S_ISSOCK(st.st_mode)) return systemError(EEXIST, socketPath + " exists and is not a socket");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socketPath.size() >= sizeof addr.sun_path) return systemError(ENAMETOOLONG, "socket path " + socketPath);
  std::memcpy(addr.sun_path, socketPath.c_str(), socketPath.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errnoError("socket");
  const int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  const int err = errno;
  ::close(fd);
  if (rc == 0) return systemError(EADDRINUSE, "another daemon is serving on " + socketPath);
  if (err != ECONNREFUSED && err != ENOENT) return systemError(err, "probe " + socketPath);
  if (::unlink(socketPath.c_str()) != 0 && errno != ENOENT) return errnoError("unlink stale " + socketPath);
  return {};
}

Result<void> setSocketAccess(const std::string& socketPath, std::optional<gid_t> gid, mode_t mode) {
  if (gid && ::chown(socketPath.c_str(), static_cast<uid_t>(-1), *gid) != 0)
    return errnoError("chown " + socketPath + " to gid " + std::to_string(*gid));
  if (::chmod(socketPath.c_str(), mode) != 0) return errnoError("chmod " + socketPath);
  return {};
}

void unlinkSocket(const std::string& socketPath) { ::unlink(socketPath.c_str()); }

}  // namespace tt::sys
