#include "sys/ProcMaps.h"

#include <charconv>

#include "core/Parse.h"

namespace tt::sys {
namespace {

bool isHex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// "7f12a0000000-7f12a0200000 rw-p 00000000 00:00 0     [heap]": a VMA header. Field lines
// ("Rss:   2048 kB") start with a capitalised key and a colon, never with a hex range.
bool parseHeader(std::string_view line, Vma& vma) {
  const size_t dash = line.find('-');
  if (dash == 0 || dash == std::string_view::npos) return false;
  for (size_t i = 0; i < dash; ++i)
    if (!isHex(line[i])) return false;
  const size_t space = line.find(' ', dash);
  if (space == std::string_view::npos) return false;
  auto hex = [](std::string_view s, uint64_t& out) {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out, 16);
    return ec == std::errc() && p == s.data() + s.size();
  };
  if (!hex(line.substr(0, dash), vma.start) || !hex(line.substr(dash + 1, space - dash - 1), vma.end)) return false;
  // Five fields follow the range (perms, offset, dev, inode) and then the optional path.
  std::string_view rest = line.substr(space);
  for (int field = 0; field < 4; ++field) {
    rest = trim(rest);
    const size_t next = rest.find(' ');
    if (field == 0) vma.writable = rest.size() > 1 && rest[1] == 'w';
    rest = next == std::string_view::npos ? std::string_view{} : rest.substr(next);
  }
  vma.path = std::string(trim(rest));
  return vma.end > vma.start;
}

// "AnonHugePages:      4096 kB" -> bytes.
Result<uint64_t> kbField(std::string_view value) {
  value = trim(value);
  if (value.size() > 3 && value.substr(value.size() - 3) == " kB") value = value.substr(0, value.size() - 3);
  auto kb = parseUint(value);
  if (!kb) return kb.error();
  return *kb * 1024;
}

}  // namespace

Result<std::vector<Vma>> parseSmaps(std::string_view text) {
  std::vector<Vma> vmas;
  size_t lineNo = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    ++lineNo;
    if (trim(line).empty()) continue;
    Vma header;
    if (parseHeader(line, header)) {
      vmas.push_back(std::move(header));
      continue;
    }
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos)
      return logicError("smaps line " + std::to_string(lineNo) + ": neither a VMA header nor a field");
    if (vmas.empty()) return logicError("smaps line " + std::to_string(lineNo) + ": field before any VMA header");
    const std::string_view key = line.substr(0, colon);
    const std::string_view value = line.substr(colon + 1);
    Vma& vma = vmas.back();
    if (key == "AnonHugePages" || key == "Rss") {
      auto bytes = kbField(value);
      if (!bytes) return withContext(bytes.error(), "smaps line " + std::to_string(lineNo));
      (key == "Rss" ? vma.rssBytes : vma.anonHugeBytes) = *bytes;
    } else if (key == "THPeligible") {
      vma.thpEligible = trim(value) == "1";
    } else if (key == "VmFlags") {
      const std::string flags = " " + std::string(trim(value)) + " ";
      vma.hugeDisabled = flags.find(" nh ") != std::string::npos;
    }
  }
  return vmas;
}

Result<std::vector<Vma>> readSmaps(const Fs& procfs, pid_t pid) {
  return procfs.readParsed(std::to_string(pid) + "/smaps", parseSmaps);
}

Result<std::vector<Vma>> readVmasFromMaps(const Fs& procfs, pid_t pid) {
  // A maps line is an smaps header line, and maps has no field lines.
  return procfs.readParsed(std::to_string(pid) + "/maps", parseSmaps);
}

}  // namespace tt::sys
