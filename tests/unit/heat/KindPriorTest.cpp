// The kind prior (phase marks x region kind) against measured evidence, the way the daemon runs
// the model: per epoch, the client's marks of the past epoch arrive first (with their own
// timestamps), then the sources' evidence at the epoch's close, then advanceEpoch and the plan.
// Two regions of the same kind: the prior cannot tell them apart, only the evidence can.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "fakes/policy/FakePlacement.h"
#include "heat/HeatModel.h"
#include "policy/Planner.h"

namespace {

using tt::AccessEvidence;
using tt::IterationMark;
using tt::MarkType;
using tt::RegionInfo;
using tt::RegionKind;
using tt::heat::HeatModel;
using tt::heat::HeatSnapshot;
using tt::heat::UnitHeat;

constexpr uint64_t kMs = 1'000'000;
constexpr uint64_t kPage = tt::kBasePageSize;
constexpr pid_t kTgid = 91;
constexpr uint64_t kPages = 1024;  // 4 MiB per region
constexpr uint64_t kHot = 0x10000000;
constexpr uint64_t kCold = 0x20000000;
constexpr uint64_t kEpochNs = 500 * kMs;  // the e2e config's service.epoch_ms
constexpr uint64_t kStepNs = 20 * kMs;    // 25 steps (125 marks) per epoch

tensortier::v1::PolicyConfig config() {
  tensortier::v1::PolicyConfig c;
  c.set_fast_budget_bytes(kPages * kPage + (kPages / 4) * kPage);  // one region and a quarter
  c.set_fast_reserve_fraction(0);
  c.set_plan_interval_ms(500);
  c.set_initial_migration_bandwidth(100'000'000'000ULL);  // moves are not the subject here
  return c;
}

RegionInfo region(uint64_t id, uint64_t start) {
  RegionInfo r;
  r.id = id;
  r.tgid = kTgid;
  r.start = start;
  r.length = kPages * kPage;
  r.kind = RegionKind::Activation;  // the same kind: the prior gives both the same schedule
  return r;
}

IterationMark mark(MarkType type, uint64_t step, uint64_t t, std::string phase = "") {
  IterationMark m;
  m.tgid = kTgid;
  m.type = type;
  m.step = step;
  m.timestampNs = t;
  m.phase = std::move(phase);
  return m;
}

const UnitHeat* unitAt(const HeatSnapshot& s, uint64_t start) {
  for (const auto& u : s.units)
    if (u.start == start) return &u;
  return nullptr;
}

// What a training client sends every step (the Python client's StepBegin, three phases, StepEnd);
// `repeats` > 1 announces each phase again 1 and 2 ms into it (a redundant client).
void sendStep(HeatModel& model, uint64_t step, uint64_t t, int repeats = 1) {
  model.onMark(mark(MarkType::StepBegin, step, t));
  const std::pair<uint64_t, const char*> phases[] = {{0, "forward"}, {8, "backward"}, {15, "optimizer"}};
  for (const auto& [at, name] : phases)
    for (int r = 0; r < repeats; ++r)
      model.onMark(mark(MarkType::PhaseBegin, step, t + at * kMs + static_cast<uint64_t>(r) * kMs, name));
  model.onMark(mark(MarkType::StepEnd, step, t + 19 * kMs));
}

// Soft-dirty-like evidence: at each epoch close, every page of the hot region once.
std::vector<AccessEvidence> hotPages() {
  std::vector<AccessEvidence> out;
  for (uint64_t p = 0; p < kPages; ++p) {
    AccessEvidence e;
    e.tgid = kTgid;
    e.page = kHot + p * kPage;
    e.weight = 1;
    e.kind = tt::AccessKind::Store;
    out.push_back(e);
  }
  return out;
}

TEST(HeatModelKindPrior, FrequentStepMarksDoNotMakeAColdRegionOfTheSameKindHot) {
  const auto cfg = config();
  HeatModel model(cfg);
  ASSERT_TRUE(model.addRegion(region(1, kHot)).ok());
  ASSERT_TRUE(model.addRegion(region(2, kCold)).ok());
  tt::fakes::FakePlacement placement;
  placement.map(kTgid, kHot, kPages * kPage, 1);
  // The cold region starts in DRAM (as when it was promoted before any evidence arrived): the
  // hot one must displace it, against the hysteresis that protects resident blocks.
  placement.map(kTgid, kCold, kPages * kPage, 0);
  const auto topo = tt::fakes::twoNodeTopology();
  tt::policy::Planner planner(cfg);
  tt::policy::PlanContext ctx;

  const uint64_t t0 = 10'000 * kMs;
  const auto evidence = hotPages();
  uint64_t step = 0, nextStepNs = t0;
  model.advanceEpoch(t0);
  for (uint64_t e = 1; e <= 20; ++e) {
    const uint64_t close = t0 + e * kEpochNs;
    for (; nextStepNs + kStepNs <= close; nextStepNs += kStepNs) sendStep(model, step++, nextStepNs);
    model.ingest(evidence, close);
    model.advanceEpoch(close);
    placement.apply(planner.plan(model.snapshot(), placement, topo, ctx));
    EXPECT_LE(placement.fastBytes(kTgid), cfg.fast_budget_bytes()) << "epoch " << e;
  }
  ASSERT_EQ(model.clockOf(kTgid).source, tt::heat::PeriodSource::Marks);
  EXPECT_EQ(model.clockOf(kTgid).periodNs, kStepNs);

  const UnitHeat* hot = unitAt(model.snapshot(), kHot);
  const UnitHeat* cold = unitAt(model.snapshot(), kCold);
  ASSERT_TRUE(hot && cold);
  EXPECT_GE(hot->score, 4 * cold->score) << "hot " << hot->score << " cold " << cold->score;
  EXPECT_GE(hot->expectedAccessesPerPage, 4 * cold->expectedAccessesPerPage)
      << "hot " << hot->expectedAccessesPerPage << " cold " << cold->expectedAccessesPerPage;
  EXPECT_GE(hot->accessesPerPagePerStep, 4 * cold->accessesPerPagePerStep)
      << "hot " << hot->accessesPerPagePerStep << " cold " << cold->accessesPerPagePerStep;
  EXPECT_GE(hot->heat, 4 * cold->heat) << "hot " << hot->heat << " cold " << cold->heat;

  // Under a budget that fits one region, the planner ends with the hot one in DRAM, the cold not.
  uint64_t hotFast = 0, coldFast = 0;
  for (uint64_t p = 0; p < kPages; ++p) {
    hotFast += placement.nodeOf(kTgid, kHot + p * kPage) == 0 ? 1 : 0;
    coldFast += placement.nodeOf(kTgid, kCold + p * kPage) == 0 ? 1 : 0;
  }
  EXPECT_EQ(hotFast, kPages);
  EXPECT_EQ(coldFast, 0u);
}

TEST(HeatModelKindPrior, MarksAloneRankByKindAndRedundantMarksAddNothing) {
  // Without any evidence the prior is all there is: a weight (active in every phase) outranks
  // optimizer state (active in one phase). The prior integrates the time spent in each phase, so
  // a client that repeats its phase marks (here: each phase announced three times) changes
  // nothing but rounding.
  auto run = [](int repeats) {
    HeatModel model(config());
    RegionInfo w = region(1, kHot), o = region(2, kCold);
    w.kind = RegionKind::Weight;
    o.kind = RegionKind::OptimizerState;
    EXPECT_TRUE(model.addRegion(w).ok());
    EXPECT_TRUE(model.addRegion(o).ok());
    const uint64_t t0 = 10'000 * kMs;
    model.advanceEpoch(t0);
    uint64_t step = 0, nextStepNs = t0;
    for (uint64_t e = 1; e <= 10; ++e) {
      const uint64_t close = t0 + e * kEpochNs;
      for (; nextStepNs + kStepNs <= close; nextStepNs += kStepNs, ++step) sendStep(model, step, nextStepNs, repeats);
      model.advanceEpoch(close);
    }
    const UnitHeat* wu = unitAt(model.snapshot(), kHot);
    const UnitHeat* ou = unitAt(model.snapshot(), kCold);
    EXPECT_TRUE(wu && ou);
    return wu && ou && ou->heat > 0 ? wu->heat / ou->heat : 0.0;
  };
  const double once = run(1), thrice = run(3);
  EXPECT_GT(once, 1.5);
  EXPECT_NEAR(thrice, once, 0.1 * once);
}

}  // namespace
