#include "heat/HeatModel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numbers>
#include <random>
#include <span>
#include <tuple>

namespace {

using tt::AccessEvidence;
using tt::IterationMark;
using tt::MarkType;
using tt::MigrationRates;
using tt::RegionInfo;
using tt::RegionKind;
using tt::heat::HeatModel;
using tt::heat::HeatSnapshot;
using tt::heat::UnitHeat;

constexpr uint64_t kMs = 1'000'000;
constexpr uint64_t kPage = tt::kBasePageSize;
constexpr pid_t kTgid = 77;

tensortier::v1::PolicyConfig baseConfig() {
  tensortier::v1::PolicyConfig c;
  c.set_heat_half_life_ms(1000);
  c.set_schedule_buckets(8);
  c.set_period_bin_ms(5);
  c.set_period_history_bins(1024);
  c.set_period_min_ms(20);
  c.set_period_max_ms(1000);
  return c;
}

RegionInfo region(uint64_t id, uint64_t start, uint64_t pages, RegionKind kind = RegionKind::Other) {
  RegionInfo r;
  r.id = id;
  r.tgid = kTgid;
  r.start = start;
  r.length = pages * kPage;
  r.kind = kind;
  return r;
}

AccessEvidence sample(uint64_t address, uint32_t weight = 1) {
  AccessEvidence e;
  e.tgid = kTgid;
  e.page = address - address % kPage;
  e.weight = weight;
  e.kind = tt::AccessKind::Load;
  return e;
}

const UnitHeat* unitAt(const HeatSnapshot& s, uint64_t start) {
  for (const auto& u : s.units)
    if (u.start == start) return &u;
  return nullptr;
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

constexpr uint64_t kRegionA = 0x10000000;
constexpr uint64_t kRegionB = 0x20000000;
constexpr uint64_t kPagesPerRegion = 64;

// Two tensors used in alternation: A in the first half of every 100 ms step, B in the second.
// Every millisecond, four samples land on random pages of the active one. Epochs are 10 ms.
// `duplicateMarkAfterNs` > 0: each step mark is sent again that much later (two connections).
void runTwoPhase(HeatModel& model, uint64_t fromNs, uint64_t steps, bool sendMarks, uint64_t seed,
                 const std::function<void(uint64_t)>& afterEpoch = nullptr, uint64_t duplicateMarkAfterNs = 0) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint64_t> page(0, kPagesPerRegion - 1);
  const uint64_t period = 100 * kMs;
  for (uint64_t t = fromNs; t < fromNs + steps * period; t += kMs) {
    const uint64_t offset = (t - fromNs) % period;
    if (offset == 0 && sendMarks) model.onMark(mark(MarkType::StepBegin, (t - fromNs) / period, t));
    const uint64_t base = offset < period / 2 ? kRegionA : kRegionB;
    std::vector<AccessEvidence> batch;
    for (int i = 0; i < 4; ++i) batch.push_back(sample(base + page(rng) * kPage));
    model.ingest(batch, t);
    if (offset == 0 && sendMarks && duplicateMarkAfterNs > 0)
      model.onMark(mark(MarkType::StepBegin, (t - fromNs) / period, t + duplicateMarkAfterNs));
    if ((t + kMs - fromNs) % (10 * kMs) == 0) {
      model.advanceEpoch(t + kMs);
      if (afterEpoch) afterEpoch(t + kMs);
    }
  }
}

TEST(HeatModel, PageAndUnitHeatDecayWithTheHalfLife) {
  HeatModel model(baseConfig());
  const uint64_t t0 = 5000 * kMs;
  std::vector<AccessEvidence> batch{sample(0x1000, 100)};
  model.ingest(batch, t0);
  EXPECT_NEAR(model.pageHeat(kTgid, 0x1000, t0), 100.0, 1e-9);
  EXPECT_NEAR(model.pageHeat(kTgid, 0x1000, t0 + 1000 * kMs), 50.0, 1e-6);
  EXPECT_NEAR(model.pageHeat(kTgid, 0x1000, t0 + 2000 * kMs), 25.0, 1e-6);
  model.advanceEpoch(t0 + 1000 * kMs);
  ASSERT_EQ(model.snapshot().units.size(), 1u);
  EXPECT_NEAR(model.snapshot().units[0].heat, 50.0, 1e-6);
  EXPECT_NEAR(model.snapshot().units[0].features[tt::heat::kRecency], 0.5, 1e-9);
}

// A small region nothing ever touched (no marks, no schedule: the feature blend decides) gets no
// value from its size: size makes a touched small tensor worth more per byte, it does not make an
// idle one worth a share of the hottest unit's accesses, here another process's.
TEST(HeatModel, ANeverTouchedSmallRegionIsWorthNothingForItsSize) {
  HeatModel model(baseConfig());
  const uint64_t t0 = 5000 * kMs;
  RegionInfo hot = region(1, 0x100000, 64);
  RegionInfo idle = region(2, 0x900000, 1);
  idle.tgid = kTgid + 1;
  ASSERT_TRUE(model.addRegion(hot).ok());
  ASSERT_TRUE(model.addRegion(idle).ok());
  std::vector<AccessEvidence> batch;
  for (uint64_t p = 0; p < 64; ++p) batch.push_back(sample(0x100000 + p * kPage, 50));
  model.ingest(batch, t0);
  model.advanceEpoch(t0 + 100 * kMs);
  const UnitHeat* h = unitAt(model.snapshot(), 0x100000);
  const UnitHeat* i = unitAt(model.snapshot(), 0x900000);
  ASSERT_NE(h, nullptr);
  ASSERT_NE(i, nullptr);
  EXPECT_GT(h->expectedAccessesPerPage, 0.0);
  EXPECT_GT(h->features[tt::heat::kSize], 0.0);
  EXPECT_EQ(i->features[tt::heat::kSize], 0.0);
  EXPECT_EQ(i->expectedAccessesPerPage, 0.0) << "an idle one-page region valued through its size";
}

TEST(HeatModel, BlockWeightsFollowThePageHeatWithinAUnit) {
  auto config = baseConfig();
  config.set_chunk_pages(4);
  HeatModel model(config);
  // A 12-page tensor starting 2 pages before a 2 MiB boundary, where the per-page heat changes
  // chunk: its first block of 4 pages straddles two chunks of page heat.
  const uint64_t start = 2 * tt::kBlockBytes - 2 * kPage;
  ASSERT_TRUE(model.addRegion(region(1, start, 12)).ok());
  ASSERT_TRUE(model.addRegion(region(2, 0x40000000, 4)).ok());  // one block
  ASSERT_TRUE(model.addRegion(region(3, 0x50000000, 8)).ok());  // never sampled
  const uint64_t t0 = 5000 * kMs;
  // Dense evidence (each record 1000 times), so the measured split decides: pages 0-1 (the first
  // chunk) get 6 accesses per record one half-life before the epoch closes, pages 2-3 (the next
  // chunk) 3 at the close: 3 per record each by then, 12 for block 0. Block 1 gets one access per
  // page and record (4), block 2 none.
  constexpr int kRepeat = 1000;
  std::vector<AccessEvidence> early, late;
  for (int r = 0; r < kRepeat; ++r) {
    early.push_back(sample(start, 6));
    early.push_back(sample(start + kPage, 6));
    late.push_back(sample(start + 2 * kPage, 3));
    late.push_back(sample(start + 3 * kPage, 3));
    for (uint64_t p = 4; p < 8; ++p) late.push_back(sample(start + p * kPage, 1));
  }
  late.push_back(sample(0x40000000, 5));
  model.ingest(early, t0);
  model.ingest(late, t0 + 1000 * kMs);
  model.advanceEpoch(t0 + 1000 * kMs);

  const UnitHeat* u = unitAt(model.snapshot(), start);
  ASSERT_NE(u, nullptr);
  ASSERT_EQ(u->blockWeights.size(), 3u);
  EXPECT_EQ(u->blockWeightBytes, 4 * kPage);
  // 16 accesses per record over 12 pages: 4/3 per page. Measured: block 0 3 per page (2.25x),
  // block 1 1 (0.75x), block 2 0. Each is shrunk by the prior of 8 observations at 1x against the
  // block's expected observations: 7000 records by the close (the early 2000 halved) over 12 pages,
  // 7000 / 3 per block.
  const double expected = 7000.0 / 3.0;
  auto shrunk = [&](double measured) {
    return (measured * expected + tt::heat::kBlockWeightPriorObservations) / (expected + tt::heat::kBlockWeightPriorObservations);
  };
  // (To 1%: a thousand small additions to a page's block floating point heat each round to the
  // nearest step of its chunk's scale.)
  EXPECT_NEAR(u->blockWeights[0], shrunk(2.25), 0.01);
  EXPECT_NEAR(u->blockWeights[1], shrunk(0.75), 0.01);
  EXPECT_NEAR(u->blockWeights[2], shrunk(0.0), 1e-5);
  EXPECT_LT(u->blockWeights[2], 0.01f);
  // The unit's own figures stay per page on average: the weights only split them.
  EXPECT_NEAR(u->heat / 12.0, kRepeat * 4.0 / 3.0, 1e-3);

  const UnitHeat* single = unitAt(model.snapshot(), 0x40000000);
  ASSERT_NE(single, nullptr);
  EXPECT_TRUE(single->blockWeights.empty());
  const UnitHeat* unsampled = unitAt(model.snapshot(), 0x50000000);
  ASSERT_NE(unsampled, nullptr);
  EXPECT_TRUE(unsampled->blockWeights.empty());
}

TEST(HeatModel, SparseEvidenceMovesBlockWeightsLittle) {
  auto config = baseConfig();
  config.set_chunk_pages(4);
  const uint64_t start = 0x10000000;  // 16 pages: four blocks
  const uint64_t t0 = 5000 * kMs;
  const double prior = tt::heat::kBlockWeightPriorObservations;
  auto weightsAfter = [&](const std::function<void(HeatModel&)>& feed) {
    HeatModel model(config);
    EXPECT_TRUE(model.addRegion(region(1, start, 16)).ok());
    feed(model);
    model.advanceEpoch(t0);
    const UnitHeat* u = unitAt(model.snapshot(), start);
    return u == nullptr ? std::vector<float>{} : u->blockWeights;
  };
  // One record on block 0: measured 4x there and 0 elsewhere, but a block expected a quarter of
  // an observation, so the prior dominates.
  auto one = weightsAfter([&](HeatModel& m) {
    std::vector<AccessEvidence> batch{sample(start, 1000)};
    m.ingest(batch, t0);
  });
  ASSERT_EQ(one.size(), 4u);
  EXPECT_NEAR(one[0], (4 * 0.25 + prior) / (0.25 + prior), 1e-5);
  EXPECT_NEAR(one[1], prior / (0.25 + prior), 1e-5);
  // The same split from 4000 records: the measurement dominates.
  auto many = weightsAfter([&](HeatModel& m) {
    std::vector<AccessEvidence> batch(4000, sample(start, 1));
    m.ingest(batch, t0);
  });
  ASSERT_EQ(many.size(), 4u);
  EXPECT_NEAR(many[0], (4 * 1000.0 + prior) / (1000 + prior), 1e-4);
  EXPECT_LT(many[1], 0.01f);
  // A block of evidence counts one observation per page, as the record each page stands for,
  // whatever its count: four pages of block 0 with 5 counts each weigh as four records of 5
  // samples, the way the ring path merges them.
  auto blocks = weightsAfter([&](HeatModel& m) {
    tt::EvidenceBatch batch;
    tt::EvidenceBlock& b = batch.blocks.emplace_back();
    b.tgid = kTgid;
    b.base = start;
    b.weightPerCount = 250;
    for (uint32_t i = 0; i < 4; ++i) b.counts[i] = 5;
    m.ingest(batch, t0);
  });
  auto records = weightsAfter([&](HeatModel& m) {
    std::vector<AccessEvidence> batch;
    for (uint64_t p = 0; p < 4; ++p) batch.push_back(sample(start + p * kPage, 5 * 250));
    m.ingest(batch, t0);
  });
  ASSERT_EQ(blocks.size(), 4u);
  ASSERT_EQ(records.size(), 4u);
  EXPECT_NEAR(blocks[0], (4 * 1.0 + prior) / (1.0 + prior), 1e-5);
  EXPECT_NEAR(blocks[3], prior / (1.0 + prior), 1e-5);
  for (size_t i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(blocks[i], records[i]) << i;
}

TEST(HeatModel, RejectsBadRegions) {
  HeatModel model(baseConfig());
  ASSERT_TRUE(model.addRegion(region(1, 0x100000, 16)).ok());
  EXPECT_FALSE(model.addRegion(region(2, 0x100800, 16)).ok());  // not page aligned
  EXPECT_FALSE(model.addRegion(region(3, 0x108000, 16)).ok());  // overlaps region 1
  EXPECT_FALSE(model.addRegion(region(1, 0x900000, 16)).ok());  // duplicate id
  EXPECT_FALSE(model.addRegion(region(4, 0x900000, 0)).ok());   // empty
  EXPECT_TRUE(model.addRegion(region(5, 0x110000, 16)).ok());   // adjacent is fine
}

TEST(HeatModel, SamplesWithoutRegionsClusterIntoAlignedChunks) {
  auto config = baseConfig();
  config.set_chunk_pages(16);
  HeatModel model(config);
  const uint64_t chunk = 16 * kPage;
  std::vector<AccessEvidence> batch{sample(5 * chunk + 3 * kPage), sample(5 * chunk + 9 * kPage), sample(9 * chunk)};
  model.ingest(batch, 10 * kMs);
  model.advanceEpoch(20 * kMs);
  const auto& units = model.snapshot().units;
  ASSERT_EQ(units.size(), 2u);
  EXPECT_EQ(units[0].start, 5 * chunk);
  EXPECT_EQ(units[0].length, chunk);
  EXPECT_EQ(units[0].regionId, 0u);
  EXPECT_NEAR(units[0].heat, 2 * std::exp2(-10.0 / 1000.0), 1e-9);
  EXPECT_EQ(units[1].start, 9 * chunk);

  // A region registered over part of a chunk replaces it; pages sampled later around the region
  // form chunks clipped to the region's edges.
  ASSERT_TRUE(model.addRegion(region(7, 5 * chunk + 4 * kPage, 8)).ok());
  std::vector<AccessEvidence> later{sample(5 * chunk + kPage), sample(5 * chunk + 5 * kPage), sample(5 * chunk + 14 * kPage)};
  model.ingest(later, 30 * kMs);
  model.advanceEpoch(40 * kMs);
  const auto& after = model.snapshot().units;
  ASSERT_EQ(after.size(), 4u);
  EXPECT_EQ(after[0].start, 5 * chunk);
  EXPECT_EQ(after[0].length, 4 * kPage);
  EXPECT_EQ(after[1].regionId, 7u);
  EXPECT_EQ(after[2].start, 5 * chunk + 12 * kPage);
  EXPECT_EQ(after[2].length, 4 * kPage);
}

TEST(HeatModel, FeatureWeightsMoveTowardThePredictiveFeature) {
  // Frequency and recency cannot tell the two alternating tensors apart over a long half-life;
  // the learned step schedule (reuse) can. Size is identical for both and predicts nothing.
  auto config = baseConfig();
  config.set_heat_half_life_ms(2000);
  config.set_heat_half_life_steps(0);  // keep the long half-life once the period is known
  HeatModel model(config);
  ASSERT_TRUE(model.addRegion(region(1, kRegionA, kPagesPerRegion)).ok());
  ASSERT_TRUE(model.addRegion(region(2, kRegionB, kPagesPerRegion)).ok());
  const auto initial = model.weights();
  runTwoPhase(model, 1000 * kMs, 30, true, 11);
  const auto& w = model.weights();
  EXPECT_NEAR(initial[tt::heat::kReuse], 0.25, 1e-12);
  EXPECT_GT(w[tt::heat::kReuse], 0.4);
  EXPECT_GT(w[tt::heat::kReuse], w[tt::heat::kFrequency]);
  EXPECT_GT(w[tt::heat::kReuse], w[tt::heat::kRecency]);
  EXPECT_LT(w[tt::heat::kSize], 0.25);
  double sum = 0;
  for (double x : w) sum += x;
  EXPECT_NEAR(sum, 1.0, 1e-9);
}

TEST(HeatModel, FrequencyWinsOnASteadySkewedWorkload) {
  // No period: eight units with Zipf-like popularity, all touched every epoch. Recency is 1 for
  // every unit and size is equal, so neither ranks them; decayed frequency does.
  HeatModel model(baseConfig());
  std::mt19937_64 rng(21);
  std::uniform_int_distribution<uint64_t> page(0, 15);
  std::discrete_distribution<int> unit({8, 4, 2.7, 2, 1.6, 1.3, 1.1, 1});
  for (uint64_t e = 0; e < 200; ++e) {
    const uint64_t t = 1000 * kMs + e * 10 * kMs;
    std::vector<AccessEvidence> batch;
    for (uint64_t u = 0; u < 8; ++u) batch.push_back(sample(0x40000000 + u * 0x1000000));
    for (int i = 0; i < 64; ++i)
      batch.push_back(sample(0x40000000 + static_cast<uint64_t>(unit(rng)) * 0x1000000 + page(rng) * kPage));
    model.ingest(batch, t);
    model.advanceEpoch(t + 10 * kMs);
  }
  const auto& w = model.weights();
  EXPECT_GT(w[tt::heat::kFrequency], 0.25);
  EXPECT_GT(w[tt::heat::kFrequency], w[tt::heat::kRecency]);
  EXPECT_GT(w[tt::heat::kFrequency], w[tt::heat::kSize]);
}

TEST(HeatModel, StepPeriodFromMarksIncludingMissingOnes) {
  HeatModel model(baseConfig());
  for (uint64_t s = 0; s < 20; ++s)
    if (s % 5 != 3) model.onMark(mark(MarkType::StepBegin, s, 500 * kMs + s * 73 * kMs));
  const auto clock = model.clockOf(kTgid);
  EXPECT_EQ(clock.source, tt::heat::PeriodSource::Marks);
  EXPECT_EQ(clock.periodNs, 73 * kMs);
  EXPECT_EQ(clock.anchorNs, 500 * kMs + 19 * 73 * kMs);
}

TEST(HeatModel, StepPeriodFromTheSampleStreamWithoutMarks) {
  HeatModel model(baseConfig());
  ASSERT_TRUE(model.addRegion(region(1, kRegionA, kPagesPerRegion)).ok());
  ASSERT_TRUE(model.addRegion(region(2, kRegionB, kPagesPerRegion)).ok());
  runTwoPhase(model, 1000 * kMs, 40, false, 12);
  const auto clock = model.clockOf(kTgid);
  EXPECT_EQ(clock.source, tt::heat::PeriodSource::Samples);
  EXPECT_NEAR(static_cast<double>(clock.periodNs), 100.0 * kMs, 3.0 * kMs);
  EXPECT_GT(clock.confidence, 0.5);
}

// Two connections of one process mark every step, 50 us apart: one boundary, not a step of 50 us
// (a period that short made the half-life 100 us and decayed all heat to nothing).
TEST(HeatModel, AStepMarkedTwiceKeepsThePeriodAndTheHeat) {
  HeatModel model(baseConfig());
  ASSERT_TRUE(model.addRegion(region(1, kRegionA, kPagesPerRegion)).ok());
  ASSERT_TRUE(model.addRegion(region(2, kRegionB, kPagesPerRegion)).ok());
  const uint64_t t0 = 1000 * kMs;
  runTwoPhase(model, t0, 20, true, 5, nullptr, 50'000);
  const auto clock = model.clockOf(kTgid);
  EXPECT_EQ(clock.source, tt::heat::PeriodSource::Marks);
  EXPECT_EQ(clock.periodNs, 100 * kMs);
  const UnitHeat* a = unitAt(model.snapshot(), kRegionA);
  ASSERT_TRUE(a);
  EXPECT_GT(a->heat, 100.0);
}

// A client that attaches mid-step ends that step and begins the next 20 us later: one boundary.
TEST(HeatModel, AStepEndThenTheNextStepBeginIsOneBoundary) {
  HeatModel model(baseConfig());
  const uint64_t t0 = 1000 * kMs;
  model.onMark(mark(MarkType::StepEnd, 5, t0));
  model.onMark(mark(MarkType::StepBegin, 6, t0 + 20'000));
  model.onMark(mark(MarkType::StepBegin, 7, t0 + 100 * kMs));
  EXPECT_EQ(model.clockOf(kTgid).periodNs, 100 * kMs);
}

// Gradient accumulation: forward and backward once per micro-batch, four of each per step, then
// the optimizer. A is used in the first half of the step, B in the second. Only each phase's
// first mark in a step places the step; the repeats used to move its start by up to 60 ms.
TEST(HeatModel, PhasesRepeatedWithinAStepDoNotMoveIt) {
  HeatModel model(baseConfig());
  ASSERT_TRUE(model.addRegion(region(1, kRegionA, kPagesPerRegion)).ok());
  ASSERT_TRUE(model.addRegion(region(2, kRegionB, kPagesPerRegion)).ok());
  std::mt19937_64 rng(9);
  std::uniform_int_distribution<uint64_t> page(0, kPagesPerRegion - 1);
  const uint64_t t0 = 1000 * kMs, period = 100 * kMs;
  for (uint64_t t = t0; t < t0 + 20 * period; t += kMs) {
    const uint64_t offset = t - t0 - (t - t0) / period * period;
    const uint64_t step = (t - t0) / period;
    if (offset == 0) model.onMark(mark(MarkType::StepBegin, step, t));
    if (offset < 88 * kMs && offset % (11 * kMs) == 0)
      model.onMark(mark(MarkType::PhaseBegin, step, t, offset % (22 * kMs) == 0 ? "forward" : "backward"));
    if (offset == 90 * kMs) model.onMark(mark(MarkType::PhaseBegin, step, t, "optimizer"));
    std::vector<AccessEvidence> batch;
    for (int i = 0; i < 4; ++i) batch.push_back(sample((offset < period / 2 ? kRegionA : kRegionB) + page(rng) * kPage));
    model.ingest(batch, t);
    if ((t + kMs - t0) % (10 * kMs) == 0) model.advanceEpoch(t + kMs);
  }
  const uint64_t step = t0 + 20 * period;
  model.onMark(mark(MarkType::StepBegin, 20, step));
  model.onMark(mark(MarkType::PhaseBegin, 20, step, "forward"));
  model.advanceEpoch(step + 5 * kMs);
  EXPECT_EQ(model.clockOf(kTgid).anchorNs, step);
  const UnitHeat* a = unitAt(model.snapshot(), kRegionA);
  const UnitHeat* b = unitAt(model.snapshot(), kRegionB);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->nextUseInNs, 0u);
  // B's first bucket (of eight, 12.5 ms each) starts 50 ms into the step: 45 ms from now.
  EXPECT_EQ(b->nextUseInNs, 45 * kMs);
}

// A period learned from marks is dropped once the marks stop (an evaluation loop, a finished
// training loop): for the hint when one is configured, else for no period.
TEST(HeatModel, APeriodFromMarksIsDroppedWhenTheMarksStop) {
  for (const uint32_t hintMs : {0U, 250U}) {
    auto config = baseConfig();
    HeatModel model(config);
    const uint64_t t0 = 1000 * kMs;
    for (uint64_t s = 0; s < 10; ++s) {
      model.onMark(mark(MarkType::StepBegin, s, t0 + s * 100 * kMs));
      model.advanceEpoch(t0 + s * 100 * kMs + 10 * kMs);
    }
    ASSERT_EQ(model.clockOf(kTgid).source, tt::heat::PeriodSource::Marks);
    config.set_step_period_hint_ms(hintMs);
    model.reconfigure(config);
    const uint64_t last = t0 + 9 * 100 * kMs;
    uint64_t t = last + 10 * kMs;
    for (; t <= last + tt::heat::kStaleMarkSteps * 100 * kMs; t += 10 * kMs) model.advanceEpoch(t);
    EXPECT_EQ(model.clockOf(kTgid).source, tt::heat::PeriodSource::Marks) << "dropped before " << tt::heat::kStaleMarkSteps << " steps";
    model.advanceEpoch(t + 20 * kMs);
    const auto clock = model.clockOf(kTgid);
    if (hintMs == 0) {
      EXPECT_FALSE(clock.known()) << tt::heat::periodSourceName(clock.source) << " " << clock.periodNs;
    } else {
      EXPECT_EQ(clock.source, tt::heat::PeriodSource::Hint);
      EXPECT_EQ(clock.periodNs, 250 * kMs);
    }
    // Marks again: their period again.
    model.onMark(mark(MarkType::StepBegin, 100, t + 100 * kMs));
    model.onMark(mark(MarkType::StepBegin, 101, t + 180 * kMs));
    EXPECT_EQ(model.clockOf(kTgid).source, tt::heat::PeriodSource::Marks);
    EXPECT_EQ(model.clockOf(kTgid).periodNs, 80 * kMs);
  }
}

// A client that marks every 100th step of 200 ms (every 20 s) keeps its period between marks: the
// marks are stale after 16 of their usual gaps, not 16 steps.
TEST(HeatModel, MarksEveryHundredStepsKeepTheirPeriod) {
  HeatModel model(baseConfig());
  const uint64_t t0 = 1000 * kMs;
  uint64_t nextMark = 0;
  for (uint64_t t = t0; t <= t0 + 100'000 * kMs; t += 1000 * kMs) {
    for (; t0 + nextMark * 20'000 * kMs <= t; ++nextMark)
      model.onMark(mark(MarkType::StepBegin, nextMark * 100, t0 + nextMark * 20'000 * kMs));
    model.advanceEpoch(t);
    if (nextMark < 2) continue;
    const auto clock = model.clockOf(kTgid);
    EXPECT_EQ(clock.source, tt::heat::PeriodSource::Marks) << "at " << (t - t0) / kMs << " ms";
    EXPECT_EQ(clock.periodNs, 200 * kMs) << "at " << (t - t0) / kMs << " ms";
  }
}

// With one scale for the kind prior per process, a unit sampled once does not rank below one of the
// same kind never sampled.
TEST(HeatModel, ASampledUnitDoesNotRankBelowAnUnsampledOneOfTheSameKind) {
  HeatModel model(baseConfig());
  constexpr uint64_t kRegionC = 0x30000000;
  ASSERT_TRUE(model.addRegion(region(1, kRegionA, kPagesPerRegion, RegionKind::Weight)).ok());
  ASSERT_TRUE(model.addRegion(region(2, kRegionB, kPagesPerRegion, RegionKind::Weight)).ok());
  ASSERT_TRUE(model.addRegion(region(3, kRegionC, kPagesPerRegion, RegionKind::Weight)).ok());
  std::mt19937_64 rng(2);
  const uint64_t t0 = 1000 * kMs, period = 100 * kMs;
  for (uint64_t t = t0; t < t0 + 10 * period; t += kMs) {
    if ((t - t0) % period == 0) model.onMark(mark(MarkType::StepBegin, (t - t0) / period, t));
    std::vector<AccessEvidence> batch;
    for (int i = 0; i < 4; ++i) batch.push_back(sample(kRegionA + rng() % kPagesPerRegion * kPage));
    if (t == t0 + 5 * period + 30 * kMs) batch.push_back(sample(kRegionB));
    model.ingest(batch, t);
    if ((t + kMs - t0) % (10 * kMs) == 0) model.advanceEpoch(t + kMs);
  }
  const UnitHeat* b = unitAt(model.snapshot(), kRegionB);
  const UnitHeat* c = unitAt(model.snapshot(), kRegionC);
  ASSERT_TRUE(b && c);
  EXPECT_GE(b->accessesPerPagePerStep, c->accessesPerPagePerStep);
  EXPECT_GE(b->features[tt::heat::kReuse], c->features[tt::heat::kReuse]);
}

// A period found in the sample stream is dropped once the stream stops repeating.
TEST(HeatModel, APeriodFromSamplesIsDroppedWhenTheStreamStopsRepeating) {
  HeatModel model(baseConfig());
  ASSERT_TRUE(model.addRegion(region(1, kRegionA, kPagesPerRegion)).ok());
  ASSERT_TRUE(model.addRegion(region(2, kRegionB, kPagesPerRegion)).ok());
  const uint64_t t0 = 1000 * kMs;
  runTwoPhase(model, t0, 40, false, 12);
  ASSERT_EQ(model.clockOf(kTgid).source, tt::heat::PeriodSource::Samples);
  // Random accesses over both regions for longer than the detector's history (1024 bins of 5 ms)
  // and two of its re-estimates.
  std::mt19937_64 rng(4);
  std::uniform_int_distribution<uint64_t> page(0, 2 * kPagesPerRegion - 1);
  const uint64_t from = t0 + 40 * 100 * kMs;
  for (uint64_t t = from; t < from + 8000 * kMs; t += kMs) {
    std::vector<AccessEvidence> batch;
    for (int i = 0; i < 4; ++i) {
      const uint64_t p = page(rng);
      batch.push_back(sample((p < kPagesPerRegion ? kRegionA : kRegionB) + (p % kPagesPerRegion) * kPage));
    }
    model.ingest(batch, t);
    if ((t + kMs - from) % (10 * kMs) == 0) model.advanceEpoch(t + kMs);
  }
  const auto clock = model.clockOf(kTgid);
  EXPECT_FALSE(clock.known()) << tt::heat::periodSourceName(clock.source) << " " << clock.periodNs;
}

// The daemon hands the model each epoch's evidence as one span, without the time of each access
// (ingest(batch, since, now)): the stream then shows periods of two epochs and more, and this
// finds them. A 2.5 s step of two halves read in 500 ms epochs.
TEST(HeatModel, StepPeriodFromEvidenceDeliveredOncePerEpoch) {
  auto config = baseConfig();
  config.set_period_bin_ms(50);
  config.set_period_history_bins(1024);
  config.set_period_max_ms(5000);
  HeatModel model(config);
  ASSERT_TRUE(model.addRegion(region(1, kRegionA, kPagesPerRegion)).ok());
  ASSERT_TRUE(model.addRegion(region(2, kRegionB, kPagesPerRegion)).ok());
  const uint64_t t0 = 1000 * kMs, period = 2500 * kMs, epoch = 500 * kMs;
  for (uint64_t t = t0; t < t0 + 48 * period; t += epoch) {
    const bool firstHalf = (t - t0) % period < period / 2;
    tt::EvidenceBatch batch;
    for (uint64_t p = 0; p < kPagesPerRegion; ++p) batch.records.push_back(sample((firstHalf ? kRegionA : kRegionB) + p * kPage, 4));
    model.ingest(batch, t, t + epoch, 1.0);
    model.advanceEpoch(t + epoch);
  }
  const auto clock = model.clockOf(kTgid);
  EXPECT_EQ(clock.source, tt::heat::PeriodSource::Samples);
  EXPECT_NEAR(static_cast<double>(clock.periodNs), static_cast<double>(period), 0.05 * static_cast<double>(period));
}

TEST(HeatModel, ConfiguredHintIsUsedWithoutMarks) {
  auto config = baseConfig();
  config.set_step_period_hint_ms(250);
  HeatModel model(config);
  std::vector<AccessEvidence> batch{sample(0x1000)};
  model.ingest(batch, 10 * kMs);
  model.advanceEpoch(20 * kMs);
  EXPECT_EQ(model.clockOf(kTgid).source, tt::heat::PeriodSource::Hint);
  EXPECT_EQ(model.clockOf(kTgid).periodNs, 250 * kMs);
  // Live: a new hint replaces it; a cleared one leaves no period (nothing else gives one here).
  config.set_step_period_hint_ms(400);
  model.reconfigure(config);
  model.advanceEpoch(30 * kMs);
  EXPECT_EQ(model.clockOf(kTgid).periodNs, 400 * kMs);
  config.set_step_period_hint_ms(0);
  model.reconfigure(config);
  model.advanceEpoch(40 * kMs);
  EXPECT_FALSE(model.clockOf(kTgid).known());
}

TEST(HeatModel, LookaheadRaisesTheNextPhaseBeforeItStarts) {
  HeatModel model(baseConfig());
  ASSERT_TRUE(model.addRegion(region(1, kRegionA, kPagesPerRegion)).ok());
  ASSERT_TRUE(model.addRegion(region(2, kRegionB, kPagesPerRegion)).ok());
  const uint64_t t0 = 1000 * kMs;
  runTwoPhase(model, t0, 20, true, 13);
  // Step 20 starts at t0 + 2000 ms. B's phase starts 50 ms into it.
  const uint64_t step = t0 + 2000 * kMs;
  model.onMark(mark(MarkType::StepBegin, 20, step));
  model.advanceEpoch(step + 10 * kMs);
  const UnitHeat* a = unitAt(model.snapshot(), kRegionA);
  const UnitHeat* b = unitAt(model.snapshot(), kRegionB);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->nextUseInNs, 0u);
  EXPECT_GT(a->features[tt::heat::kReuse], b->features[tt::heat::kReuse]);  // B is far off
  model.advanceEpoch(step + 40 * kMs);  // 10 ms before B's phase
  a = unitAt(model.snapshot(), kRegionA);
  b = unitAt(model.snapshot(), kRegionB);
  ASSERT_TRUE(a && b);
  EXPECT_GT(b->nextUseInNs, 0u);
  EXPECT_LE(b->nextUseInNs, 12 * kMs + 500'000);
  EXPECT_GT(b->features[tt::heat::kReuse], 0.5);
  EXPECT_GT(b->expectedAccessesPerPage, 0.0);
}

// Every page of the region at `base`, `weight` accesses each.
tt::EvidenceBatch regionBatch(uint64_t base, uint32_t weight) {
  tt::EvidenceBatch b;
  for (uint64_t p = 0; p < kPagesPerRegion; ++p) b.records.push_back(sample(base + p * kPage, weight));
  return b;
}

// A in the first half of each of 30 steps from t0 and B in the second, each read at the end of
// its half (A's read covering its half from `aFrom` ns into the step), ten accesses per page per
// step each. 100 ms into the next step (bucket 1 of 8 at 800 ms steps): A is in use, B is needed
// when its half starts. Stamped at their reads, A's accesses would all sit in bucket 4 and B's in
// bucket 0 of the next step, and A would look idle now.
void expectHalvesPlacedInTheirBuckets(const tensortier::v1::PolicyConfig& config, uint64_t t0, uint64_t period,
                                      uint64_t aFrom) {
  constexpr uint64_t kSteps = 30;
  HeatModel model(config);
  ASSERT_TRUE(model.addRegion(region(1, kRegionA, kPagesPerRegion)).ok());
  ASSERT_TRUE(model.addRegion(region(2, kRegionB, kPagesPerRegion)).ok());
  for (uint64_t s = 0; s < kSteps; ++s) {
    const uint64_t begin = t0 + s * period;
    model.onMark(mark(MarkType::StepBegin, s, begin));
    model.ingest(regionBatch(kRegionA, 10), begin + aFrom, begin + period / 2, 1.0);
    model.ingest(regionBatch(kRegionB, 10), begin + period / 2, begin + period, 1.0);
    model.advanceEpoch(begin + period);
  }
  model.onMark(mark(MarkType::StepBegin, kSteps, t0 + kSteps * period));
  model.advanceEpoch(t0 + kSteps * period + 100 * kMs);
  const UnitHeat* a = unitAt(model.snapshot(), kRegionA);
  const UnitHeat* b = unitAt(model.snapshot(), kRegionB);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->nextUseInNs, 0U);
  EXPECT_NEAR(static_cast<double>(b->nextUseInNs), static_cast<double>(period / 2 - 100 * kMs), 1.0 * kMs);
  // Ten accesses per page per step each (and the kind prior's share: 1/(1 + epochs with evidence)).
  EXPECT_NEAR(a->accessesPerPagePerStep, 10.0, 0.5);
  EXPECT_NEAR(b->accessesPerPagePerStep, 10.0, 0.5);
}

// Sources read once per epoch hand over what they gathered since the last read. The schedule must
// place it over that span, not at its end; a span of several steps counts whole in the last one.
TEST(HeatModel, EvidenceGatheredOverASpanIsSpreadOverItsBuckets) {
  auto config = baseConfig();  // 8 buckets
  config.set_heat_half_life_ms(100000);
  const uint64_t period = 800 * kMs, t0 = 1000 * kMs;
  constexpr uint64_t kSteps = 30;
  expectHalvesPlacedInTheirBuckets(config, t0, period, 0);

  // One read every four steps: it counts whole in the step it ends in, spread over every bucket (a
  // unit read that way is in use all through the step as far as the evidence can tell).
  HeatModel slow(config);
  ASSERT_TRUE(slow.addRegion(region(1, kRegionA, kPagesPerRegion)).ok());
  for (uint64_t r = 1; r <= kSteps; ++r) {
    for (uint64_t k = 0; k < 4; ++k) slow.onMark(mark(MarkType::StepBegin, 4 * (r - 1) + k, t0 + (4 * (r - 1) + k) * period));
    const uint64_t now = t0 + r * 4 * period;
    slow.ingest(regionBatch(kRegionA, 40), now - 4 * period, now, 1.0);
    slow.advanceEpoch(now);
  }
  const UnitHeat* s = unitAt(slow.snapshot(), kRegionA);
  ASSERT_TRUE(s);
  EXPECT_NEAR(s->accessesPerPagePerStep, 40.0, 2.0);
  EXPECT_EQ(s->nextUseInNs, 0U);
}

// Tenure (UnitHeat::steadySteps): a unit's run of use is timed from its first evidence, in steps,
// at the level it held over the run, and ends when more than kSteadyGapSteps steps pass without
// evidence. A region given only a prior by its kind and the phase marks has no run.
TEST(HeatModel, SteadyUseIsTimedFromItsFirstEvidenceAndEndsAfterAGap) {
  const uint64_t period = 100 * kMs, t0 = 1000 * kMs;
  HeatModel model(baseConfig());
  ASSERT_TRUE(model.addRegion(region(1, kRegionA, kPagesPerRegion)).ok());
  ASSERT_TRUE(model.addRegion(region(2, kRegionB, kPagesPerRegion, RegionKind::Weight)).ok());
  uint64_t step = 0;
  // One step: marks (with a forward phase, which gives the weights region B its prior) and, when
  // `touched`, ten accesses per page of A over the step, read at its end.
  auto runStep = [&](bool touched) {
    const uint64_t begin = t0 + step * period;
    model.onMark(mark(MarkType::StepBegin, step, begin));
    model.onMark(mark(MarkType::PhaseBegin, step, begin, "forward"));
    if (touched) model.ingest(regionBatch(kRegionA, 10), begin, begin + period, 1.0);
    model.advanceEpoch(begin + period);
    ++step;
  };
  // A missing unit reads as all zeros, which the first checks of each would catch.
  auto at = [&](uint64_t start) {
    const UnitHeat* u = unitAt(model.snapshot(), start);
    return u != nullptr ? *u : UnitHeat{};
  };
  auto a = [&] { return at(kRegionA); };
  auto b = [&] { return at(kRegionB); };

  for (int k = 0; k < 30; ++k) runStep(true);
  ASSERT_EQ(model.clockOf(kTgid).periodNs, period);
  // The first evidence covers step 0 (read over it): 30 steps, now the end of step 29.
  EXPECT_NEAR(a().steadySteps, 30.0, 1e-6);
  EXPECT_NEAR(a().accessesPerPagePerStep, 10.0, 0.5);
  EXPECT_NEAR(a().steadyAccessesPerPagePerStep, 10.0, 0.5);
  EXPECT_GT(b().accessesPerPagePerStep, 0.0) << "the prior should give B a schedule";
  EXPECT_EQ(b().steadySteps, 0.0);
  EXPECT_EQ(b().steadyAccessesPerPagePerStep, 0.0);

  // Four idle steps are a gap the run survives (sampling misses a lightly used unit); a fifth ends it.
  for (int k = 0; k < 4; ++k) runStep(false);
  EXPECT_NEAR(a().steadySteps, 34.0, 1e-6);
  // The run's level: 300 accesses per page over 34 steps; the schedule still says 10 (unobserved
  // steps are not learned from as idle), and the level is the lower of the two.
  EXPECT_NEAR(a().accessesPerPagePerStep, 10.0, 0.5);
  EXPECT_NEAR(a().steadyAccessesPerPagePerStep, 300.0 / 34, 0.01);
  runStep(false);
  EXPECT_EQ(a().steadySteps, 0.0);
  EXPECT_EQ(a().steadyAccessesPerPagePerStep, 0.0);

  // Used again: a new run, timed from its own first evidence.
  for (int k = 0; k < 3; ++k) runStep(true);
  EXPECT_NEAR(a().steadySteps, 3.0, 1e-6);

  // Then read once every ten steps over the whole span (a source read once per epoch, the epoch
  // longer than the gap): the evidence may stand for a use anywhere in its span, so the run goes on.
  for (int k = 0; k < 3; ++k) {
    const uint64_t begin = t0 + step * period;
    for (uint64_t j = 0; j < 10; ++j) model.onMark(mark(MarkType::StepBegin, step + j, begin + j * period));
    step += 10;
    model.ingest(regionBatch(kRegionA, 10), begin, t0 + step * period, 1.0);
    model.advanceEpoch(t0 + step * period);
  }
  EXPECT_NEAR(a().steadySteps, 33.0, 1e-6);
  // Its level is per observed step, as the schedule learns it (10 a read): 60 accesses over 33
  // steps read ten at a time are 3.3 observations, 18 each, held at the schedule's 10. Divided by
  // the 33 steps instead, a source read once per epoch would look k-fold colder than it is (1.8).
  EXPECT_NEAR(a().steadyAccessesPerPagePerStep, 10.0, 0.5);
}

// The daemon plans once per epoch: what a phase needs before the next plan must be fetched in this
// one, so the look-ahead reaches past it.
TEST(HeatModel, LookaheadReachesPastTheNextPlan) {
  HeatModel often(baseConfig()), epochal(baseConfig());
  const uint64_t t0 = 1000 * kMs;
  for (HeatModel* m : {&often, &epochal}) {
    ASSERT_TRUE(m->addRegion(region(1, kRegionA, kPagesPerRegion)).ok());
    ASSERT_TRUE(m->addRegion(region(2, kRegionB, kPagesPerRegion)).ok());
    runTwoPhase(*m, t0, 20, true, 13);
  }
  epochal.setPlanInterval(40 * kMs);
  // 10 ms into step 20: B's phase begins in 40 ms, before the next plan of a 40 ms epoch.
  const uint64_t step = t0 + 2000 * kMs;
  for (HeatModel* m : {&often, &epochal}) {
    m->onMark(mark(MarkType::StepBegin, 20, step));
    m->advanceEpoch(step + 10 * kMs);
  }
  const UnitHeat* soon = unitAt(often.snapshot(), kRegionB);
  const UnitHeat* inTime = unitAt(epochal.snapshot(), kRegionB);
  ASSERT_TRUE(soon && inTime);
  EXPECT_GE(epochal.snapshot().horizonNs, 40 * kMs);
  EXPECT_LT(often.snapshot().horizonNs, 40 * kMs);
  EXPECT_GT(inTime->expectedAccessesPerPage, 2 * soon->expectedAccessesPerPage);

  // Each process has its own look-ahead; one without a step schedule has none (0), and the
  // snapshot's mean is over the scheduled ones.
  RegionInfo unscheduled = region(3, kRegionA, kPagesPerRegion);
  unscheduled.tgid = kTgid + 1;
  ASSERT_TRUE(epochal.addRegion(unscheduled).ok());
  epochal.advanceEpoch(step + 20 * kMs);
  const HeatSnapshot& snap = epochal.snapshot();
  ASSERT_EQ(snap.processes.size(), 2u);
  for (const auto& p : snap.processes) {
    if (p.tgid == kTgid) {
      EXPECT_GE(p.horizonNs, 40 * kMs);
      EXPECT_EQ(p.horizonNs, snap.horizonNs);
    } else {
      EXPECT_EQ(p.horizonNs, 0u) << "a process without a schedule";
    }
  }
}

// A in the first half of 800 ms steps, B in the second, ten accesses per page per step each, and
// 100 ms into a step: A is in use for 300 ms more. Its remainder counts only until a successor of
// its size must start moving in: A's demotion and the successor's promotion (256 KiB each) plus
// the next plan. At 5.24288 MB/s (100 ms for both moves) and 100 ms plans that is 200 ms before A's
// half ends, so 100 ms of its 300 ms count (2.5 of the 7.5 accesses per page left); with moves and
// plans that take no time, all of it. The cut is at most margin / (1 + margin) of A's 400 ms
// burst: with the default margin 0.25, 80 ms, however long the lead (so 220 of the 300 ms count,
// 5.5), and the value falls steadily through the burst to nothing 80 ms before its end. C, used
// all step, has no end to cut.
TEST(HeatModel, ABurstInProgressCountsUntilItsSuccessorMustMoveIn) {
  constexpr uint64_t kRegionC = 0x30000000;
  const double bothMovesIn100Ms = 2.0 * kPagesPerRegion * kPage / 0.1;
  auto remainder = [](double margin, double bytesPerSecond, uint64_t planIntervalNs, uint64_t intoStepNs = 100 * kMs,
                      uint64_t unitStart = kRegionA) {
    auto config = baseConfig();
    config.set_hysteresis_margin(margin);
    HeatModel model(config);
    EXPECT_TRUE(model.addRegion(region(1, kRegionA, kPagesPerRegion)).ok());
    EXPECT_TRUE(model.addRegion(region(2, kRegionB, kPagesPerRegion)).ok());
    EXPECT_TRUE(model.addRegion(region(3, kRegionC, kPagesPerRegion)).ok());
    model.setMigrationRates({bytesPerSecond, bytesPerSecond});
    model.setPlanInterval(planIntervalNs);
    const uint64_t t0 = 1000 * kMs, period = 800 * kMs;
    for (uint64_t s = 0; s < 30; ++s) {
      const uint64_t begin = t0 + s * period;
      model.onMark(mark(MarkType::StepBegin, s, begin));
      model.ingest(regionBatch(kRegionA, 10), begin, begin + period / 2, 1.0);
      model.ingest(regionBatch(kRegionB, 10), begin + period / 2, begin + period, 1.0);
      model.ingest(regionBatch(kRegionC, 20), begin, begin + period, 1.0);
      model.advanceEpoch(begin + period);
    }
    model.onMark(mark(MarkType::StepBegin, 30, t0 + 30 * period));
    model.advanceEpoch(t0 + 30 * period + intoStepNs);
    const UnitHeat* u = unitAt(model.snapshot(), unitStart);
    EXPECT_TRUE(u);
    if (!u) return -1.0;
    EXPECT_EQ(u->nextUseInNs, 0U);
    return u->expectedAccessesPerPage;
  };
  // A margin large enough (10: up to 91% of the burst) that the lead alone sets the cut.
  EXPECT_NEAR(remainder(10, 1e15, 0), 7.5, 0.3) << "with instant moves the whole remainder counts";
  EXPECT_NEAR(remainder(10, bothMovesIn100Ms, 100 * kMs), 2.5, 0.3)
      << "the part after the successor must start moving in still counted";
  EXPECT_NEAR(remainder(10, bothMovesIn100Ms, 150 * kMs), 1.25, 0.3) << "a cut within a bucket (250 ms lead)";
  EXPECT_NEAR(remainder(10, bothMovesIn100Ms, 100 * kMs, 150 * kMs), 1.25, 0.3) << "from part-way into a bucket";
  // The default margin: a fifth of the burst at most.
  EXPECT_NEAR(remainder(0.25, bothMovesIn100Ms, 100 * kMs), 5.5, 0.3) << "more cut than a fifth of the burst";
  EXPECT_NEAR(remainder(0.25, bothMovesIn100Ms, 400 * kMs), 5.5, 0.3) << "a lead longer than the remainder";
  EXPECT_NEAR(remainder(0, bothMovesIn100Ms, 100 * kMs), 7.5, 0.3) << "no margin, no cut";
  double previous = 1e9;
  for (uint64_t into : {0, 50, 100, 200, 300, 350}) {
    const double v = remainder(0.25, bothMovesIn100Ms, 100 * kMs, into * kMs);
    EXPECT_LE(v, previous) << into << " ms into the step: the value rose within the burst";
    previous = v;
  }
  EXPECT_NEAR(previous, 0.0, 1e-9) << "the last 80 ms of the burst still counted";
  const double wholeStep = remainder(0.25, 1e15, 0, 100 * kMs, kRegionC);
  EXPECT_GT(wholeStep, 15.0) << "a unit used all step";
  EXPECT_NEAR(remainder(10, bothMovesIn100Ms, 400 * kMs, 100 * kMs, kRegionC), wholeStep, 1e-9)
      << "a unit used all step has no end to cut";
}

// The look-ahead covers every phase whose tensors take longer to fetch than the time left until
// it: a 1 GiB tensor needed from 400 ms into an 800 ms step takes 1.07 s at the default 1 GB/s,
// so 1 ms into the step it already counts in full. A horizon that ended at the first bucket with
// nothing new to fetch (the next one) valued it at an eighth.
TEST(HeatModel, TheHorizonCoversALargeTensorNeededLaterInTheStep) {
  HeatModel model(baseConfig());
  constexpr uint64_t kLargePages = 262144;  // 1 GiB
  ASSERT_TRUE(model.addRegion(region(1, kRegionA, kPagesPerRegion)).ok());
  ASSERT_TRUE(model.addRegion(region(2, kRegionB, kLargePages)).ok());
  std::mt19937_64 rng(17);
  const uint64_t t0 = 1000 * kMs, period = 800 * kMs;
  for (uint64_t t = t0; t < t0 + 20 * period; t += kMs) {
    const uint64_t offset = (t - t0) % period;
    if (offset == 0) model.onMark(mark(MarkType::StepBegin, (t - t0) / period, t));
    std::vector<AccessEvidence> batch;
    for (int i = 0; i < 4; ++i) {
      if (offset < 400 * kMs) batch.push_back(sample(kRegionA + rng() % kPagesPerRegion * kPage));
      else if (offset < 600 * kMs) batch.push_back(sample(kRegionB + rng() % kLargePages * kPage));
    }
    model.ingest(batch, t);
    if ((t + kMs - t0) % (10 * kMs) == 0) model.advanceEpoch(t + kMs);
  }
  const uint64_t step = t0 + 20 * period;
  model.onMark(mark(MarkType::StepBegin, 20, step));
  model.advanceEpoch(step + kMs);
  EXPECT_GE(model.snapshot().horizonNs, 400 * kMs);
  const UnitHeat* large = unitAt(model.snapshot(), kRegionB);
  ASSERT_TRUE(large);
  ASSERT_GT(large->accessesPerPagePerStep, 0.0);
  EXPECT_NEAR(large->expectedAccessesPerPage, large->accessesPerPagePerStep, 0.1 * large->accessesPerPagePerStep);
}

// Marks reach the daemon's model in a batch once per epoch, each with its own time, so a segment
// of the kind prior is a whole step: it is spread over the step's buckets. All of it in the
// bucket of the segment's midpoint made a weight tensor, in use all step, look unused but for a
// spike half-way through.
TEST(HeatModel, TheKindPriorOfAStepIsSpreadOverItsBuckets) {
  auto config = baseConfig();
  config.set_schedule_buckets(32);
  HeatModel model(config);
  ASSERT_TRUE(model.addRegion(region(1, kRegionA, kPagesPerRegion, RegionKind::Weight)).ok());
  const uint64_t t0 = 1000 * kMs, period = 100 * kMs;
  uint64_t nextStep = 0;
  for (uint64_t e = 1; e <= 12; ++e) {
    const uint64_t end = t0 + e * 1000 * kMs + 3 * kMs;  // 3 ms into a step
    for (; t0 + nextStep * period <= end; ++nextStep) model.onMark(mark(MarkType::StepBegin, nextStep, t0 + nextStep * period));
    model.advanceEpoch(end);
    if (e < 10) continue;
    const UnitHeat* w = unitAt(model.snapshot(), kRegionA);
    ASSERT_TRUE(w);
    EXPECT_EQ(w->nextUseInNs, 0u) << "epoch " << e;
    EXPECT_GT(w->expectedAccessesPerPage, 0.5 * w->accessesPerPagePerStep) << "epoch " << e;
  }
}

// CLOCK_MONOTONIC after half a year of uptime (above 2^53 ns a double has 2 ns steps): the spread
// still ends and puts each half of the step where it belongs.
TEST(HeatModel, SpreadingWorksAfterMonthsOfUptime) {
  auto config = baseConfig();
  config.set_heat_half_life_ms(100000);
  expectHalvesPlacedInTheirBuckets(config, (uint64_t{200} * 86400 * 1000) * kMs + 1, 800 * kMs + 3, 7);
}

TEST(HeatModel, RegionHintsAndPhaseMarksAloneGiveASchedule) {
  auto config = baseConfig();
  config.set_lookahead_step_fraction(0);  // judge the schedule itself, not the look-ahead horizon
  HeatModel model(config);
  ASSERT_TRUE(model.addRegion(region(1, 0x10000000, 64, RegionKind::Weight)).ok());
  ASSERT_TRUE(model.addRegion(region(2, 0x20000000, 64, RegionKind::Activation)).ok());
  ASSERT_TRUE(model.addRegion(region(3, 0x30000000, 64, RegionKind::OptimizerState)).ok());
  const uint64_t t0 = 1000 * kMs;
  for (uint64_t s = 0; s < 12; ++s) {
    const uint64_t step = t0 + s * 100 * kMs;
    model.onMark(mark(MarkType::StepBegin, s, step));
    model.onMark(mark(MarkType::PhaseBegin, s, step, "forward"));
    for (uint64_t e = 10; e <= 100; e += 10) {
      if (e == 40) model.onMark(mark(MarkType::PhaseBegin, s, step + 35 * kMs, "backward"));
      if (e == 80) model.onMark(mark(MarkType::PhaseBegin, s, step + 75 * kMs, "optimizer"));
      model.advanceEpoch(step + e * kMs);
    }
  }
  const uint64_t step = t0 + 1200 * kMs;
  model.onMark(mark(MarkType::StepBegin, 12, step));
  model.advanceEpoch(step + 10 * kMs);  // forward
  const auto* act = unitAt(model.snapshot(), 0x20000000);
  const auto* opt = unitAt(model.snapshot(), 0x30000000);
  ASSERT_TRUE(act && opt);
  EXPECT_GT(act->features[tt::heat::kReuse], opt->features[tt::heat::kReuse]);
  EXPECT_EQ(act->nextUseInNs, 0u);
  EXPECT_GT(opt->nextUseInNs, 50 * kMs);
  model.advanceEpoch(step + 80 * kMs);  // optimizer
  act = unitAt(model.snapshot(), 0x20000000);
  opt = unitAt(model.snapshot(), 0x30000000);
  ASSERT_TRUE(act && opt);
  EXPECT_GT(opt->features[tt::heat::kReuse], act->features[tt::heat::kReuse]);
  EXPECT_EQ(opt->nextUseInNs, 0u);
}

TEST(HeatModel, RemovingRegionsAndProcessesForgetsThem) {
  HeatModel model(baseConfig());
  ASSERT_TRUE(model.addRegion(region(1, 0x100000, 16)).ok());
  ASSERT_TRUE(model.addRegion(region(2, 0x200000, 16)).ok());
  std::vector<AccessEvidence> batch{sample(0x100000 + 3 * kPage, 5), sample(0x200000 + 3 * kPage, 5),
                                     sample(0x100000 + 16 * kPage, 5)};  // the last one just past region 1
  model.ingest(batch, 5 * kMs);
  model.advanceEpoch(10 * kMs);
  EXPECT_EQ(model.snapshot().units.size(), 3u);  // the two regions, the chunk of the page past region 1
  EXPECT_GT(model.pageHeat(kTgid, 0x100000 + 3 * kPage, 10 * kMs), 0.0);
  model.removeRegion(1);
  model.advanceEpoch(20 * kMs);
  size_t regions = 0;
  for (const auto& u : model.snapshot().units) {
    EXPECT_NE(u.regionId, 1u);
    regions += u.regionId != 0 ? 1 : 0;
  }
  EXPECT_EQ(regions, 1u);  // region 2 (besides, chunks of the unregistered pages sampled)
  // Its per-page heat goes with it (a region registered there next starts afresh); others' stays.
  EXPECT_EQ(model.pageHeat(kTgid, 0x100000 + 3 * kPage, 20 * kMs), 0.0);
  EXPECT_GT(model.pageHeat(kTgid, 0x100000 + 16 * kPage, 20 * kMs), 0.0);
  EXPECT_GT(model.pageHeat(kTgid, 0x200000 + 3 * kPage, 20 * kMs), 0.0);
  model.removeRegion(2);
  EXPECT_TRUE(model.addRegion(region(1, 0x100000, 16)).ok());  // the id and range are free again
  model.removeProcess(kTgid);
  model.advanceEpoch(30 * kMs);
  EXPECT_TRUE(model.snapshot().units.empty());
}

TEST(HeatModel, HottestPagesAreOrdered) {
  HeatModel model(baseConfig());
  std::vector<AccessEvidence> batch{sample(0x1000, 3), sample(0x2000, 9), sample(0x3000, 1)};
  model.ingest(batch, 10 * kMs);
  const auto top = model.hottestPages(2, 10 * kMs);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].page, 0x2000u);
  EXPECT_EQ(top[1].page, 0x1000u);
  EXPECT_EQ(top[0].tgid, kTgid);
}

// The pid-filtered variant: only that process's pages, hottest first, even when another
// process's pages are hotter; tgid 0 is every process.
TEST(HeatModel, HottestPagesOfOneProcess) {
  HeatModel model(baseConfig());
  constexpr pid_t kOther = 78;
  std::vector<AccessEvidence> batch{sample(0x1000, 3), sample(0x2000, 9), sample(0x3000, 1)};
  for (auto [page, weight] : {std::pair<uint64_t, uint32_t>{0x1000, 50}, {0x5000, 40}}) {
    AccessEvidence e = sample(page, weight);
    e.tgid = kOther;
    batch.push_back(e);
  }
  model.ingest(batch, 10 * kMs);
  auto top = model.hottestPages(10, 10 * kMs, kTgid);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].page, 0x2000u);
  EXPECT_EQ(top[1].page, 0x1000u);
  EXPECT_EQ(top[2].page, 0x3000u);
  for (const auto& p : top) EXPECT_EQ(p.tgid, kTgid);
  top = model.hottestPages(1, 10 * kMs, kOther);
  ASSERT_EQ(top.size(), 1u);
  EXPECT_EQ(top[0].tgid, kOther);
  EXPECT_EQ(top[0].page, 0x1000u);
  EXPECT_NEAR(top[0].heat, 50.0, 1e-6);
  EXPECT_TRUE(model.hottestPages(10, 10 * kMs, 4242).empty());
  top = model.hottestPages(10, 10 * kMs, 0);
  ASSERT_EQ(top.size(), 5u);
  EXPECT_EQ(top[0].tgid, kOther);
  EXPECT_EQ(top[2].tgid, kTgid);
  EXPECT_EQ(top[2].page, 0x2000u);
}

// The selection keeps only `limit` pages at a time: it must still find exactly the hottest, in
// order, among many pages over chunks decayed differently (checked against pageHeat of each).
TEST(HeatModel, HottestPagesAreTheHottestOfManyPages) {
  HeatModel model(baseConfig());
  std::mt19937 rng(7);
  std::vector<uint64_t> pages;
  for (uint64_t chunk = 0; chunk < 4; ++chunk) {
    std::vector<AccessEvidence> batch;
    for (uint64_t i = 0; i < tt::kBlockPages; i += 1 + rng() % 3) {
      const uint64_t page = 0x40000000 + chunk * tt::kBlockBytes + i * kPage;
      batch.push_back(sample(page, static_cast<uint32_t>(1 + rng() % 1000)));
      pages.push_back(page);
    }
    model.ingest(batch, (10 + 300 * chunk) * kMs);  // each chunk a different age at the query
  }
  const uint64_t now = 2000 * kMs;
  std::vector<std::pair<double, uint64_t>> expected;
  for (uint64_t page : pages) expected.emplace_back(model.pageHeat(kTgid, page, now), page);
  std::sort(expected.begin(), expected.end(), std::greater<>());
  const auto top = model.hottestPages(50, now);
  ASSERT_EQ(top.size(), 50u);
  for (size_t i = 0; i < top.size(); ++i) {
    EXPECT_DOUBLE_EQ(top[i].heat, expected[i].first) << i;
    // Pages of equal heat may come in any order.
    const auto same = std::count_if(expected.begin(), expected.end(), [&](const auto& e) { return e.first == expected[i].first; });
    if (same == 1) {
      EXPECT_EQ(top[i].page, expected[i].second) << i;
    }
  }
  EXPECT_EQ(model.hottestPages(pages.size() + 10, now).size(), pages.size());
  EXPECT_TRUE(model.hottestPages(0, now).empty());
}

// In-kernel sources hand over blocks (a count per page of a 2 MiB chunk) instead of one record per
// page; the model folds a block's run of pages into each unit at once. That must be the same
// model: fed the same evidence as records and as blocks, over steps with marks, regions that
// split a chunk and a second process, the two agree on every unit, page and weight.
TEST(HeatModel, BlocksAreTheRecordsTheyStandFor) {
  const auto config = baseConfig();
  HeatModel byRecords(config), byBlocks(config);
  constexpr uint64_t kChunk = tt::kBlockBytes;
  constexpr uint64_t kBase = 64 * kChunk;
  // A region in the middle of the first chunk splits it into three units; the second chunk is
  // one unregistered unit; the third belongs to another process.
  for (HeatModel* m : {&byRecords, &byBlocks}) ASSERT_TRUE(m->addRegion(region(1, kBase + 100 * kPage, 50)).ok());
  constexpr pid_t kOther = kTgid + 1;
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<uint32_t> count(0, 6);
  const uint64_t period = 100 * kMs;
  for (uint64_t step = 0; step < 12; ++step) {
    const uint64_t t0 = (step + 1) * period;
    for (HeatModel* m : {&byRecords, &byBlocks}) m->onMark(mark(MarkType::StepBegin, step, t0));
    for (uint64_t epoch = 0; epoch < 4; ++epoch) {
      const uint64_t now = t0 + (epoch + 1) * 25 * kMs;
      tt::EvidenceBatch blocks;
      for (auto [tgid, base, kind] : {std::tuple{kTgid, kBase, tt::AccessKind::Load},
                                      std::tuple{kTgid, kBase, tt::AccessKind::Store},
                                      std::tuple{kTgid, kBase + kChunk, tt::AccessKind::Fault},
                                      std::tuple{kOther, kBase + 2 * kChunk, tt::AccessKind::Load}}) {
        tt::EvidenceBlock& b = blocks.blocks.emplace_back();
        b.tgid = tgid;
        b.base = base;
        b.kind = kind;
        b.weightPerCount = 3;
        // Phase-dependent: the region is busy in the first half of the step only.
        for (uint32_t i = 0; i < tt::kBlockPages; ++i) {
          const bool inRegion = base == kBase && i >= 100 && i < 150;
          const uint32_t n = count(rng);
          b.counts[i] = static_cast<uint8_t>(inRegion && epoch >= 2 ? 0 : n % 4 == 0 ? n : 0);
        }
      }
      const auto records = blocks.flattened();
      ASSERT_GT(records.size(), 100U);
      // A scale as a sampler that delivers 1 in 2 would pass.
      byRecords.ingest(std::span<const AccessEvidence>(records), now, 2.0);
      byBlocks.ingest(blocks, now, 2.0);
      byRecords.advanceEpoch(now);
      byBlocks.advanceEpoch(now);
    }
  }
  const HeatSnapshot& a = byRecords.snapshot();
  const HeatSnapshot& b = byBlocks.snapshot();
  ASSERT_EQ(a.units.size(), b.units.size());
  ASSERT_EQ(a.units.size(), 5U);  // three in the first chunk, one each in the others
  auto near = [](double x, double y) { return std::abs(x - y) <= 1e-9 * std::max({1.0, std::abs(x), std::abs(y)}); };
  for (size_t i = 0; i < a.units.size(); ++i) {
    const UnitHeat& x = a.units[i];
    const UnitHeat& y = b.units[i];
    EXPECT_EQ(x.tgid, y.tgid);
    EXPECT_EQ(x.start, y.start);
    EXPECT_EQ(x.length, y.length);
    EXPECT_GT(x.heat, 0) << i;
    EXPECT_TRUE(near(x.heat, y.heat)) << i << ": " << x.heat << " vs " << y.heat;
    EXPECT_TRUE(near(x.score, y.score)) << i;
    EXPECT_TRUE(near(x.expectedAccessesPerPage, y.expectedAccessesPerPage)) << i;
    EXPECT_TRUE(near(x.accessesPerPagePerStep, y.accessesPerPagePerStep)) << i;
    EXPECT_EQ(x.nextUseInNs, y.nextUseInNs) << i;
    for (size_t f = 0; f < tt::heat::kFeatureCount; ++f) EXPECT_TRUE(near(x.features[f], y.features[f])) << i << " " << f;
  }
  for (size_t f = 0; f < tt::heat::kFeatureCount; ++f) EXPECT_TRUE(near(a.weights[f], b.weights[f])) << f;
  ASSERT_EQ(a.processes.size(), b.processes.size());
  for (size_t p = 0; p < a.processes.size(); ++p) EXPECT_EQ(a.processes[p].clock.periodNs, b.processes[p].clock.periodNs);
  const uint64_t end = 13 * period;
  for (uint64_t page = kBase; page < kBase + 2 * kChunk; page += kPage)
    ASSERT_TRUE(near(byRecords.pageHeat(kTgid, page, end), byBlocks.pageHeat(kTgid, page, end))) << std::hex << page;
  // Per-page heat is rounded to its chunk's scale (block floating point): a block adds its pages
  // in the order of the records it stands for, so both round alike and count the same pages.
  EXPECT_EQ(a.trackedPages, b.trackedPages);
  EXPECT_GT(a.trackedPages, 0U);
  const auto topRecords = byRecords.hottestPages(64, end);
  const auto topBlocks = byBlocks.hottestPages(64, end);
  ASSERT_EQ(topRecords.size(), topBlocks.size());
  for (size_t i = 0; i < topRecords.size(); ++i) EXPECT_TRUE(near(topRecords[i].heat, topBlocks[i].heat)) << i;
  EXPECT_GT(byBlocks.pageHeat(kOther, kBase + 2 * kChunk + 4 * kPage, end) + byBlocks.pageHeat(kOther, kBase + 2 * kChunk, end), 0);
}

// Per-page heat is kept per 2 MiB chunk with evidence, and `max_tracked_pages` bounds the address
// space it covers: past it, the colder half of the chunks is forgotten (the units keep the model).
TEST(HeatModel, PerPageHeatKeepsTheHotterChunksWithinTheCap) {
  auto config = baseConfig();
  config.set_max_tracked_pages(2 * tt::kBlockPages);  // two chunks
  HeatModel model(config);
  const uint64_t t = 10 * kMs;
  std::vector<AccessEvidence> ev;
  // Chunk 1 gets three pages, chunk 0 one, both within the cap.
  ev.push_back(sample(0 * tt::kBlockBytes + 5 * kPage, 2));
  for (uint64_t p : {1, 2, 3}) ev.push_back(sample(1 * tt::kBlockBytes + p * kPage, 10));
  model.ingest(ev, t);
  model.advanceEpoch(t);
  EXPECT_EQ(model.snapshot().trackedPages, 4U);
  EXPECT_NEAR(model.pageHeat(kTgid, 1 * tt::kBlockBytes + 2 * kPage, t), 10.0, 1e-6);
  EXPECT_NEAR(model.pageHeat(kTgid, 5 * kPage, t), 2.0, 1e-6);
  EXPECT_EQ(model.pageHeat(kTgid, 6 * kPage, t), 0.0);
  // A third chunk exceeds the cap: one chunk (half the cap) stays, the hottest.
  ev = {sample(7 * tt::kBlockBytes, 1)};
  model.ingest(ev, t + kMs);
  model.advanceEpoch(t + kMs);
  EXPECT_EQ(model.snapshot().trackedPages, 3U);
  EXPECT_GT(model.pageHeat(kTgid, 1 * tt::kBlockBytes + 2 * kPage, t + kMs), 9.0);
  EXPECT_EQ(model.pageHeat(kTgid, 5 * kPage, t + kMs), 0.0);
  EXPECT_EQ(model.pageHeat(kTgid, 7 * tt::kBlockBytes, t + kMs), 0.0);
  const auto top = model.hottestPages(10, t + kMs);
  ASSERT_EQ(top.size(), 3U);
  for (const auto& p : top) EXPECT_EQ(p.page / tt::kBlockBytes, 1U);
  // A unit's heat does not depend on the page map: chunk 0's unit still has its accesses.
  const UnitHeat* u = unitAt(model.snapshot(), 0);
  ASSERT_NE(u, nullptr);
  EXPECT_GT(u->heat, 1.9);
}

// Evidence that counts nothing (weight 0) leaves no chunk of per-page heat behind, and a chunk
// without heat ranks coldest when the cap forgets chunks: the hottest chunk is the one kept.
TEST(HeatModel, ChunksWithoutHeatNeitherCountNorDisplaceHotChunks) {
  auto config = baseConfig();
  config.set_max_tracked_pages(2 * tt::kBlockPages);  // two chunks; past them one is kept
  HeatModel model(config);
  const uint64_t t = 10 * kMs;
  std::vector<AccessEvidence> ev;
  ev.push_back(sample(4 * tt::kBlockBytes + 3 * kPage, 0));
  model.ingest(ev, t);
  model.advanceEpoch(t);
  EXPECT_EQ(model.snapshot().trackedPages, 0U);
  EXPECT_TRUE(model.hottestPages(10, t).empty());
  // Two chunks with heat fill the cap: the weight-0 record took no room, so both stay.
  ev = {sample(1 * tt::kBlockBytes + 2 * kPage, 10), sample(7 * tt::kBlockBytes, 1)};
  model.ingest(ev, t + kMs);
  model.advanceEpoch(t + kMs);
  EXPECT_EQ(model.snapshot().trackedPages, 2U);
  EXPECT_NEAR(model.pageHeat(kTgid, 7 * tt::kBlockBytes, t + kMs), 1.0, 1e-3);
  // A block whose counts weigh nothing makes a chunk without heat, past the cap: it ranks
  // coldest, and the hottest chunk is the one kept.
  tt::EvidenceBatch weightless;
  weightless.blocks.push_back(tt::EvidenceBlock{});
  weightless.blocks.back().tgid = kTgid;
  weightless.blocks.back().base = 9 * tt::kBlockBytes;
  weightless.blocks.back().weightPerCount = 0;
  weightless.blocks.back().counts[5] = 3;
  model.ingest(weightless, t + 2 * kMs);
  model.advanceEpoch(t + 2 * kMs);
  const auto top = model.hottestPages(10, t + 2 * kMs);
  ASSERT_EQ(top.size(), 1U);
  EXPECT_EQ(top[0].page, 1 * tt::kBlockBytes + 2 * kPage);
  EXPECT_GT(top[0].heat, 9.0);
  EXPECT_EQ(model.snapshot().trackedPages, 1U);
}

// Per-page heat is a mantissa per page and a scale per chunk: decay multiplies the scale alone, so
// a cold page keeps its resolution however far the chunk decays (a per-page rounding would have
// taken a page of 3 steps to 0 within two half-lives).
TEST(HeatModel, ChunkHeatDecaysByItsScaleWithoutRoundingItsPages) {
  HeatModel model(baseConfig());  // half-life 1 s
  const uint64_t t0 = 1000 * kMs;
  // The chunk's first access sets its scale: 65535 accesses in the top mantissa make a step one
  // access, so the other page holds exactly 3 steps.
  std::vector<AccessEvidence> ev{sample(0x1000, 65535), sample(0x2000, 3)};
  model.ingest(ev, t0);
  EXPECT_EQ(model.pageHeat(kTgid, 0x1000, t0), 65535.0);
  EXPECT_EQ(model.pageHeat(kTgid, 0x2000, t0), 3.0);
  // Ten half-lives later an access to a third page of the chunk applies the decay (1/1024) to it.
  const uint64_t t1 = t0 + 10 * 1000 * kMs;
  ev = {sample(0x3000, 1)};
  model.ingest(ev, t1);
  const double f = std::exp2(-10.0);
  EXPECT_NEAR(model.pageHeat(kTgid, 0x1000, t1), 65535.0 * f, 1e-12 * 65535.0 * f);
  EXPECT_NEAR(model.pageHeat(kTgid, 0x2000, t1), 3.0 * f, 1e-12 * 3.0 * f);
  EXPECT_DOUBLE_EQ(model.pageHeat(kTgid, 0x1000, t1) / model.pageHeat(kTgid, 0x2000, t1), 65535.0 / 3.0);
  // The new access is 1024 steps of the decayed scale: exact too.
  EXPECT_NEAR(model.pageHeat(kTgid, 0x3000, t1), 1.0, 1e-12);
  model.advanceEpoch(t1);
  EXPECT_EQ(model.snapshot().trackedPages, 3U);
  // Between touches, reading a page decays it too.
  EXPECT_NEAR(model.pageHeat(kTgid, 0x2000, t1 + 1000 * kMs), 1.5 * f, 1e-12);
}

// When a page outgrows its mantissa the chunk is renormalised: the scale rises by a power of two,
// the hot page is exact to rounding (half a step), every other page is rounded to the new step,
// and a page that rounds to 0 stops counting as a page with heat, as does a later access worth
// less than half a step.
TEST(HeatModel, ChunkRenormalisesWhenAPageGetsFarHotterThanTheRest) {
  HeatModel model(baseConfig());
  const uint64_t t = 1000 * kMs;
  // First access: 3 accesses are the top mantissa, 65535 steps of 3/65535.
  std::vector<AccessEvidence> ev{sample(0x1000, 3), sample(0x2000, 3), sample(0x3000, 1), sample(0x6000, 1)};
  model.ingest(ev, t);
  model.advanceEpoch(t);
  EXPECT_EQ(model.snapshot().trackedPages, 4U);
  const double oldStep = 3.0 / 65535;
  EXPECT_NEAR(model.pageHeat(kTgid, 0x2000, t), 3.0, 1e-12);
  EXPECT_NEAR(model.pageHeat(kTgid, 0x3000, t), 1.0, 1e-12);  // 21845 steps

  // One page becomes 50001 times hotter than the rest: 150003 accesses are 3.3e9 old steps, and
  // the least power of two that brings them under 65535.5 is 2^16.
  ev = {sample(0x1000, 150000), sample(0x3000, 1)};
  model.ingest(ev, t);
  model.advanceEpoch(t);
  const double step = 65536 * oldStep;
  EXPECT_NEAR(model.pageHeat(kTgid, 0x1000, t), 150003.0, step / 2);
  // 3 accesses are 0.99998 of the new step: one step.
  EXPECT_NEAR(model.pageHeat(kTgid, 0x2000, t), step, 1e-12);
  EXPECT_NEAR(model.pageHeat(kTgid, 0x2000, t), 3.0, step / 2);
  // 1 access is a third of a step: rounded to 0, and the page no longer counts.
  EXPECT_EQ(model.pageHeat(kTgid, 0x6000, t), 0.0);
  // Nor does an access of that size added after the rescale to a page that rounded to 0.
  EXPECT_EQ(model.pageHeat(kTgid, 0x3000, t), 0.0);
  EXPECT_EQ(model.snapshot().trackedPages, 2U);
  const auto top = model.hottestPages(10, t);
  ASSERT_EQ(top.size(), 2U);
  EXPECT_EQ(top[0].page, 0x1000U);
  EXPECT_EQ(top[1].page, 0x2000U);

  // A new access below half a step is lost; one above it (2 accesses) counts as one step.
  ev = {sample(0x4000, 1), sample(0x5000, 2)};
  model.ingest(ev, t);
  model.advanceEpoch(t);
  EXPECT_EQ(model.pageHeat(kTgid, 0x4000, t), 0.0);
  EXPECT_NEAR(model.pageHeat(kTgid, 0x5000, t), step, 1e-12);
  EXPECT_EQ(model.snapshot().trackedPages, 3U);
  // The unit has every access, rounded or not: the units do not depend on per-page heat.
  const UnitHeat* u = unitAt(model.snapshot(), 0);
  ASSERT_NE(u, nullptr);
  EXPECT_NEAR(u->heat, 150012.0, 1e-6);
}

// Rescales by a factor of 2 (a hot page that keeps doubling) round an exact half to even: a page
// left at one step goes to 0 at the next one and stops counting, instead of staying at one step
// (round half up: 1/2 -> 1) that stands for twice as many accesses at every rescale.
TEST(HeatModel, APageLeftFarBehindByRescalesStopsCounting) {
  HeatModel model(baseConfig());
  const uint64_t t = 1000 * kMs;
  std::vector<AccessEvidence> ev{sample(0x1000, 2), sample(0x2000, 1)};
  model.ingest(ev, t);
  model.advanceEpoch(t);
  EXPECT_EQ(model.snapshot().trackedPages, 2U);
  double hot = 2;
  for (int i = 0; i < 20; ++i) {
    // Doubling the hot page: 2 x 65535 steps, a rescale by exactly 2.
    ev = {sample(0x1000, static_cast<uint32_t>(hot))};
    model.ingest(ev, t);
    model.advanceEpoch(t);
    hot *= 2;
  }
  // 2^21 accesses on the hot page, 1 on the other: 1/32 of a step, rounded away.
  EXPECT_NEAR(model.pageHeat(kTgid, 0x1000, t), hot, hot / 65535);
  EXPECT_EQ(model.pageHeat(kTgid, 0x2000, t), 0.0);
  EXPECT_EQ(model.snapshot().trackedPages, 1U);
  const auto top = model.hottestPages(10, t);
  ASSERT_EQ(top.size(), 1U);
  EXPECT_EQ(top[0].page, 0x1000U);
}

// A chunk's heat decays away: once its hottest page is negligible its pages stop counting as
// tracked, and a later access counts a page once again (not twice).
TEST(HeatModel, DecayedPagesStopCountingAsTrackedAndCountOnceWhenTouchedAgain) {
  HeatModel model(baseConfig());  // half-life 1 s
  std::vector<AccessEvidence> ev{sample(0x1000, 1), sample(0x2000, 1)};
  model.ingest(ev, 1 * kMs);
  model.advanceEpoch(1 * kMs);
  EXPECT_EQ(model.snapshot().trackedPages, 2U);
  // 40 half-lives later one of the two is touched again: the other has decayed to nothing.
  const uint64_t later = 1 * kMs + 40 * 1000 * kMs;
  ev = {sample(0x1000, 1)};
  model.ingest(ev, later);
  model.advanceEpoch(later);
  EXPECT_EQ(model.snapshot().trackedPages, 1U);
  EXPECT_EQ(model.pageHeat(kTgid, 0x2000, later), 0.0);
  EXPECT_NEAR(model.pageHeat(kTgid, 0x1000, later), 1.0, 1e-6);
  // And both again: two pages, not three.
  ev = {sample(0x1000, 1), sample(0x2000, 1)};
  model.ingest(ev, later + kMs);
  model.advanceEpoch(later + kMs);
  EXPECT_EQ(model.snapshot().trackedPages, 2U);
}

}  // namespace

namespace {

// A live reload replaces the planner; the heat model takes its own keys over its learned state.
// The notes (log, `tensortierctl tune`) name exactly the heat model's keys that changed.
TEST(HeatModelKeys, OnlyTheHeatModelsOwnKeysGetANote) {
  tensortier::v1::PolicyConfig before, after;
  after.set_hysteresis_margin(before.hysteresis_margin() + 0.5);  // planner only
  after.set_amortization_steps(before.amortization_steps() + 1);
  after.set_fast_budget_bytes(1ULL << 30);
  EXPECT_TRUE(tt::heat::heatModelKeysChanged(before, after).empty());
  after.set_heat_half_life_ms(before.heat_half_life_ms() * 2);
  after.set_chunk_pages(before.chunk_pages() / 2);
  EXPECT_EQ(tt::heat::heatModelKeysChanged(before, after),
            (std::vector<std::string>{"heat_half_life_ms", "chunk_pages"}));
  // A key written out at its default is no change.
  tensortier::v1::PolicyConfig spelled;
  spelled.set_heat_half_life_ms(before.heat_half_life_ms());
  EXPECT_TRUE(tt::heat::heatModelKeysChanged(before, spelled).empty());
  EXPECT_TRUE(tt::heat::heatModelChangeNotes(before, spelled).empty());
  const auto notes = tt::heat::heatModelChangeNotes(before, after);
  ASSERT_EQ(notes.size(), 2U);
  EXPECT_EQ(notes[0], "policy.heat_half_life_ms: live from the next epoch");
  EXPECT_EQ(notes[1], "policy.chunk_pages: live from the next epoch (chunks of unregistered pages regrouped, their heat kept)");
}

// Sum over the snapshot's chunk units (no region) of their heat, and of their count.
std::pair<double, size_t> chunkHeat(const HeatSnapshot& s) {
  double heat = 0;
  size_t n = 0;
  for (const auto& u : s.units)
    if (u.regionId == 0) {
      heat += u.heat;
      ++n;
    }
  return {heat, n};
}

// Regions A and B, A used in the first half of each of `steps` steps from t0 and B in the second,
// ten accesses per page per step each, read over each half.
void learnHalves(HeatModel& model, uint64_t t0, uint64_t period, uint64_t steps) {
  ASSERT_TRUE(model.addRegion(region(1, kRegionA, kPagesPerRegion)).ok());
  ASSERT_TRUE(model.addRegion(region(2, kRegionB, kPagesPerRegion)).ok());
  for (uint64_t s = 0; s < steps; ++s) {
    const uint64_t begin = t0 + s * period;
    model.onMark(mark(MarkType::StepBegin, s, begin));
    model.ingest(regionBatch(kRegionA, 10), begin, begin + period / 2, 1.0);
    model.ingest(regionBatch(kRegionB, 10), begin + period / 2, begin + period, 1.0);
    model.advanceEpoch(begin + period);
  }
}

// A new schedule_buckets resamples the learned schedules instead of dropping them: each step's
// accesses are kept, and so is when in the step they come.
TEST(HeatModelReconfigure, ScheduleBucketsResampleTheLearnedSchedules) {
  auto config = baseConfig();  // 8 buckets
  config.set_heat_half_life_ms(100000);
  const uint64_t period = 800 * kMs, t0 = 1000 * kMs;
  constexpr uint64_t kSteps = 30;
  for (const uint32_t buckets : {16U, 3U}) {
    SCOPED_TRACE(buckets);
    HeatModel model(config);
    learnHalves(model, t0, period, kSteps);
    auto next = config;
    next.set_schedule_buckets(buckets);
    model.reconfigure(next);
    // Nothing learned since: what the planner sees comes from the resampled schedules alone.
    model.onMark(mark(MarkType::StepBegin, kSteps, t0 + kSteps * period));
    model.advanceEpoch(t0 + kSteps * period + 100 * kMs);
    const UnitHeat* a = unitAt(model.snapshot(), kRegionA);
    const UnitHeat* b = unitAt(model.snapshot(), kRegionB);
    ASSERT_TRUE(a && b);
    EXPECT_NEAR(a->accessesPerPagePerStep, 10.0, 0.5);
    EXPECT_NEAR(b->accessesPerPagePerStep, 10.0, 0.5);
    EXPECT_EQ(a->nextUseInNs, 0U);
    // The look-ahead is whole buckets of the new size (the next one is enough here).
    EXPECT_NEAR(static_cast<double>(model.snapshot().horizonNs), static_cast<double>(period) / buckets, 1.0 * kMs);
    if (buckets == 16) {
      // B's half starts at bucket 8 of 16, 400 ms into the step: 300 ms from now.
      EXPECT_NEAR(static_cast<double>(b->nextUseInNs), 300.0 * kMs, 1.0 * kMs);
    } else {
      // Three buckets of 267 ms: A fills the first and half the second, B the rest of the second
      // and the third. B shares A's bucket 1, so it is needed 167 ms from now, not 300.
      EXPECT_NEAR(static_cast<double>(b->nextUseInNs), 800.0 / 3 * kMs - 100 * kMs, 1.0 * kMs);
    }
  }
}

// A new chunk_pages regroups the chunks of unregistered pages: their heat is carried over into the
// new chunks (shared out by page heat, so the hot pages' new chunks get it), cut at regions as
// before, and their runs of steady use go on.
TEST(HeatModelReconfigure, ChunkPagesRegroupTheChunksOfUnregisteredPages) {
  auto config = baseConfig();
  config.set_chunk_pages(16);
  HeatModel model(config);
  const uint64_t chunk = 16 * kPage;
  // A region in the middle of chunk 6.
  ASSERT_TRUE(model.addRegion(region(7, 6 * chunk + 4 * kPage, 8)).ok());
  const uint64_t t0 = 1000 * kMs;
  for (uint64_t e = 0; e < 10; ++e) {
    const uint64_t now = t0 + e * 100 * kMs;
    std::vector<AccessEvidence> batch{sample(5 * chunk + 3 * kPage, 40), sample(5 * chunk + 9 * kPage, 10),
                                      sample(6 * chunk + 1 * kPage, 5), sample(6 * chunk + 14 * kPage, 5),
                                      sample(9 * chunk, 20)};
    model.ingest(batch, now);
    model.advanceEpoch(now);
  }
  const auto [heat16, n16] = chunkHeat(model.snapshot());
  ASSERT_EQ(n16, 4U);  // chunk 5, chunk 6 either side of the region, chunk 9
  const UnitHeat* before9 = unitAt(model.snapshot(), 9 * chunk);
  ASSERT_TRUE(before9);
  const double steady = before9->steadySteps;
  ASSERT_GT(steady, 0.0);
  const uint64_t last = t0 + 900 * kMs;
  auto regroup = [&](uint32_t pages) {
    auto next = config;
    next.set_chunk_pages(pages);
    model.reconfigure(next);
    model.advanceEpoch(last);
    return chunkHeat(model.snapshot());
  };

  // Four times larger: chunks 4-7 become one, cut by the region into two; chunks 8-11 one.
  const auto [heat64, n64] = regroup(64);
  EXPECT_NEAR(heat64, heat16, 1e-9 * heat16);
  ASSERT_EQ(n64, 3U);
  const UnitHeat* low = unitAt(model.snapshot(), 4 * chunk);
  const UnitHeat* high = unitAt(model.snapshot(), 6 * chunk + 12 * kPage);
  const UnitHeat* far = unitAt(model.snapshot(), 8 * chunk);
  ASSERT_TRUE(low && high && far);
  EXPECT_EQ(low->length, 2 * chunk + 4 * kPage);
  EXPECT_EQ(high->length, 2 * chunk - 12 * kPage);
  EXPECT_EQ(far->length, 4 * chunk);
  // Chunk 5 and the part of chunk 6 below the region: 55 of the 60 accesses an epoch either side of
  // the region.
  EXPECT_NEAR(low->heat / (low->heat + high->heat), 55.0 / 60.0, 1e-3);
  EXPECT_NEAR(far->steadySteps, steady, 1e-9);

  // Four pages: the heat of each old chunk goes to the new chunks its hot pages are in, not
  // evenly over its pages.
  const auto [heat4, n4] = regroup(4);
  EXPECT_NEAR(heat4, heat16, 1e-6 * heat16);
  EXPECT_EQ(n4, 5U);  // one per sampled page
  const UnitHeat* hot = unitAt(model.snapshot(), 5 * chunk);
  ASSERT_TRUE(hot);
  EXPECT_EQ(hot->length, 4 * kPage);
  EXPECT_NEAR(hot->heat / heat4, 40.0 / 80.0, 1e-3);
  // Evidence after the change lands in the new chunks.
  std::vector<AccessEvidence> more{sample(5 * chunk + 3 * kPage, 40)};
  model.ingest(more, last + 100 * kMs);
  model.advanceEpoch(last + 100 * kMs);
  EXPECT_EQ(chunkHeat(model.snapshot()).second, 5U);
}

// A new half-life applies from the change on, to unit and page heat alike; the time before it
// decays by the old one, though page heat decays only when next touched.
TEST(HeatModelReconfigure, HalfLifeAppliesFromTheChangeOn) {
  HeatModel model(baseConfig());  // 1000 ms
  const uint64_t t0 = 5000 * kMs;
  std::vector<AccessEvidence> batch{sample(0x1000, 100)};
  model.ingest(batch, t0);
  model.advanceEpoch(t0 + 1000 * kMs);  // 50 left
  auto shorter = baseConfig();
  shorter.set_heat_half_life_ms(250);
  model.reconfigure(shorter);
  EXPECT_NEAR(model.pageHeat(kTgid, 0x1000, t0 + 1500 * kMs), 12.5, 0.01);
  model.advanceEpoch(t0 + 1500 * kMs);
  ASSERT_EQ(model.snapshot().units.size(), 1U);
  EXPECT_NEAR(model.snapshot().units[0].heat, 12.5, 1e-6);
  EXPECT_NEAR(model.pageHeat(kTgid, 0x1000, t0 + 2000 * kMs), 3.125, 0.01);
}

// Regrouping carries a run of steady use over only while it is going: a chunk used once long ago
// does not date the run of the chunk in use beside it that it is merged with.
TEST(HeatModelReconfigure, ChunkPagesRegroupCarriesOnlyRunsStillGoing) {
  auto config = baseConfig();  // no step clock: a step is 1.44 s, a run ends after 5.8 s idle
  config.set_chunk_pages(16);
  HeatModel model(config);
  const uint64_t chunk = 16 * kPage, t0 = 1000 * kMs;
  std::vector<AccessEvidence> once{sample(10 * chunk, 50)};
  model.ingest(once, t0);
  model.advanceEpoch(t0);
  uint64_t now = t0;
  for (uint64_t e = 0; e <= 10; ++e) {
    now = t0 + 7000 * kMs + e * 100 * kMs;
    std::vector<AccessEvidence> batch{sample(9 * chunk, 5)};
    model.ingest(batch, now);
    model.advanceEpoch(now);
  }
  const UnitHeat* used = unitAt(model.snapshot(), 9 * chunk);
  ASSERT_TRUE(used);
  const double steady = used->steadySteps;
  EXPECT_NEAR(steady, 1000.0 / (1000.0 / std::numbers::ln2), 1e-6);
  EXPECT_EQ(unitAt(model.snapshot(), 10 * chunk)->steadySteps, 0.0) << "its run has ended";
  config.set_chunk_pages(64);
  model.reconfigure(config);
  model.advanceEpoch(now);
  const UnitHeat* merged = unitAt(model.snapshot(), 8 * chunk);
  ASSERT_TRUE(merged);
  EXPECT_EQ(merged->length, 4 * chunk);
  EXPECT_NEAR(merged->steadySteps, steady, 1e-6);
}

// initial_migration_bandwidth sizes the look-ahead only until the engine has measured one.
TEST(HeatModelReconfigure, InitialBandwidthAppliesUntilOneIsMeasured) {
  auto config = baseConfig();  // 8 buckets
  config.set_heat_half_life_ms(100000);
  config.set_initial_migration_bandwidth(uint64_t{10} << 30);
  const uint64_t period = 800 * kMs, t0 = 1000 * kMs;
  HeatModel model(config);
  learnHalves(model, t0, period, 30);
  // 310 ms into the next step, B is needed from 400 ms on: the horizon is the first bucket end by
  // which B's move and the 40 ms of slack (lookahead_step_fraction 0.05) fit: at once at 10 GiB/s,
  // 600 ms into the step at 1 MiB/s (B's 256 KiB copied twice, in and something else out: 500 ms
  // + 40 ms from 310 ms is 850 ms).
  const uint64_t t = t0 + 30 * period + 310 * kMs;
  model.onMark(mark(MarkType::StepBegin, 30, t0 + 30 * period));
  model.advanceEpoch(t);
  const uint64_t fast = model.snapshot().horizonNs;
  EXPECT_EQ(fast, 100 * kMs);
  auto slow = config;
  slow.set_initial_migration_bandwidth(1 << 20);
  model.reconfigure(slow);
  model.advanceEpoch(t + 1);
  EXPECT_EQ(model.snapshot().horizonNs, 600 * kMs);
  model.setMigrationRates({10.0 * (1 << 30), 10.0 * (1 << 30)});
  model.advanceEpoch(t + 2);
  EXPECT_EQ(model.snapshot().horizonNs, fast);
  model.reconfigure(slow);  // measured: the initial figure no longer applies
  model.advanceEpoch(t + 3);
  EXPECT_EQ(model.snapshot().horizonNs, fast);
}

// A fetch into a full fast tier is a promotion and a demotion, each at its own rate: the horizon
// reaches as far as both copies take, whichever direction is the slow one.
TEST(HeatModelReconfigure, TheLookAheadTimesAFetchAtEachDirectionsRate) {
  auto config = baseConfig();  // 8 buckets of 100 ms
  config.set_heat_half_life_ms(100000);
  const uint64_t period = 800 * kMs, t0 = 1000 * kMs;
  HeatModel model(config);
  learnHalves(model, t0, period, 30);
  const uint64_t t = t0 + 30 * period + 310 * kMs;
  model.onMark(mark(MarkType::StepBegin, 30, t0 + 30 * period));
  const double mib = 1 << 20;
  const auto horizonAt = [&](const MigrationRates& rates, uint64_t at) {
    model.setMigrationRates(rates);
    model.advanceEpoch(at);
    return model.snapshot().horizonNs;
  };
  // 310 ms into the step, B (256 KiB) is needed from 400 ms on. 62.5 ms in at 4 MiB/s and 62.5 ms
  // out, with the 40 ms of slack, fit by the second bucket boundary from now (190 ms): a horizon
  // of two buckets. With one direction at 1 MiB/s (250 ms) and the other at 4 MiB/s (62.5 ms)
  // they fit only by the fourth (390 ms).
  EXPECT_EQ(horizonAt({4 * mib, 4 * mib}, t), 200 * kMs);
  EXPECT_EQ(horizonAt({4 * mib, 1 * mib}, t + 1), 400 * kMs);
  EXPECT_EQ(horizonAt({1 * mib, 4 * mib}, t + 2), 400 * kMs);
  // Rates not both known leave the last ones.
  EXPECT_EQ(horizonAt({4 * mib, 0}, t + 3), 400 * kMs);
}

}  // namespace
