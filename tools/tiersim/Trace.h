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

// Footprint in pages: the sum of the regions (equals totalPages for generated traces).
[[nodiscard]] uint64_t footprintPages(const Trace& trace);

// Checks what replay relies on: accesses and marks in time order, pages inside [0, totalPages),
// regions inside the address space and not overlapping. A bad trace gets a message, not a crash.
[[nodiscard]] Result<void> validateTrace(const Trace& trace);

// ---- File form ----------------------------------------------------------------------------------

// Writes `trace` to `path`: virtual addresses are kSimBase + page * 4096.
[[nodiscard]] Result<void> writeTraceFile(const Trace& trace, const std::string& path);

// Reads a trace file. Regions (the header's and those added later) are laid out densely in
// address order (page ids follow the regions' virtual addresses); overlapping registrations are
// merged into one region (the first's name and kind) and counted; an access outside every region
// is dropped and counted.
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
