// Prefetching oracle: an offline yardstick that schedules copies into windows whose memory
// bandwidth is idle, as Sentinel (Ren et al., HPCA'21) migrates tensors during compute-intensive
// layers so that the next memory-bound layer finds its data in DRAM.
//
// Not a peer's policy, and not something an online system can run: it knows
//   - every future access (the whole trace, as the other offline policies),
//   - the cost model: the tiers' latencies and bandwidths, memory parallelism, the compute overlap,
//     the migration overlap and the window length (PrefetchOracleParams, filled from SimConfig),
//   - the current placement of every page (EpochContext::tierOf, as every policy).
// What it assumes (approximations of the simulator, not of hardware):
//   - windows lie on a fixed grid of `windowNs` trace time from 0; the simulator starts a window at
//     the first access after the last one ended and at every StepEnd, so the grids drift apart
//     within a step. Neighbouring windows of one op cost alike, so this is close, not exact.
//   - the copies of an epoch are charged to the simulator's window that closes next; the oracle
//     prices them in the windows just before and just after the replay's trace time and takes the
//     worse (it does not know which of the two the simulator closes), adding the copies of earlier
//     epochs charged to the same window. Since the simulator's copy queue, copies run at the
//     engine's rate from the epoch on and their bytes are spread over the windows they run in, so
//     this over-prices a batch (all of it in one window), and a page lands when its copy ends,
//     not at the epoch; the oracle is not re-tuned for that (it stays a yardstick, priced as before).
//
// How an access is valued: a window's "memory weight" is the share of a slow-minus-fast stall
// difference that shows up in its time, computed once, from the trace alone, with every access of
// the window on the slow tier and again with every access on the fast tier:
//   weight = (1 - overlap) + overlap * clamp((stall_slow - compute) / (stall_slow - stall_fast), 0, 1)
// (window time = compute + stall - overlap * min(compute, stall)). With overlap 0 every window has
// weight 1 (the static optimum's and the look-ahead oracle's value); with overlap 1 a window that
// stays compute bound even when all its data is slow has weight 0: where its pages live does not
// matter. A window counts as exposed as its most exposed neighbour (the grids differ, above). An
// access saves count x (per-line roofline saving, AutoTm.cpp) x weight.
//
// What it moves (Belady's rule for prefetching, on the weighted accesses): every epoch, with the
// copy engine's time since the last epoch as budget, less the simulator's backlog of queued copies
// (no banking of idle engine time),
//   - promotes the slow page whose next weighted access (within `horizonSteps` steps) is soonest,
//     into free fast room, if the saving of its weighted accesses in the horizon beats the move's cost;
//   - otherwise swaps it with the fast page whose next weighted access is furthest (none in the
//     horizon first), if that is later than the slow page's, and the slow page's saving before the
//     fast page is needed again beats the cost of both copies; when fewer than two idle windows
//     (compute bound even with all their data slow) lie between the two uses, the victim cannot be
//     assumed to come back for free, and its saving over the rest of the horizon (every access
//     outside an idle window in full) is subtracted;
// where a copy costs (1 - migration overlap) x its copy time on the critical path plus the time its
// stolen bandwidth (migration overlap x 4 KiB read on the source, written on the destination) adds
// to the window it lands in, priced exactly with the cost model against the traffic of the window's
// accesses under the current placement: zero in a window whose memory bandwidth has room (a
// compute-bound window under --overlap 1, or a latency-bound tier). It starts from the static
// optimum's placement (AutoTm.cpp) and re-plans the candidate order every 1/32 step of trace time
// (each candidate is re-priced when it is tried). A heuristic with an oracle's input, not a proven optimum.
#include <algorithm>
#include <limits>

#include "Baselines.h"
#include "CostModel.h"

namespace tt::tiersim {
namespace {

constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();

TierSpec specOf(const TierInfo& tier) {
  return TierSpec{"", tier.readLatencyNs, tier.writeLatencyNs, tier.readBandwidthBytesPerNs,
                  tier.writeBandwidthBytesPerNs};
}

class PrefetchOraclePolicy : public StaticStartOracle {
 public:
  explicit PrefetchOraclePolicy(const PrefetchOracleParams& params)
      : StaticStartOracle(params.memoryParallelism), params_(params), window_(std::max<uint64_t>(1, params.windowNs)) {}
  [[nodiscard]] std::string name() const override { return "oracle-prefetch"; }

