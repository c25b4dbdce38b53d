// Tiny hand-made traces and a scriptable policy for the tiersim tests.
#pragma once

#include <functional>
#include <vector>

#include "Policy.h"
#include "Simulator.h"
#include "Trace.h"

namespace tt::tiersim::test {

// A step mark of the trace's own (trace-time) clock.
inline IterationMark stepMark(MarkType type, uint64_t step, uint64_t timestampNs) {
  IterationMark mark;
  mark.type = type;
  mark.step = step;
  mark.timestampNs = timestampNs;
  return mark;
}

// One step [0, computeNs) over `pages` pages of one region, with the given accesses.
inline Trace oneStepTrace(uint64_t pages, uint64_t computeNs, std::vector<SimAccess> accesses) {
  Trace trace;
  trace.name = "tiny";
  trace.totalPages = pages;
  trace.regions.push_back(TraceRegion{1, 0, pages, RegionKind::Activation, "a"});
  trace.accesses = std::move(accesses);
  IterationMark begin;
  begin.type = MarkType::StepBegin;
  begin.timestampNs = 0;
  IterationMark end;
  end.type = MarkType::StepEnd;
  end.timestampNs = computeNs;
  trace.marks = {begin, end};
  return trace;
}

inline SimConfig twoTierConfig(uint64_t fastPages) {
  SimConfig config;
  config.tiers = {SimTier{dramTier(), fastPages}, SimTier{optaneTier(6), 0}};
  config.samplePeriod = 0;
  config.memoryParallelism = 1;
  config.windowNs = 1000;
  config.epochNs = 100'000;
  config.migrationOverlap = 0;
  return config;
}

// A policy whose epochs run a callback; records what it was shown.
class ScriptedPolicy : public Policy {
 public:
  std::function<void(const EpochContext&, std::vector<PageMove>&)> epoch;
  // When set, where a page goes on first touch (else the default: the fastest tier with room).
  std::function<TierId(PageId)> firstTouch;
  std::vector<SimAccess> samples;
  std::vector<SimAccess> hints;
  std::vector<IterationMark> marks;
  [[nodiscard]] std::string name() const override { return "scripted"; }
  void init(const std::vector<TraceRegion>&, uint64_t, const std::vector<TierInfo>&,
            const std::vector<SimAccess>*) override {}
  [[nodiscard]] TierId firstTouchTier(PageId page, const std::vector<TierInfo>& tiers) const override {
    return firstTouch ? firstTouch(page) : Policy::firstTouchTier(page, tiers);
  }
  void onSample(const SimAccess& access) override { samples.push_back(access); }
  void onHintFault(const SimAccess& access) override { hints.push_back(access); }
  void onMark(const IterationMark& mark) override { marks.push_back(mark); }
  void onEpoch(const EpochContext& context, std::vector<PageMove>& moves) override {
    if (epoch) epoch(context, moves);
  }
};

}  // namespace tt::tiersim::test
