// AutoTM-like static optimum.
//
// AutoTM (Hildebrand et al., ASPLOS'20) formulates tensor placement and movement in a DNN's
// computation graph as an integer linear program. Its static variant (no movement) chooses, once,
// which tensors live in fast memory so that the modelled memory time is minimal under the fast
// capacity. Here, with the whole trace known in advance:
//   saving(page) = sum over the page's accesses of count * (cost per line in the slow tier - cost
//                  per line in the fast tier),
//   cost per line = max(latency / memory parallelism, 64 B / bandwidth) for its direction,
// i.e. the per-line form of the simulator's roofline (exact when every window is bound by the
// same term; the max over a window makes the true objective slightly non-linear). Maximising the
// total saving under "fast pages <= capacity" is a knapsack with unit weights, whose optimum is
// the pages with the largest savings, which is what we place (ties broken by tensor, then page
// order, so whole tensors stay together, as AutoTM's tensor-granular ILP would choose them).
// The plan holds for the whole run: pages are placed on first touch and never migrated, so the
// result is the best any static placement can do under this cost model, and migrating policies
// can beat it only by exploiting phases.
#include <algorithm>
#include <numeric>

#include "Baselines.h"
#include "CostModel.h"

namespace tt::tiersim {
namespace {

class AutoTmStaticPolicy : public Policy {
 public:
  explicit AutoTmStaticPolicy(double memoryParallelism) : parallelism_(std::max(1.0, memoryParallelism)) {}
  [[nodiscard]] std::string name() const override { return "autotm-static"; }

  void init(const std::vector<TraceRegion>& regions, uint64_t totalPages,
            const std::vector<TierInfo>& tiers, const std::vector<SimAccess>* fullTrace) override {
    planned_.assign(totalPages, 1);
    if (fullTrace == nullptr || tiers.size() < 2) return;  // offline only; no trace, no plan
    const LineSaving line = perLineSaving(tiers, parallelism_);
    const double readSaving = line.readNs;
    const double writeSaving = line.writeNs;
    std::vector<double> saving(totalPages, 0.0);
    for (const auto& access : *fullTrace) {
      saving[access.page] += static_cast<double>(access.count) * (access.write ? writeSaving : readSaving);
    }
    // Per-tensor density first (AutoTM's unit is the tensor), then the page's own saving.
    std::vector<double> regionDensity(totalPages, 0.0);
    for (const auto& region : regions) {
      double sum = 0;
      for (uint64_t i = 0; i < region.pages; ++i) sum += saving[region.firstPage + i];
      const double density = sum / static_cast<double>(region.pages);
      for (uint64_t i = 0; i < region.pages; ++i) regionDensity[region.firstPage + i] = density;
    }
    std::vector<PageId> order(totalPages);
    std::iota(order.begin(), order.end(), PageId{0});
    std::stable_sort(order.begin(), order.end(), [&](PageId a, PageId b) {
      if (saving[a] != saving[b]) return saving[a] > saving[b];
      return regionDensity[a] > regionDensity[b];
    });
    const uint64_t capacity = std::min<uint64_t>(tiers[0].capacityPages, totalPages);
    for (uint64_t i = 0; i < capacity; ++i) {
      if (saving[order[i]] <= 0) break;
      planned_[order[i]] = 0;
    }
  }

  [[nodiscard]] TierId firstTouchTier(PageId page, const std::vector<TierInfo>& tiers) const override {
    (void)tiers;
    return page < planned_.size() ? planned_[page] : TierId{1};
  }
  void onSample(const SimAccess&) override {}
  void onMark(const IterationMark&) override {}
  void onEpoch(const EpochContext&, std::vector<PageMove>&) override {}

 private:
  double parallelism_;
  std::vector<TierId> planned_;
};

}  // namespace

LineSaving perLineSaving(const std::vector<TierInfo>& tiers, double memoryParallelism) {
  const double parallelism = std::max(1.0, memoryParallelism);
  auto lineCost = [&](const TierInfo& tier, bool write) {
    const double latency = write ? tier.writeLatencyNs : tier.readLatencyNs;
    const double bandwidth = write ? tier.writeBandwidthBytesPerNs : tier.readBandwidthBytesPerNs;
    return std::max(latency / parallelism, kCacheLineBytes / bandwidth);
  };
  if (tiers.size() < 2) return {};
  return {lineCost(tiers[1], false) - lineCost(tiers[0], false), lineCost(tiers[1], true) - lineCost(tiers[0], true)};
}

std::unique_ptr<Policy> makeAutoTmStaticPolicy(double memoryParallelism) {
  return std::make_unique<AutoTmStaticPolicy>(memoryParallelism);
}

}  // namespace tt::tiersim
