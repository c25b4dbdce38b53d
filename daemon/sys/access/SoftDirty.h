// Soft-dirty page tracking (Documentation/admin-guide/mm/soft-dirty.rst): writing "4" to
// /proc/PID/clear_refs clears the soft-dirty bit (pagemap bit 55) of every page of PID and
// write-protects them; the next write to a page faults once and sets the bit again. So between two
// clears, the set bits are exactly the pages written. Needs CONFIG_MEM_SOFT_DIRTY: without it the
// write to clear_refs still succeeds but the bit never sets, so support is probed, not assumed.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <vector>

#include "core/Result.h"
#include "sys/Fs.h"

namespace tt::sys {

inline constexpr uint64_t kPagemapSoftDirty = 1ULL << 55;

class SoftDirtyTracker {
 public:
  virtual ~SoftDirtyTracker() = default;
  // Holds on to `pid` as the process it is now: later calls act on this process and fail (ENOENT)
  // once it has exited, even when its pid has been reused meanwhile. A clear_refs written to the
  // new process would wipe its soft-dirty state, which CRIU's incremental dumps rest on. Fails
  // when the process is gone already. clear() and dirtyPages() need it.
  [[nodiscard]] virtual Result<void> track(pid_t pid) = 0;
  virtual void untrack(pid_t pid) = 0;
  // Clears the soft-dirty bits of every page of `pid`.
  [[nodiscard]] virtual Result<void> clear(pid_t pid) = 0;
  // Appends the addresses of soft-dirty pages in [start, start + pages * 4096) to `dirty`.
  [[nodiscard]] virtual Result<void> dirtyPages(pid_t pid, uint64_t start, uint64_t pages,
                                                std::vector<uint64_t>& dirty) = 0;
};

// Over procfs: track() opens /proc/PID as a directory (O_PATH), and the files are opened relative to
// it. Once the process is gone, the kernel fails lookups in that directory, whoever has the pid now.
class ProcSoftDirtyTracker final : public SoftDirtyTracker {
 public:
  explicit ProcSoftDirtyTracker(Fs procfs) : procfs_(std::move(procfs)) {}
  ~ProcSoftDirtyTracker() override;
  ProcSoftDirtyTracker(const ProcSoftDirtyTracker&) = delete;
  ProcSoftDirtyTracker& operator=(const ProcSoftDirtyTracker&) = delete;
  Result<void> track(pid_t pid) override;
  void untrack(pid_t pid) override;
  Result<void> clear(pid_t pid) override;
  Result<void> dirtyPages(pid_t pid, uint64_t start, uint64_t pages, std::vector<uint64_t>& dirty) override;

 private:
  [[nodiscard]] Result<int> dirOf(pid_t pid) const;
  Fs procfs_;
  std::map<pid_t, int> dirs_;  // O_PATH directory fds of the tracked processes
  std::vector<uint64_t> words_;
};

// Probes the running kernel: a forked child writes a page, clears its own soft-dirty bits, writes
// again and checks bit 55. Ok(true) when soft-dirty works, Ok(false) when the kernel lacks it.
[[nodiscard]] Result<bool> probeSoftDirty();

}  // namespace tt::sys