  void init(const std::vector<TraceRegion>& regions, uint64_t totalPages, const std::vector<TierInfo>& tiers,
            const std::vector<SimAccess>* fullTrace) override {
    initial_->init(regions, totalPages, tiers, fullTrace);
    pages_ = totalPages;
    trace_ = fullTrace;
    if (fullTrace == nullptr || tiers.size() < 2) trace_ = nullptr;  // offline only
    for (const auto& tier : tiers) specs_.push_back(specOf(tier));
    line_ = perLineSaving(tiers, params_.memoryParallelism);
  }


  void onEpoch(const EpochContext& c, std::vector<PageMove>& moves) override {
    if (trace_ == nullptr) return;
    if (!profiled_) profile(c.linesPerCount);
    // The engine's time since the last epoch, less the copies still queued from earlier epochs
    // (the simulator copies in order, so new moves wait behind them).
    const double backlogNs = static_cast<double>(c.queuedPages) * kPageBytes /
                             std::max(1e-9, std::min(c.promoteBytesPerNs, c.demoteBytesPerNs));
    const double engineNs =
        std::max(0.0, static_cast<double>(c.nowNs - std::min(c.nowNs, lastEpochNs_)) - backlogNs);
    lastEpochNs_ = c.nowNs;
    learnStepLength(c.traceNowNs);
    if (stepTraceNs_ <= 0) return;
    now_ = c.traceNowNs;
    until_ = now_ + static_cast<uint64_t>(params_.horizonSteps * stepTraceNs_);
    if (!planned_ || static_cast<double>(now_ - lastPlanTraceNs_) >= stepTraceNs_ / kPlansPerStep) {
      planned_ = true;
      lastPlanTraceNs_ = now_;
      plan(c);
    }
    schedule(c, engineNs, moves);
  }

 private:
  // Re-plans (candidate order) every 1/32 of a step of trace time: phases (a layer, the optimizer)
  // are shorter than a step, and candidates are re-priced at every epoch anyway.
  static constexpr double kPlansPerStep = 32;
  // Candidates priced and turned down per epoch before it gives up until the next epoch (bounds the
  // work of an epoch in a busy window; turned-down candidates are tried again next epoch).
  static constexpr int kMaxRejections = 64;
  // Idle windows between the promoted page's use and the victim's next one that count as a chance to
  // bring the victim back for free.
  static constexpr uint64_t kIdleToReturn = 2;

