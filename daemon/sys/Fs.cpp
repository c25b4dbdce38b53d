#include "sys/Fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <memory>

namespace tt::sys {

Fs::Fs(std::string root) : root_(std::move(root)) {
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
}

std::string Fs::resolve(std::string_view relative) const {
  while (!relative.empty() && relative.front() == '/') relative.remove_prefix(1);
  if (root_ == "/") return "/" + std::string(relative);
  return root_ + "/" + std::string(relative);
}

Result<std::string> Fs::readFile(std::string_view relative) const {
  const std::string path = resolve(relative);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errnoError("open " + path);
  std::string content;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      Error e = errnoError("read " + path);
      ::close(fd);
      return e;
    }
    if (n == 0) break;
    content.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return content;
}

Result<std::string> Fs::readLine(std::string_view relative) const {
  auto content = readFile(relative);
  if (!content) return content.error();
  std::string& s = *content;
  if (auto nl = s.find('\n'); nl != std::string::npos) s.resize(nl);
  return std::move(s);
}

Result<std::vector<std::string>> Fs::listDir(std::string_view relative) const {
  const std::string path = resolve(relative);
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(path.c_str()), ::closedir);
  if (!dir) return errnoError("opendir " + path);
  std::vector<std::string> names;
  errno = 0;
  while (const dirent* entry = ::readdir(dir.get())) {
    std::string_view name(entry->d_name);
    if (name != "." && name != "..") names.emplace_back(name);
  }
  if (errno != 0) return errnoError("readdir " + path);
  std::sort(names.begin(), names.end());
  return names;
}

bool Fs::exists(std::string_view relative) const {
  struct stat st {};
  return ::stat(resolve(relative).c_str(), &st) == 0;
}

Result<void> Fs::writeFile(std::string_view relative, std::string_view content) const {
  const std::string path = resolve(relative);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errnoError("open for write " + path);
  const ssize_t n = ::write(fd, content.data(), content.size());
  Error e = errnoError("write " + path);
  ::close(fd);
  if (n < 0) return e;
  if (static_cast<size_t>(n) != content.size()) return systemError(EIO, "short write to " + path);
  return {};
}

Result<void> replaceFile(const std::string& path, std::string_view text) {
  if (auto d = ensureParentDirectory(path); !d) return d.error();
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return errnoError("create " + tmp);
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!written) {
    ::unlink(tmp.c_str());
    return systemError(err, "write " + tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const Error e = errnoError("rename " + tmp + " to " + path);
    ::unlink(tmp.c_str());
    return e;
  }
  return {};
}

Result<void> ensureParentDirectory(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos || slash == 0) return {};
  const std::string dir = path.substr(0, slash);
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return errnoError("mkdir " + dir);
  return {};
}

}  // namespace tt::sys
