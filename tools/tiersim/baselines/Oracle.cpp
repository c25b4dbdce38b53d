// Look-ahead oracle: an offline, migrating policy that knows every future access.
//
// Not a peer's policy: a yardstick for what migration can add under the cost model. The static
// optimum (AutoTm.cpp) is the best placement that never moves; this asks how much better a policy
// that moves pages with perfect knowledge of the future does. Every epoch it values each page by
// the stall its accesses in the next `horizon` of trace time would save in the fast tier
// (accesses x per-line slow-minus-fast cost, the AutoTM roofline per line), then:
//   - promotes slow pages whose value exceeds one copy, into free fast room, best first;
//   - swaps while the best slow page's value exceeds the worst fast page's value plus two copies
//     (the promotion and the demotion that makes room);
// moving at most what the copy engine moves until the next plan, so it does not queue copies it
// cannot finish. A copy is charged `copyWeight` x its copy time (1: the on-critical-path half plus the
// bandwidth the overlapped half steals, at the simulator's default overlap of 0.5).
//
// It starts from the static optimum's placement (first touch as AutoTm.cpp plans it), so it is never
// worse than never moving by more than what its moves cost, and re-plans every `replanEpochs`
// epochs (with that many epochs of copy budget). It is a heuristic with an oracle's input, not a
// proven optimum: a lower step time than it reaches may exist. The horizon is a share of the step
// (measured from the StepBegin marks, in trace time); before two steps began it does not move.
#include <algorithm>

#include "Baselines.h"
#include "CostModel.h"

namespace tt::tiersim {
namespace {

class LookaheadOraclePolicy : public StaticStartOracle {
 public:
  LookaheadOraclePolicy(double memoryParallelism, double horizonSteps, double copyWeight)
      : StaticStartOracle(memoryParallelism),
        parallelism_(std::max(1.0, memoryParallelism)),
        horizonSteps_(horizonSteps),
        copyWeight_(copyWeight) {}
  [[nodiscard]] std::string name() const override { return "oracle-lookahead"; }

  void init(const std::vector<TraceRegion>& regions, uint64_t totalPages, const std::vector<TierInfo>& tiers,
            const std::vector<SimAccess>* fullTrace) override {
    initial_->init(regions, totalPages, tiers, fullTrace);
    pages_ = totalPages;
    if (fullTrace == nullptr || tiers.size() < 2) return;  // offline only
    const LineSaving line = perLineSaving(tiers, parallelism_);
    // Per page, its accesses in time order (CSR): time and cumulative saving (per count unit).
    offset_.assign(totalPages + 1, 0);
    for (const auto& a : *fullTrace) ++offset_[a.page + 1];
    for (uint64_t p = 0; p < totalPages; ++p) offset_[p + 1] += offset_[p];
    times_.resize(fullTrace->size());
    cumulative_.resize(fullTrace->size());
    std::vector<uint64_t> fill(offset_.begin(), offset_.end() - 1);
    for (const auto& a : *fullTrace) {  // the trace is in time order, so each page's list is too
      const uint64_t i = fill[a.page]++;
      times_[i] = a.timeNs;
      cumulative_[i] = static_cast<double>(a.count) * (a.write ? line.writeNs : line.readNs);
    }
    for (uint64_t p = 0; p < totalPages; ++p)
      for (uint64_t i = offset_[p] + 1; i < offset_[p + 1]; ++i) cumulative_[i] += cumulative_[i - 1];
    begin_.assign(offset_.begin(), offset_.end() - 1);
    end_ = begin_;
    value_.assign(totalPages, 0.0);
  }


  void onEpoch(const EpochContext& c, std::vector<PageMove>& moves) override {
    if (offset_.empty()) return;
    learnStepLength(c.traceNowNs);
    if (stepTraceNs_ <= 0) return;
    const double sinceNs = lastPlanNs_ > 0 ? static_cast<double>(c.nowNs - lastPlanNs_) : 0;
    if (lastPlanNs_ > 0 && sinceNs < kReplanNs) return;
    lastPlanNs_ = c.nowNs;
    const uint64_t now = c.traceNowNs;
    const uint64_t until = now + static_cast<uint64_t>(horizonSteps_ * stepTraceNs_);
    const double scale = static_cast<double>(c.linesPerCount);
    for (uint64_t p = 0; p < pages_; ++p) {
      uint64_t& b = begin_[p];
      uint64_t& e = end_[p];
      const uint64_t last = offset_[p + 1];
      while (b < last && times_[b] < now) ++b;
      if (e < b) e = b;
      while (e < last && times_[e] < until) ++e;
      const double before = b > offset_[p] ? cumulative_[b - 1] : 0.0;
      const double upTo = e > offset_[p] ? cumulative_[e - 1] : 0.0;
      value_[p] = (upTo - before) * scale;
    }
    const double copyNs = kPageBytes / std::max(1e-9, c.promoteBytesPerNs) * copyWeight_;
    const double demoteNs = kPageBytes / std::max(1e-9, c.demoteBytesPerNs) * copyWeight_;
    auto budget = static_cast<int64_t>(c.promoteBytesPerNs * std::max(sinceNs, 1e6) / kPageBytes);
    const auto& tierOf = *c.tierOf;
    const auto& present = *c.present;
    slow_.clear();
    fast_.clear();
    for (uint64_t p = 0; p < pages_; ++p) {
      if (present[p] == 0) continue;
      if (tierOf[p] == 0)
        fast_.push_back(p);
      else if (value_[p] > copyNs)
        slow_.push_back(p);
    }
    std::sort(slow_.begin(), slow_.end(), [&](PageId a, PageId b) { return value_[a] > value_[b]; });
    std::sort(fast_.begin(), fast_.end(), [&](PageId a, PageId b) { return value_[a] < value_[b]; });
    uint64_t free = c.tiers[0].capacityPages > c.tiers[0].usedPages ? c.tiers[0].capacityPages - c.tiers[0].usedPages : 0;
    DemotionRoom room(c);
    std::vector<PageMove> demotions, promotions;
    size_t s = 0, f = 0;
    for (; s < slow_.size() && budget > 0; ++s) {
      const PageId p = slow_[s];
      if (free > 0) {
        --free;
      } else {
        if (f >= fast_.size() || value_[p] <= value_[fast_[f]] + copyNs + demoteNs) break;
        const TierId to = room.take();
        if (to == 0) break;
        demotions.push_back({fast_[f++], to});
        --budget;
      }
      promotions.push_back({p, 0});
      --budget;
    }
    moves.insert(moves.end(), demotions.begin(), demotions.end());
    moves.insert(moves.end(), promotions.begin(), promotions.end());
  }

 private:
  // Re-plans every 5 ms of simulated time (a training step at the default 1/16 scale is 40-200 ms),
  // with the copy budget of the time since the last plan.
  static constexpr double kReplanNs = 5e6;

  double parallelism_;
  double horizonSteps_;
  double copyWeight_;
  uint64_t pages_ = 0;
  std::vector<uint64_t> offset_, begin_, end_;
  std::vector<uint64_t> times_;
  std::vector<double> cumulative_;
  std::vector<double> value_;
  std::vector<PageId> slow_, fast_;
  uint64_t lastPlanNs_ = 0;
};

}  // namespace

std::unique_ptr<Policy> makeLookaheadOraclePolicy(double memoryParallelism, double horizonSteps, double copyWeight) {
  return std::make_unique<LookaheadOraclePolicy>(memoryParallelism, horizonSteps, copyWeight);
}

}  // namespace tt::tiersim