  // Per page, its accesses in time order (CSR): time, cumulative weighted saving, and the index of
  // the next access with a positive weight.
  void profile(uint32_t linesPerCount) {
    profiled_ = true;
    const auto& trace = *trace_;
    const double lpc = std::max<uint32_t>(1, linesPerCount);
    const uint64_t windows = trace.empty() ? 1 : trace.back().timeNs / window_ + 1;
    std::vector<TierTraffic> traffic(windows);
    for (const auto& a : trace) {
      auto& t = traffic[a.timeNs / window_];
      (a.write ? t.writeLines : t.readLines) += static_cast<uint64_t>(static_cast<double>(a.count) * lpc);
    }
    std::vector<double> weight(windows, 1.0);
    std::vector<double> hard(windows, 1.0);
    const double overlap = std::clamp(params_.computeOverlap, 0.0, 1.0);
    const double compute = static_cast<double>(window_);
    std::vector<double> exposedOf(windows, 0.0);
    for (uint64_t w = 0; w < windows; ++w) {
      const double slow = tierStallNs(specs_[1], traffic[w], params_.memoryParallelism);
      const double fast = tierStallNs(specs_[0], traffic[w], params_.memoryParallelism);
      exposedOf[w] = slow > fast ? std::clamp((slow - compute) / (slow - fast), 0.0, 1.0) : 0.0;
    }
    for (uint64_t w = 0; w < windows; ++w) {
      // The simulator's windows need not line up with this grid: an access near the end of a
      // compute-bound window may share the simulator's window with a memory-bound neighbour, so a
      // window counts as exposed as its most exposed neighbour.
      double exposed = exposedOf[w];
      if (w > 0) exposed = std::max(exposed, exposedOf[w - 1]);
      if (w + 1 < windows) exposed = std::max(exposed, exposedOf[w + 1]);
      weight[w] = (1.0 - overlap) + overlap * exposed;
      hard[w] = exposed > 0 ? 1.0 : 1.0 - overlap;
    }
    idleBefore_.assign(windows + 1, 0);
    for (uint64_t w = 0; w < windows; ++w) {
      const bool idle = tierStallNs(specs_[1], traffic[w], params_.memoryParallelism) <= compute;
      idleBefore_[w + 1] = idleBefore_[w] + (idle ? 1 : 0);
    }
    offset_.assign(pages_ + 1, 0);
    for (const auto& a : trace) ++offset_[a.page + 1];
    for (uint64_t p = 0; p < pages_; ++p) offset_[p + 1] += offset_[p];
    times_.resize(trace.size());
    cumulative_.resize(trace.size());
    cumulativeHard_.resize(trace.size());
    nextWeighted_.resize(trace.size());
    std::vector<uint64_t> fill(offset_.begin(), offset_.end() - 1);
    for (const auto& a : trace) {
      const uint64_t i = fill[a.page]++;
      times_[i] = a.timeNs;
      const double full = static_cast<double>(a.count) * lpc * (a.write ? line_.writeNs : line_.readNs);
      cumulative_[i] = full * weight[a.timeNs / window_];
      cumulativeHard_[i] = full * hard[a.timeNs / window_];
    }
    for (uint64_t p = 0; p < pages_; ++p) {
      uint64_t next = offset_[p + 1];
      for (uint64_t i = offset_[p + 1]; i-- > offset_[p];) {
        if (cumulative_[i] > kWeightedFloor) next = i;
        nextWeighted_[i] = next;
      }
      for (uint64_t i = offset_[p] + 1; i < offset_[p + 1]; ++i) {
        cumulative_[i] += cumulative_[i - 1];
        cumulativeHard_[i] += cumulativeHard_[i - 1];
      }
    }
    begin_.assign(offset_.begin(), offset_.end() - 1);
  }

  // Windows between two trace times (exclusive) that stay compute bound with all their accesses on
  // the slow tier: where a copy surely has room.
  [[nodiscard]] uint64_t idleWindows(uint64_t from, uint64_t to) const {
    const uint64_t last = idleBefore_.size() - 1;
    const uint64_t a = std::min(last, from / window_ + 1);
    const uint64_t b = std::min(last, to / window_);
    return b > a ? idleBefore_[b] - idleBefore_[a] : 0;
  }

  // Moves page p's cursor to its first access at or after now_.
  void refresh(PageId p) {
    uint64_t& b = begin_[p];
    while (b < offset_[p + 1] && times_[b] < now_) ++b;
  }
  // Trace time of p's next weighted access before until_, or kNever (refresh first).
  [[nodiscard]] uint64_t nextUse(PageId p) const {
    const uint64_t i = begin_[p] < offset_[p + 1] ? nextWeighted_[begin_[p]] : offset_[p + 1];
    return i < offset_[p + 1] && times_[i] < until_ ? times_[i] : kNever;
  }
  // Weighted saving of p's accesses in [now_, to) (refresh first).
  // `hard`: every access outside an idle window counts in full (what a page loses at the margin
  // when its window is already memory bound), instead of the window's average weight.
  [[nodiscard]] double saving(PageId p, uint64_t to, bool hard = false) const {
    const auto& cumulative = hard ? cumulativeHard_ : cumulative_;
    const uint64_t b = begin_[p];
    const auto first = times_.begin() + static_cast<std::ptrdiff_t>(b);
    const auto last = times_.begin() + static_cast<std::ptrdiff_t>(offset_[p + 1]);
    const auto e = static_cast<uint64_t>(std::lower_bound(first, last, to) - times_.begin());
    const double before = b > offset_[p] ? cumulative[b - 1] : 0.0;
    const double upTo = e > offset_[p] ? cumulative[e - 1] : 0.0;
    return upTo - before;
  }

