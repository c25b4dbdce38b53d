// Owner of bpf/perf_sample_agg.bpf.c: a BPF perf_event program attached to sampling events that
// counts samples per (tgid, page) in the kernel for tracked tgids only, and drops the samples
// before they reach any perf ring. Counts are kept in blocks of 512 per-page u8 counters, one per
// (tgid, 2 MiB-aligned chunk); the daemon reads and clears the blocks once per epoch.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/Result.h"
#include "sys/bpf/ChunkCounts.h"
#include "sys/bpf/RunStats.h"
#include "sys/bpf/TgidBitmap.h"

struct perf_sample_agg;
struct bpf_link;

namespace tt::sys::bpf {

struct AggStats {
  uint64_t samples = 0;    // program runs
  uint64_t tracked = 0;    // of tracked tgids
  uint64_t noAddress = 0;
  uint64_t mapFull = 0;    // samples dropped: the CPU's staged chunk could not be inserted (map full)
  uint64_t newChunks = 0;  // chunks inserted into the kernel hash (a chunk still staged at the drain
                           // is collected from its staging block and never inserted)
  uint64_t saturated = 0;  // samples not counted: their page's counter was at kChunkCountMax
  uint64_t withTier = 0;   // tracked samples whose data_src named the memory that served them
  uint64_t dataSrcNa = 0;  // tracked samples whose data_src said "not available" (no tier)
};

// How the program attached to events that record data_src (PEBS, IBS) reads it from the kernel's
// sample, chosen at load: the kfunc where the kernel has it (6.2+), else two probe reads (6.1).
// Ordered from least to most capable.
enum class DataSrcReader : uint8_t {
  None,       // neither program loaded: such events get the cookie-kinded program, no tier
  ProbeRead,  // bpf_probe_read_kernel
  Kfunc,      // bpf_cast_to_kern_ctx
};
[[nodiscard]] const char* toString(DataSrcReader r);

class PerfSampleAgg {
 public:
  // Opens and loads the programs; the tgid bitmap covers tgids below `pidMax` (kPidMaxLimit),
  // the count map holds up to `maxChunks` 2 MiB chunks per epoch. The data_src reader is the most
  // capable one the kernel loads, up to `mostCapable` (the benchmark compares them). Needs
  // CAP_BPF/CAP_PERFMON (root).
  [[nodiscard]] static Result<std::unique_ptr<PerfSampleAgg>> load(uint32_t pidMax, uint32_t maxChunks,
                                                                   DataSrcReader mostCapable = DataSrcReader::Kfunc);
  ~PerfSampleAgg();
  PerfSampleAgg(const PerfSampleAgg&) = delete;
  PerfSampleAgg& operator=(const PerfSampleAgg&) = delete;
  // Attaches the program to one sampling event; `kind` (enum tt_sample_kind, the BPF attach cookie)
  // is what that event's samples are counted as (PEBS loads and stores apart). `recordsDataSrc`:
  // the event was opened with PERF_SAMPLE_DATA_SRC, so its samples are counted by the tier that
  // served them when dataSrcReader() is not None (their kind stays the event's, IBS ops included).
  [[nodiscard]] Result<void> attach(int perfEventFd, uint32_t kind, bool recordsDataSrc);
  [[nodiscard]] DataSrcReader dataSrcReader() const { return reader_; }
  // Why the better data_src readers could not be loaded (empty when the best one was).
  [[nodiscard]] const std::string& dataSrcReaderError() const { return readerError_; }

  [[nodiscard]] Result<void> track(pid_t tgid);
  [[nodiscard]] Result<void> untrack(pid_t tgid);

  // Reads and removes every count block (ChunkCountMap::drain). Appends to `out`; returns the
  // number of blocks appended.
  [[nodiscard]] Result<size_t> drain(std::vector<ChunkCounts>& out);

  // Per-CPU stats summed.
  [[nodiscard]] Result<AggStats> stats() const;
  // Total BPF run time and run count of its loaded programs (needs bpf_enable_stats, else zeros).
  [[nodiscard]] Result<std::pair<uint64_t, uint64_t>> runTimeNsAndCount() const;
  // Kernel memory of the program's maps now: memlock of /proc/self/fdinfo/<map fd>. Since 6.4 the
  // kernel reports a non-preallocated hash map's bucket array plus its elements in use (key, value
  // and element header each, not the slab size class they are allocated from); older kernels
  // report an estimate from max_entries.
  struct MapMemory {
    uint64_t chunks = 0;  // the two count-block hashes (one per drain-generation parity)
    uint64_t other = 0;   // tgid bitmap, staging blocks, generation, grace maps, .rodata, stats
    [[nodiscard]] uint64_t total() const { return chunks + other; }
  };
  [[nodiscard]] Result<MapMemory> mapMemory() const;

 private:
  PerfSampleAgg(perf_sample_agg* skel, uint32_t pidMax, DataSrcReader reader);
  [[nodiscard]] static Result<std::unique_ptr<PerfSampleAgg>> loadWith(uint32_t pidMax, uint32_t maxChunks,
                                                                      DataSrcReader reader);
  [[nodiscard]] Result<void> setBit(pid_t tgid, bool on);
  perf_sample_agg* skel_;
  uint32_t pidMax_;
  DataSrcReader reader_;
  std::string readerError_;
  std::vector<bpf_link*> links_;
  ChunkCountMap chunks_;
};


}  // namespace tt::sys::bpf
