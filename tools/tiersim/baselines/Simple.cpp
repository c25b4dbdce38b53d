// The two placement-only baselines: all-DRAM (the bound) and first-touch (the kernel default).
#include "Baselines.h"

namespace tt::tiersim {
namespace {

class FirstTouchPolicy : public Policy {
 public:
  explicit FirstTouchPolicy(std::string name) : name_(std::move(name)) {}
  [[nodiscard]] std::string name() const override { return name_; }
  void init(const std::vector<TraceRegion>&, uint64_t, const std::vector<TierInfo>&,
            const std::vector<SimAccess>*) override {}
  void onSample(const SimAccess&) override {}
  void onMark(const IterationMark&) override {}
  void onEpoch(const EpochContext&, std::vector<PageMove>&) override {}

 private:
  std::string name_;
};

}  // namespace

// The all-DRAM bound differs from first-touch only in the simulator's configuration: tier 0 has
// room for the whole footprint (SimConfig::unboundedFastTier), so every page lands there.
std::unique_ptr<Policy> makeAllDramPolicy() { return std::make_unique<FirstTouchPolicy>("all-dram"); }
std::unique_ptr<Policy> makeFirstTouchPolicy() { return std::make_unique<FirstTouchPolicy>("first-touch"); }

}  // namespace tt::tiersim
