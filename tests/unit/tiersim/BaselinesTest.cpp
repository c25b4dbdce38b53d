// Each baseline's defining behaviour, driven directly or on tiny synthetic traces.
#include <gtest/gtest.h>

#include <algorithm>

#include "Simulator.h"
#include "Sweep.h"
#include "TestTraces.h"
#include "baselines/Baselines.h"
#include "traces/ModelTraces.h"

namespace tt::tiersim {
namespace {

using test::oneStepTrace;
using test::twoTierConfig;

// A hand-held epoch: pages below `fastPages` in tier 0, the rest in tier 1, all present.
struct World {
  std::vector<TierId> tierOf;
  std::vector<uint8_t> present;
  std::vector<uint8_t> accessed;
  std::vector<TierInfo> tiers;
  std::vector<TraceRegion> regions;

  World(uint64_t pages, uint64_t fastPages, uint64_t fastCapacity)
      : tierOf(pages, 1), present(pages, 1), accessed(pages, 0), tiers(2) {
    for (PageId p = 0; p < fastPages; ++p) tierOf[p] = 0;
    tiers[0].capacityPages = fastCapacity;
    tiers[0].usedPages = fastPages;
    tiers[1].capacityPages = pages;
    tiers[1].usedPages = pages - fastPages;
    regions.push_back(TraceRegion{1, 0, pages, RegionKind::Weight, "w"});
  }
  EpochContext context(uint64_t nowNs) {
    EpochContext c;
    c.nowNs = nowNs;
    c.tiers = tiers;
    c.tierOf = &tierOf;
    c.present = &present;
    c.accessedBits = &accessed;
    return c;
  }
  std::vector<PageMove> epoch(Policy& policy, uint64_t nowNs) {
    std::vector<PageMove> moves;
    auto c = context(nowNs);
    policy.onEpoch(c, moves);
    return moves;
  }
};

bool promotes(const std::vector<PageMove>& moves, PageId page) {
  return std::any_of(moves.begin(), moves.end(), [&](const PageMove& m) { return m.page == page && m.to == 0; });
}

SimAccess read(PageId page) { return SimAccess{0, page, 64, false}; }

// ---- TPP ----------------------------------------------------------------------------------------

TEST(TiersimTpp, PromotesOnASecondHintFaultOnly) {
  World world(100, 10, 50);
  auto tpp = makeTppPolicy(TppParams{});
  tpp->init(world.regions, 100, world.tiers, nullptr);
  tpp->onHintFault(read(20));
  EXPECT_FALSE(promotes(world.epoch(*tpp, 1000), 20)) << "first fault only activates the page";
  tpp->onHintFault(read(20));
  const auto moves = world.epoch(*tpp, 2000);
  ASSERT_EQ(moves.size(), 1U);
  EXPECT_TRUE(promotes(moves, 20));
}

TEST(TiersimTpp, RespectsThePromotionRateLimit) {
  World world(100, 10, 90);
  TppParams params;
  params.promoteRateLimitBytesPerSec = 3 * 4096;  // 3 pages per 1 s window
  auto tpp = makeTppPolicy(params);
  tpp->init(world.regions, 100, world.tiers, nullptr);
  for (int round = 0; round < 2; ++round) {
    for (PageId page = 20; page < 30; ++page) tpp->onHintFault(read(page));
  }
  EXPECT_EQ(world.epoch(*tpp, 0).size(), 3U);
  EXPECT_EQ(world.epoch(*tpp, 500'000'000).size(), 0U) << "same window";
  EXPECT_EQ(world.epoch(*tpp, 1'000'000'000).size(), 3U) << "next window";
}

TEST(TiersimTpp, DemotesUnreferencedPagesUnderTheWatermark) {
  World world(100, 10, 10);  // fast tier full
  for (PageId p = 0; p < 5; ++p) world.accessed[p] = 1;
  auto tpp = makeTppPolicy(TppParams{});
  tpp->init(world.regions, 100, world.tiers, nullptr);
  const auto moves = world.epoch(*tpp, 0);
  ASSERT_EQ(moves.size(), 1U);
  EXPECT_EQ(moves[0].page, 5U) << "referenced pages 0-4 get a second chance";
  EXPECT_EQ(moves[0].to, 1);
  for (PageId p = 0; p < 5; ++p) EXPECT_EQ(world.accessed[p], 0) << "aging clears the referenced bit";
}

// ---- HeMem --------------------------------------------------------------------------------------

HeMemParams unitHeMem() {
  HeMemParams params;
  params.hugePageBytes = 4096;  // one simulator page per HeMem page, for the test
  params.intervalNs = 1;
  return params;
}

TEST(TiersimHeMem, PromotesAtTheReadThreshold) {
  World world(100, 10, 50);
  auto hemem = makeHeMemPolicy(unitHeMem());
  hemem->init(world.regions, 100, world.tiers, nullptr);
  for (int i = 0; i < 7; ++i) hemem->onSample(read(40));
  EXPECT_FALSE(promotes(world.epoch(*hemem, 10), 40)) << "7 reads are not hot";
  hemem->onSample(read(40));
  EXPECT_TRUE(promotes(world.epoch(*hemem, 20), 40)) << "8 reads are";
}

TEST(TiersimHeMem, WritesAreHotAtFour) {
  World world(100, 10, 50);
  auto hemem = makeHeMemPolicy(unitHeMem());
  hemem->init(world.regions, 100, world.tiers, nullptr);
  for (int i = 0; i < 4; ++i) hemem->onSample(SimAccess{0, 41, 64, true});
  EXPECT_TRUE(promotes(world.epoch(*hemem, 10), 41));
}

TEST(TiersimHeMem, CoolingHalvesEveryPagesCounts) {
  World world(100, 10, 50);
  auto hemem = makeHeMemPolicy(unitHeMem());
  hemem->init(world.regions, 100, world.tiers, nullptr);
  for (int i = 0; i < 7; ++i) hemem->onSample(read(40));
  for (int i = 0; i < 18; ++i) hemem->onSample(read(60));  // reaches the cooling threshold
  hemem->onSample(read(40));  // 7 halved to 3, plus 1: not hot
  const auto moves = world.epoch(*hemem, 10);
  EXPECT_FALSE(promotes(moves, 40)) << "page 40's count was halved by the cooling";
  EXPECT_TRUE(promotes(moves, 60)) << "page 60: 18 halved to 9, still hot";
}

TEST(TiersimHeMem, MakesRoomByDemotingAColdFastPage) {
  World world(100, 10, 10);  // fast tier full of never-sampled (cold) pages
  auto hemem = makeHeMemPolicy(unitHeMem());
  hemem->init(world.regions, 100, world.tiers, nullptr);
  for (int i = 0; i < 8; ++i) hemem->onSample(read(50));
  const auto moves = world.epoch(*hemem, 10);
  ASSERT_EQ(moves.size(), 2U);
  EXPECT_EQ(moves[0].to, 1);
  EXPECT_LT(moves[0].page, 10U);
  EXPECT_TRUE(promotes(moves, 50));
}

// ---- Memtis -------------------------------------------------------------------------------------

TEST(TiersimMemtis, BinsAreLog2OfCountPlusOne) {
  EXPECT_EQ(memtisBin(0), 0U);
  EXPECT_EQ(memtisBin(1), 1U);
  EXPECT_EQ(memtisBin(2), 1U);
  EXPECT_EQ(memtisBin(3), 2U);
  EXPECT_EQ(memtisBin(6), 2U);
  EXPECT_EQ(memtisBin(7), 3U);
  EXPECT_EQ(memtisBin(1ULL << 40), 15U);
}

// Pages 0-4 sampled 31 times (bin 5), 5-19 7 times (bin 3), 20-99 once (bin 1).
void sampleSkewed(Policy& memtis) {
  for (PageId p = 0; p < 100; ++p) {
    const int n = p < 5 ? 31 : (p < 20 ? 7 : 1);
    for (int i = 0; i < n; ++i) memtis.onSample(read(p));
  }
}

TEST(TiersimMemtis, HotThresholdIsTheLowestBinWhoseHotSetFitsTheFastTier) {
  MemtisParams params;
  params.adaptationPeriodSamples = 1;
  params.coolingPeriodSamples = 1'000'000;
  // Like __adjust_active_threshold(), empty bins below the last one taken lower the threshold
  // without changing the hot set: capacity 10 takes bin 5 (5 pages) and empty bin 4.
  for (const auto& [capacity, expected] : {std::pair<uint64_t, int>{10, 4}, {25, 2}, {100, 1}, {4, 6}}) {
    World world(100, 0, capacity);
    auto memtis = makeMemtisPolicy(params);
    memtis->init(world.regions, 100, world.tiers, nullptr);
    sampleSkewed(*memtis);
    EXPECT_EQ(memtisHotThreshold(*memtis), expected) << "fast capacity " << capacity;
    uint64_t hot = 0;
    for (PageId p = 0; p < 100; ++p) {
      const uint64_t count = p < 5 ? 31 : (p < 20 ? 7 : 1);
      hot += memtisBin(count) >= static_cast<unsigned>(expected) ? 1 : 0;
    }
    if (expected < 15) {
      EXPECT_LE(hot, capacity) << "the hot set fits the fast tier";
    }
  }
}

TEST(TiersimMemtis, PromotesExactlyTheHotSet) {
  MemtisParams params;
  params.adaptationPeriodSamples = 1;
  params.coolingPeriodSamples = 1'000'000;
  params.minFreeBytes = 0;
  World world(100, 0, 10);
  auto memtis = makeMemtisPolicy(params);
  memtis->init(world.regions, 100, world.tiers, nullptr);
  sampleSkewed(*memtis);
  const auto moves = world.epoch(*memtis, 0);
  ASSERT_EQ(moves.size(), 5U);
  for (PageId p = 0; p < 5; ++p) EXPECT_TRUE(promotes(moves, p)) << p;
}

TEST(TiersimMemtis, CoolingHalvesCounts) {
  for (bool cooling : {false, true}) {
    MemtisParams params;
    params.adaptationPeriodSamples = 1;
    params.coolingPeriodSamples = cooling ? 31 : 1'000'000;  // cools right after page 0's 31st sample
    params.minFreeBytes = 0;
    World world(100, 0, 1);
    auto memtis = makeMemtisPolicy(params);
    memtis->init(world.regions, 100, world.tiers, nullptr);
    for (int i = 0; i < 31; ++i) memtis->onSample(read(0));
    for (int i = 0; i < 20; ++i) memtis->onSample(read(1));
    // Uncooled: page 0 (31, bin 5) is the one hot page. Cooled: 15 (bin 4), level with page 1
    // (20, bin 4): two pages in the top bin do not fit one fast page, nothing is hot.
    EXPECT_EQ(promotes(world.epoch(*memtis, 0), 0), !cooling) << (cooling ? "cooled" : "not cooled");
  }
}

TEST(TiersimMemtis, DemotesColdPagesBeforeWarmOnes) {
  MemtisParams params;
  params.adaptationPeriodSamples = 1;
  params.coolingPeriodSamples = 1'000'000;
  params.minFreeBytes = 0;
  // Fast tier full: pages 5-9 (bin 3) and 20-24 (bin 1). Hot threshold 4, so bin 3 is the warm
  // band; the five hot pages 0-4 need room.
  World world(100, 0, 10);
  for (PageId p = 0; p < 100; ++p) world.tierOf[p] = ((p >= 5 && p < 10) || (p >= 20 && p < 25)) ? 0 : 1;
  world.tiers[0].usedPages = 10;
  world.tiers[1].usedPages = 90;
  auto memtis = makeMemtisPolicy(params);
  memtis->init(world.regions, 100, world.tiers, nullptr);
  sampleSkewed(*memtis);
  ASSERT_EQ(memtisHotThreshold(*memtis), 4);
  const auto moves = world.epoch(*memtis, 0);
  std::vector<PageId> demoted;
  for (const auto& m : moves) {
    if (m.to == 1) demoted.push_back(m.page);
  }
  std::sort(demoted.begin(), demoted.end());
  EXPECT_EQ(demoted, (std::vector<PageId>{20, 21, 22, 23, 24}));
  for (PageId p = 0; p < 5; ++p) EXPECT_TRUE(promotes(moves, p)) << p;
}

// ---- AutoTM static, first-touch, all-DRAM --------------------------------------------------------

TEST(TiersimAutoTm, PlacesTheLargestSavingsInTheFastTier) {
  std::vector<SimAccess> accesses;
  uint64_t t = 0;
  for (int i = 0; i < 10; ++i) accesses.push_back(SimAccess{t++, 0, 64, false});
  accesses.push_back(SimAccess{t++, 1, 64, false});
  for (int i = 0; i < 5; ++i) accesses.push_back(SimAccess{t++, 2, 64, true});
  const Trace trace = oneStepTrace(3, 1000, accesses);
  for (const auto& [capacity, fastPages] :
       {std::pair<uint64_t, std::vector<PageId>>{1, {0}}, {2, {0, 2}}}) {
    auto autotm = makeAutoTmStaticPolicy(64);
    std::vector<TierInfo> tiers(2);
    tiers[0] = TierInfo{capacity, 0, 81, 86, 100, 80};
    tiers[1] = TierInfo{3, 0, 305, 94, 39.6, 13.8};
    autotm->init(trace.regions, 3, tiers, &trace.accesses);
    for (PageId p = 0; p < 3; ++p) {
      const bool fast = std::find(fastPages.begin(), fastPages.end(), p) != fastPages.end();
      EXPECT_EQ(autotm->firstTouchTier(p, tiers), fast ? 0 : 1) << "capacity " << capacity << " page " << p;
    }
  }
}

TEST(TiersimFirstTouch, NeverMigrates) {
  ModelTraceOptions options;
  options.steps = 3;
  options.scaleDivisor = 64;
  auto trace = generateModelTrace("bert-base", options);
  ASSERT_TRUE(trace.ok());
  SweepOptions sweep;
  const auto* entry = findPolicy("first-touch");
  ASSERT_NE(entry, nullptr);
  auto config = makeSimConfig(sweep, *trace, 0.2, *entry);
  ASSERT_TRUE(config.ok());
  auto policy = entry->make(PolicyContext{});
  auto result = simulate(*trace, *policy, *config, false);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->promotedPages + result->demotedPages, 0U);
  for (const auto& step : result->steps) EXPECT_EQ(step.migratedBytes, 0U);
  EXPECT_GT(result->fastHitFraction, 0.0);
  EXPECT_LT(result->fastHitFraction, 1.0);
}

TEST(TiersimAllDram, IsTheBoundForEveryPolicy) {
  ModelTraceOptions options;
  options.steps = 3;
  options.scaleDivisor = 64;
  auto trace = generateModelTrace("vgg16", options);
  ASSERT_TRUE(trace.ok());
  SweepOptions sweep;
  sweep.warmupSteps = 1;
  double bound = 0;
  for (const auto& entry : policyRegistry()) {
    auto config = makeSimConfig(sweep, *trace, 0.2, entry);
    ASSERT_TRUE(config.ok());
    auto policy = entry.make(makePolicyContext(*trace, *config));
    auto result = simulate(*trace, *policy, *config, entry.offline);
    ASSERT_TRUE(result.ok()) << entry.name;
    if (entry.name == "all-dram") {
      bound = result->meanStepNs;
      EXPECT_DOUBLE_EQ(result->fastHitFraction, 1.0);
      continue;
    }
    ASSERT_GT(bound, 0) << "all-dram is registered first";
    EXPECT_GE(result->meanStepNs, bound) << entry.name << " beat infinite DRAM";
  }
}

}  // namespace
}  // namespace tt::tiersim
