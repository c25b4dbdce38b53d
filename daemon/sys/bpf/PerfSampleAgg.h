// Owner of bpf/perf_sample_agg.bpf.c: a BPF perf_event program attached to sampling events that
// counts samples per (tgid, page) in the kernel for tracked tgids only, and drops the samples
// before they reach any perf ring. The daemon reads the counts once per epoch.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/Result.h"

struct perf_sample_agg;
struct bpf_link;

namespace tt::sys::bpf {

struct PageCount {
  uint32_t tgid = 0;
  uint64_t page = 0;
  uint64_t samples = 0;
};

struct AggStats {
  uint64_t samples = 0;   // program runs
  uint64_t tracked = 0;   // of tracked tgids
  uint64_t noAddress = 0;
  uint64_t mapFull = 0;
};

class PerfSampleAgg {
 public:
  // Opens and loads the program; the tgid bitmap covers tgids below `pidMax` (kernel.pid_max),
  // the count map holds up to `maxPages` pages per epoch. Needs CAP_BPF/CAP_PERFMON (root).
  [[nodiscard]] static Result<std::unique_ptr<PerfSampleAgg>> load(uint32_t pidMax, uint32_t maxPages);
  ~PerfSampleAgg();
  PerfSampleAgg(const PerfSampleAgg&) = delete;
  PerfSampleAgg& operator=(const PerfSampleAgg&) = delete;

  // Attaches the program to one perf event fd (one per CPU). The fd must outlive this object's
  // links or be closed after it (closing the fd detaches).
  [[nodiscard]] Result<void> attach(int perfEventFd);

  [[nodiscard]] Result<void> track(pid_t tgid);
  [[nodiscard]] Result<void> untrack(pid_t tgid);

  // Reads and removes every count (BPF_MAP_LOOKUP_AND_DELETE_BATCH; falls back to a key walk on
  // kernels without batch ops). Appends to `out`.
  [[nodiscard]] Result<size_t> drain(std::vector<PageCount>& out);

  // Per-CPU stats summed.
  [[nodiscard]] Result<AggStats> stats() const;
  // Total BPF run time and run count of the program (needs bpf_enable_stats, else zeros).
  [[nodiscard]] Result<std::pair<uint64_t, uint64_t>> runTimeNsAndCount() const;
  [[nodiscard]] int programFd() const;
  // Kernel memory of the program's maps now (memlock of /proc/self/fdinfo/<map fd>, which 6.x
  // reports as the memory in use for non-preallocated hash maps).
  [[nodiscard]] Result<uint64_t> mapMemoryBytes() const;

 private:
  explicit PerfSampleAgg(perf_sample_agg* skel, uint32_t pidMax) : skel_(skel), pidMax_(pidMax) {}
  [[nodiscard]] Result<void> setBit(pid_t tgid, bool on);
  perf_sample_agg* skel_;
  uint32_t pidMax_;
  std::vector<bpf_link*> links_;
  bool batchUnsupported_ = false;
  std::vector<uint8_t> keys_, values_;
};

// kernel.pid_max from procfs (`procRoot` normally "/proc").
[[nodiscard]] Result<uint32_t> readPidMax(const std::string& procRoot);

// Turns on the kernel's BPF run-time statistics (BPF_STATS_RUN_TIME) while the returned fd is
// open; -1 and an error when not permitted.
[[nodiscard]] Result<int> enableBpfRunTimeStats();

}  // namespace tt::sys::bpf
