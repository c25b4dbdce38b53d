#include "service/StuckMoves.h"

#include <algorithm>

namespace tt::service {

void StuckMoves::erase(pid_t tgid, uint64_t start, uint64_t end, std::vector<Erased>* erased) {
  if (start >= end) return;
  // The first hold that may reach into [start, end): the last one starting at or before it.
  auto it = holds_.upper_bound({tgid, start});
  if (it != holds_.begin() && std::prev(it)->first.first == tgid) --it;
  while (it != holds_.end() && it->first.first == tgid && it->second.range.start < end) {
    const Hold h = it->second;
    const uint64_t hs = h.range.start, he = h.range.start + h.range.length;
    if (he <= start) {
      ++it;
      continue;
    }
    it = holds_.erase(it);
    if (erased != nullptr) erased->push_back({std::max(hs, start), std::min(he, end), h.wait});
    if (hs < start) {
      Hold left = h;
      left.range.length = start - hs;
      holds_.emplace(std::pair{tgid, hs}, left);
    }
    if (he > end) {
      Hold right = h;
      right.range.start = end;
      right.range.length = he - end;
      it = holds_.emplace(std::pair{tgid, end}, right).first;
      ++it;
    }
  }
}

void StuckMoves::onFinishedPlan(std::span<const FinishedRun> runs) {
  for (const FinishedRun& run : runs) {
    const uint64_t runEnd = run.start + run.length;
    std::vector<Erased> erased;
    // A run that tried every page settles its whole range; one that did not (cancelled, the target
    // full, failed) says nothing of the pages it did not try: only its busy ranges are replaced.
    if (run.tried) erase(run.tgid, run.start, runEnd, &erased);
    for (const AddressRange& b : run.busy) {
      // Only what lies in the run (the engine's ranges always do; a fake's might not).
      const uint64_t start = std::max(b.start, run.start), end = std::min(b.start + b.length, runEnd);
      if (start >= end) continue;
      if (!run.tried) erase(run.tgid, start, end, &erased);
      uint32_t wait = 0;  // the longest hold this one follows: a retry the engine left busy again
      for (const Erased& e : erased)
        if (e.start < end && start < e.end) wait = std::max(wait, e.wait);
      if (holds_.size() >= kMaxRanges) {
        ++notHeld_;
        continue;
      }
      Hold h;
      h.range = StuckRange{run.tgid, start, end - start, run.demotion, false};
      h.wait = wait == 0 ? kFirstHoldPlans : std::min(kMaxHoldPlans, 2 * wait);
      h.plansLeft = h.wait;
      holds_[{run.tgid, start}] = h;
    }
  }
}

std::vector<StuckRange> StuckMoves::nextPlan(bool counts) {
  std::vector<StuckRange> out;
  out.reserve(holds_.size());
  for (auto& [key, h] : holds_) {
    StuckRange r = h.range;
    r.retry = h.plansLeft == 0;
    if (counts && h.plansLeft > 0) --h.plansLeft;
    out.push_back(r);
  }
  return out;
}

void StuckMoves::removeProcess(pid_t tgid) {
  holds_.erase(holds_.lower_bound({tgid, 0}), holds_.lower_bound({tgid + 1, 0}));
}

void StuckMoves::removeRange(pid_t tgid, uint64_t start, uint64_t length) { erase(tgid, start, start + length, nullptr); }

StuckMoves::Totals StuckMoves::totals() const {
  Totals t;
  t.ranges = holds_.size();
  for (const auto& [key, h] : holds_) (h.range.onFast ? t.fastPages : t.slowPages) += h.range.length / kBasePageSize;
  t.notHeld = notHeld_;
  return t;
}

}  // namespace tt::service
