// A child process that touches a known set of pages on command: the target of the privileged
// sources tests. It maps `pages` fresh 4 KiB pages (THP off) and, each time it is told to, writes
// one byte to every page whose index satisfies the pattern of that round, so every write to a page
// not touched before is exactly one first-touch page fault at a known address.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <set>

namespace tt::test {

class PatternChild {
 public:
  // `hugePages`: the buffer starts on a 2 MiB boundary and asks for transparent huge pages
  // (MADV_HUGEPAGE); otherwise it refuses them (MADV_NOHUGEPAGE), so every page is a 4 KiB one.
  explicit PatternChild(uint64_t pages, bool hugePages = false);
  ~PatternChild();
  PatternChild(const PatternChild&) = delete;
  PatternChild& operator=(const PatternChild&) = delete;

  [[nodiscard]] pid_t pid() const { return pid_; }
  [[nodiscard]] uint64_t base() const { return base_; }
  [[nodiscard]] uint64_t pages() const { return pages_; }
  // Touches every page i with i % stride == offset (first call per page faults); waits until done.
  // Returns the page addresses touched.
  std::set<uint64_t> touch(uint32_t stride, uint32_t offset);
  // Writes one byte to every page in [first, end); waits until done. Returns the page addresses.
  std::set<uint64_t> writeRange(uint64_t first, uint64_t end);
  // `times` times: writes one byte to every page in [first, end), then discards the range
  // (MADV_DONTNEED), so each write is a fresh page fault: `times` faults per page. Waits until done.
  std::set<uint64_t> refaultRange(uint64_t first, uint64_t end, uint32_t times);
  // Shares the buffer copy-on-write with a forked process that only waits, writes one byte to
  // every page in [first, end) (a write-protect fault each: the copy), then ends that process.
  // Waits until done. Returns the page addresses.
  std::set<uint64_t> cowWriteRange(uint64_t first, uint64_t end);
  // Maps the huge pages in [first, end) by 4 KiB page-table entries instead of one PMD each (a
  // protection change on one page splits the mapping; the huge page itself stays whole).
  void splitHugeMappings(uint64_t first, uint64_t end);
  // Reads every page in [first, end) over and over for `ms` milliseconds; waits until done.
  std::set<uint64_t> readRangeFor(uint64_t first, uint64_t end, uint32_t ms);

 private:
  std::set<uint64_t> command(uint64_t op, uint64_t a, uint64_t b, uint64_t c);
  pid_t pid_ = -1;
  int toChild_ = -1;
  int fromChild_ = -1;
  uint64_t base_ = 0;
  uint64_t pages_ = 0;
};

}  // namespace tt::test