  // Candidate order for the next epochs: slow pages by next weighted use, soonest first; fast pages
  // by next weighted use, latest (or none in the horizon) first.
  void plan(const EpochContext& c) {
    const auto& tierOf = *c.tierOf;
    const auto& present = *c.present;
    ++planId_;
    promote_.clear();
    demote_.clear();
    nextOf_.assign(pages_, kNever);
    for (uint64_t p = 0; p < pages_; ++p) {
      if (present[p] == 0) continue;
      refresh(p);
      nextOf_[p] = nextUse(p);
      if (tierOf[p] != 0) {
        if (nextOf_[p] != kNever) promote_.push_back(p);
      } else {
        demote_.push_back(p);
      }
    }
    std::stable_sort(promote_.begin(), promote_.end(), [&](PageId a, PageId b) { return nextOf_[a] < nextOf_[b]; });
    std::stable_sort(demote_.begin(), demote_.end(), [&](PageId a, PageId b) { return nextOf_[a] > nextOf_[b]; });
    promoteAt_ = 0;
    demoteAt_ = 0;
  }

  // Traffic of the accesses in [from, to) under the current placement, per tier.
  void windowTraffic(uint64_t from, uint64_t to, const EpochContext& c, std::vector<TierTraffic>& out) const {
    out.assign(specs_.size(), TierTraffic{});
    const auto& trace = *trace_;
    auto it = std::lower_bound(trace.begin(), trace.end(), from,
                               [](const SimAccess& a, uint64_t t) { return a.timeNs < t; });
    for (; it != trace.end() && it->timeNs < to; ++it) {
      auto& t = out[(*c.tierOf)[it->page]];
      (it->write ? t.writeLines : t.readLines) += static_cast<uint64_t>(it->count) * c.linesPerCount;
    }
  }
  [[nodiscard]] double windowTime(const std::vector<TierTraffic>& traffic) const {
    double stall = 0;
    for (size_t t = 0; t < traffic.size(); ++t) stall += tierStallNs(specs_[t], traffic[t], params_.memoryParallelism);
    return windowTimeNs(static_cast<double>(window_), stall, params_.computeOverlap);
  }

