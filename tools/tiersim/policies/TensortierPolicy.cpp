#include "policies/TensortierPolicy.h"

#include <algorithm>
#include <cmath>

#include "CostModel.h"
#include "core/Log.h"
#include "heat/HeatModel.h"
#include "policy/Planner.h"
#include "topology/Topology.h"

namespace tt::tiersim {
namespace {

// The daemon plans once per epoch loop tick; here at most once per this much simulated time (the
// simulator's epochs are much shorter than the daemon's), at full scale. Divided by the trace's
// scale divisor S like every baseline's periods (Baselines.h), so a trace S times faster gets as
// many plans per step: 4 ms / 16 = 250 us at the sweep's S = 16, what it was before it scaled.
constexpr uint64_t kPlanEveryUnscaledNs = 4'000'000;

// The simulator's page table, as the planner's PlacementQuery: prefix sums rebuilt once per plan.
class SimPlacement : public policy::PlacementQuery {
 public:
  void rebuild(const std::vector<TierId>& tierOf, const std::vector<uint8_t>& present) {
    const size_t n = tierOf.size();
    fast_.assign(n + 1, 0);
    present_.assign(n + 1, 0);
    for (size_t i = 0; i < n; ++i) {
      const bool p = present[i] != 0;
      present_[i + 1] = present_[i] + (p ? 1 : 0);
      fast_[i + 1] = fast_[i] + (p && tierOf[i] == 0 ? 1 : 0);
    }
  }
  [[nodiscard]] policy::Residency residency(pid_t tgid, uint64_t start, uint64_t length) const override {
    if (tgid != kSimTgid || start < kSimBase || fast_.empty()) return {};
    const uint64_t n = fast_.size() - 1;
    const uint64_t first = std::min(n, (start - kSimBase) / kBasePageSize);
    const uint64_t last = std::min(n, first + length / kBasePageSize);
    const uint64_t fast = fast_[last] - fast_[first];
    const uint64_t present = present_[last] - present_[first];
    policy::Residency r;  // one fast node: no per-node detail needed
    r.fastPages = fast;
    r.slowPages = present - fast;
    return r;
  }

 private:
  std::vector<uint64_t> fast_;
  std::vector<uint64_t> present_;
};

class TensortierPolicy : public Policy {
 public:
  TensortierPolicy(const tensortier::v1::PolicyConfig& config, uint32_t samplePeriod, double memoryParallelism,
                   uint32_t scaleDivisor)
      : heat_(config),
        planner_(config),
        samplePeriod_(std::max<uint32_t>(1, samplePeriod)),
        memoryParallelism_(memoryParallelism > 0 ? memoryParallelism : 64),
        planEveryNs_(std::max<uint64_t>(1, kPlanEveryUnscaledNs / std::max<uint32_t>(1, scaleDivisor))) {}

  [[nodiscard]] uint64_t plans() const { return plans_; }

  [[nodiscard]] std::string name() const override { return "tensortier"; }

  void init(const std::vector<TraceRegion>& regions, uint64_t totalPages, const std::vector<TierInfo>& tiers,
            const std::vector<SimAccess>* fullTrace) override {
    (void)fullTrace;  // online: never peeks
    totalPages_ = totalPages;
    for (const TraceRegion& r : regions) {
      RegionInfo info;
      info.id = r.id + 1;  // 0 is reserved in the daemon
      info.tgid = kSimTgid;
      info.start = kSimBase + r.firstPage * kBasePageSize;
      info.length = r.pages * kBasePageSize;
      info.kind = r.kind;
      info.name = r.name;
      if (auto added = heat_.addRegion(info); !added) {
        TT_LOG(Warn) << "tiersim tensortier: region " << r.name << ": " << added.error().message();
      }
    }
    // One NUMA node per simulated tier: node 0 fast with the CPUs, the others slow, farther each.
    topology_ = topology::Topology{};
    for (size_t t = 0; t < tiers.size(); ++t) {
      topology::NumaNode node;
      node.id = static_cast<int>(t);
      if (t == 0) node.cpus = {0};
      node.memory = {tiers[t].capacityPages * kBasePageSize, tiers[t].capacityPages * kBasePageSize};
      for (size_t o = 0; o < tiers.size(); ++o) node.distances.push_back(o == t ? 10 : 10 + 10 * static_cast<int>(std::max(o, t)));
      node.tier = t == 0 ? topology::Tier::Fast : topology::Tier::Slow;
      topology_.nodes.push_back(node);
    }
    if (tiers.size() >= 2) {
      // The cost of a line served by the slow tier instead of the fast one, as the simulator's
      // roofline charges it: bandwidth-bound streams pay the bandwidth difference, sparse ones the
      // latency difference over the misses in flight.
      const TierInfo& f = tiers[0];
      const TierInfo& s = tiers[1];
      const double bw = 64.0 / s.readBandwidthBytesPerNs - 64.0 / f.readBandwidthBytesPerNs;
      const double lat = (s.readLatencyNs - f.readLatencyNs) / memoryParallelism_;
      slowPenaltyNs_ = std::max({bw, lat, 0.1});
    }
  }

