// Reads kernel pseudo-files (sysfs, procfs) under a root directory.
//
// Paths are given relative to the root ("devices/system/node/online" under "/sys"), so unit tests
// point the same code at fixture trees in tests/fixtures, as oomd's util/Fs does.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/Result.h"

namespace tt::sys {

class Fs {
 public:
  explicit Fs(std::string root);

  [[nodiscard]] const std::string& root() const { return root_; }
  [[nodiscard]] std::string resolve(std::string_view relative) const;

  [[nodiscard]] Result<std::string> readFile(std::string_view relative) const;
  // readFile, then `parse` (std::string_view -> Result<T>) on the text; a parse error names the
  // file it came from.
  template <typename Parse>
  [[nodiscard]] auto readParsed(std::string_view relative, Parse&& parse) const
      -> decltype(parse(std::string_view{})) {
    auto text = readFile(relative);
    if (!text) return text.error();
    auto parsed = parse(std::string_view(*text));
    if (!parsed) return withContext(parsed.error(), resolve(relative));
    return parsed;
  }
  // First line without the trailing newline: most sysfs attributes are one value.
  [[nodiscard]] Result<std::string> readLine(std::string_view relative) const;
  // Entry names, sorted, without "." and "..".
  [[nodiscard]] Result<std::vector<std::string>> listDir(std::string_view relative) const;
  [[nodiscard]] bool exists(std::string_view relative) const;
  [[nodiscard]] Result<void> writeFile(std::string_view relative, std::string_view content) const;

 private:
  std::string root_;
};

// Creates the parent directory of `path` (mode 0755) if missing; one level only (its own parent,
// such as /run, exists): the runtime directory of the socket and of the kernel-tiering state.
[[nodiscard]] Result<void> ensureParentDirectory(const std::string& path);
// Writes `text` to `path` whole or not at all (a file beside it, synced, renamed over it; mode
// 0600), creating the parent directory: for the daemon's state files, read back after a crash.
[[nodiscard]] Result<void> replaceFile(const std::string& path, std::string_view text);

}  // namespace tt::sys
