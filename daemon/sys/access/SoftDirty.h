// Soft-dirty page tracking (Documentation/admin-guide/mm/soft-dirty.rst): writing "4" to
// /proc/PID/clear_refs clears the soft-dirty bit (pagemap bit 55) of every page of PID and
// write-protects them; the next write to a page faults once and sets the bit again. So between two
// clears, the set bits are exactly the pages written. Needs CONFIG_MEM_SOFT_DIRTY: without it the
// write to clear_refs still succeeds but the bit never sets, so support is probed, not assumed.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <vector>

#include "core/Result.h"
#include "sys/Fs.h"

namespace tt::sys {

inline constexpr uint64_t kPagemapSoftDirty = 1ULL << 55;

class SoftDirtyTracker {
 public:
  virtual ~SoftDirtyTracker() = default;
  // Clears the soft-dirty bits of every page of `pid`.
  [[nodiscard]] virtual Result<void> clear(pid_t pid) = 0;
  // Appends the addresses of soft-dirty pages in [start, start + pages * 4096) to `dirty`.
  [[nodiscard]] virtual Result<void> dirtyPages(pid_t pid, uint64_t start, uint64_t pages,
                                                std::vector<uint64_t>& dirty) = 0;
};

class ProcSoftDirtyTracker final : public SoftDirtyTracker {
 public:
  explicit ProcSoftDirtyTracker(Fs procfs) : procfs_(std::move(procfs)) {}
  Result<void> clear(pid_t pid) override;
  Result<void> dirtyPages(pid_t pid, uint64_t start, uint64_t pages, std::vector<uint64_t>& dirty) override;

 private:
  Fs procfs_;
  std::vector<uint64_t> words_;
};

// Probes the running kernel: a forked child writes a page, clears its own soft-dirty bits, writes
// again and checks bit 55. Ok(true) when soft-dirty works, Ok(false) when the kernel lacks it.
[[nodiscard]] Result<bool> probeSoftDirty();

}  // namespace tt::sys
