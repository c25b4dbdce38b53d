// The file-system side of the daemon's trace recordings (trace::Recorder): the directory, new
// files in it, and removal of old ones. An interface so the recorder's naming and retention rules
// are unit-tested against a fake; LinuxTraceDirectory is the one the daemon uses.
//
// Every call works relative to a descriptor of the directory (openat/fstatat/unlinkat), so the
// checks and the action on one entry see the same directory, and nothing follows a symlink
// inside it. The directory path itself may be a symlink an operator set up.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "core/Result.h"

namespace tt::sys {

class TraceDirectory {
 public:
  virtual ~TraceDirectory() = default;

  // Creates `directory` if it is missing (missing parents with mode 0755) with mode 0750 and, when
  // `group` is set, that group, so the admins can list and read the recordings and nobody else
  // can. An existing directory (or one another process makes in between) is left as the operator
  // made it, but it must be owned by this process's effective uid and writable by no one else,
  // and every directory above it owned by root or this uid and writable by no one else unless
  // sticky (EPERM otherwise: others could replace or remove recordings). A new directory that
  // cannot be given its group, or whose parents fail that check, is removed again (a later call
  // retries) and the call fails.
  [[nodiscard]] virtual Result<void> ensureDirectory(const std::string& directory, std::optional<gid_t> group) = 0;

  // Creates `name` in `directory` for writing and returns its descriptor (the caller closes it):
  // exclusively (EEXIST if anything has that name, a symlink included), mode exactly 0640 and,
  // when `group` is set, that group, given on the descriptor (fchown) before anything is written.
  // When the group cannot be given the file is removed again and the call fails.
  [[nodiscard]] virtual Result<int> createFile(const std::string& directory, const std::string& name,
                                               std::optional<gid_t> group) = 0;

  // Names of the regular files in `directory` owned by this process's effective uid (what the
  // daemon itself created); symlinks, directories and other users' files are not listed.
  [[nodiscard]] virtual Result<std::vector<std::string>> listOwnFiles(const std::string& directory) = 0;

  // Removes `name` from `directory` if it still is a regular file owned by this process's
  // effective uid (a symlink is never followed nor, when it replaced the file, removed).
  [[nodiscard]] virtual Result<void> removeOwnFile(const std::string& directory, const std::string& name) = 0;
};

class LinuxTraceDirectory final : public TraceDirectory {
 public:
  [[nodiscard]] Result<void> ensureDirectory(const std::string& directory, std::optional<gid_t> group) override;
  [[nodiscard]] Result<int> createFile(const std::string& directory, const std::string& name,
                                       std::optional<gid_t> group) override;
  [[nodiscard]] Result<std::vector<std::string>> listOwnFiles(const std::string& directory) override;
  [[nodiscard]] Result<void> removeOwnFile(const std::string& directory, const std::string& name) override;
};

}  // namespace tt::sys
