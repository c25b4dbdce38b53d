#include "sources/FaultStormGuard.h"

namespace tt::sources {

bool FaultStormGuard::update(uint64_t faults, double seconds, double faultCostNs, double budgetPercent) {
  if (!(seconds >= kMinEpochSeconds)) return paused_;
  costPercent_ = static_cast<double>(faults) * faultCostNs / (seconds * 1e9) * 100.0;
  if (!paused_ && costPercent_ > budgetPercent) {
    paused_ = true;
    ++pauses_;
  } else if (paused_ && costPercent_ <= budgetPercent * kResumeShareOfBudget) {
    paused_ = false;
  }
  return paused_;
}

}  // namespace tt::sources
