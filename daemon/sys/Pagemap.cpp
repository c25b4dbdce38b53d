#include "sys/Pagemap.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "core/Types.h"

namespace tt::sys {
namespace {

void appendBlock(std::vector<HugeRange>& out, uint64_t block) {
  if (!out.empty() && out.back().start + out.back().length == block) out.back().length += kHugePageSize;
  else out.push_back({block, kHugePageSize});
}

}  // namespace

WordFile::WordFile(const Fs& fs, const std::string& relative) : path_(fs.resolve(relative)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
}

WordFile::WordFile(int dirfd, const std::string& name) : path_(name) {
  fd_ = ::openat(dirfd, name.c_str(), O_RDONLY | O_CLOEXEC);
}

WordFile::~WordFile() {
  if (fd_ >= 0) ::close(fd_);
}

Result<void> WordFile::opened() const {
  if (fd_ < 0) return errnoError("open " + path_);
  return {};
}

Result<uint64_t> WordFile::word(uint64_t index) const {
  uint64_t value = 0;
  if (auto r = words(index, &value, 1); !r) return r.error();
  return value;
}

Result<void> WordFile::words(uint64_t index, uint64_t* out, size_t count) const {
  auto* bytes = reinterpret_cast<char*>(out);
  const size_t total = count * sizeof(uint64_t);
  size_t done = 0;
  while (done < total) {
    const ssize_t n = ::pread(fd_, bytes + done, total - done, static_cast<off_t>(index * sizeof(uint64_t) + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errnoError("pread " + path_ + " words " + std::to_string(index) + "+" + std::to_string(count));
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  std::memset(bytes + done, 0, total - done);
  return {};
}

Result<void> readWords(const Fs& fs, const std::string& relative, uint64_t index, std::vector<uint64_t>& out,
                       size_t count) {
  WordFile file(fs, relative);
  if (auto ok = file.opened(); !ok) return ok.error();
  out.resize(count);
  return file.words(index, out.data(), count);
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
