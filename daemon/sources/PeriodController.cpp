#include "sources/PeriodController.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace tt::sources {

PeriodController::PeriodController(uint64_t initialPeriod, const PeriodLimits& limits)
    : limits_(limits), period_(initialPeriod) {
  period_ = clamp(static_cast<double>(initialPeriod));
}

uint64_t PeriodController::lowestPeriod() const {
  return std::min(limits_.maxPeriod, std::max(limits_.minPeriod, limits_.floorPeriod));
}

uint64_t PeriodController::clamp(double period) const {
  // In double first: a large cost ratio times a large period must not wrap.
  const double lo = static_cast<double>(lowestPeriod());
  const double hi = static_cast<double>(std::max(limits_.maxPeriod, lowestPeriod()));
  return static_cast<uint64_t>(std::clamp(std::ceil(period), lo, hi));
}

uint64_t PeriodController::setLimits(const PeriodLimits& limits) {
  limits_ = limits;
  period_ = clamp(static_cast<double>(period_));
  return period_;
}

uint64_t PeriodController::update(const EpochCost& epoch) {
  if (epoch.wallNs == 0) return period_;
  const double wall = static_cast<double>(epoch.wallNs);
  const double fixed = 100.0 * static_cast<double>(epoch.events) * limits_.eventCountNs / wall;
  const double variable =
      100.0 * (static_cast<double>(epoch.overflows) * limits_.sampleCostNs + static_cast<double>(epoch.daemonCpuNs)) /
      wall;
  lastCostPercent_ = fixed + variable;
  const double budget = limits_.budgetPercent;
  const double target = kSetpoint * budget;
  const double current = static_cast<double>(period_);
  if (fixed + variable > budget) {
    // Samples (and the daemon's work on them) scale with 1 / period; the counting does not.
    period_ = fixed >= target ? limits_.maxPeriod : clamp(current * variable / (target - fixed));
    period_ = clamp(static_cast<double>(period_));
  } else if (fixed + 2 * variable <= target) {
    period_ = clamp(std::floor(current / 2));
  } else {
    period_ = clamp(current);  // limits may have moved under it
  }
  if (epoch.throttled) period_ = clamp(std::max(static_cast<double>(period_), 2 * current));
  return period_;
}

uint64_t stormFloorPeriod(double sampleCostNs, double eventCountNs, double eventCostNs, double budgetPercent) {
  if (sampleCostNs <= 0 || eventCostNs <= 0 || budgetPercent <= 0) return 1;
  const double room = eventCostNs * PeriodController::kSetpoint * budgetPercent / 100.0 - std::max(0.0, eventCountNs);
  if (room <= 0) return UINT64_MAX;
  const double p = sampleCostNs / room;
  return p >= 1e18 ? UINT64_MAX : static_cast<uint64_t>(std::max(1.0, std::ceil(p)));
}

}  // namespace tt::sources
