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
#include <string>
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

// An open binary procfs file of 64-bit words (pagemap, kpageflags), closed on scope exit.
class WordFile {
 public:
  WordFile(const Fs& fs, const std::string& relative);
  // `name` in the directory open as `dirfd` (a process's /proc directory).
  WordFile(int dirfd, const std::string& name);
  ~WordFile();
  WordFile(const WordFile&) = delete;
  WordFile& operator=(const WordFile&) = delete;

  [[nodiscard]] Result<void> opened() const;
  // One word; a read past the end of a fixture file yields 0 (not present), as the kernel's
  // pagemap does for unmapped addresses.
  [[nodiscard]] Result<uint64_t> word(uint64_t index) const;
  // `count` consecutive words from word `index`, in as few reads as the file gives them: each read
  // of pagemap takes the target's mmap lock and walks its page tables, so a word per read cost
  // 0.5 us a page (114.89 ms of CPU per GiB scanned, against 6.58 ms in 512 KiB reads:
  // sources_bench pagemap-scan). Short reads are continued; what lies past the end of a fixture
  // file is 0.
  [[nodiscard]] Result<void> words(uint64_t index, uint64_t* out, size_t count) const;

 private:
  std::string path_;
  int fd_ = -1;
};

// Reads `count` consecutive 64-bit words of a binary procfs file (pagemap, kpageflags) starting at
// word `index`.
[[nodiscard]] Result<void> readWords(const Fs& fs, const std::string& relative, uint64_t index,
                                     std::vector<uint64_t>& out, size_t count);

}  // namespace tt::sys
