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
  // First line without the trailing newline: most sysfs attributes are one value.
  [[nodiscard]] Result<std::string> readLine(std::string_view relative) const;
  // Entry names, sorted, without "." and "..".
  [[nodiscard]] Result<std::vector<std::string>> listDir(std::string_view relative) const;
  [[nodiscard]] bool exists(std::string_view relative) const;
  [[nodiscard]] Result<void> writeFile(std::string_view relative, std::string_view content) const;

 private:
  std::string root_;
};

}  // namespace tt::sys
