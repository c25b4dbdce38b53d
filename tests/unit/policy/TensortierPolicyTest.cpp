// Drives tensortier's simulator policy (tools/tiersim/policies) through the real replay of a tiny
// synthetic two-phase trace: tensor A is streamed in the first half of every step, tensor B in the
// second; the fast tier holds only one of them. A placement that never moves can serve at most
// about half the accesses from DRAM; tensortier must learn the schedule and swap ahead of need.
#include "policies/TensortierPolicy.h"

#include <gtest/gtest.h>

#include <iostream>

#include <cstdlib>

#include "Simulator.h"
#include "Sweep.h"
#include "core/Log.h"
#include "Trace.h"

namespace {

using namespace tt::tiersim;

constexpr uint64_t kUs = 1000;
constexpr uint64_t kPagesPerTensor = 256;  // 1 MiB
constexpr uint64_t kStepNs = 10'000 * kUs;

Trace twoPhaseTrace(uint32_t steps) {
  Trace t;
  t.name = "two-phase";
  // 10 ms steps: a model scaled 1/16 as in the sweep, whose periods the policy scales to match.
  t.scaleDivisor = 16;
  t.totalPages = 2 * kPagesPerTensor;
  t.regions.push_back({0, 0, kPagesPerTensor, tt::RegionKind::Weight, "A"});
  t.regions.push_back({1, kPagesPerTensor, kPagesPerTensor, tt::RegionKind::Activation, "B"});
  auto mark = [&](tt::MarkType type, uint64_t step, uint64_t time, const char* phase) {
    tt::IterationMark m;
    m.type = type;
    m.step = step;
    m.timestampNs = time;
    m.phase = phase;
    t.marks.push_back(m);
  };
  for (uint64_t s = 0; s < steps; ++s) {
    const uint64_t begin = s * kStepNs;
    mark(tt::MarkType::StepBegin, s, begin, "");
    mark(tt::MarkType::PhaseBegin, s, begin, "forward");
    mark(tt::MarkType::PhaseBegin, s, begin + kStepNs / 2, "backward");
    // Each half streams its tensor 32 times (a record of 64 lines per page), so that a swap pays
    // for its copies: 32 x 64 lines x ~3.5 ns saved per page against ~2 us per copy.
    for (int half = 0; half < 2; ++half)
      for (uint64_t i = 0; i < 32 * kPagesPerTensor; ++i) {
        SimAccess a;
        a.timeNs = begin + half * kStepNs / 2 + i * (kStepNs / 2) / (32 * kPagesPerTensor + 1);
        a.page = half * kPagesPerTensor + i % kPagesPerTensor;
        a.count = 64;
        t.accesses.push_back(a);
      }
    mark(tt::MarkType::StepEnd, s, begin + kStepNs - 1, "");
  }
  return t;
}

// The reference: first-touch placement, never moved (what the kernel does without a policy).
class NeverMove : public Policy {
 public:
  [[nodiscard]] std::string name() const override { return "never-move"; }
  void init(const std::vector<TraceRegion>&, uint64_t, const std::vector<TierInfo>&, const std::vector<SimAccess>*) override {}
  void onSample(const SimAccess&) override {}
  void onMark(const tt::IterationMark&) override {}
  void onEpoch(const EpochContext&, std::vector<PageMove>&) override {}
};

TEST(TensortierPolicy, LearnsTheTwoPhaseScheduleAndSwapsAheadOfNeed) {
  const Trace trace = twoPhaseTrace(30);
  ASSERT_TRUE(validateTrace(trace).ok());
  SimConfig config;
  SimTier fast{dramTier(), kPagesPerTensor + 16};
  SimTier slow{optaneTier(), trace.totalPages};
  config.tiers = {fast, slow};
  config.epochNs = 62'500;
  // The daemon's migration engine copies on its own worker threads: most of a copy overlaps the
  // application (the simulator's default charges half of it to the critical path).
  config.migrationOverlap = 0.9;
  config.warmupSteps = 15;
  if (std::getenv("TT_DEBUG_ADAPTER")) tt::log::setLevel(tt::log::Level::Debug);
  auto policy = makeTensortierPolicy(tensortier::v1::PolicyConfig{}, 199, 64, trace.scaleDivisor);
  ASSERT_EQ(policy->name(), "tensortier");
  auto result = simulate(trace, *policy, config, false);
  ASSERT_TRUE(result) << result.error().message();
  // Since the simulator's copy queue a swap of the two tensors takes about 1 ms of copy engine
  // time, longer than the adapter's 250 us between plans. The planner sees a page in its current
  // tier until its copy completes, so a plan made mid-swap (e.g. as the phase turns) can ask for
  // promotions into room that still-queued promotions have reserved; the simulator refuses those
  // rather than over-commit DRAM, and the planner asks again at its next plan. They must stay a
  // small share of the moves (before the queue, with instant moves, there were none).
  EXPECT_LT(result->refusedMoves, result->promotedPages / 20);
  EXPECT_GT(result->promotedPages, 10 * kPagesPerTensor) << "it must swap the tensors every step";
  EXPECT_GT(result->fastHitFraction, 0.8) << "share of line accesses served by DRAM after warm-up";
  NeverMove still;
  auto reference = simulate(trace, still, config, false);
  ASSERT_TRUE(reference) << reference.error().message();
  EXPECT_LT(reference->fastHitFraction, 0.6);
  EXPECT_LT(result->meanStepNs, 0.99 * reference->meanStepNs) << "the swaps must pay for their copies";
  std::cout << "never-move: fast hit " << reference->fastHitFraction << ", mean step " << reference->meanStepNs / 1e6 << " ms\n";
  std::cout << "two-phase trace: fast hit " << result->fastHitFraction << ", mean step "
            << result->meanStepNs / 1e6 << " ms, promoted " << result->promotedPages << " pages\n";
}

// A trace of `steps` steps of 64 ms / scale each, every page read once per step: the same
// training run at another scale divisor, as the generator makes it (time divided by the scale).
Trace scaledTrace(uint32_t scale, uint32_t steps) {
  Trace t;
  t.name = "scaled";
  t.scaleDivisor = scale;
  t.totalPages = 64;
  t.regions.push_back({0, 0, 64, tt::RegionKind::Weight, "w"});
  const uint64_t stepNs = 64'000'000 / scale;
  for (uint64_t s = 0; s < steps; ++s) {
    tt::IterationMark begin;
    begin.type = tt::MarkType::StepBegin;
    begin.step = s;
    begin.timestampNs = s * stepNs;
    t.marks.push_back(begin);
    for (uint64_t p = 0; p < 64; ++p) t.accesses.push_back({s * stepNs + p * stepNs / 64, p, 64, false});
    tt::IterationMark end = begin;
    end.type = tt::MarkType::StepEnd;
    end.timestampNs = (s + 1) * stepNs;
    t.marks.push_back(end);
  }
  return t;
}

// The planning period scales with the trace, as the baselines' periods do: the sweep's registry
// and configuration at scale 1 and 1/16 give the same number of plans per step.
TEST(TensortierPolicy, PlansAsOftenPerStepAtEveryScale) {
  const PolicyEntry* entry = findPolicy("tensortier");
  ASSERT_NE(entry, nullptr);
  constexpr uint32_t kSteps = 6;
  auto plansPerStep = [&](uint32_t scale) {
    const Trace trace = scaledTrace(scale, kSteps);
    SweepOptions options;
    options.scaleDivisor = scale;
    auto config = makeSimConfig(options, trace, 0.5, *entry);
    EXPECT_TRUE(config.ok());
    if (!config.ok()) return 0.0;
    auto policy = entry->make(makePolicyContext(trace, *config));
    auto result = simulate(trace, *policy, *config, entry->offline);
    EXPECT_TRUE(result.ok());
    return static_cast<double>(tensortierPlans(*policy)) / kSteps;
  };
  const double full = plansPerStep(1);
  const double sixteenth = plansPerStep(16);
  // 64 ms steps, a plan every 4 ms at the first 1 ms epoch past it: 16 a step.
  EXPECT_NEAR(full, 16, 0.5);
  EXPECT_NEAR(sixteenth, full, 0.5);
}

}  // namespace
