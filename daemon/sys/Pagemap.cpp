#include "sys/Pagemap.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <optional>

#include "core/Types.h"

namespace tt::sys {
namespace {

// An open binary procfs file, closed on scope exit.
class WordFile {
 public:
  WordFile(const Fs& fs, const std::string& relative) : path_(fs.resolve(relative)) {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  }
  ~WordFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  WordFile(const WordFile&) = delete;
  WordFile& operator=(const WordFile&) = delete;

  [[nodiscard]] Result<void> opened() const {
    if (fd_ < 0) return errnoError("open " + path_);
    return {};
  }
  // One word; a read past the end of a fixture file yields 0 (not present), as the kernel's
  // pagemap does for unmapped addresses.
  [[nodiscard]] Result<uint64_t> word(uint64_t index) const {
    uint64_t value = 0;
    const ssize_t n = ::pread(fd_, &value, sizeof value, static_cast<off_t>(index * sizeof value));
    if (n < 0) return errnoError("pread " + path_ + " word " + std::to_string(index));
    if (n != static_cast<ssize_t>(sizeof value)) return uint64_t{0};
    return value;
  }

 private:
  std::string path_;
  int fd_ = -1;
};

void appendBlock(std::vector<HugeRange>& out, uint64_t block) {
  if (!out.empty() && out.back().start + out.back().length == block) out.back().length += kHugePageSize;
  else out.push_back({block, kHugePageSize});
}

}  // namespace

Result<void> readWords(const Fs& fs, const std::string& relative, uint64_t index, std::vector<uint64_t>& out,
                       size_t count) {
  WordFile file(fs, relative);
  if (auto ok = file.opened(); !ok) return ok.error();
  out.resize(count);
  for (size_t i = 0; i < count; ++i) {
    auto w = file.word(index + i);
    if (!w) return w.error();
    out[i] = *w;
  }
  return {};
}

Result<std::vector<HugeRange>> ProcHugePageProbe::hugeRanges(pid_t pid, uint64_t start, uint64_t length) {
  std::vector<HugeRange> out;
  auto vmas = readSmaps(procfs_, pid);
  if (!vmas) return vmas.error();
  const uint64_t end = start + length;
  std::optional<WordFile> pagemap, kpageflags;
  for (const Vma& vma : *vmas) {
    if (vma.anonHugeBytes == 0 || vma.end <= start || vma.start >= end) continue;
    // Whole 2 MiB blocks inside both the VMA and the requested range.
    const uint64_t lo = (std::max(vma.start, start) + kHugePageSize - 1) & ~(kHugePageSize - 1);
    const uint64_t hi = std::min(vma.end, end) & ~(kHugePageSize - 1);
    if (lo >= hi) continue;
    if (!pagemap) {
      pagemap.emplace(procfs_, std::to_string(pid) + "/pagemap");
      if (auto ok = pagemap->opened(); !ok) return ok.error();
      kpageflags.emplace(procfs_, "kpageflags");
    }
    // Without PFNs (no CAP_SYS_ADMIN, or no kpageflags) only a VMA whose aligned part smaps
    // reports as entirely huge can be trusted to be huge block by block.
    const uint64_t vmaAligned = (vma.end & ~(kHugePageSize - 1)) -
                                ((vma.start + kHugePageSize - 1) & ~(kHugePageSize - 1));
    const bool wholeVmaHuge = vma.anonHugeBytes >= vmaAligned;
    for (uint64_t block = lo; block < hi; block += kHugePageSize) {
      auto entry = pagemap->word(block / kBasePageSize);
      if (!entry) return entry.error();
      if ((*entry & kPagemapPresent) == 0) continue;
      const uint64_t pfn = *entry & kPagemapPfnMask;
      if (pfn == 0 || !kpageflags->opened()) {
        if (wholeVmaHuge) appendBlock(out, block);
        continue;
      }
      auto flags = kpageflags->word(pfn);
      if (!flags) return flags.error();
      if ((*flags & kKpfThp) && (*flags & kKpfCompoundHead)) appendBlock(out, block);
    }
  }
  return out;
}

}  // namespace tt::sys
