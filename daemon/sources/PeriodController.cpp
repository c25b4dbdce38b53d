#include "sources/PeriodController.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace tt::sources {

namespace {

uint64_t roundUpTo(uint64_t v, uint64_t unit) {
  if (unit <= 1 || v % unit == 0) return v;
  const uint64_t down = v - v % unit;
  return down > UINT64_MAX - unit ? down : down + unit;
}

}  // namespace

PeriodController::PeriodController(uint64_t initialPeriod, const PeriodLimits& limits)
    : limits_(limits), period_(initialPeriod) {
  period_ = clamp(static_cast<double>(initialPeriod));
}

uint64_t PeriodController::lowestPeriod() const {
  return roundUpTo(std::min(limits_.maxPeriod, std::max(limits_.minPeriod, limits_.floorPeriod)), limits_.granularity);
}

uint64_t PeriodController::clamp(double period) const {
  const uint64_t unit = std::max<uint64_t>(1, limits_.granularity);
  const uint64_t lowest = lowestPeriod();
  const uint64_t highest = std::max(lowest, limits_.maxPeriod - limits_.maxPeriod % unit);
  // In double first: a large cost ratio times a large period must not wrap.
  const auto p = static_cast<uint64_t>(
      std::clamp(std::ceil(period), static_cast<double>(lowest), static_cast<double>(highest)));
  return std::min(highest, roundUpTo(p, unit));
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
    period_ = clamp(std::max(std::floor(current / 2), static_cast<double>(lossFloor_)));
  } else {
    period_ = clamp(current);  // limits may have moved under it
  }
  if (epoch.throttled) period_ = clamp(std::max(static_cast<double>(period_), 2 * current));
  // A throttled or lossy epoch's raised period is a floor for a while: the cost estimate of the
  // next, quieter epoch would halve it straight back into the throttling or loss (throttled at P,
  // cheap at 2P, back to P: every other epoch throttled).
  const bool hold = epoch.throttled || epoch.lost > 0;
  if (epoch.lost > 0) {
    // The overflow count is events / period, an estimate, and a ring's LOST record comes an epoch
    // late (the kernel writes it when the ring has room again), so `delivered` can be off by the
    // whole loss: a step is at most what nothing delivered calls for (4x), and a loss that lasts
    // takes a few epochs to settle instead of one estimate sending the period to its maximum.
    const double taken = std::max(static_cast<double>(epoch.overflows), static_cast<double>(epoch.lost));
    const double delivered = taken - static_cast<double>(epoch.lost);
    const double factor = delivered > 0 ? std::min(taken / (kSetpoint * delivered), 2 / kSetpoint) : 2 / kSetpoint;
    period_ = clamp(std::max(static_cast<double>(period_), current * factor));
  }
  if (hold) {
    lossFloor_ = period_;
    lossEpochsLeft_ = kLossMemoryEpochs;
  } else if (lossEpochsLeft_ > 0 && --lossEpochsLeft_ == 0) {
    lossFloor_ = 0;
  }
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
