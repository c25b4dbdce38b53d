// The fault trace's CPU budget (the storm guard).
//
// Why: while attached, the page-fault program runs on every user fault of every process on the
// machine, tracked or not. Here that is 60-130 ns of a ~1.5 us first-touch fault (the kernel's
// call into a BPF program, the tgid filter, the count), so a thread that does nothing but fault,
// as a process does while it populates its memory, is slowed 5-7% (docs/benchmarks.md,
// "First-touch storm"): more than the sources' CPU budget stands for. The sampling sources meet
// their budget by raising the sample period; a tracepoint has no period, so the guard pauses it.
//
// How: every 0.1 s it estimates what the program cost, or while paused would have cost: the
// machine's user faults in the epoch (from /proc/vmstat) times the cost of one fault's program
// run (sources.fault_trace.fault_cost_ns), over the epoch's length, as a percentage of one CPU:
// the unit of sources.cpu_budget_percent. Over the budget it pauses the program (detached: no
// fault on the machine pays anything for it); it resumes once the estimate is at most half the
// budget, so a fault rate near the budget does not attach and detach it every epoch.
//
// While nothing is tracked the program is detached anyway: the source does not judge then, and
// starts afresh with the first tracked process.
//
// What a pause loses: the not-present and hint faults of tracked processes while it lasts (in a
// storm, pages being populated rather than re-used), and for pages first touched during it the
// first-touch/hint split: their next not-present fault counts as a first touch. A storm shorter
// than an epoch is over before the guard sees it; it pays the program for its whole length.
#pragma once

#include <cstdint>

namespace tt::sources {

class FaultStormGuard {
 public:
  // Resume once the estimate is at most this share of the budget.
  static constexpr double kResumeShareOfBudget = 0.5;
  // Shorter epochs are not judged (a few faults in a millisecond are no storm): the caller keeps
  // counting until one is this long.
  static constexpr double kMinEpochSeconds = 0.1;

  // One epoch: `faults` user faults on the machine in `seconds`. Returns whether the program
  // should be paused from now on. Epochs shorter than kMinEpochSeconds leave everything as it was.
  bool update(uint64_t faults, double seconds, double faultCostNs, double budgetPercent);

  // Forget the decision and the estimate (nothing to judge by: the fault count is unreadable).
  void reset() {
    paused_ = false;
    costPercent_ = 0;
  }
  [[nodiscard]] bool paused() const { return paused_; }
  // The last epoch's estimate, percent of one CPU.
  [[nodiscard]] double costPercent() const { return costPercent_; }
  // Times the program was paused since start.
  [[nodiscard]] uint64_t pauses() const { return pauses_; }

 private:
  bool paused_ = false;
  double costPercent_ = 0;
  uint64_t pauses_ = 0;
};

}  // namespace tt::sources
