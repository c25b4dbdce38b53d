// Pages the engine could not move in the policy's own plans, held back from the plans that follow.
//
// A page the kernel will not migrate (pinned by an RDMA or GPU registration, an io_uring fixed
// buffer: move_pages answers EBUSY or leaves it after every retry) stays where it is whatever the
// planner asks. Left to itself the planner would ask again in every plan, each time paying the
// engine's busy retries and backoff sleeps, and, for a demotion, size the plan's promotions into
// room that never frees, so the process would end over its quota and the fast tier over budget.
//
// From each finished plan of the policy's own (migrate::RunReport::busy, per run) this keeps the
// busy ranges, each held for a number of plans (StuckRange::retry false: the planner leaves its
// pages where they are and charges fast ones to the budgets) and then due a retry (retry true: the
// planner may move them, but a demotion of them frees no room in that plan). A retry the engine
// leaves busy again is held twice as long as before, from kFirstHoldPlans up to kMaxHoldPlans. A
// finished run that tried every page settles every hold in its range: pages it moved are no
// longer held, and pages it left busy are held anew (a run cut short settles only its busy ranges). A due retry the planner does not act on (it wants the pages where they
// are) stays due; a process's exit or a region's removal drops its holds.
//
// Bounded: at most kMaxRanges ranges (the engine reports at most 64 per run); busy ranges past
// that are not held (counted in Totals::notHeld) and are asked again like any other page.
//
// Threading: none; the epoch loop owns it (under its run lock).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include "core/Types.h"
#include "service/Stages.h"

namespace tt::service {

class StuckMoves {
 public:
  static constexpr uint32_t kFirstHoldPlans = 4;
  static constexpr uint32_t kMaxHoldPlans = 256;
  static constexpr size_t kMaxRanges = 4096;

  // The runs of one finished plan of the policy's (all of them, each once).
  void onFinishedPlan(std::span<const FinishedRun> runs);
  // The ranges for the next plan, held or due a retry; counts the holds down by one plan when
  // `counts` (the plan can go to the engine: it is idle, so a plan made while it is busy, which
  // the loop drops, does not wear a hold down).
  [[nodiscard]] std::vector<StuckRange> nextPlan(bool counts = true);
  void removeProcess(pid_t tgid);
  void removeRange(pid_t tgid, uint64_t start, uint64_t length);

  struct Totals {
    size_t ranges = 0;
    uint64_t fastPages = 0;  // 4 KiB pages held on fast nodes (failed demotions)
    uint64_t slowPages = 0;  // on slow nodes (failed promotions)
    uint64_t notHeld = 0;    // busy ranges not held: over kMaxRanges (cumulative)
  };
  [[nodiscard]] Totals totals() const;

 private:
  struct Hold {
    StuckRange range;
    uint32_t wait = 0;       // plans held before the next retry
    uint32_t plansLeft = 0;  // of them still to come; 0 = due
  };
  struct Erased {
    uint64_t start = 0, end = 0;
    uint32_t wait = 0;
  };
  // Takes [start, end) of `tgid` out of every hold (trimming those that reach past it); appends
  // what it took to `erased`.
  void erase(pid_t tgid, uint64_t start, uint64_t end, std::vector<Erased>* erased);

  std::map<std::pair<pid_t, uint64_t>, Hold> holds_;  // by (tgid, start); never overlapping
  uint64_t notHeld_ = 0;
};

}  // namespace tt::service
