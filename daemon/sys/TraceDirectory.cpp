#include "sys/TraceDirectory.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <memory>
#include <utility>

namespace tt::sys {

namespace {

// Closes a descriptor at scope exit unless released.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  [[nodiscard]] int get() const { return fd_; }
  [[nodiscard]] int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

std::string gidText(gid_t gid) { return "gid " + std::to_string(gid); }

// A file name, not a path: the recorder's names never hold '/', and "." / ".." are not files.
bool plainEntryName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos;
}

Result<int> openDirectory(const std::string& directory) {
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errnoError("open trace directory " + directory);
  return fd;
}

std::string modeText(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

// Every directory above `directory`: owned by root or the daemon's user, and writable by no one
// else unless sticky (/tmp): whoever can write to a parent can rename the trace directory away
// and put their own in its place after the checks.
Result<void> checkParents(const std::string& directory) {
  for (size_t slash = directory.rfind('/'); slash != std::string::npos && slash > 0; slash = directory.rfind('/', slash - 1)) {
    const std::string parent = directory.substr(0, slash);
    struct stat st {};
    if (::stat(parent.c_str(), &st) != 0) return errnoError("trace directory parent " + parent);
    if (st.st_uid != 0 && st.st_uid != ::geteuid()) {
      return systemError(EPERM, "trace directory parent " + parent + " is owned by uid " + std::to_string(st.st_uid) +
                                    ": refusing to record below it (service.trace_directory)");
    }
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0) {
      return systemError(EPERM, "trace directory parent " + parent + " has mode " + modeText(st.st_mode) +
                                    ": writable by its group or by everyone, refusing to record below it");
    }
  }
  return {};
}

// A trace directory that was there already, made by an admin or an earlier start. Recordings of
// other users' processes go there, so only the daemon's own user may change what is in it:
// another owner, or write access for the group or for everyone, would let them replace or remove
// recordings under the daemon's feet; refused, as sshd refuses a home directory others can write
// to. Checked on a descriptor of the directory itself (a symlink is followed: its target counts),
// then its parents.
Result<void> checkExisting(const std::string& directory) {
  const int raw = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (raw < 0) return errnoError("open trace directory " + directory);
  Fd fd(raw);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return errnoError("stat trace directory " + directory);
  if (st.st_uid != ::geteuid()) {
    return systemError(EPERM, "trace directory " + directory + " is owned by uid " + std::to_string(st.st_uid) +
                                  ", not by the daemon's uid " + std::to_string(::geteuid()) +
                                  ": refusing to record there (chown it, or point service.trace_directory elsewhere)");
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return systemError(EPERM, "trace directory " + directory + " has mode " + modeText(st.st_mode) +
                                  ": writable by its group or by everyone, refusing to record there (chmod 0750 it)");
  }
  return checkParents(directory);
}

}  // namespace

Result<void> LinuxTraceDirectory::ensureDirectory(const std::string& path, std::optional<gid_t> group) {
  // "traces/" names the same directory as "traces": the last level must be the one given the group.
  std::string directory = path;
  while (directory.size() > 1 && directory.back() == '/') directory.pop_back();
  if (directory.empty()) return systemError(EINVAL, "empty trace directory path");
  if (::access(directory.c_str(), F_OK) == 0) return checkExisting(directory);
  // Missing parents first, as mkdir -p would but with mode exactly 0755 whatever the umask: the
  // admins must be able to pass through them. Only the last level holds recordings.
  for (size_t slash = directory.find('/', 1); slash != std::string::npos; slash = directory.find('/', slash + 1)) {
    const std::string parent = directory.substr(0, slash);
    if (::mkdir(parent.c_str(), 0755) != 0) {
      if (errno == EEXIST) continue;  // there already: not ours to change
      return errnoError("create trace directory parent " + parent);
    }
    const int raw = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (raw < 0) return errnoError("open new trace directory parent " + parent);
    Fd fd(raw);
    if (::fchmod(fd.get(), 0755) != 0) return errnoError("chmod 0755 trace directory parent " + parent);
  }
  if (::mkdir(directory.c_str(), 0750) != 0) {
    if (errno != EEXIST) return errnoError("create trace directory " + directory);
    return checkExisting(directory);  // made by someone else in between: theirs, so checked
  }
  if (auto parents = checkParents(directory); !parents) {
    ::rmdir(directory.c_str());
    return parents.error();
  }
  // Ours, just made: set group and mode on a descriptor of it, never by path again (O_NOFOLLOW:
  // if it was swapped for a symlink in between, refuse). fchmod because mkdir's mode is narrowed
  // by the umask.
  const int raw = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (raw < 0) return errnoError("open new trace directory " + directory);
  Fd fd(raw);
  if (group && ::fchown(fd.get(), static_cast<uid_t>(-1), *group) != 0) {
    Error e = errnoError("give new trace directory " + directory + " the admin group (" + gidText(*group) + ")");
    ::rmdir(directory.c_str());  // empty and ours: the next recording start tries again
    return e;
  }
  if (::fchmod(fd.get(), 0750) != 0) return errnoError("chmod 0750 trace directory " + directory);
  return {};
}

