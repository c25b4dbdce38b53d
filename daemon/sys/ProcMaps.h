// /proc/PID/smaps as tensortier needs it: the VMAs of a process with how much of each is backed by
// transparent huge pages (AnonHugePages). The migration engine uses it to find THP-backed ranges
// without reading pagemap for VMAs that have none.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/Result.h"
#include "sys/Fs.h"

namespace tt::sys {

struct Vma {
  uint64_t start = 0;
  uint64_t end = 0;             // exclusive
  std::string path;             // backing file, "[heap]", "[stack]" or empty for anonymous
  bool writable = false;        // 'w' in the permissions
  uint64_t rssBytes = 0;
  uint64_t anonHugeBytes = 0;   // AnonHugePages: bytes mapped by PMD-sized THPs
  bool thpEligible = false;     // THPeligible: 1
  bool hugeDisabled = false;    // VmFlags has "nh" (MADV_NOHUGEPAGE)
};

// Parses the text of a smaps file. Unknown lines are ignored (the kernel adds fields over time).
[[nodiscard]] Result<std::vector<Vma>> parseSmaps(std::string_view text);

// Reads and parses `<pid>/smaps` under `procfs` (rooted at /proc, or a fixture tree).
[[nodiscard]] Result<std::vector<Vma>> readSmaps(const Fs& procfs, pid_t pid);

// Reads `<pid>/maps` instead: the same VMA headers without the fields (rssBytes, anonHugeBytes,
// thpEligible and hugeDisabled stay zero). For callers that need only ranges, permissions and
// paths: smaps has the kernel walk every page table of the process (milliseconds per GiB
// resident), maps does not.
// (sys::readMaps in sys/service reads the same file for the registry, outside tt_sys.)
[[nodiscard]] Result<std::vector<Vma>> readVmasFromMaps(const Fs& procfs, pid_t pid);

}  // namespace tt::sys
