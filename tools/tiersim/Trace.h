// A page-access trace as tiersim replays it, and its file form (proto/tensortier/v1/trace.proto).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "Policy.h"
#include "core/Result.h"
#include "core/Types.h"
#include "trace/TraceFile.h"

namespace tt::tiersim {

struct Trace {
  std::string name;
  std::vector<TraceRegion> regions;        // pages [firstPage, firstPage + pages), no overlap
  uint64_t totalPages = 0;                 // simulated address space: pages 0..totalPages-1
  std::vector<SimAccess> accesses;         // sorted by timeNs
  std::vector<IterationMark> marks;        // sorted by timestampNs (trace time)
  uint32_t samplePeriod = 1;               // 1: every access; N: recorded 1 in N (counts scale by N)
  bool computeOnlyTime = true;             // timestamps are compute time (see trace.proto)
  uint32_t scaleDivisor = 1;               // synthetic traces: sizes and FLOPs divided by this
  std::string description;
};

// What a trace may ask of a replay, checked where traces come in (readTraceFile, the generator)
// and by validateTrace, so that a damaged or hostile file gets an error instead of exhausting
// memory or running for ever.
//
// Address space: the replay keeps state per page (tier, presence, accessed bit, copy-queue slot,
// hint-scan time) and so do the policies (counts, prefix sums): 20 to 40 bytes a page. 2^28 pages
// (1 TiB of 4 KiB pages, far above any training process's registered tensors) is at most 5 to 10
// GiB of that state; a region of 2^50 bytes would fail to allocate it.
inline constexpr uint64_t kMaxTracePages = uint64_t{1} << 28;
// Scale divisor: the generator divides tensors and FLOPs by it and the sweep every policy period
// (the 1 ms epoch becomes 1 ms / S) while a touched page's stall stays what it is, so epochs per
// simulated step grow with S: at 1024 an epoch is still about 1 us; at 10^6 it is 1 ns and a replay
// runs millions of them per step. The sweep uses 16, tests up to 256.
inline constexpr uint32_t kMaxScaleDivisor = 1024;
// A recording's sample period (a record stands for count x period lines, which the cost model
// charges and the replay samples): 2^24, above any PMU sampling period in use (10^2 to 10^5).
inline constexpr uint32_t kMaxTraceSamplePeriod = 1U << 24;
// Lines one record stands for (count x sample period): 2^26, 4 GiB of traffic. The replay samples
// each line (with --sample-period 1 it delivers every one), so without a bound one record of
// 2^31 x 2^24 lines would run for days.
inline constexpr uint64_t kMaxRecordLines = uint64_t{1} << 26;

// Footprint in pages: the sum of the regions (equals totalPages for generated traces).
[[nodiscard]] uint64_t footprintPages(const Trace& trace);

// Checks what replay relies on: accesses and marks in time order, pages inside [0, totalPages),
// regions inside the address space and not overlapping, the bounds above. A bad trace gets a
// message, not a crash.
[[nodiscard]] Result<void> validateTrace(const Trace& trace);

// ---- File form ----------------------------------------------------------------------------------

// Writes `trace` to `path`: virtual addresses are kSimBase + page * 4096.
[[nodiscard]] Result<void> writeTraceFile(const Trace& trace, const std::string& path);

// Reads a trace file. Regions (the header's and those added later) are laid out densely in
// address order (page ids follow the regions' virtual addresses); overlapping registrations are
// merged into one region (the first's name and kind) and counted; an access outside every region
// is dropped and counted. A region, or all of them, above kMaxTracePages, a scale_divisor above
// kMaxScaleDivisor or a sample_period above kMaxTraceSamplePeriod is an error naming the field.
struct ReadTraceStats {
  uint64_t droppedAccesses = 0;
  uint64_t mergedRegions = 0;
  // The file ended inside a chunk (a recording still being written, or cut short by a crash): the
  // chunks before it are read, the incomplete one is not.
  bool incompleteLastChunk = false;
  // A recording's times are CLOCK_MONOTONIC (time since boot): shifted by this so that the trace
  // starts at 0, as the simulator's clock does.
  uint64_t shiftedByNs = 0;
};
[[nodiscard]] Result<Trace> readTraceFile(const std::string& path, ReadTraceStats* stats = nullptr);

// The incremental writer is the daemon's (daemon/trace/TraceFile.h): the recorder of live runs
// and tiersim write the same format with the same code.
using trace::TraceWriter;

}  // namespace tt::tiersim
