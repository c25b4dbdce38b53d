#include "policy/Planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "fakes/policy/FakePlacement.h"
#include "heat/HeatModel.h"

namespace {

using tt::MigrationPlan;
using tt::fakes::FakePlacement;
using tt::heat::HeatSnapshot;
using tt::heat::UnitHeat;
using tt::policy::PlanContext;
using tt::policy::Planner;

constexpr uint64_t kPage = tt::kBasePageSize;
constexpr uint64_t kChunkPages = 16;
constexpr uint64_t kChunk = kChunkPages * kPage;
constexpr pid_t kTgid = 42;
constexpr uint64_t kMs = 1'000'000;

tensortier::v1::PolicyConfig plannerConfig() {
  tensortier::v1::PolicyConfig c;
  c.set_chunk_pages(kChunkPages);
  c.set_fast_reserve_fraction(0);
  c.set_initial_migration_bandwidth(100'000'000'000ULL);  // effectively unlimited unless a test says
  return c;
}

// The engine copying as fast both ways.
tt::MigrationRates bothWays(double bytesPerSec) { return {bytesPerSec, bytesPerSec}; }

// Plans every 10 ms, each sized to exactly what the engine moves in that interval.
tensortier::v1::PolicyConfig tenMsPlansAtEngineRate() {
  auto c = plannerConfig();
  c.set_plan_interval_ms(10);
  c.set_plan_bandwidth_factor(1.0);
  return c;
}

UnitHeat unit(pid_t tgid, uint64_t start, uint64_t length, double accessesPerPage, uint64_t regionId = 0) {
  UnitHeat u;
  u.tgid = tgid;
  u.start = start;
  u.length = length;
  u.regionId = regionId;
  u.expectedAccessesPerPage = accessesPerPage;
  return u;
}

// `count` one-chunk units 4 chunks apart (not adjacent), values 10, 20, ..., all on the slow node.
HeatSnapshot spreadUnits(FakePlacement& placement, pid_t tgid, size_t count, uint64_t base, double scale = 1) {
  HeatSnapshot snap;
  for (size_t i = 0; i < count; ++i) {
    const uint64_t start = base + i * 4 * kChunk;
    snap.units.push_back(unit(tgid, start, kChunk, scale * 10.0 * static_cast<double>(i + 1)));
    placement.map(tgid, start, kChunk, 1);
  }
  return snap;
}

bool isFastUnit(const FakePlacement& p, pid_t tgid, uint64_t start) {
  for (uint64_t a = start; a < start + kChunk; a += kPage)
    if (p.nodeOf(tgid, a) != 0) return false;
  return true;
}

TEST(Planner, GlobalBudgetIsNeverExceededAndHoldsTheHottest) {
  Planner planner(plannerConfig());
  FakePlacement placement;
  const auto topo = tt::fakes::twoNodeTopology();
  HeatSnapshot snap = spreadUnits(placement, kTgid, 20, 0x1000000);
  PlanContext ctx;
  ctx.fastCapacityBytes = 5 * kChunk;
  for (int round = 0; round < 3; ++round) {
    placement.apply(planner.plan(snap, placement, topo, ctx));
    EXPECT_LE(placement.fastBytes(), 5 * kChunk);
    EXPECT_LE(planner.lastStats().selectedBytes, 5 * kChunk);
  }
  EXPECT_EQ(placement.fastBytes(), 5 * kChunk);
  for (size_t i = 15; i < 20; ++i) EXPECT_TRUE(isFastUnit(placement, kTgid, snap.units[i].start)) << i;
}

TEST(Planner, PerProcessQuotasAreEnforced) {
  auto config = plannerConfig();
  config.set_per_process_quota_bytes(3 * kChunk);
  Planner planner(config);
  FakePlacement placement;
  const auto topo = tt::fakes::twoNodeTopology();
  HeatSnapshot snap = spreadUnits(placement, 1, 10, 0x1000000, 10.0);  // process 1 is much hotter
  HeatSnapshot other = spreadUnits(placement, 2, 10, 0x1000000, 1.0);
  snap.units.insert(snap.units.end(), other.units.begin(), other.units.end());
  PlanContext ctx;
  ctx.fastCapacityBytes = 8 * kChunk;
  ctx.processes.push_back({2, -1, 2 * kChunk});  // a tighter quota for process 2
  for (int round = 0; round < 3; ++round) placement.apply(planner.plan(snap, placement, topo, ctx));
  EXPECT_EQ(placement.fastBytes(1), 3 * kChunk);
  EXPECT_EQ(placement.fastBytes(2), 2 * kChunk);
}

TEST(Planner, DemotionsMakeRoomAndComeFirst) {
  Planner planner(plannerConfig());
  FakePlacement placement;
  const auto topo = tt::fakes::twoNodeTopology();
  HeatSnapshot snap;
  for (uint64_t i = 0; i < 4; ++i) {  // cold units filling the fast tier
    snap.units.push_back(unit(kTgid, 0x1000000 + i * 4 * kChunk, kChunk, 0.0));
    placement.map(kTgid, 0x1000000 + i * 4 * kChunk, kChunk, 0);
  }
  snap.units.push_back(unit(kTgid, 0x9000000, kChunk, 1000.0));
  placement.map(kTgid, 0x9000000, kChunk, 1);
  PlanContext ctx;
  ctx.fastCapacityBytes = 4 * kChunk;
  const MigrationPlan plan = planner.plan(snap, placement, topo, ctx);
  ASSERT_GE(plan.moves.size(), 2u);
  EXPECT_EQ(plan.moves.front().targetNode, 1);  // a demotion first
  EXPECT_EQ(plan.moves.back().targetNode, 0);
  EXPECT_EQ(plan.moves.back().start, 0x9000000u);
  EXPECT_GT(plan.moves.front().priority, plan.moves.back().priority);
  placement.apply(plan);
  EXPECT_LE(placement.fastBytes(), 4 * kChunk);
  EXPECT_TRUE(isFastUnit(placement, kTgid, 0x9000000));
}

// A phase swap: the fast tier is full of a tensor the next phase does not use, and the plan can
// promote only part of the next phase's. It frees room for those promotions first, then promotes,
// and only then frees headroom for the next plans: the next phase's pages must not wait behind
// pages nobody needs gone yet.
TEST(Planner, HeadroomDemotionsComeAfterThePromotions) {
  Planner planner(tenMsPlansAtEngineRate());
  FakePlacement placement;
  const auto topo = tt::fakes::twoNodeTopology();
  HeatSnapshot snap;
  // The last phase's tensor, idle now, filling the fast tier: blocks side by side, which a run
  // must not merge across the promotions.
  for (uint64_t i = 0; i < 6; ++i) snap.units.push_back(unit(kTgid, 0x1000000 + i * kChunk, kChunk, 0.0));
  placement.map(kTgid, 0x1000000, 6 * kChunk, 0);
  for (uint64_t i = 0; i < 4; ++i) {  // the next phase's, hot, on the slow tier
    snap.units.push_back(unit(kTgid, 0x9000000 + i * 4 * kChunk, kChunk, 100000.0));
    placement.map(kTgid, 0x9000000 + i * 4 * kChunk, kChunk, 1);
  }
  PlanContext ctx;
  ctx.fastCapacityBytes = 6 * kChunk;
  // Five chunks per 10 ms interval: two promotions and the two demotions they need, and one
  // chunk of headroom.
  ctx.migration = bothWays(5.0 * kChunk / 0.010);
  const MigrationPlan plan = planner.plan(snap, placement, topo, ctx);
  const auto& st = planner.lastStats();
  ASSERT_EQ(st.promoteBytes, 2 * kChunk);
  ASSERT_EQ(st.headroomDemoteBytes, kChunk);
  ASSERT_LT(st.headroomDemoteBytes, st.demoteBytes);
  // The moves in order: demotions worth the promotions' room, the promotions, the headroom.
  size_t k = 0;
  uint64_t freedFirst = 0, promoted = 0, freedLast = 0;
  for (; k < plan.moves.size() && plan.moves[k].targetNode == 1; ++k) freedFirst += plan.moves[k].length;
  for (; k < plan.moves.size() && plan.moves[k].targetNode == 0; ++k) promoted += plan.moves[k].length;
  for (; k < plan.moves.size() && plan.moves[k].targetNode == 1; ++k) freedLast += plan.moves[k].length;
  EXPECT_EQ(k, plan.moves.size()) << "demotions, promotions, demotions: nothing else, in that order";
  EXPECT_EQ(freedFirst, st.demoteBytes - st.headroomDemoteBytes);
  EXPECT_GE(freedFirst, promoted - (ctx.fastCapacityBytes - placement.fastBytes()));
  EXPECT_EQ(promoted, st.promoteBytes);
  EXPECT_EQ(freedLast, st.headroomDemoteBytes);
  for (size_t i = 1; i < plan.moves.size(); ++i) EXPECT_GT(plan.moves[i - 1].priority, plan.moves[i].priority) << i;
  placement.apply(plan);
  EXPECT_LE(placement.fastBytes(), 6 * kChunk);
  for (uint64_t i = 0; i < 2; ++i) EXPECT_TRUE(isFastUnit(placement, kTgid, 0x9000000 + i * 4 * kChunk)) << i;
}

TEST(Planner, HysteresisPreventsPingPongOnNoise) {
  // Two equally hot tensors, room for one; their measured heat alternates +-5% every epoch.
  auto run = [](double margin, double costWeight) {
    auto config = plannerConfig();
    config.set_hysteresis_margin(margin);
    config.set_migration_cost_weight(costWeight);
    Planner planner(config);
    FakePlacement placement;
    const auto topo = tt::fakes::twoNodeTopology();
    placement.map(kTgid, 0x1000000, kChunk, 1);
    placement.map(kTgid, 0x2000000, kChunk, 1);
    PlanContext ctx;
    ctx.fastCapacityBytes = kChunk;
    int moves = 0;
    for (int e = 0; e < 40; ++e) {
      const double noise = (e % 2 == 0) ? 0.05 : -0.05;
      HeatSnapshot snap;
      snap.units.push_back(unit(kTgid, 0x1000000, kChunk, 100 * (1 + noise)));
      snap.units.push_back(unit(kTgid, 0x2000000, kChunk, 100 * (1 - noise)));
      const MigrationPlan plan = planner.plan(snap, placement, topo, ctx);
      if (e > 0) moves += static_cast<int>(plan.moves.size());
      placement.apply(plan);
      EXPECT_LE(placement.fastBytes(), kChunk);
    }
    return moves;
  };
  EXPECT_EQ(run(0.25, 0.0), 0);  // the margin alone holds the resident
  EXPECT_EQ(run(0.25, 0.5), 0);
  EXPECT_GT(run(0.0, 0.0), 20);  // without it the same input ping-pongs: the test can tell
}

// Each region's blocks go as one run, cut only by max_run_bytes; adjacent regions stay separate runs
// that name their region, so the engine can hand each to its client's mbind (the engine merges
// runs of one region only, too).
TEST(Planner, EmitsMaximalContiguousRunsPerRegion) {
  Planner planner(plannerConfig());
  FakePlacement placement;
  const auto topo = tt::fakes::twoNodeTopology();
  HeatSnapshot snap;
  // A 64-chunk hot tensor and two adjacent 4-chunk tensors right after it, all on the slow node.
  snap.units.push_back(unit(kTgid, 0x10000000, 64 * kChunk, 50.0, 1));
  snap.units.push_back(unit(kTgid, 0x10000000 + 64 * kChunk, 4 * kChunk, 50.0, 2));
  snap.units.push_back(unit(kTgid, 0x10000000 + 68 * kChunk, 4 * kChunk, 50.0, 3));
  placement.map(kTgid, 0x10000000, 72 * kChunk, 1);
  PlanContext ctx;
  ctx.fastCapacityBytes = 100 * kChunk;
  const MigrationPlan plan = planner.plan(snap, placement, topo, ctx);
  ASSERT_EQ(plan.moves.size(), 3u);
  std::vector<tt::MoveRequest> runs = plan.moves;
  std::sort(runs.begin(), runs.end(), [](const tt::MoveRequest& a, const tt::MoveRequest& b) { return a.start < b.start; });
  EXPECT_EQ(runs[0].start, 0x10000000u);
  EXPECT_EQ(runs[0].length, 64 * kChunk);
  EXPECT_EQ(runs[0].regionId, 1u);
  EXPECT_EQ(runs[1].start, 0x10000000u + 64 * kChunk);
  EXPECT_EQ(runs[1].length, 4 * kChunk);
  EXPECT_EQ(runs[1].regionId, 2u);
  EXPECT_EQ(runs[2].start, 0x10000000u + 68 * kChunk);
  EXPECT_EQ(runs[2].length, 4 * kChunk);
  EXPECT_EQ(runs[2].regionId, 3u);
  for (const auto& m : runs) EXPECT_EQ(m.targetNode, 0);

  auto config = plannerConfig();
  config.set_max_run_bytes(16 * kChunk);
  Planner limited(config);
  const MigrationPlan split = limited.plan(snap, placement, topo, ctx);
  ASSERT_EQ(split.moves.size(), 6u);  // 64 chunks in four runs of 16, and the two 4-chunk regions
  uint64_t covered = 0;
  for (const auto& m : split.moves) {
    EXPECT_LE(m.length, 16 * kChunk);
    covered += m.length;
  }
  EXPECT_EQ(covered, 72 * kChunk);
}

TEST(Planner, PromotionsPerPlanAreCappedByMigrationBandwidth) {
  Planner planner(tenMsPlansAtEngineRate());
  FakePlacement placement;
  const auto topo = tt::fakes::twoNodeTopology();
  // Hot enough that even at this bandwidth every promotion pays for its copy.
  HeatSnapshot snap = spreadUnits(placement, kTgid, 20, 0x1000000, 1000.0);
  PlanContext ctx;
  ctx.fastCapacityBytes = 100 * kChunk;
  ctx.migration = bothWays(4.0 * kChunk / 0.010);  // four chunks per 10 ms interval
  int plans = 0;
  while (placement.fastBytes() < 20 * kChunk && plans < 20) {
    placement.apply(planner.plan(snap, placement, topo, ctx));
    EXPECT_LE(planner.lastStats().promoteBytes, 4 * kChunk);
    ++plans;
  }
  EXPECT_EQ(plans, 5);
  // The hottest went first.
  EXPECT_EQ(placement.fastBytes(), 20 * kChunk);
}

// What one plan copied: its promoted and demoted bytes (PlanStats) and its moves' lengths summed.
struct PlanCopy {
  uint64_t promoted = 0;
  uint64_t demoted = 0;
  uint64_t moved = 0;
};

// Eight hot chunks on the slow tier and four idle ones on a fast tier of six chunks (room for two
// more), planned every 10 ms at `rates` until nothing moves: the first plan fills the room and
// swaps, the later ones only swap. Checks that the fast tier never holds more than its six chunks
// and that six hot chunks end there.
std::vector<PlanCopy> plansOfTheSwap(const tt::MigrationRates& rates) {
  Planner planner(tenMsPlansAtEngineRate());
  FakePlacement placement;
  const auto topo = tt::fakes::twoNodeTopology();
  HeatSnapshot snap = spreadUnits(placement, kTgid, 8, 0x1000000, 1000.0);
  for (uint64_t i = 0; i < 4; ++i) {
    snap.units.push_back(unit(kTgid, 0x9000000 + i * 4 * kChunk, kChunk, 0.0));
    placement.map(kTgid, 0x9000000 + i * 4 * kChunk, kChunk, 0);
  }
  PlanContext ctx;
  ctx.fastCapacityBytes = 6 * kChunk;
  ctx.migration = rates;
  std::vector<PlanCopy> plans;
  for (int k = 0; k < 20; ++k) {
    const MigrationPlan plan = planner.plan(snap, placement, topo, ctx);
    if (plan.moves.empty()) break;
    PlanCopy c{planner.lastStats().promoteBytes, planner.lastStats().demoteBytes, 0};
    for (const auto& m : plan.moves) c.moved += m.length;
    plans.push_back(c);
    placement.apply(plan);
    EXPECT_LE(placement.fastBytes(), 6 * kChunk);
  }
  for (size_t i = 2; i < 8; ++i) EXPECT_TRUE(isFastUnit(placement, kTgid, snap.units[i].start)) << "hot unit " << i;
  return plans;
}

// A swap copies twice: each page promoted into a full fast tier needs a page demoted. A plan
// copies no more than the engine moves in its interval, promotions and the demotions they need
// together: into free room first, then half and half.
TEST(Planner, APlanCopiesNoMoreThanAnIntervalPromotionsAndTheirRoomTogether) {
  const auto plans = plansOfTheSwap(bothWays(4.0 * kChunk / 0.010));  // four chunks per 10 ms interval
  std::vector<uint64_t> promoted;
  for (size_t i = 0; i < plans.size(); ++i) {
    EXPECT_EQ(plans[i].moved, plans[i].promoted + plans[i].demoted) << "plan " << i;
    EXPECT_LE(plans[i].moved, 4 * kChunk) << "plan " << i;
    promoted.push_back(plans[i].promoted);
  }
  // Two chunks into the free room and one swap, then two swaps, then the last one.
  EXPECT_EQ(promoted, (std::vector<uint64_t>{3 * kChunk, 2 * kChunk, kChunk}));
}

// Demotions at half the promotion rate (the slow tier's writes the bottleneck, or a lower
// demote_mbps): a demoted byte takes the copy time of two promoted ones, so a swap plan promotes
// less than at equal rates, and no plan's copying, each way at its own rate, passes the interval.
TEST(Planner, DemotionsAreChargedTheCopyTimeOfTheirOwnRate) {
  const double rate = 4.0 * kChunk / 0.010;  // four chunks promoted per 10 ms interval
  const auto equal = plansOfTheSwap(bothWays(rate));
  const auto slowOut = plansOfTheSwap({rate, rate / 2});
  ASSERT_FALSE(equal.empty());
  ASSERT_FALSE(slowOut.empty());
  // First plans: at equal rates two chunks into the free room and one swap (4 chunks copied); with
  // demotions at half speed the swap would take 1 + 2 chunks' time, so the first plan promotes two
  // and spends the rest of the interval on one chunk of headroom (2 chunks' time).
  EXPECT_EQ(equal.front().promoted, 3 * kChunk);
  EXPECT_EQ(equal.front().demoted, kChunk);
  EXPECT_EQ(slowOut.front().promoted, 2 * kChunk);
  EXPECT_EQ(slowOut.front().demoted, kChunk);
  for (size_t i = 0; i < slowOut.size(); ++i) {
    const double seconds =
        static_cast<double>(slowOut[i].promoted) / rate + static_cast<double>(slowOut[i].demoted) / (rate / 2);
    EXPECT_LE(seconds, 0.010 * (1 + 1e-9)) << "plan " << i << ": " << slowOut[i].promoted / kChunk << " chunks in, "
                                           << slowOut[i].demoted / kChunk << " out";
  }
  EXPECT_GT(slowOut.size(), equal.size()) << "the same swaps over more plans";
}

TEST(Planner, TargetNodesAreTheNearestOfEachTier) {
  auto config = plannerConfig();
  config.set_fast_budget_bytes(kChunk);  // one of the two nodes' chunks
  Planner planner(config);
  FakePlacement placement;
  placement.setFastNodes({0, 1});
  const auto topo = tt::fakes::twoSocketTopology(kChunk);
  HeatSnapshot snap;
  snap.units.push_back(unit(kTgid, 0x1000000, kChunk, 100.0));
  snap.units.push_back(unit(kTgid, 0x2000000, kChunk, 0.0));
  placement.map(kTgid, 0x1000000, kChunk, 3);
  placement.map(kTgid, 0x2000000, kChunk, 1);
  PlanContext ctx;
  ctx.processes.push_back({kTgid, 1, 0});  // runs on socket 1
  const MigrationPlan plan = planner.plan(snap, placement, topo, ctx);
  ASSERT_EQ(plan.moves.size(), 2u);
  EXPECT_EQ(plan.moves[0].start, 0x2000000u);
  EXPECT_EQ(plan.moves[0].targetNode, 3);  // socket 1's slow node
  EXPECT_EQ(plan.moves[1].start, 0x1000000u);
  EXPECT_EQ(plan.moves[1].targetNode, 1);  // socket 1's DRAM
}

// Two sockets of 4 chunks of DRAM each, and a process on socket 1 whose 8 hot chunks start on
// socket 1's slow node: the global budget takes all 8, but socket 1 holds only 4. The rest goes
// to socket 0's DRAM, and neither node is ever sent more than it holds.
TEST(Planner, EachFastNodeIsFilledOnlyToItsShareAndTheRestSpillsToTheNextNearest) {
  Planner planner(plannerConfig());
  FakePlacement placement;
  placement.setFastNodes({0, 1});
  const auto topo = tt::fakes::twoSocketTopology(4 * kChunk);
  HeatSnapshot snap = spreadUnits(placement, kTgid, 8, 0x1000000);
  for (const auto& u : snap.units) placement.map(kTgid, u.start, u.length, 3);
  PlanContext ctx;
  ctx.processes.push_back({kTgid, 1, 0});
  for (int round = 0; round < 3; ++round) {
    const MigrationPlan plan = planner.plan(snap, placement, topo, ctx);
    uint64_t sent[4] = {0, 0, 0, 0};
    for (const auto& m : plan.moves) sent[m.targetNode] += m.length;
    EXPECT_LE(placement.bytesOn(0) + sent[0], 4 * kChunk) << "round " << round;
    EXPECT_LE(placement.bytesOn(1) + sent[1], 4 * kChunk) << "round " << round;
    placement.apply(plan);
    for (const auto& st : planner.lastStats().nodes) EXPECT_EQ(st.budgetBytes, 4 * kChunk) << "node " << st.node;
  }
  EXPECT_EQ(placement.bytesOn(1), 4 * kChunk);
  EXPECT_EQ(placement.bytesOn(0), 4 * kChunk);
  EXPECT_EQ(placement.bytesOn(3), 0u);
  // The hottest stay nearest the process: socket 1 holds the four hottest chunks.
  for (size_t i = 4; i < 8; ++i) EXPECT_EQ(placement.nodeOf(kTgid, snap.units[i].start), 1) << "unit " << i;
}

// The selection does not know the fast nodes' shares: what it keeps on a node can stay over the
// node's share, and no plan frees (or copies) that excess. It must not take the plan's interval
// from the promotions that go to another node.
TEST(Planner, PagesKeptOverANodesShareDoNotTakeTheIntervalFromPromotionsToAnotherNode) {
  Planner planner(tenMsPlansAtEngineRate());
  FakePlacement placement;
  placement.setFastNodes({0, 1});
  const auto topo = tt::fakes::twoSocketTopology(4 * kChunk);
  HeatSnapshot snap = spreadUnits(placement, kTgid, 8, 0x1000000, 1000.0);  // first touched on socket 1's DRAM
  for (size_t i = 6; i < 8; ++i) placement.map(kTgid, snap.units[i].start, kChunk, 3);  // two on its slow node
  PlanContext ctx;
  ctx.processes.push_back({kTgid, 1, 0});
  ctx.migration = bothWays(2.0 * kChunk / 0.010);  // two chunks per 10 ms interval
  const MigrationPlan plan = planner.plan(snap, placement, topo, ctx);
  const auto& st = planner.lastStats();
  EXPECT_EQ(st.selectedBytes, 8 * kChunk);
  EXPECT_EQ(st.promoteBytes, 2 * kChunk) << "node 1's two chunks over its share are not room to free";
  EXPECT_EQ(st.demoteBytes, 0u);
  for (const auto& m : plan.moves) EXPECT_EQ(m.targetNode, 0) << "socket 1's DRAM has no room left";
}

// Room for a chunk and a half on each socket, three hot chunks: the hottest goes whole to
// socket 1, the next whole to socket 0 (socket 1 has half a chunk left), and the third, which
// neither has room for whole, is split between the two halves that are left.
TEST(Planner, ABlockIsSplitBetweenFastNodesWhenNeitherHasRoomForAllOfIt) {
  Planner planner(plannerConfig());
  FakePlacement placement;
  placement.setFastNodes({0, 1});
  const auto topo = tt::fakes::twoSocketTopology(kChunk + kChunk / 2);
  HeatSnapshot snap = spreadUnits(placement, kTgid, 3, 0x1000000);
  for (const auto& u : snap.units) placement.map(kTgid, u.start, u.length, 3);
  PlanContext ctx;
  ctx.processes.push_back({kTgid, 1, 0});
  const MigrationPlan plan = planner.plan(snap, placement, topo, ctx);
  placement.apply(plan);
  EXPECT_EQ(placement.bytesOn(1), kChunk + kChunk / 2);
  EXPECT_EQ(placement.bytesOn(0), kChunk + kChunk / 2);
  EXPECT_EQ(placement.bytesOn(3), 0u);
  EXPECT_EQ(planner.lastStats().deferredPromoteBytes, 0u);
  EXPECT_EQ(placement.nodeOf(kTgid, snap.units[2].start), 1) << "the hottest is nearest";
  for (const auto& m : plan.moves) EXPECT_TRUE(m.betweenTiers);
}

// A block half on socket 0's DRAM and half on slow memory, of a process on socket 1: its slow
// half goes to socket 1, and its fast half stays on socket 0 (the moves are between tiers: the
// engine leaves pages already in DRAM where they are). Socket 1 is charged the slow half only.
TEST(Planner, APartlyFastBlockOnlySendsItsSlowPages) {
  Planner planner(plannerConfig());
  FakePlacement placement;
  placement.setFastNodes({0, 1});
  const auto topo = tt::fakes::twoSocketTopology(kChunk);
  HeatSnapshot snap;
  snap.units.push_back(unit(kTgid, 0x1000000, kChunk, 100.0));
  placement.map(kTgid, 0x1000000, kChunk / 2, 0);
  placement.map(kTgid, 0x1000000 + kChunk / 2, kChunk / 2, 3);
  PlanContext ctx;
  ctx.processes.push_back({kTgid, 1, 0});
  const MigrationPlan plan = planner.plan(snap, placement, topo, ctx);
  ASSERT_FALSE(plan.moves.empty());
  for (const auto& m : plan.moves) {
    EXPECT_EQ(m.targetNode, 1);
    EXPECT_TRUE(m.betweenTiers) << "a between-tier move: the fast half must stay on node 0";
  }
  bool node1Charged = false;
  for (const auto& n : planner.lastStats().nodes)
    if (n.node == 1) {
      node1Charged = true;
      EXPECT_EQ(n.promoteBytes, kChunk / 2);
    }
  EXPECT_TRUE(node1Charged);
}

// When the nearest node's room is held by a colder block, that block is demoted from the node
// the promotion needs, not from the other one.
TEST(Planner, DemotionsFreeRoomOnTheFastNodeThePromotionsGoTo) {
  Planner planner(plannerConfig());
  FakePlacement placement;
  placement.setFastNodes({0, 1});
  const auto topo = tt::fakes::twoSocketTopology(kChunk);
  HeatSnapshot snap;
  snap.units.push_back(unit(kTgid, 0x1000000, kChunk, 50.0));   // on socket 0, warm
  snap.units.push_back(unit(kTgid, 0x2000000, kChunk, 1.0));    // on socket 1, cold
  snap.units.push_back(unit(kTgid, 0x3000000, kChunk, 500.0));  // slow, hot
  placement.map(kTgid, 0x1000000, kChunk, 0);
  placement.map(kTgid, 0x2000000, kChunk, 1);
  placement.map(kTgid, 0x3000000, kChunk, 3);
  PlanContext ctx;
  ctx.processes.push_back({kTgid, 0, 0});  // runs on socket 0, whose DRAM is full of warm data
  const MigrationPlan plan = planner.plan(snap, placement, topo, ctx);
  placement.apply(plan);
  EXPECT_EQ(placement.nodeOf(kTgid, 0x1000000), 0);  // the warm chunk keeps its place
  EXPECT_EQ(placement.nodeOf(kTgid, 0x3000000), 1);  // the hot one takes the cold one's node
  EXPECT_EQ(placement.nodeOf(kTgid, 0x2000000), 2);  // demoted to its process's nearest slow node
}

TEST(Planner, UntieredTopologyPlansNothing) {
  Planner planner(plannerConfig());
  FakePlacement placement;
  auto topo = tt::fakes::twoNodeTopology();
  topo.nodes[1].tier = tt::topology::Tier::Fast;
  HeatSnapshot snap = spreadUnits(placement, kTgid, 3, 0x1000000);
  const MigrationPlan plan = planner.plan(snap, placement, topo, PlanContext{});
  EXPECT_TRUE(plan.moves.empty());
  EXPECT_FALSE(planner.lastStats().tiered);
  const uint64_t first = plan.generation;
  EXPECT_GT(planner.plan(snap, placement, topo, PlanContext{}).generation, first);
}

TEST(Planner, LookaheadPromotesTheNextPhaseBeforeItStarts) {
  // Heat model + planner + a fake page table, as the daemon's epoch loop runs them. Two tensors of
  // 64 pages used in alternation (A in the first half of each 100 ms step, B in the second); the
  // fast tier holds one. After a few steps, B must be fast before its phase begins, every step.
  tensortier::v1::PolicyConfig config = plannerConfig();
  config.set_schedule_buckets(10);
  config.set_heat_half_life_ms(500);
  config.set_lookahead_step_fraction(0.1);
  tt::heat::HeatModel heat(config);
  Planner planner(config);
  FakePlacement placement;
  const auto topo = tt::fakes::twoNodeTopology();
  constexpr uint64_t kA = 0x10000000, kB = 0x20000000, kPages = 64;
  for (uint64_t id : {1, 2}) {
    tt::RegionInfo r;
    r.id = id;
    r.tgid = kTgid;
    r.start = id == 1 ? kA : kB;
    r.length = kPages * kPage;
    ASSERT_TRUE(heat.addRegion(r).ok());
    placement.map(kTgid, r.start, r.length, 1);
  }
  PlanContext ctx;
  ctx.fastCapacityBytes = kPages * kPage;
  ctx.migration = bothWays(100e6);  // a whole tensor in 2.6 ms
  heat.setMigrationRates(ctx.migration);
  std::mt19937_64 rng(4);
  std::uniform_int_distribution<uint64_t> page(0, kPages - 1);
  const uint64_t t0 = 1000 * kMs;
  int checked = 0, readyOnTime = 0;
  for (uint64_t t = t0; t < t0 + 30 * 100 * kMs; t += kMs) {
    const uint64_t offset = (t - t0) % (100 * kMs);
    const uint64_t step = (t - t0) / (100 * kMs);
    if (offset == 0) {
      tt::IterationMark m;
      m.tgid = kTgid;
      m.type = tt::MarkType::StepBegin;
      m.step = step;
      m.timestampNs = t;
      heat.onMark(m);
    }
    const uint64_t base = offset < 50 * kMs ? kA : kB;
    if (step >= 10 && (offset == 0 || offset == 50 * kMs)) {
      ++checked;
      if (placement.residency(kTgid, base, kPages * kPage).fastPages == kPages) ++readyOnTime;
    }
    std::vector<tt::AccessEvidence> batch;
    for (int i = 0; i < 4; ++i) {
      tt::AccessEvidence e;
      e.tgid = kTgid;
      e.page = base + page(rng) * kPage;
      batch.push_back(e);
    }
    heat.ingest(batch, t, 1000.0);  // a sampler that keeps 1 access in 1000
    if ((offset + kMs) % (10 * kMs) == 0) {
      heat.advanceEpoch(t + kMs);
      placement.apply(planner.plan(heat.snapshot(), placement, topo, ctx));
      ASSERT_LE(placement.fastBytes(), kPages * kPage);
    }
  }
  EXPECT_EQ(checked, 40);
  EXPECT_EQ(readyOnTime, checked);
}

TEST(Planner, PageSamplesAloneArePlannedAsContiguousRuns) {
  // No regions, no marks: samples over 8 adjacent chunks (and one far away) form chunk units; the
  // planner promotes the adjacent ones as one run, not chunk by chunk or page by page.
  auto config = plannerConfig();
  tt::heat::HeatModel heat(config);
  Planner planner(config);
  FakePlacement placement;
  const auto topo = tt::fakes::twoNodeTopology();
  const uint64_t base = 0x40000000;
  placement.map(kTgid, base, 8 * kChunk, 1);
  placement.map(kTgid, 0x80000000, kChunk, 1);
  std::vector<tt::AccessEvidence> batch;
  for (uint64_t p = 0; p < 8 * kChunkPages; p += 3) {
    tt::AccessEvidence e;
    e.tgid = kTgid;
    e.page = base + p * kPage;
    e.weight = 500;
    batch.push_back(e);
  }
  tt::AccessEvidence far;
  far.tgid = kTgid;
  far.page = 0x80000000 + 5 * kPage;
  far.weight = 500;
  batch.push_back(far);
  heat.ingest(batch, 100 * kMs);
  heat.advanceEpoch(110 * kMs);
  ASSERT_EQ(heat.snapshot().units.size(), 9u);
  PlanContext ctx;
  ctx.fastCapacityBytes = 64 * kChunk;
  const MigrationPlan plan = planner.plan(heat.snapshot(), placement, topo, ctx);
  ASSERT_EQ(plan.moves.size(), 2u);
  EXPECT_EQ(plan.moves[0].start, base);
  EXPECT_EQ(plan.moves[0].length, 8 * kChunk);
  EXPECT_EQ(plan.moves[1].start, 0x80000000u);
  EXPECT_EQ(plan.moves[1].length, kChunk);
  for (const auto& m : plan.moves) EXPECT_EQ(m.targetNode, 0);
}

// Pins (PlanContext::pins, from tensortierctl migrate): the pinned ranges stay where they are and
// their fast pages use the budget; the rest is planned around them; without the pin they are
// planned again.
TEST(Planner, PinnedRangesStayPutAndCountAgainstTheBudget) {
  Planner planner(plannerConfig());
  FakePlacement placement;
  const auto topo = tt::fakes::twoNodeTopology();
  HeatSnapshot snap = spreadUnits(placement, kTgid, 20, 0x1000000);
  const auto& hottest = snap.units[19];
  const auto& coldest = snap.units[0];
  placement.map(kTgid, coldest.start, kChunk, 0);  // moved to the fast node by hand
  PlanContext ctx;
  ctx.fastCapacityBytes = 5 * kChunk;
  ctx.pins.push_back({kTgid, hottest.start, hottest.length});  // kept slow by hand
  ctx.pins.push_back({kTgid, coldest.start, coldest.length});
  ctx.pins.push_back({kTgid + 1, snap.units[18].start, kChunk});  // another process: no effect here
  for (int round = 0; round < 3; ++round) {
    const MigrationPlan plan = planner.plan(snap, placement, topo, ctx);
    for (const auto& m : plan.moves) {
      const bool touchesPin = (m.start < hottest.start + kChunk && hottest.start < m.start + m.length) ||
                              (m.start < coldest.start + kChunk && coldest.start < m.start + m.length);
      EXPECT_FALSE(touchesPin) << "plan moves a pinned range at " << std::hex << m.start;
    }
    placement.apply(plan);
    EXPECT_LE(placement.fastBytes(), 5 * kChunk);
  }
  EXPECT_FALSE(isFastUnit(placement, kTgid, hottest.start));
  EXPECT_TRUE(isFastUnit(placement, kTgid, coldest.start));
  // The pinned fast chunk takes one of the five: four more, the hottest unpinned ones.
  EXPECT_EQ(placement.fastBytes(), 5 * kChunk);
  for (size_t i = 15; i < 19; ++i) EXPECT_TRUE(isFastUnit(placement, kTgid, snap.units[i].start)) << i;
  EXPECT_FALSE(isFastUnit(placement, kTgid, snap.units[14].start));
  EXPECT_EQ(planner.lastStats().pinnedFastBytes, kChunk);
  EXPECT_EQ(planner.lastStats().pinnedBytes, 2 * kChunk);
  EXPECT_EQ(planner.lastStats().fastUsedBytes, 5 * kChunk);
  EXPECT_EQ(planner.lastStats().budgetBytes, 5 * kChunk);

  // Unpinned (or expired): planned by heat again.
  ctx.pins.clear();
  for (int round = 0; round < 3; ++round) placement.apply(planner.plan(snap, placement, topo, ctx));
  EXPECT_TRUE(isFastUnit(placement, kTgid, hottest.start));
  EXPECT_FALSE(isFastUnit(placement, kTgid, coldest.start));
  EXPECT_EQ(planner.lastStats().pinnedFastBytes, 0U);
}

TEST(Planner, PinnedFastPagesCountAgainstTheProcessQuota) {
  auto config = plannerConfig();
  config.set_per_process_quota_bytes(3 * kChunk);
  Planner planner(config);
  FakePlacement placement;
  const auto topo = tt::fakes::twoNodeTopology();
  HeatSnapshot snap = spreadUnits(placement, kTgid, 10, 0x1000000);
  for (size_t i = 0; i < 2; ++i) placement.map(kTgid, snap.units[i].start, kChunk, 0);  // cold, fast by hand
  PlanContext ctx;
  ctx.fastCapacityBytes = 100 * kChunk;
  for (size_t i = 0; i < 2; ++i) ctx.pins.push_back({kTgid, snap.units[i].start, kChunk});
  for (int round = 0; round < 3; ++round) placement.apply(planner.plan(snap, placement, topo, ctx));
  EXPECT_EQ(placement.fastBytes(kTgid), 3 * kChunk);  // two pinned + the hottest one
  EXPECT_TRUE(isFastUnit(placement, kTgid, snap.units[9].start));
  EXPECT_FALSE(isFastUnit(placement, kTgid, snap.units[8].start));

  // Pins over the whole quota: nothing else is promoted, nothing pinned demoted.
  placement.map(kTgid, snap.units[2].start, kChunk, 0);
  placement.map(kTgid, snap.units[9].start, kChunk, 1);
  ctx.pins.push_back({kTgid, snap.units[2].start, kChunk});
  for (int round = 0; round < 3; ++round) placement.apply(planner.plan(snap, placement, topo, ctx));
  EXPECT_EQ(placement.fastBytes(kTgid), 3 * kChunk);
  EXPECT_FALSE(isFastUnit(placement, kTgid, snap.units[9].start));
}

// Two pages of the coldest unit, on the fast node, cannot be demoted (the kernel has them pinned).
// Held (the engine reported them busy), they are charged to the budget: the other units fill only
// what is left, the plan never touches them, and the fast tier stays within its budget.
TEST(Planner, HeldStuckPagesStayWhereTheyAreAndCountAgainstTheBudget) {
  Planner planner(plannerConfig());
  FakePlacement placement;
  const auto topo = tt::fakes::twoNodeTopology();
  HeatSnapshot snap = spreadUnits(placement, kTgid, 20, 0x1000000);
  const uint64_t coldest = snap.units[0].start;
  placement.map(kTgid, coldest, kChunk, 0);
  placement.pin(kTgid, coldest + 3 * kPage);
  placement.pin(kTgid, coldest + 4 * kPage);
  PlanContext ctx;
  ctx.fastCapacityBytes = 5 * kChunk;
  // What the daemon did before: every plan demotes the unit and promotes a full budget's worth,
  // and the two pages stay: the fast tier ends over its budget.
  {
    Planner unaware(plannerConfig());
    FakePlacement p = placement;
    for (int round = 0; round < 3; ++round) p.apply(unaware.plan(snap, p, topo, ctx));
    EXPECT_EQ(p.fastBytes(), 5 * kChunk + 2 * kPage) << "the case this test is about did not arise";
  }
  ctx.stuck.push_back({kTgid, coldest + 3 * kPage, 2 * kPage, true, false});
  for (int round = 0; round < 3; ++round) {
    const MigrationPlan plan = planner.plan(snap, placement, topo, ctx);
    for (const auto& m : plan.moves)
      EXPECT_FALSE(m.start < coldest + 5 * kPage && coldest + 3 * kPage < m.start + m.length)
          << "a move touches the stuck pages: " << std::hex << m.start << "+" << m.length;
    placement.apply(plan);
    EXPECT_LE(placement.fastBytes(), 5 * kChunk) << "round " << round;
  }
  EXPECT_EQ(placement.nodeOf(kTgid, coldest + 3 * kPage), 0);
  // Room for four whole chunks beside the two pages: the four hottest (the rest of the budget,
  // 14 pages, holds what is left of the coldest unit, the only block that fits there).
  for (size_t i = 16; i < 20; ++i) EXPECT_TRUE(isFastUnit(placement, kTgid, snap.units[i].start)) << i;
  EXPECT_FALSE(isFastUnit(placement, kTgid, snap.units[15].start));
  EXPECT_EQ(planner.lastStats().pinnedFastBytes, 2 * kPage);
  EXPECT_EQ(planner.lastStats().fastUsedBytes, 5 * kChunk);
}

// Twenty units on the slow node but the four hottest; of the coldest, idle now, two pages that a
// demotion left on the fast node, stuck and due a retry (in ctx.stuck).
class PlannerAfterAFailedDemotion : public ::testing::Test {
 protected:
  PlannerAfterAFailedDemotion() {
    snap.units[0].expectedAccessesPerPage = 0;  // idle: not worth any room
    placement.map(kTgid, coldest + 3 * kPage, 2 * kPage, 0);
    for (size_t i = 16; i < 20; ++i) placement.map(kTgid, snap.units[i].start, kChunk, 0);
    ctx.stuck.push_back({kTgid, coldest + 3 * kPage, 2 * kPage, true, true});
  }

  Planner planner{plannerConfig()};
  FakePlacement placement;
  const tt::topology::Topology topo = tt::fakes::twoNodeTopology();
  PlanContext ctx;
  HeatSnapshot snap = spreadUnits(placement, kTgid, 20, 0x1000000);
  const uint64_t coldest = snap.units[0].start;
};

// Due a retry, the stuck pages are demoted again, but the plan sizes no promotion into their room:
// only once the demotion has succeeded does the next plan use it.
TEST_F(PlannerAfterAFailedDemotion, TheRetryFreesNoRoomUntilItHasSucceeded) {
  ctx.fastCapacityBytes = 5 * kChunk;
  placement.pin(kTgid, coldest + 3 * kPage);  // still pinned: the retry fails
  placement.pin(kTgid, coldest + 4 * kPage);
  MigrationPlan plan = planner.plan(snap, placement, topo, ctx);
  const bool retried = std::any_of(plan.moves.begin(), plan.moves.end(), [&](const tt::MoveRequest& m) {
    return m.targetNode == 1 && m.start <= coldest + 3 * kPage && coldest + 5 * kPage <= m.start + m.length;
  });
  EXPECT_TRUE(retried) << "the stuck pages' demotion was not retried";
  for (const auto& m : plan.moves)
    EXPECT_NE(m.start, snap.units[15].start) << "unit 15 promoted into room the retry may not free";
  placement.apply(plan);
  EXPECT_LE(placement.fastBytes(), 5 * kChunk);
  // The pages come free and the retry moves them: the next plan has the room.
  placement.pin(kTgid, coldest + 3 * kPage, false);
  placement.pin(kTgid, coldest + 4 * kPage, false);
  placement.apply(planner.plan(snap, placement, topo, ctx));
  ctx.stuck.clear();  // the engine reported the retry's run settled
  placement.apply(planner.plan(snap, placement, topo, ctx));
  EXPECT_TRUE(isFastUnit(placement, kTgid, snap.units[15].start));
  EXPECT_EQ(placement.fastBytes(), 5 * kChunk);
}

// A retried demotion of stuck pages frees no room this plan counts on (see above), so it goes after
// the plan's promotions: the hot unit's pages must not wait behind pages that may not move at all.
TEST_F(PlannerAfterAFailedDemotion, TheRetryComesAfterThePromotions) {
  ctx.fastCapacityBytes = 6 * kChunk;  // room for unit 15 beside the stuck pages
  const MigrationPlan plan = planner.plan(snap, placement, topo, ctx);
  const auto find = [&](int node, uint64_t start, uint64_t end) {
    return std::find_if(plan.moves.begin(), plan.moves.end(), [&](const tt::MoveRequest& m) {
      return m.targetNode == node && m.start <= start && end <= m.start + m.length;
    });
  };
  const auto promotion = find(0, snap.units[15].start, snap.units[15].start + kChunk);
  const auto retry = find(1, coldest + 3 * kPage, coldest + 5 * kPage);
  ASSERT_NE(promotion, plan.moves.end()) << "unit 15 was not promoted: the case this test is about did not arise";
  ASSERT_NE(retry, plan.moves.end()) << "the stuck pages' demotion was not retried";
  EXPECT_LT(promotion, retry) << "the retry comes before the promotion";
  EXPECT_GT(promotion->priority, retry->priority);
}

// A page a promotion could not move stays on the slow node: the promotion of the rest of its
// block goes around it.
TEST(Planner, PromotionsGoAroundHeldSlowPages) {
  Planner planner(plannerConfig());
  FakePlacement placement;
  const auto topo = tt::fakes::twoNodeTopology();
  HeatSnapshot snap = spreadUnits(placement, kTgid, 1, 0x1000000);
  const uint64_t start = snap.units[0].start;
  PlanContext ctx;
  ctx.fastCapacityBytes = 5 * kChunk;
  ctx.stuck.push_back({kTgid, start + 7 * kPage, kPage, false, false});
  const MigrationPlan plan = planner.plan(snap, placement, topo, ctx);
  ASSERT_EQ(plan.moves.size(), 2u);
  EXPECT_EQ(plan.moves[0].start, start);
  EXPECT_EQ(plan.moves[0].length, 7 * kPage);
  EXPECT_EQ(plan.moves[1].start, start + 8 * kPage);
  EXPECT_EQ(plan.moves[1].length, kChunk - 8 * kPage);
  EXPECT_EQ(planner.lastStats().promoteBytes, kChunk - kPage) << "the held page is not counted as moving";
}

// A fast hold whose pages are on the slow node after all (a range joined across pages that did
// move, or moved since by hand or by the kernel) does not keep its hot block out of DRAM: only
// demotions go around fast holds, so the promotion covers the range (and its run settles the hold).
TEST(Planner, AFastHoldDoesNotStopThePromotionOfItsBlock) {
  Planner planner(plannerConfig());
  FakePlacement placement;
  const auto topo = tt::fakes::twoNodeTopology();
  HeatSnapshot snap = spreadUnits(placement, kTgid, 1, 0x1000000);
  const uint64_t start = snap.units[0].start;
  PlanContext ctx;
  ctx.fastCapacityBytes = 5 * kChunk;
  ctx.stuck.push_back({kTgid, start, kChunk, true, false});
  placement.apply(planner.plan(snap, placement, topo, ctx));
  EXPECT_TRUE(isFastUnit(placement, kTgid, start));
  EXPECT_EQ(planner.lastStats().pinnedFastBytes, 0u) << "no fast page there to charge";
}

}  // namespace

// Plans one round for a slow block whose pages each expect `accessesPerPage` accesses (no long-run
// term) with room for it in the fast tier, and says whether the block was promoted.
bool promotes(const tensortier::v1::PolicyConfig& config, double accessesPerPage, double bytesPerSec,
              double accessesPerPagePass) {
  Planner planner(config);
  FakePlacement placement;
  const auto topo = tt::fakes::twoNodeTopology();
  HeatSnapshot snap;
  snap.units.push_back(unit(kTgid, 0x1000000, kChunk, accessesPerPage));
  placement.map(kTgid, 0x1000000, kChunk, 1);
  PlanContext ctx;
  ctx.fastCapacityBytes = 4 * kChunk;
  ctx.migration = bothWays(bytesPerSec);
  ctx.accessesPerPagePass = accessesPerPagePass;
  placement.apply(planner.plan(snap, placement, topo, ctx));
  return isFastUnit(placement, kTgid, 0x1000000);
}

TEST(Planner, AFastEngineDoesNotMakeMovingAPageReadOnceWorthIt) {
  auto config = plannerConfig();
  config.set_amortization_steps(0);
  constexpr double kTbPerSec = 1e12;  // copy time ~4 ns per page: a move looks free on time alone
  // Evidence counted per cache line (64 accesses per pass over a page) and per page (1).
  for (const double perPass : {64.0, 0.0}) {
    const double pass = perPass > 0 ? perPass : 1.0;
    SCOPED_TRACE(perPass);
    // Read once before it would leave: the copy's own read and write of the page cost more.
    EXPECT_FALSE(promotes(config, 1 * pass, kTbPerSec, perPass));
    // Reused four times: worth the copy's traffic.
    EXPECT_TRUE(promotes(config, 4 * pass, kTbPerSec, perPass));
    // Without the floor the read-once block is promoted: the test can tell.
    auto timeOnly = config;
    timeOnly.set_move_floor_page_passes(0);
    EXPECT_TRUE(promotes(timeOnly, 1 * pass, kTbPerSec, perPass));
  }
}

TEST(Planner, ASlowEngineStillChargesTheFullCopyTime) {
  auto config = plannerConfig();
  config.set_amortization_steps(0);
  // 1 MB/s: 4 ms per page, x 0.5 = 2 ms, far above the floor (2 x 64 x 200 ns = 25.6 us) and above
  // what four passes save (4 x 64 x 200 ns = 51.2 us): the larger cost, the copy time, decides.
  EXPECT_FALSE(promotes(config, 4 * 64.0, 1e6, 64.0));
  EXPECT_TRUE(promotes(config, 4 * 64.0, 1e12, 64.0));
}

TEST(Planner, AResidentKeepsItsPlaceUnlessTheSwapPaysForBothCopiesTraffic) {
  // Room for one block; the resident expects 10 accesses per page, a slow candidate 13. At a very
  // fast engine the swap saves 3 x 200 ns per page, less than the traffic of promoting one and
  // demoting the other (2 passes x 200 ns each): nothing moves.
  auto swaps = [](double floorPasses) {
    auto config = plannerConfig();
    config.set_amortization_steps(0);
    config.set_hysteresis_margin(0);
    config.set_move_floor_page_passes(floorPasses);
    Planner planner(config);
    FakePlacement placement;
    const auto topo = tt::fakes::twoNodeTopology();
    HeatSnapshot snap;
    snap.units.push_back(unit(kTgid, 0x1000000, kChunk, 10.0));
    snap.units.push_back(unit(kTgid, 0x2000000, kChunk, 13.0));
    placement.map(kTgid, 0x1000000, kChunk, 0);
    placement.map(kTgid, 0x2000000, kChunk, 1);
    PlanContext ctx;
    ctx.fastCapacityBytes = kChunk;
    ctx.migration = bothWays(1e12);
    placement.apply(planner.plan(snap, placement, topo, ctx));
    return isFastUnit(placement, kTgid, 0x2000000);
  };
  EXPECT_FALSE(swaps(2));
  EXPECT_TRUE(swaps(0));  // on copy time alone the same candidate displaces the resident
}

// A promotion is charged the promotion rate's copy time, and keeping a resident saves the
// demotion rate's: with room to spare only the first counts; a swap pays both.
TEST(Planner, EachMoveIsChargedItsOwnDirectionsCopyTime) {
  const double fast = static_cast<double>(kPage) / 100e-9;  // a page in 100 ns
  const double slow = fast / 10;                              // in 1000 ns
  auto promotes = [](const tt::MigrationRates& rates, bool full) {
    auto config = plannerConfig();
    config.set_amortization_steps(0);
    config.set_hysteresis_margin(0);
    config.set_move_floor_page_passes(0);
    config.set_migration_cost_weight(1.0);
    Planner planner(config);
    FakePlacement placement;
    const auto topo = tt::fakes::twoNodeTopology();
    HeatSnapshot snap;
    // The candidate saves 3 x 200 ns per page over its horizon on the fast tier; when the tier is
    // full, over a resident expecting 10 accesses per page.
    snap.units.push_back(unit(kTgid, 0x2000000, kChunk, full ? 13.0 : 3.0));
    placement.map(kTgid, 0x2000000, kChunk, 1);
    if (full) {
      snap.units.push_back(unit(kTgid, 0x1000000, kChunk, 10.0));
      placement.map(kTgid, 0x1000000, kChunk, 0);
    }
    PlanContext ctx;
    ctx.fastCapacityBytes = full ? kChunk : 2 * kChunk;
    ctx.migration = rates;
    placement.apply(planner.plan(snap, placement, topo, ctx));
    return isFastUnit(placement, kTgid, 0x2000000);
  };
  // Room to spare: 600 ns saved against a 100 ns promotion, or a 1000 ns one.
  EXPECT_TRUE(promotes({fast, slow}, false));
  EXPECT_FALSE(promotes({slow, fast}, false));
  // Full: the swap costs both copies, 200 ns at equal rates, 1100 ns with either one slow.
  EXPECT_TRUE(promotes(bothWays(fast), true));
  EXPECT_FALSE(promotes({fast, slow}, true));
  EXPECT_FALSE(promotes({slow, fast}, true));
}

TEST(Planner, KeepsTheHotBlocksOfALargeUnit) {
  // One tensor of four blocks, all slow, room for one block. The unit's per-page figures are an
  // average; its block weights (from the per-page heat) say the third block takes most accesses.
  auto fastBlocks = [](std::vector<float> weights, uint64_t weightBytes = kChunk) {
    Planner planner(plannerConfig());
    FakePlacement placement;
    const auto topo = tt::fakes::twoNodeTopology();
    HeatSnapshot snap;
    UnitHeat u = unit(kTgid, 0x1000000, 4 * kChunk, 500.0, 7);
    u.blockWeights = std::move(weights);
    u.blockWeightBytes = weightBytes;
    snap.units.push_back(u);
    placement.map(kTgid, 0x1000000, 4 * kChunk, 1);
    PlanContext ctx;
    ctx.fastCapacityBytes = kChunk;
    for (int round = 0; round < 3; ++round) placement.apply(planner.plan(snap, placement, topo, ctx));
    EXPECT_LE(placement.fastBytes(), kChunk);
    std::vector<bool> fast;
    for (uint64_t b = 0; b < 4; ++b) fast.push_back(isFastUnit(placement, kTgid, 0x1000000 + b * kChunk));
    return fast;
  };
  EXPECT_EQ(fastBlocks({0.4f, 0.4f, 2.8f, 0.4f}), (std::vector<bool>{false, false, true, false}));
  EXPECT_EQ(fastBlocks({0.1f, 3.7f, 0.1f, 0.1f}), (std::vector<bool>{false, true, false, false}));
  // Weights for other blocks than the planner's (a chunk_pages the heat model did not use) are
  // ignored: every block is worth the average, so one of them is promoted. The same count of
  // blocks of another size is not enough: applied, either set would make block 1 the only one
  // worth its room.
  for (const auto& [weights, bytes] : {std::pair{std::vector<float>{0.0f, 4.0f, 0.0f}, 2 * kChunk},
                                       std::pair{std::vector<float>{0.0f, 4.0f, 0.0f, 0.0f}, kChunk / 2}}) {
    const std::vector<bool> ignored = fastBlocks(weights, bytes);
    EXPECT_EQ(std::count(ignored.begin(), ignored.end(), true), 1);
  }
  const std::vector<bool> applied = fastBlocks({0.0f, 4.0f, 0.0f, 0.0f});
  EXPECT_EQ(applied, (std::vector<bool>{false, true, false, false}));
}

TEST(Planner, ABlockWithoutAccessesIsNotWorthItsRoomWhateverItsUnit) {
  // The cold tail of a hot unit is demoted for a warm unit, which on the averages would lose.
  Planner planner(plannerConfig());
  FakePlacement placement;
  const auto topo = tt::fakes::twoNodeTopology();
  HeatSnapshot snap;
  UnitHeat hot = unit(kTgid, 0x1000000, 2 * kChunk, 400.0, 1);
  hot.blockWeights = {2.0f, 0.0f};
  hot.blockWeightBytes = kChunk;
  snap.units.push_back(hot);
  snap.units.push_back(unit(kTgid, 0x4000000, kChunk, 300.0, 2));
  placement.map(kTgid, 0x1000000, 2 * kChunk, 0);
  placement.map(kTgid, 0x4000000, kChunk, 1);
  PlanContext ctx;
  ctx.fastCapacityBytes = 2 * kChunk;
  for (int round = 0; round < 3; ++round) placement.apply(planner.plan(snap, placement, topo, ctx));
  EXPECT_TRUE(isFastUnit(placement, kTgid, 0x1000000));
  EXPECT_FALSE(isFastUnit(placement, kTgid, 0x1000000 + kChunk));
  EXPECT_TRUE(isFastUnit(placement, kTgid, 0x4000000));
}

// Room for one block, held by `resident` (on the fast node); `candidate` is on the slow node. Plans
// three rounds at 100 MB/s and says whether the candidate took the room.
bool candidateTakesTheRoom(const tensortier::v1::PolicyConfig& config, const UnitHeat& resident,
                           const UnitHeat& candidate) {
  Planner planner(config);
  FakePlacement placement;
  const auto topo = tt::fakes::twoNodeTopology();
  HeatSnapshot snap;
  snap.units = {resident, candidate};
  placement.map(kTgid, resident.start, resident.length, 0);
  placement.map(kTgid, candidate.start, candidate.length, 1);
  PlanContext ctx;
  ctx.fastCapacityBytes = kChunk;
  ctx.migration = bothWays(100e6);
  for (int round = 0; round < 3; ++round) placement.apply(planner.plan(snap, placement, topo, ctx));
  EXPECT_LE(placement.fastBytes(), kChunk);
  return isFastUnit(placement, kTgid, candidate.start);
}

// A block nothing uses holds the room; a slow block used `level` times per page per step for
// `steadySteps` steps. At 100 MB/s a move costs 20.5 us a page (half of its 41 us copy) and 4 steps
// of 10 accesses save 8 us: the swap pays only over a longer tenure.
bool steadyBlockDisplacesAnIdleOne(const tensortier::v1::PolicyConfig& config, double steadySteps, double level) {
  UnitHeat used = unit(kTgid, 0x2000000, kChunk, 10.0, 2);
  used.accessesPerPagePerStep = 10.0;
  used.steadySteps = steadySteps;
  used.steadyAccessesPerPagePerStep = level;
  return candidateTakesTheRoom(config, unit(kTgid, 0x1000000, kChunk, 0.0, 1), used);
}

TEST(Planner, ABlockSteadyForLongDisplacesAnIdleOneThatAFewStepsCannotPayFor) {
  const auto config = plannerConfig();  // amortization 4 steps, tenure up to 1000
  // Steady for 60 steps at 10 accesses: 56 more steps, worth 112 us, capped at the two moves.
  EXPECT_TRUE(steadyBlockDisplacesAnIdleOne(config, 60, 10.0));
  // Just begun: the amortization steps alone, as before.
  EXPECT_FALSE(steadyBlockDisplacesAnIdleOne(config, 0, 10.0));
  EXPECT_FALSE(steadyBlockDisplacesAnIdleOne(config, 4, 10.0));
  // In use for 60 steps, but at a tenth of its present rate until lately: 11.2 us more, not enough.
  EXPECT_FALSE(steadyBlockDisplacesAnIdleOne(config, 60, 1.0));
  // At that level for 600 steps: 119 us, the cap.
  EXPECT_TRUE(steadyBlockDisplacesAnIdleOne(config, 600, 1.0));
  // Tenure off (max_amortization_steps at or below amortization_steps).
  auto off = config;
  off.set_max_amortization_steps(off.amortization_steps());
  EXPECT_FALSE(steadyBlockDisplacesAnIdleOne(off, 60, 10.0));
  // Tenure up to 8 steps only: 4 more, 8 us, not enough.
  auto shortTenure = config;
  shortTenure.set_max_amortization_steps(8);
  EXPECT_FALSE(steadyBlockDisplacesAnIdleOne(shortTenure, 60, 10.0));
}

TEST(Planner, TenureDoesNotRankBlocksSteadyForLongAgainstEachOther) {
  // Both steady for 60 steps; the resident at 10 accesses a step, the candidate at 20. Uncapped,
  // the candidate's 56 extra steps would be worth 112 us more than the resident's, over the swap's
  // 41 us; capped, both get the same tenure and 4 steps of the difference (8 us) do not pay.
  UnitHeat resident = unit(kTgid, 0x1000000, kChunk, 10.0, 1);
  UnitHeat candidate = unit(kTgid, 0x2000000, kChunk, 20.0, 2);
  for (UnitHeat* u : {&resident, &candidate}) {
    u->accessesPerPagePerStep = u->expectedAccessesPerPage;
    u->steadySteps = 60;
    u->steadyAccessesPerPagePerStep = u->expectedAccessesPerPage;
  }
  EXPECT_FALSE(candidateTakesTheRoom(plannerConfig(), resident, candidate));
  // The same pair without tenure (both at 4 steps): the same answer, for the same reason.
  auto off = plannerConfig();
  off.set_max_amortization_steps(off.amortization_steps());
  EXPECT_FALSE(candidateTakesTheRoom(off, resident, candidate));
}

TEST(Planner, ChargesEachProcessItsSlowNodesOwnPenalty) {
  // One fast node and two slow ones (a CXL node and an Optane node, say); a process beside each
  // slow node with the same evidence, and room for one block. Charged each slow node's own penalty,
  // the block that would otherwise stay on the slower node takes the room, whichever node that is.
  auto topo = tt::fakes::twoNodeTopology();
  topo.nodes[0].distances = {10, 20, 20};
  topo.nodes[1].distances = {20, 10, 30};
  tt::topology::NumaNode other = topo.nodes[1];
  other.id = 2;
  other.distances = {20, 30, 10};
  topo.nodes.push_back(other);
  constexpr pid_t kNearOne = 41, kNearTwo = 42;
  constexpr uint64_t kStart = 0x1000000;
  auto fastProcess = [&](double nodeOneNs, double nodeTwoNs) {
    Planner planner(plannerConfig());
    FakePlacement placement;
    HeatSnapshot snap;
    snap.units = {unit(kNearOne, kStart, kChunk, 10.0), unit(kNearTwo, kStart, kChunk, 10.0)};
    placement.map(kNearOne, kStart, kChunk, 1);
    placement.map(kNearTwo, kStart, kChunk, 2);
    PlanContext ctx;
    ctx.fastCapacityBytes = kChunk;
    ctx.processes = {{kNearOne, 1, 0}, {kNearTwo, 2, 0}};
    ctx.slowPenaltyByNode = {{1, nodeOneNs}, {2, nodeTwoNs}};
    for (int round = 0; round < 3; ++round) placement.apply(planner.plan(snap, placement, topo, ctx));
    EXPECT_LE(placement.fastBytes(), kChunk);
    const bool one = isFastUnit(placement, kNearOne, kStart), two = isFastUnit(placement, kNearTwo, kStart);
    return one == two ? pid_t{0} : one ? kNearOne : kNearTwo;
  };
  EXPECT_EQ(fastProcess(100, 400), kNearTwo);
  EXPECT_EQ(fastProcess(400, 100), kNearOne);
}
