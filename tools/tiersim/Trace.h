// A page-access trace as tiersim replays it, and its file form (proto/tensortier/v1/trace.proto).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "Policy.h"
#include "core/Result.h"
#include "core/Types.h"

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
};
[[nodiscard]] Result<Trace> readTraceFile(const std::string& path, ReadTraceStats* stats = nullptr);

// Incremental writer for a live recording (the daemon): header first, then accesses/marks as they
// come, in time order. Addresses are virtual; flush() closes a chunk.
class TraceWriter {
 public:
  TraceWriter() = default;
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;
  ~TraceWriter();

  struct Header {
    std::string name;
    pid_t tgid = 0;
    uint32_t samplePeriod = 1;
    bool computeOnlyTime = false;
    uint32_t scaleDivisor = 1;
    std::vector<RegionInfo> regions;
    std::string description;
  };
  [[nodiscard]] Result<void> open(const std::string& path, const Header& header);
  // count: cache-line accesses the record stands for (a sample's weight).
  [[nodiscard]] Result<void> addAccess(uint64_t timeNs, uint64_t address, uint32_t count, bool write);
  [[nodiscard]] Result<void> addMark(const IterationMark& mark);
  // A region registered after open() (goes into the current chunk).
  [[nodiscard]] Result<void> addRegion(const RegionInfo& region);
  [[nodiscard]] Result<void> flush();
  [[nodiscard]] Result<void> close();

 private:
  struct Impl;
  Impl* impl_ = nullptr;
};

}  // namespace tt::tiersim
