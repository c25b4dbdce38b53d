// The pure planning steps of the migration engine: merging a plan's requests into maximal
// contiguous runs, and cutting a run into huge-page and base-page segments.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <vector>

#include "core/Types.h"
#include "sys/Pagemap.h"

namespace tt::migrate {

// A maximal contiguous range of one process going to one node, built from one or more
// MoveRequests with the same tgid, target node, priority and region.
struct MoveRun {
  pid_t tgid = 0;
  uint64_t start = 0;
  uint64_t length = 0;
  int targetNode = 0;
  int priority = 0;
  uint64_t regionId = 0;
  bool betweenTiers = false;  // MoveRequest::betweenTiers
  bool operator==(const MoveRun&) const = default;
};

// Merges overlapping and adjacent requests with the same (tgid, targetNode, priority, regionId,
// betweenTiers)
// and orders the runs by priority (highest first), then tgid, then address. Requests with a zero
// length are dropped; unaligned edges are widened to whole 4 KiB pages.
[[nodiscard]] std::vector<MoveRun> coalesce(const std::vector<MoveRequest>& moves);

struct Segment {
  uint64_t start = 0;
  uint64_t length = 0;
  bool huge = false;  // moved one 2 MiB entry at a time
  bool operator==(const Segment&) const = default;
};

// Cuts [start, start + length) into alternating base and huge segments; `hugeRanges` must be
// ascending and 2 MiB aligned (sys::HugePageProbe's answer). Parts of huge ranges outside the run
// are ignored.
[[nodiscard]] std::vector<Segment> splitHuge(uint64_t start, uint64_t length,
                                             const std::vector<sys::HugeRange>& hugeRanges);

}  // namespace tt::migrate
