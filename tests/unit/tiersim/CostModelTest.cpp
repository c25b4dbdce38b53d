// Cost-model arithmetic and the charges the simulator derives from it.
#include <gtest/gtest.h>

#include "CostModel.h"
#include "Simulator.h"
#include "TestTraces.h"
#include "baselines/Baselines.h"

namespace tt::tiersim {
namespace {

using test::oneStepTrace;
using test::ScriptedPolicy;
using test::twoTierConfig;

TEST(TiersimCostModel, LatencyTermIsLinesTimesLatencyOverParallelism) {
  TierTraffic traffic{10, 5, 0, 0};
  EXPECT_DOUBLE_EQ(latencyTermNs(dramTier(), traffic, 5), (10 * 81.0 + 5 * 86.0) / 5);
  EXPECT_DOUBLE_EQ(latencyTermNs(optaneTier(6), traffic, 1), 10 * 305.0 + 5 * 94.0);
}

TEST(TiersimCostModel, BandwidthTermIsBytesOverBandwidthPerDirection) {
  const TierSpec optane = optaneTier(6);
  EXPECT_DOUBLE_EQ(optane.readBandwidthBytesPerNs, 6 * 6.6);
  EXPECT_DOUBLE_EQ(optane.writeBandwidthBytesPerNs, 6 * 2.3);
  TierTraffic traffic{100, 100, 4096, 8192};
  EXPECT_DOUBLE_EQ(bandwidthTermNs(optane, traffic), (6400.0 + 4096) / (6 * 6.6) + (6400.0 + 8192) / (6 * 2.3));
}

TEST(TiersimCostModel, TierStallIsTheLargerTerm) {
  const TierSpec optane = optaneTier(6);
  TierTraffic sparse{1, 0, 0, 0};  // one line: latency bound
  EXPECT_DOUBLE_EQ(tierStallNs(optane, sparse, 1), 305.0);
  TierTraffic streaming{6400, 0, 0, 0};  // many lines in flight: bandwidth bound
  EXPECT_DOUBLE_EQ(tierStallNs(optane, streaming, 1000), 6400 * 64.0 / (6 * 6.6));
}

TEST(TiersimCostModel, WindowOverlapInterpolatesBetweenSumAndMax) {
  EXPECT_DOUBLE_EQ(windowTimeNs(100, 40, 0), 140);
  EXPECT_DOUBLE_EQ(windowTimeNs(100, 40, 1), 100);
  EXPECT_DOUBLE_EQ(windowTimeNs(100, 40, 0.5), 120);
  EXPECT_DOUBLE_EQ(windowTimeNs(10, 40, 1), 40);
}

TEST(TiersimCostModel, CopyRateIsBoundedByEngineAndBothTiers) {
  EXPECT_DOUBLE_EQ(copyBytesPerNs(dramTier(), optaneTier(6), 2.0), 2.0);
  EXPECT_DOUBLE_EQ(copyBytesPerNs(dramTier(), optaneTier(6), 50.0), 6 * 2.3);
  EXPECT_DOUBLE_EQ(copyBytesPerNs(optaneTier(1), dramTier(), 50.0), 6.6);
}

std::vector<SimAccess> spacedReads(int n, uint64_t spacingNs) {
  std::vector<SimAccess> accesses;
  for (int i = 0; i < n; ++i) accesses.push_back(SimAccess{static_cast<uint64_t>(i) * spacingNs, static_cast<PageId>(i), 1, false});
  return accesses;
}

TEST(TiersimCostModel, AllDramStepIsComputePlusDramLatency) {
  const Trace trace = oneStepTrace(10, 100'000, spacedReads(10, 10'000));
  SimConfig config = twoTierConfig(0);
  config.unboundedFastTier = true;
  auto policy = makeAllDramPolicy();
  auto result = simulate(trace, *policy, config, false);
  ASSERT_TRUE(result.ok()) << result.error().message();
  ASSERT_EQ(result->steps.size(), 1U);
  EXPECT_DOUBLE_EQ(result->steps[0].computeNs, 100'000);
  EXPECT_DOUBLE_EQ(result->steps[0].timeNs, 100'000 + 10 * 81.0);
  EXPECT_DOUBLE_EQ(result->fastHitFraction, 1.0);
}

TEST(TiersimCostModel, SlowTierAccessesPaySlowLatency) {
  const Trace trace = oneStepTrace(10, 100'000, spacedReads(10, 10'000));
  auto policy = makeFirstTouchPolicy();
  auto result = simulate(trace, *policy, twoTierConfig(4), false);
  ASSERT_TRUE(result.ok()) << result.error().message();
  // Pages 0-3 fit the fast tier on first touch, 4-9 land in the slow tier.
  EXPECT_DOUBLE_EQ(result->steps[0].timeNs, 100'000 + 4 * 81.0 + 6 * 305.0);
  EXPECT_DOUBLE_EQ(result->fastHitFraction, 0.4);
}

// Four pages touched at t=0, demoted by the policy at its first epoch; nothing touched after.
Result<SimResult> demoteFourPages(double migrationOverlap, bool move) {
  const Trace trace = oneStepTrace(4, 1'000'000, spacedReads(4, 0));
  SimConfig config = twoTierConfig(4);
  config.migrationOverlap = migrationOverlap;
  config.memoryParallelism = 1e9;  // bandwidth bound: stolen bytes add up linearly
  ScriptedPolicy policy;
  policy.epoch = [move](const EpochContext& context, std::vector<PageMove>& moves) {
    if (move && context.epoch == 1) {
      for (PageId page = 0; page < 4; ++page) moves.push_back(PageMove{page, 1});
    }
  };
  return simulate(trace, policy, config, false);
}

TEST(TiersimCostModel, MigrationOnTheCriticalPathIsChargedItsCopyTime) {
  auto moved = demoteFourPages(0.0, true);
  auto still = demoteFourPages(0.0, false);
  ASSERT_TRUE(moved.ok() && still.ok());
  EXPECT_EQ(moved->demotedPages, 4U);
  EXPECT_EQ(moved->steps[0].migratedBytes, 4U * 4096);
  // Copy engine 2 GB/s is below DRAM read and Optane write bandwidth.
  EXPECT_DOUBLE_EQ(moved->steps[0].migrationNs, 4 * 4096 / 2.0);
  EXPECT_DOUBLE_EQ(moved->steps[0].timeNs - still->steps[0].timeNs, 4 * 4096 / 2.0);
}

TEST(TiersimCostModel, OverlappedMigrationStealsBandwidthInstead) {
  auto moved = demoteFourPages(1.0, true);
  auto still = demoteFourPages(1.0, false);
  ASSERT_TRUE(moved.ok() && still.ok());
  EXPECT_DOUBLE_EQ(moved->steps[0].migrationNs, 0);
  // Reading 16 KiB from DRAM and writing it to Optane, charged as bandwidth time.
  const double stolen = 4 * 4096 / 100.0 + 4 * 4096 / (6 * 2.3);
  EXPECT_NEAR(moved->steps[0].timeNs - still->steps[0].timeNs, stolen, 1e-6);
}

TEST(TiersimCostModel, PromotionToAFullTierIsRefusedUnlessDemotedFirst) {
  for (bool demoteFirst : {false, true}) {
    const Trace trace = oneStepTrace(2, 1'000'000, spacedReads(2, 0));
    ScriptedPolicy policy;
    policy.epoch = [demoteFirst](const EpochContext& context, std::vector<PageMove>& moves) {
      if (context.epoch != 1) return;
      if (demoteFirst) moves.push_back(PageMove{0, 1});
      moves.push_back(PageMove{1, 0});
    };
    auto result = simulate(trace, policy, twoTierConfig(1), false);
    ASSERT_TRUE(result.ok());
    EXPECT_EQ(result->refusedMoves, demoteFirst ? 0U : 1U);
    EXPECT_EQ(result->promotedPages, demoteFirst ? 1U : 0U);
  }
}

}  // namespace
}  // namespace tt::tiersim
