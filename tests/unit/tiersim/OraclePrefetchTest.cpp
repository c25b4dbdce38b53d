// The prefetching oracle (baselines/OraclePrefetch.cpp) and the property of the cost model it
// exploits: under full compute overlap and fully overlapped copies, a copy that lands in a
// compute-bound window costs nothing.
#include <gtest/gtest.h>

#include "Simulator.h"
#include "Sweep.h"
#include "TestTraces.h"
#include "baselines/Baselines.h"

namespace tt::tiersim {
namespace {

// ---- The cost model: a copy in a compute-bound window ---------------------------------------------

// 20 pages, each read one line every 10 us for 100 us: every 1 us window is compute bound.
Trace lightTrace() {
  std::vector<SimAccess> accesses;
  for (uint64_t t = 0; t < 100'000; t += 500) accesses.push_back(SimAccess{t, (t / 500) % 20, 1, false});
  return test::oneStepTrace(20, 100'000, accesses);
}

// One swap (page 0 out of the fast tier, page 15 in) at the first epoch after 20 us.
double stepWithSwap(const SimConfig& config, bool swap) {
  test::ScriptedPolicy policy;
  bool done = false;
  policy.epoch = [&](const EpochContext& c, std::vector<PageMove>& moves) {
    if (!swap || done || c.nowNs < 20'000) return;
    done = true;
    moves.push_back({0, 1});
    moves.push_back({15, 0});
  };
  auto result = simulate(lightTrace(), policy, config, false);
  EXPECT_TRUE(result.ok());
  if (!result.ok() || result->steps.size() != 1) return 0;
  EXPECT_EQ(result->steps[0].migratedBytes, swap ? 2 * 4096U : 0U);
  return result->meanStepNs;
}

SimConfig lightConfig(double computeOverlap, double migrationOverlap) {
  SimConfig c = test::twoTierConfig(10);
  c.memoryParallelism = 64;
  c.epochNs = 10'000;
  c.computeOverlap = computeOverlap;
  c.migrationOverlap = migrationOverlap;
  return c;
}

TEST(TiersimOraclePrefetch, CostModelChargesNothingForACopyInAComputeBoundWindowUnderFullOverlap) {
  const SimConfig overlapped = lightConfig(1, 1);
  EXPECT_DOUBLE_EQ(stepWithSwap(overlapped, true), stepWithSwap(overlapped, false));
  EXPECT_DOUBLE_EQ(stepWithSwap(overlapped, false), 100'000.0);  // compute only
  // The default model charges half of each copy on the critical path (2 KiB of copy time at 2 GB/s).
  const SimConfig serial = lightConfig(0, 0.5);
  EXPECT_GE(stepWithSwap(serial, true) - stepWithSwap(serial, false), 2 * 0.5 * 4096 / 2.0);
}

// ---- The oracle ---------------------------------------------------------------------------------------

constexpr uint64_t kPhaseNs = 200'000;  // each compute phase, trace time
constexpr uint64_t kBurstNs = 1'000;    // each memory phase: one window
constexpr uint64_t kStepNs = 2 * (kPhaseNs + kBurstNs);
constexpr int kSteps = 6;
constexpr PageId kZ = 20;               // first page of the compute phases' data
constexpr uint64_t kZPerPhase = 1000;

// Every step: compute phase A (reads and writes of pages Z, 5 records per us, each `zLines` lines,
// each Z page once per step), a burst reading pages 0..9 (X) once each, compute phase B (more Z),
// a burst reading pages 10..19 (Y). The fast tier holds 10 pages. With zLines = 1 the compute
// phases leave the memory system almost idle; with 64 every window of them is bound by the slow
// tier's write bandwidth.
Trace burstTrace(uint32_t zLines) {
  Trace trace;
  trace.name = "bursts";
  trace.totalPages = kZ + 2 * kZPerPhase;
  trace.regions.push_back(TraceRegion{1, 0, 10, RegionKind::Weight, "x"});
  trace.regions.push_back(TraceRegion{2, 10, 10, RegionKind::Weight, "y"});
  trace.regions.push_back(TraceRegion{3, kZ, 2 * kZPerPhase, RegionKind::Activation, "z"});
  for (int s = 0; s < kSteps; ++s) {
    const uint64_t start = static_cast<uint64_t>(s) * kStepNs;
    trace.marks.push_back(test::stepMark(MarkType::StepBegin, static_cast<uint64_t>(s), start));
    uint64_t t = start;
    for (int half = 0; half < 2; ++half) {
      const PageId z = kZ + static_cast<PageId>(half) * kZPerPhase;
      for (uint64_t k = 0; k < kZPerPhase; ++k) {
        trace.accesses.push_back(SimAccess{t + k * (kPhaseNs / kZPerPhase), z + k, zLines, true});
      }
      t += kPhaseNs;
      for (PageId p = 0; p < 10; ++p) {
        trace.accesses.push_back(SimAccess{t + p * (kBurstNs / 10), p + 10 * static_cast<PageId>(half), 64, false});
      }
      t += kBurstNs;
    }
    trace.marks.push_back(test::stepMark(MarkType::StepEnd, static_cast<uint64_t>(s), start + kStepNs));
  }
  return trace;
}

SimConfig burstConfig(bool unboundedFast = false) {
  SimConfig c = test::twoTierConfig(10);
  c.memoryParallelism = 64;
  c.windowNs = 1'000;
  c.epochNs = 5'000;
  c.computeOverlap = 1;
  c.migrationOverlap = 1;
  c.warmupSteps = 2;  // the oracle learns the step length from the first two step marks
  c.unboundedFastTier = unboundedFast;
  return c;
}

// Built as the sweep builds it (the registry entry, with the run's context).
std::unique_ptr<Policy> prefetchOracle(const SimConfig& c) {
  const auto* entry = findPolicy("oracle-prefetch");
  if (entry == nullptr) return nullptr;
  return entry->make(makePolicyContext(Trace{}, c));
}

SimResult run(Policy& policy, const Trace& trace, const SimConfig& config) {
  auto result = simulate(trace, policy, config, true);
  EXPECT_TRUE(result.ok());
  return result.ok() ? *result : SimResult{};
}

TEST(TiersimOraclePrefetch, MovesTheNextBurstsPagesInDuringAnIdleComputePhase) {
  const Trace trace = burstTrace(1);
  auto oracle = prefetchOracle(burstConfig());
  ASSERT_NE(oracle, nullptr);
  auto fixed = makeAutoTmStaticPolicy(64);
  auto bound = makeAllDramPolicy();
  const SimResult moving = run(*oracle, trace, burstConfig());
  const SimResult staying = run(*fixed, trace, burstConfig());
  const SimResult allDram = run(*bound, trace, burstConfig(true));
  EXPECT_GT(moving.promotedPages, 0U);
  EXPECT_GT(moving.demotedPages, 0U);
  // The static optimum keeps one burst's pages fast; the other burst is served by the slow tier.
  EXPECT_GT(staying.meanStepNs, allDram.meanStepNs);
  EXPECT_LT(moving.meanStepNs, staying.meanStepNs);
  // The copies ran in idle windows, so moving closes nearly all of the gap to all-DRAM.
  EXPECT_LT(moving.meanStepNs - allDram.meanStepNs, 0.1 * (staying.meanStepNs - allDram.meanStepNs));
}

TEST(TiersimOraclePrefetch, DoesNotMoveWhenTheComputePhasesLeaveNoSpareBandwidth) {
  const Trace trace = burstTrace(64);
  auto oracle = prefetchOracle(burstConfig());
  ASSERT_NE(oracle, nullptr);
  auto fixed = makeAutoTmStaticPolicy(64);
  const SimResult moving = run(*oracle, trace, burstConfig());
  const SimResult staying = run(*fixed, trace, burstConfig());
  // A swap adds about 490 ns to a window bound by the slow tier's write bandwidth; a burst page's
  // one read saves about 210 ns.
  EXPECT_EQ(moving.promotedPages + moving.demotedPages, 0U);
  EXPECT_DOUBLE_EQ(moving.meanStepNs, staying.meanStepNs);
}

TEST(TiersimOraclePrefetch, KeepsTheStaticPlacementInTheDefaultModel) {
  // No compute overlap, half of every copy on the critical path: one read of a page saves far less
  // than the 2 us a swap costs, idle bandwidth or not.
  const Trace trace = burstTrace(1);
  SimConfig c = burstConfig();
  c.computeOverlap = 0;
  c.migrationOverlap = 0.5;
  auto oracle = prefetchOracle(c);
  ASSERT_NE(oracle, nullptr);
  auto fixed = makeAutoTmStaticPolicy(64);
  const SimResult moving = run(*oracle, trace, c);
  const SimResult staying = run(*fixed, trace, c);
  EXPECT_EQ(moving.promotedPages + moving.demotedPages, 0U);
  EXPECT_DOUBLE_EQ(moving.meanStepNs, staying.meanStepNs);
}

}  // namespace
}  // namespace tt::tiersim
