#include "sys/VmStat.h"

#include <cerrno>
#include <charconv>
#include <string>

namespace tt::sys {

Result<uint64_t> readVmstat(const Fs& proc, std::string_view key) {
  auto text = proc.readFile("vmstat");
  if (!text) return text.error();
  std::string_view rest(*text);
  while (!rest.empty()) {
    const size_t eol = rest.find('\n');
    const std::string_view line = rest.substr(0, eol);
    rest = eol == std::string_view::npos ? std::string_view{} : rest.substr(eol + 1);
    if (line.size() <= key.size() || line.substr(0, key.size()) != key || line[key.size()] != ' ') continue;
    const std::string_view value = line.substr(key.size() + 1);
    uint64_t v = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (ec != std::errc() || end != value.data() + value.size())
      return systemError(EINVAL, proc.resolve("vmstat") + ": " + std::string(key) + " is not a count: '" +
                                     std::string(value) + "'");
    return v;
  }
  return systemError(ENOENT, proc.resolve("vmstat") + " has no " + std::string(key));
}

}  // namespace tt::sys