  void onSample(const SimAccess& access) override {
    AccessEvidence e;
    e.tgid = kSimTgid;
    e.page = kSimBase + access.page * kBasePageSize;
    // The simulator delivers 1 in samplePeriod_ cache-line accesses, one call per sample (a record
    // of many lines gives several), and does not scale counts: a sample stands for period lines.
    e.weight = static_cast<uint32_t>(samplePeriod_);
    e.kind = access.write ? AccessKind::Store : AccessKind::Load;
    heat_.ingest(std::span<const AccessEvidence>(&e, 1), access.timeNs);
  }

  void onMark(const IterationMark& mark) override { heat_.onMark(mark); }

  void onEpoch(const EpochContext& context, std::vector<PageMove>& moves) override {
    if (context.nowNs < nextPlanNs_ || context.tierOf == nullptr || context.present == nullptr) return;
    const uint64_t interval = lastPlanNs_ > 0 ? context.nowNs - lastPlanNs_ : planEveryNs_;
    lastPlanNs_ = context.nowNs;
    nextPlanNs_ = context.nowNs + planEveryNs_;
    ++plans_;
    // Each direction's copy rate, as the simulator charges it (the slow tier's write bandwidth can
    // make demotions the slower).
    const MigrationRates rates{context.promoteBytesPerNs * 1e9, context.demoteBytesPerNs * 1e9};
    heat_.setMigrationRates(rates);
    heat_.advanceEpoch(context.nowNs);
    placement_.rebuild(*context.tierOf, *context.present);
    policy::PlanContext plan;
    plan.fastCapacityBytes = context.tiers.empty() ? 0 : context.tiers[0].capacityPages * kBasePageSize;
    // The simulated fast tier is exactly what the trained process may use: no kernel reserve.
    plan.fastBudgetBytes = plan.fastCapacityBytes;
    plan.migration = rates;
    plan.slowPenaltyNs = slowPenaltyNs_;
    // A sample stands for cache-line accesses (onSample), so one pass over a page is 64 of them.
    plan.accessesPerPagePass = static_cast<double>(kBasePageSize) / kCacheLineBytes;
    plan.intervalNs = std::max(interval, planEveryNs_);
    const MigrationPlan migration = planner_.plan(heat_.snapshot(), placement_, topology_, plan);
    if (log::enabled(log::Level::Debug)) {
      const auto& st = planner_.lastStats();
      TT_LOG(Debug) << "tensortier sim plan t=" << context.nowNs << " budget=" << st.budgetBytes << " used=" << st.fastUsedBytes
                    << " selected=" << st.selectedBytes << " promote=" << st.promoteBytes << " demote=" << st.demoteBytes
                    << " deferred=" << st.deferredPromoteBytes << " blocks=" << st.blocks << " clock="
                    << heat_.clockOf(kSimTgid).periodNs << " w=" << heat_.weights()[0] << "," << heat_.weights()[1] << ","
                    << heat_.weights()[2] << "," << heat_.weights()[3];
      for (const auto& u : heat_.snapshot().units)
        TT_LOG(Debug) << "  unit " << u.regionId << " soon=" << u.expectedAccessesPerPage << " perStep=" << u.accessesPerPagePerStep
                      << " next=" << u.nextUseInNs << " reuse=" << u.features[3];
    }
    // The plan lists its moves by priority (the demotions that make room, the promotions, the
    // headroom demotions): the simulator applies them in that order.
    const auto& tierOf = *context.tierOf;
    const auto& present = *context.present;
    for (const MoveRequest& m : migration.moves) {
      if (m.start < kSimBase) continue;
      const auto to = static_cast<TierId>(m.targetNode);
      const uint64_t first = (m.start - kSimBase) / kBasePageSize;
      const uint64_t last = std::min<uint64_t>(totalPages_, first + m.length / kBasePageSize);
      for (uint64_t p = first; p < last; ++p)
        if (present[p] != 0 && tierOf[p] != to) moves.push_back({p, to});
    }
  }

 private:
  heat::HeatModel heat_;
  policy::Planner planner_;
  topology::Topology topology_;
  SimPlacement placement_;
  uint64_t totalPages_ = 0;
  double slowPenaltyNs_ = 1;
  double samplePeriod_;
  double memoryParallelism_;
  uint64_t planEveryNs_;
  uint64_t nextPlanNs_ = 0;
  uint64_t lastPlanNs_ = 0;
  uint64_t plans_ = 0;
};

}  // namespace

std::unique_ptr<Policy> makeTensortierPolicy(const tensortier::v1::PolicyConfig& config, uint32_t samplePeriod,
                                             double memoryParallelism, uint32_t scaleDivisor) {
  return std::make_unique<TensortierPolicy>(config, samplePeriod, memoryParallelism, scaleDivisor);
}

uint64_t tensortierPlans(const Policy& policy) {
  const auto* tensortier = dynamic_cast<const TensortierPolicy*>(&policy);
  return tensortier != nullptr ? tensortier->plans() : 0;
}

}  // namespace tt::tiersim