Result<int> LinuxTraceDirectory::createFile(const std::string& directory, const std::string& name,
                                            std::optional<gid_t> group) {
  if (!plainEntryName(name)) return systemError(EINVAL, "trace file name '" + name + "'");
  auto dirFd = openDirectory(directory);
  if (!dirFd) return dirFd.error();
  Fd dir(*dirFd);
  const std::string path = directory + "/" + name;
  // O_EXCL also refuses a symlink at the name, O_NOFOLLOW says so explicitly, and the mode is set
  // at creation: a privileged writer is never pointed at another file, and there is no window in
  // which the file has a wider mode or a group it should not have.
  const int raw = ::openat(dir.get(), name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0640);
  if (raw < 0) return errnoError("create trace file " + path);
  Fd fd(raw);
  auto removeAgain = [&] { ::unlinkat(dir.get(), name.c_str(), 0); };
  if (group && ::fchown(fd.get(), static_cast<uid_t>(-1), *group) != 0) {
    Error e = errnoError("give trace file " + path + " the admin group (" + gidText(*group) + ")");
    removeAgain();
    return e;
  }
  // The umask may have narrowed the creation mode; the admins' read bit is the point.
  if (::fchmod(fd.get(), 0640) != 0) {
    Error e = errnoError("chmod 0640 trace file " + path);
    removeAgain();
    return e;
  }
  return fd.release();
}

Result<std::vector<std::string>> LinuxTraceDirectory::listOwnFiles(const std::string& directory) {
  auto dirFd = openDirectory(directory);
  if (!dirFd) return dirFd.error();
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::fdopendir(*dirFd), ::closedir);
  if (!dir) {
    Error e = errnoError("list trace directory " + directory);
    ::close(*dirFd);
    return e;
  }
  const uid_t self = ::geteuid();
  std::vector<std::string> names;
  errno = 0;
  while (const dirent* entry = ::readdir(dir.get())) {
    const std::string name(entry->d_name);
    if (!plainEntryName(name)) continue;
    struct stat st {};
    if (::fstatat(::dirfd(dir.get()), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) {  // removed since readdir saw it
        errno = 0;
        continue;
      }
      return errnoError("stat " + directory + "/" + name);
    }
    if (S_ISREG(st.st_mode) && st.st_uid == self) names.push_back(name);
    errno = 0;
  }
  if (errno != 0) return errnoError("read trace directory " + directory);
  std::sort(names.begin(), names.end());
  return names;
}

Result<void> LinuxTraceDirectory::removeOwnFile(const std::string& directory, const std::string& name) {
  if (!plainEntryName(name)) return systemError(EINVAL, "trace file name '" + name + "'");
  auto dirFd = openDirectory(directory);
  if (!dirFd) return dirFd.error();
  Fd dir(*dirFd);
  const std::string path = directory + "/" + name;
  struct stat st {};
  if (::fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return errnoError("stat " + path);
  if (!S_ISREG(st.st_mode)) return systemError(EPERM, "not removing " + path + ": not a regular file");
  if (st.st_uid != ::geteuid()) return systemError(EPERM, "not removing " + path + ": not the daemon's file");
  // unlinkat removes the name itself: were it swapped for a symlink after the check, the link
  // would go, never its target.
  if (::unlinkat(dir.get(), name.c_str(), 0) != 0) return errnoError("remove " + path);
  return {};
}

}  // namespace tt::sys
