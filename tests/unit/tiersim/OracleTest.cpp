// The look-ahead oracle (baselines/Oracle.cpp): moves pages ahead of the phase that needs them
// when their reuse there repays the copies, and otherwise keeps the static optimum's placement.
#include <gtest/gtest.h>

#include "Simulator.h"
#include "TestTraces.h"
#include "baselines/Baselines.h"

namespace tt::tiersim {
namespace {

constexpr uint64_t kStepNs = 100'000'000;  // trace (compute) time of one step
constexpr int kSteps = 6;

// Pages 0..9 are read `touches` times each in the first half of every step, pages 10..19 in the
// second half; the fast tier holds 10 pages.
Trace twoPhaseTrace(int touches) {
  Trace trace;
  trace.name = "two-phase";
  trace.totalPages = 20;
  trace.regions.push_back(TraceRegion{1, 0, 10, RegionKind::Weight, "first"});
  trace.regions.push_back(TraceRegion{2, 10, 10, RegionKind::Weight, "second"});
  for (int s = 0; s < kSteps; ++s) {
    const uint64_t start = static_cast<uint64_t>(s) * kStepNs;
    trace.marks.push_back(test::stepMark(MarkType::StepBegin, static_cast<uint64_t>(s), start));
    for (int phase = 0; phase < 2; ++phase) {
      const uint64_t phaseStart = start + static_cast<uint64_t>(phase) * kStepNs / 2;
      const uint64_t gap = kStepNs / 2 / static_cast<uint64_t>(touches * 10 + 1);
      uint64_t t = phaseStart + gap;
      for (int k = 0; k < touches; ++k)
        for (PageId p = 0; p < 10; ++p, t += gap) trace.accesses.push_back(SimAccess{t, p + 10 * static_cast<PageId>(phase), 64, false});
    }
    trace.marks.push_back(test::stepMark(MarkType::StepEnd, static_cast<uint64_t>(s), start + kStepNs - 1));
  }
  return trace;
}

SimConfig config() {
  SimConfig c = test::twoTierConfig(10);
  c.memoryParallelism = 64;
  c.migrationOverlap = 0.5;
  c.warmupSteps = 2;  // the oracle learns the step length from the first two step marks
  return c;
}

SimResult run(Policy& policy, const Trace& trace) {
  auto result = simulate(trace, policy, config(), true);
  EXPECT_TRUE(result.ok());
  return result.ok() ? *result : SimResult{};
}

TEST(TiersimOracle, MovesEachPhasesPagesInAheadWhenReuseRepaysTheCopies) {
  const Trace trace = twoPhaseTrace(200);  // 200 x 64 lines per page per phase
  auto oracle = makeLookaheadOraclePolicy(64, 0.25, 0.5);
  auto fixed = makeAutoTmStaticPolicy(64);
  const SimResult moving = run(*oracle, trace);
  const SimResult staying = run(*fixed, trace);
  EXPECT_GT(moving.promotedPages, 0U);
  EXPECT_GT(moving.demotedPages, 0U);
  EXPECT_GT(moving.fastHitFraction, 0.8) << "the phase's pages should be fast while it runs";
  EXPECT_NEAR(staying.fastHitFraction, 0.5, 0.01);  // half the pages fast, all accesses equal
  EXPECT_LT(moving.meanStepNs, staying.meanStepNs);
}

TEST(TiersimOracle, KeepsTheStaticPlacementWhenAPageIsTouchedTooFewTimes) {
  const Trace trace = twoPhaseTrace(1);  // one 64-line read per page per phase: less than a copy saves
  auto oracle = makeLookaheadOraclePolicy(64, 0.25, 0.5);
  auto fixed = makeAutoTmStaticPolicy(64);
  const SimResult moving = run(*oracle, trace);
  const SimResult staying = run(*fixed, trace);
  EXPECT_EQ(moving.promotedPages + moving.demotedPages, 0U);
  EXPECT_DOUBLE_EQ(moving.meanStepNs, staying.meanStepNs);
}

}  // namespace
}  // namespace tt::tiersim
