#include "migrate/Batching.h"

#include <algorithm>
#include <tuple>

namespace tt::migrate {

std::vector<MoveRun> coalesce(const std::vector<MoveRequest>& moves) {
  std::vector<MoveRun> runs;
  runs.reserve(moves.size());
  for (const MoveRequest& m : moves) {
    if (m.length == 0) continue;
    const uint64_t lo = m.start & ~(kBasePageSize - 1);
    const uint64_t hi = (m.start + m.length + kBasePageSize - 1) & ~(kBasePageSize - 1);
    runs.push_back({m.tgid, lo, hi - lo, m.targetNode, m.priority, m.regionId, m.betweenTiers});
  }
  auto key = [](const MoveRun& r) { return std::tie(r.tgid, r.targetNode, r.priority, r.regionId, r.betweenTiers, r.start); };
  std::sort(runs.begin(), runs.end(), [&](const MoveRun& a, const MoveRun& b) { return key(a) < key(b); });
  std::vector<MoveRun> merged;
  for (const MoveRun& r : runs) {
    if (!merged.empty()) {
      MoveRun& last = merged.back();
      const bool sameKey = last.tgid == r.tgid && last.targetNode == r.targetNode && last.priority == r.priority &&
                           last.regionId == r.regionId && last.betweenTiers == r.betweenTiers;
      if (sameKey && r.start <= last.start + last.length) {
        last.length = std::max(last.start + last.length, r.start + r.length) - last.start;
        continue;
      }
    }
    merged.push_back(r);
  }
  std::stable_sort(merged.begin(), merged.end(), [](const MoveRun& a, const MoveRun& b) {
    if (a.priority != b.priority) return a.priority > b.priority;
    if (a.tgid != b.tgid) return a.tgid < b.tgid;
    return a.start < b.start;
  });
  return merged;
}

std::vector<Segment> splitHuge(uint64_t start, uint64_t length, const std::vector<sys::HugeRange>& hugeRanges) {
  std::vector<Segment> out;
  const uint64_t end = start + length;
  uint64_t cursor = start;
  for (const sys::HugeRange& h : hugeRanges) {
    const uint64_t lo = std::max(h.start, cursor);
    const uint64_t hi = std::min(h.start + h.length, end);
    if (lo >= hi) continue;
    if (lo > cursor) out.push_back({cursor, lo - cursor, false});
    out.push_back({lo, hi - lo, true});
    cursor = hi;
  }
  if (cursor < end) out.push_back({cursor, end - cursor, false});
  return out;
}

}  // namespace tt::migrate
