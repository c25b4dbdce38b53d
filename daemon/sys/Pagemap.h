// Finding transparent huge pages in another process's address space.
//
// /proc/PID/smaps says how many bytes of a VMA are THP-backed (AnonHugePages) but not where. For
// VMAs that have some, /proc/PID/pagemap gives the PFN of the first 4 KiB page of each 2 MiB-
// aligned block and /proc/kpageflags says whether that page heads a THP (KPF_THP and
// KPF_COMPOUND_HEAD). PFNs are only visible with CAP_SYS_ADMIN; without them a VMA counts as huge
// only when smaps says all of its aligned part is.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <vector>

#include "core/Result.h"
#include "sys/Fs.h"
#include "sys/ProcMaps.h"

namespace tt::sys {

struct HugeRange {
  uint64_t start = 0;   // 2 MiB aligned
  uint64_t length = 0;  // multiple of 2 MiB
  bool operator==(const HugeRange&) const = default;
};

class HugePageProbe {
 public:
  virtual ~HugePageProbe() = default;
  // THP-backed 2 MiB blocks inside [start, start + length) of `pid`, ascending, adjacent blocks
  // merged. A block only partly inside the range is not reported (moving it would move memory
  // outside the request).
  [[nodiscard]] virtual Result<std::vector<HugeRange>> hugeRanges(pid_t pid, uint64_t start, uint64_t length) = 0;
};

// Bits of a pagemap entry and of a kpageflags word (Documentation/admin-guide/mm/pagemap.rst).
inline constexpr uint64_t kPagemapPresent = 1ULL << 63;
inline constexpr uint64_t kPagemapPfnMask = (1ULL << 55) - 1;
inline constexpr uint64_t kKpfCompoundHead = 1ULL << 15;
inline constexpr uint64_t kKpfThp = 1ULL << 22;

// The Linux implementation over procfs (`procfs` rooted at /proc, or a fixture tree holding
// <pid>/smaps, <pid>/pagemap and kpageflags in the kernel's binary layout).
class ProcHugePageProbe final : public HugePageProbe {
 public:
  explicit ProcHugePageProbe(Fs procfs) : procfs_(std::move(procfs)) {}
  Result<std::vector<HugeRange>> hugeRanges(pid_t pid, uint64_t start, uint64_t length) override;

 private:
  Fs procfs_;
};

// Reads `count` consecutive 64-bit words of a binary procfs file (pagemap, kpageflags) starting at
// word `index`.
[[nodiscard]] Result<void> readWords(const Fs& fs, const std::string& relative, uint64_t index,
                                     std::vector<uint64_t>& out, size_t count);
// The same for `name` in the directory open as `dirfd` (a process's /proc directory).
[[nodiscard]] Result<void> readWordsAt(int dirfd, const std::string& name, uint64_t index, std::vector<uint64_t>& out,
                                       size_t count);

}  // namespace tt::sys
