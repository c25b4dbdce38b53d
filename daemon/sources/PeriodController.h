// The sample-period controller of a sampling source: keeps the whole cost of sampling under a CPU
// budget (issue #4: "adaptive sample period that keeps the sampling cost under a configured CPU
// budget", Memtis keeps 3% of one core; the default here is 2%, the slowdown target).
//
// The whole cost, not only what the daemon sees: the kernel's per-sample work (the overflow
// handler, the BPF program or the ring write) runs in the context of whatever thread took the
// event, i.e. in the workload, and never shows in the daemon's CPU time. So the cost of an epoch
// is estimated as
//     overflows x sampleCostNs  +  the daemon's own measured CPU time for the source,
// where overflows counts every sample the kernel took (the events are system-wide per CPU, so
// untracked processes' samples cost the same overflow work) and sampleCostNs is the kernel-side
// cost of one sample (calibrated at start by SamplingSource, or configured).
//
// Control, once per epoch:
//   - above the budget: the period is multiplied by cost / (kSetpoint x budget) at once, so a
//     storm is cut back to half the budget in one epoch whatever its size (not doubling per epoch);
//   - at or below kSetpoint / 2 of the budget: halved (one step per epoch, so a lull does not
//     swing the period down to where the next epoch's load would overshoot);
//   - otherwise unchanged.
// Under a steady load the cost therefore settles in [budget/4, budget] (or the period sits at a
// bound), and never oscillates: a raise lands at budget/2 (no halving follows), a halving at most
// doubles a cost <= budget/4 (no raise follows).
//
// Samples the kernel took but could not deliver (a full ring, the in-kernel path's full count map)
// cost as much as the others and carry nothing, and every delivered one still stands for a period
// of events, so the heat they give is too low: an epoch that lost samples raises the period so that
// the kernel takes half of what it delivered (kSetpoint), by at most 4x per epoch (the counts are
// estimates), and for kLossMemoryEpochs epochs after the last loss no halving goes below that
// period, which would lose them again every other epoch. An epoch the kernel throttled (which it
// does per tick, so a period a quieter epoch calls cheap can still be throttled) is held the same
// way after its at-least-doubling.
//
// A storm shorter than an epoch (a first-touch storm of 65536 faults takes ~0.5 s here; the
// daemon's epoch is 1 s) is over before any per-epoch control can act, so sources that know the
// cost of the event itself (software page faults) also get a storm floor (stormFloorPeriod): the
// smallest period at which a thread doing nothing but taking that event is slowed by at most
// kSetpoint x budget by sampling (counting included; maxPeriod when the counting alone is over).
#pragma once

#include <cstdint>

namespace tt::sources {

struct PeriodLimits {
  uint64_t minPeriod = 1;
  uint64_t maxPeriod = 1;
  double budgetPercent = 2.0;  // of one CPU
  double sampleCostNs = 0;     // kernel-side cost of one sample
  double eventCountNs = 0;     // kernel-side cost of counting one event (sampled or not)
  uint64_t floorPeriod = 1;    // storm floor; the effective minimum is max(minPeriod, floorPeriod)
  // Every period is a multiple of it (IBS counts in units of 16 ops and refuses other periods):
  // the bounds are rounded inwards (the minimum up, the maximum down, never below the minimum)
  // and every period up, so a halving still lowers the period and a raise still raises it.
  uint64_t granularity = 1;
};

// What one epoch cost, as measured by the source.
struct EpochCost {
  uint64_t wallNs = 0;       // epoch length
  uint64_t events = 0;       // events counted during the epoch (all processes)
  uint64_t overflows = 0;    // samples the kernel took during the epoch (all processes)
  uint64_t daemonCpuNs = 0;  // the daemon's CPU time spent on the source during the epoch
  // The kernel throttled the events during the epoch (PERF_RECORD_THROTTLE: more samples per second
  // than kernel.perf_event_max_sample_rate allows). Samples were lost to it, and the overflow
  // count understates what the period asked for, so the period is at least doubled.
  bool throttled = false;
  // Samples lost during the epoch (PERF_RECORD_LOST on a full ring, the in-kernel path's count map
  // full): taken by the kernel, paid for, delivered to nobody.
  uint64_t lost = 0;
};

class PeriodController {
 public:
  // Target cost after a raise, as a fraction of the budget: headroom for the estimate's error
  // (the calibrated cost moves with the machine's load) and for load that grows between epochs.
  static constexpr double kSetpoint = 0.5;
  // Epochs after the last lossy one during which the period is not halved below where it was raised.
  static constexpr int kLossMemoryEpochs = 8;

  PeriodController(uint64_t initialPeriod, const PeriodLimits& limits);

  // New limits (live tuning); the period is clamped into them. Returns the new period.
  uint64_t setLimits(const PeriodLimits& limits);
  // The period for the next epoch, given what the last one cost at the current period.
  uint64_t update(const EpochCost& epoch);
  // The period actually in force when it could not be changed (or was set from outside).
  void resetPeriod(uint64_t period) { period_ = period; }

  [[nodiscard]] uint64_t period() const { return period_; }
  [[nodiscard]] const PeriodLimits& limits() const { return limits_; }
  // Estimated cost of the last epoch, percent of one CPU.
  [[nodiscard]] double lastCostPercent() const { return lastCostPercent_; }
  [[nodiscard]] uint64_t lowestPeriod() const;

 private:
  [[nodiscard]] uint64_t clamp(double period) const;

  PeriodLimits limits_;
  uint64_t period_;
  double lastCostPercent_ = 0;
  uint64_t lossFloor_ = 0;      // no halving below it while lossEpochsLeft_ > 0
  int lossEpochsLeft_ = 0;
};

// The storm floor: the smallest period P with (eventCountNs + sampleCostNs / P) / eventCostNs <=
// kSetpoint x budget (the slowdown of a thread that does nothing but take the event), where
// eventCostNs is the CPU a thread spends per event without sampling (one page fault).
// 1 when sampleCostNs or eventCostNs is unknown (<= 0); UINT64_MAX (clamped to maxPeriod by the
// controller) when the counting alone is over kSetpoint x budget.
[[nodiscard]] uint64_t stormFloorPeriod(double sampleCostNs, double eventCountNs, double eventCostNs,
                                        double budgetPercent);

}  // namespace tt::sources
