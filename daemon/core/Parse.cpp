#include "core/Parse.h"

#include <charconv>
#include <string>

namespace tt {

std::string_view trim(std::string_view s) {
  const auto isSpace = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && isSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && isSpace(s.back())) s.remove_suffix(1);
  return s;
}

Result<uint64_t> parseUint(std::string_view text) {
  const std::string_view t = trim(text);
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
  if (t.empty() || ec != std::errc() || end != t.data() + t.size())
    return logicError("not an unsigned integer: '" + std::string(text) + "'");
  return value;
}

Result<std::vector<int>> parseIdList(std::string_view text) {
  std::vector<int> ids;
  std::string_view rest = trim(text);
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const std::string_view item = trim(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    const auto dash = item.find('-');
    auto first = parseUint(item.substr(0, dash));
    auto last = dash == std::string_view::npos ? first : parseUint(item.substr(dash + 1));
    if (!first || !last || *last < *first || *last > 1'000'000)
      return logicError("bad id list '" + std::string(text) + "'");
    for (uint64_t i = *first; i <= *last; ++i) ids.push_back(static_cast<int>(i));
  }
  return ids;
}

Result<std::vector<int>> parseIntList(std::string_view text) {
  std::vector<int> values;
  std::string_view rest = trim(text);
  while (!rest.empty()) {
    const auto space = rest.find_first_of(" \t");
    const std::string_view item = rest.substr(0, space);
    int v = 0;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (ec != std::errc() || end != item.data() + item.size())
      return logicError("bad integer list '" + std::string(text) + "'");
    values.push_back(v);
    rest = space == std::string_view::npos ? std::string_view{} : trim(rest.substr(space));
  }
  return values;
}

Result<uint64_t> parseSize(std::string_view text) {
  std::string_view t = trim(text);
  uint64_t multiplier = 1;
  if (!t.empty()) {
    switch (t.back()) {
      case 'k': case 'K': multiplier = 1ULL << 10; break;
      case 'm': case 'M': multiplier = 1ULL << 20; break;
      case 'g': case 'G': multiplier = 1ULL << 30; break;
      default: break;
    }
    if (multiplier != 1) t.remove_suffix(1);
  }
  auto n = parseUint(t);
  if (!n) return logicError("bad size '" + std::string(text) + "' (use e.g. 4096, 64K, 256M, 2G)");
  if (*n > (UINT64_MAX / multiplier)) return logicError("size too large: '" + std::string(text) + "'");
  return *n * multiplier;
}

}  // namespace tt