  void schedule(const EpochContext& c, double engineNs, std::vector<PageMove>& moves) {
    const auto& tierOf = *c.tierOf;
    // The copies of epochs since the charged window began land in the same window.
    if (now_ >= pendingFrom_ + window_ || pending_.empty()) {
      pendingFrom_ = now_;
      pending_.assign(specs_.size(), TierTraffic{});
    }
    std::vector<TierTraffic> before;
    std::vector<TierTraffic> after;
    windowTraffic(now_ >= window_ ? now_ - window_ : 0, now_, c, before);
    windowTraffic(now_, now_ + window_, c, after);
    for (size_t t = 0; t < specs_.size(); ++t) {
      for (auto* w : {&before[t], &after[t]}) {
        w->extraReadBytes += pending_[t].extraReadBytes;
        w->extraWriteBytes += pending_[t].extraWriteBytes;
      }
    }
    double beforeNs = windowTime(before);
    double afterNs = windowTime(after);
    const double overlap = std::clamp(params_.migrationOverlap, 0.0, 1.0);
    const double promoteCopyNs = kPageBytes / std::max(1e-9, c.promoteBytesPerNs);
    const double demoteCopyNs = kPageBytes / std::max(1e-9, c.demoteBytesPerNs);
    uint64_t free = c.tiers[0].capacityPages > c.tiers[0].usedPages ? c.tiers[0].capacityPages - c.tiers[0].usedPages : 0;
    DemotionRoom room(c);
    std::vector<PageMove> demotions;
    std::vector<PageMove> promotions;
    // Adds one copy from -> to to both candidate windows; returns what it adds to the worse one.
    auto addCopy = [&](TierId from, TierId to, std::vector<TierTraffic>& b, std::vector<TierTraffic>& a) {
      for (auto* w : {&b, &a}) {
        (*w)[from].extraReadBytes += overlap * kPageBytes;
        (*w)[to].extraWriteBytes += overlap * kPageBytes;
      }
    };
    int rejected = 0;
    size_t d = demoteAt_;
    for (size_t i = promoteAt_; i < promote_.size() && rejected < kMaxRejections; ++i) {
      const PageId p = promote_[i];
      if (tierOf[p] == 0 || moved(p)) {
        if (i == promoteAt_) ++promoteAt_;
        continue;
      }
      refresh(p);
      const uint64_t next = nextUse(p);
      if (next == kNever) {
        if (i == promoteAt_) ++promoteAt_;
        continue;
      }
      auto b = before;
      auto a = after;
      const TierId from = tierOf[p];
      addCopy(from, 0, b, a);
      double copyNs = promoteCopyNs;
      double gain = 0;
      PageId victim = 0;
      TierId victimTo = 0;
      const bool swap = free == 0;
      if (swap) {
        while (d < demote_.size() && (tierOf[demote_[d]] != 0 || moved(demote_[d]))) ++d;
        if (d >= demote_.size()) break;
        victim = demote_[d];
        refresh(victim);
        const uint64_t victimNext = nextUse(victim);
        if (victimNext != kNever && victimNext <= next) break;  // every fast page is needed sooner
        victimTo = room.peek();
        if (victimTo == 0) break;
        addCopy(0, victimTo, b, a);
        copyNs += demoteCopyNs;
        // Saving while the victim is not needed (it has no weighted access until then), less what
        // the victim then loses if no idle window lies between the two uses to bring it back in.
        gain = saving(p, std::min(victimNext, until_));
        if (victimNext != kNever && idleWindows(next, victimNext) < kIdleToReturn) gain -= saving(victim, until_, true);
      } else {
        gain = saving(p, until_);
      }
      if (copyNs > engineNs) break;
      const double bNs = windowTime(b);
      const double aNs = windowTime(a);
      const double cost = (1.0 - overlap) * copyNs + std::max(bNs - beforeNs, aNs - afterNs);
      if (gain <= cost + line_.readNs) {  // one line's saving: no churn for nothing
        ++rejected;
        continue;
      }
      engineNs -= copyNs;
      before = std::move(b);
      after = std::move(a);
      beforeNs = bNs;
      afterNs = aNs;
      pending_[from].extraReadBytes += overlap * kPageBytes;
      pending_[0].extraWriteBytes += overlap * kPageBytes;
      if (swap) {
        (void)room.take();
        demotions.push_back({victim, victimTo});
        markMoved(victim);
        pending_[0].extraReadBytes += overlap * kPageBytes;
        pending_[victimTo].extraWriteBytes += overlap * kPageBytes;
        ++d;
      } else {
        --free;
      }
      promotions.push_back({p, 0});
      markMoved(p);
    }
    demoteAt_ = d;
    // Demotions first: they make the room the promotions need.
    moves.insert(moves.end(), demotions.begin(), demotions.end());
    moves.insert(moves.end(), promotions.begin(), promotions.end());
  }

  // A page moved since the last plan stays put until the next (no ping-pong within a plan).
  [[nodiscard]] bool moved(PageId p) const { return movedPlan_.size() > p && movedPlan_[p] == planId_; }
  void markMoved(PageId p) {
    if (movedPlan_.size() != pages_) movedPlan_.assign(pages_, 0);
    movedPlan_[p] = planId_;
  }

  static constexpr double kWeightedFloor = 1e-9;

  PrefetchOracleParams params_;
  uint64_t window_;
  const std::vector<SimAccess>* trace_ = nullptr;
  uint64_t pages_ = 0;
  std::vector<TierSpec> specs_;
  LineSaving line_;
  bool profiled_ = false;
  std::vector<uint64_t> offset_, begin_, times_, nextWeighted_;
  std::vector<uint64_t> idleBefore_;  // idle windows before each window of the fixed grid
  std::vector<double> cumulative_, cumulativeHard_;
  std::vector<uint64_t> nextOf_;
  std::vector<PageId> promote_, demote_;
  size_t promoteAt_ = 0, demoteAt_ = 0;
  std::vector<uint32_t> movedPlan_;
  uint32_t planId_ = 1;
  std::vector<TierTraffic> pending_;
  uint64_t pendingFrom_ = 0;
  uint64_t now_ = 0, until_ = 0;
  uint64_t lastEpochNs_ = 0;
  bool planned_ = false;
  uint64_t lastPlanTraceNs_ = 0;
};

}  // namespace

std::unique_ptr<Policy> makePrefetchOraclePolicy(const PrefetchOracleParams& params) {
  return std::make_unique<PrefetchOraclePolicy>(params);
}

}  // namespace tt::tiersim
