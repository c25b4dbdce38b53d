#include "heat/StepClock.h"

#include <gtest/gtest.h>

#include <random>

namespace {

using tt::heat::MarkPeriodEstimator;
using tt::heat::SamplePeriodDetector;
using tt::heat::SamplePeriodParams;
using tt::heat::StepClock;

constexpr uint64_t kMs = 1'000'000;

TEST(StepClock, PhaseAndBucketWrapAroundTheAnchor) {
  StepClock c{100 * kMs, 1000 * kMs, tt::heat::PeriodSource::Marks, 1};
  EXPECT_DOUBLE_EQ(c.phaseAt(1000 * kMs), 0.0);
  EXPECT_NEAR(c.phaseAt(1025 * kMs), 0.25, 1e-9);
  EXPECT_NEAR(c.phaseAt(1375 * kMs), 0.75, 1e-9);
  EXPECT_NEAR(c.phaseAt(990 * kMs), 0.9, 1e-9);  // before the anchor: the previous step
  EXPECT_EQ(c.bucketAt(1025 * kMs, 8), 2u);
  EXPECT_EQ(c.bucketAt(1099 * kMs, 8), 7u);
}

TEST(MarkPeriod, CleanMarks) {
  MarkPeriodEstimator est;
  EXPECT_FALSE(est.periodNs());
  for (uint64_t s = 0; s < 10; ++s) est.add(s, 5 * kMs + s * 80 * kMs);
  ASSERT_TRUE(est.periodNs());
  EXPECT_EQ(*est.periodNs(), 80 * kMs);
}

TEST(MarkPeriod, NoisyMarksAverageOut) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> jitter(-4 * static_cast<int64_t>(kMs), 4 * static_cast<int64_t>(kMs));
  MarkPeriodEstimator est;
  for (uint64_t s = 0; s < 30; ++s) est.add(s, static_cast<uint64_t>(static_cast<int64_t>(1000 * kMs + s * 80 * kMs) + jitter(rng)));
  ASSERT_TRUE(est.periodNs());
  EXPECT_NEAR(static_cast<double>(*est.periodNs()), 80.0 * kMs, 0.02 * 80 * kMs);
}

TEST(MarkPeriod, MissingMarksWithStepNumbers) {
  MarkPeriodEstimator est;
  for (uint64_t s = 0; s < 30; ++s)
    if (s % 3 != 1 && s % 7 != 4) est.add(s, s * 120 * kMs);
  ASSERT_TRUE(est.periodNs());
  EXPECT_EQ(*est.periodNs(), 120 * kMs);
}

TEST(MarkPeriod, MissingMarksWithoutStepNumbers) {
  // A client that sends no step numbers (all zero): gaps spanning two or three steps must not
  // inflate the period.
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<int64_t> jitter(-2 * static_cast<int64_t>(kMs), 2 * static_cast<int64_t>(kMs));
  MarkPeriodEstimator est;
  for (uint64_t s = 0; s < 40; ++s)
    if (s % 4 != 1 && s % 9 != 5) est.add(0, static_cast<uint64_t>(static_cast<int64_t>(s * 50 * kMs) + jitter(rng)) + 10 * kMs);
  ASSERT_TRUE(est.periodNs());
  EXPECT_NEAR(static_cast<double>(*est.periodNs()), 50.0 * kMs, 0.02 * 50 * kMs);
}

// One boundary marked twice (two connections of one process, 2 ms apart; or a copy within a
// millisecond without step numbers) is one boundary, not a step as long as the gap between the
// copies.
TEST(MarkPeriod, ABoundaryMarkedTwiceIsOneBoundary) {
  MarkPeriodEstimator numbered;
  for (uint64_t s = 0; s < 20; ++s) {
    EXPECT_TRUE(numbered.add(s, 1000 * kMs + s * 100 * kMs));
    EXPECT_EQ(numbered.add(s, 1000 * kMs + s * 100 * kMs + 2 * kMs), s == 0) << "step " << s;
  }
  ASSERT_TRUE(numbered.periodNs());
  // The first step is 98 ms by its first copy (the second was taken: nothing was numbered yet).
  EXPECT_NEAR(static_cast<double>(*numbered.periodNs()), 100.0 * kMs, 0.01 * 100 * kMs);

  MarkPeriodEstimator unnumbered;
  for (uint64_t s = 0; s < 20; ++s) {
    (void)unnumbered.add(0, 1000 * kMs + s * 100 * kMs);
    EXPECT_FALSE(unnumbered.add(0, 1000 * kMs + s * 100 * kMs + 50'000));
  }
  ASSERT_TRUE(unnumbered.periodNs());
  EXPECT_EQ(*unnumbered.periodNs(), 100 * kMs);
}

// Step numbers that start again at 0 (a loop over the data's batches, per epoch of the data) keep
// the period.
TEST(MarkPeriod, StepNumbersThatRestartKeepThePeriod) {
  MarkPeriodEstimator est;
  for (uint64_t i = 0; i < 30; ++i) (void)est.add(i % 7, 1000 * kMs + i * 60 * kMs);
  ASSERT_TRUE(est.periodNs());
  EXPECT_EQ(*est.periodNs(), 60 * kMs);
}

// A stream where unit u is accessed during the u-th quarter of every period.
void feedPeriodic(SamplePeriodDetector& det, uint64_t periodNs, uint64_t durationNs, double noise, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u01(0, 1);
  for (uint64_t t = 0; t < durationNs; t += kMs / 2) {
    const uint64_t quarter = (t % periodNs) * 4 / periodNs;
    det.add(t, 1000 + quarter, 1.0);
    if (u01(rng) < noise) det.add(t, 2000 + static_cast<uint64_t>(u01(rng) * 50), 1.0);
  }
}

// 5 ms bins over ~5 s of history, periods of 20 ms to 1 s: the daemon's defaults' shape.
SamplePeriodParams detectorParams() {
  SamplePeriodParams p;
  p.binNs = 5 * kMs;
  p.historyBins = 1024;
  p.minPeriodNs = 20 * kMs;
  p.maxPeriodNs = 1000 * kMs;
  return p;
}

TEST(SamplePeriod, CleanPeriodicStream) {
  SamplePeriodParams p = detectorParams();
  SamplePeriodDetector det(p);
  feedPeriodic(det, 137 * kMs, 3000 * kMs, 0, 1);
  auto est = det.estimate();
  ASSERT_TRUE(est);
  EXPECT_NEAR(est->periodNs, 137.0 * kMs, 0.01 * 137 * kMs);
  EXPECT_GT(est->confidence, 0.8);
}

// A live config change: thresholds apply to the history gathered so far; a new bin width or
// history length cannot reuse the bins, so the history restarts.
TEST(SamplePeriod, NewParametersKeepTheHistoryUnlessItsLayoutChanges) {
  SamplePeriodParams p = detectorParams();
  SamplePeriodDetector det(p);
  feedPeriodic(det, 137 * kMs, 3000 * kMs, 0, 1);
  const size_t filled = det.filledBins();
  ASSERT_GT(filled, 0U);
  ASSERT_TRUE(det.estimate());
  SamplePeriodParams stricter = p;
  stricter.minConfidence = 1.01;  // no lag reaches it
  stricter.maxPeriodNs = p.maxPeriodNs / 2;
  EXPECT_TRUE(det.setParams(stricter));
  EXPECT_EQ(det.filledBins(), filled);
  EXPECT_FALSE(det.estimate());
  EXPECT_TRUE(det.setParams(p));
  auto est = det.estimate();
  ASSERT_TRUE(est);
  EXPECT_NEAR(est->periodNs, 137.0 * kMs, 0.01 * 137 * kMs);

  SamplePeriodParams wider = p;
  wider.binNs = 2 * p.binNs;
  EXPECT_FALSE(det.setParams(wider));
  EXPECT_EQ(det.filledBins(), 0U);
  EXPECT_FALSE(det.estimate());
  feedPeriodic(det, 137 * kMs, 3000 * kMs, 0, 1);
  est = det.estimate();
  ASSERT_TRUE(est);
  EXPECT_NEAR(est->periodNs, 137.0 * kMs, 0.02 * 137 * kMs);
}

TEST(SamplePeriod, NoisyPeriodicStream) {
  SamplePeriodParams p = detectorParams();
  SamplePeriodDetector det(p);
  feedPeriodic(det, 90 * kMs, 3000 * kMs, 0.8, 2);
  auto est = det.estimate();
  ASSERT_TRUE(est);
  EXPECT_NEAR(est->periodNs, 90.0 * kMs, 0.02 * 90 * kMs);
}

// Unit u busy in the u-th 100 ms quarter of a 400 ms step, read in 100 ms spans over [from, to).
void feedQuarterSpans(SamplePeriodDetector& det, uint64_t fromNs, uint64_t toNs) {
  for (uint64_t t = fromNs + 100 * kMs; t <= toNs; t += 100 * kMs)
    det.addOver(t - 100 * kMs, t, 1000 + ((t - 100 * kMs) % (400 * kMs)) / (100 * kMs), 50.0);
}

// A steady stream read once per 100 ms epoch: delivered all at each epoch's end it is a spike train
// whose period is the epoch's; spread over the spans it was gathered in, it has no period.
TEST(SamplePeriod, SteadyStreamReadInEpochsHasNoPeriod) {
  SamplePeriodParams p = detectorParams();
  SamplePeriodDetector spikes(p), spread(p);
  for (uint64_t t = 100 * kMs; t <= 4000 * kMs; t += 100 * kMs)
    for (uint64_t unit = 0; unit < 8; ++unit) {
      spikes.add(t, unit, 50.0);
      spread.addOver(t - 100 * kMs, t, unit, 50.0);
    }
  auto aliased = spikes.estimate();
  ASSERT_TRUE(aliased) << "the spike train shows the epoch (what spreading avoids)";
  EXPECT_NEAR(aliased->periodNs, 100.0 * kMs, 5.0 * kMs);
  EXPECT_FALSE(spread.estimate());
}

// A period of four epochs survives the spreading: unit u busy in the u-th quarter of a 400 ms step,
// read once per 100 ms epoch.
TEST(SamplePeriod, PeriodOfSeveralEpochsIsFoundInSpreadEvidence) {
  SamplePeriodParams p = detectorParams();
  SamplePeriodDetector det(p);
  feedQuarterSpans(det, 0, 4800 * kMs);
  auto est = det.estimate();
  ASSERT_TRUE(est);
  EXPECT_NEAR(est->periodNs, 400.0 * kMs, 10.0 * kMs);
}

// One long span (a slow epoch) raises the shortest period looked for only while it is in the
// history: a 400 ms period read in 100 ms spans is found again once the 2.5 s span has left it.
TEST(SamplePeriod, ALongSpanRaisesTheShortestPeriodOnlyWhileInTheHistory) {
  SamplePeriodParams p = detectorParams();  // 1024 bins of 5 ms: 5.1 s of history
  SamplePeriodDetector det(p);
  det.addOver(0, 2500 * kMs, 1000, 50.0);
  feedQuarterSpans(det, 2500 * kMs, 6000 * kMs);
  EXPECT_FALSE(det.estimate()) << "the 2.5 s span is in the history: no period under 5 s";
  feedQuarterSpans(det, 6000 * kMs, 12000 * kMs);
  auto est = det.estimate();
  ASSERT_TRUE(est);
  EXPECT_NEAR(est->periodNs, 400.0 * kMs, 10.0 * kMs);
}

TEST(SamplePeriod, AperiodicStreamHasNoPeriod) {
  SamplePeriodParams p = detectorParams();
  p.minConfidence = 0.5;
  SamplePeriodDetector det(p);
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<uint64_t> unit(0, 63);
  for (uint64_t t = 0; t < 3000 * kMs; t += kMs / 2) det.add(t, unit(rng), 1.0);
  EXPECT_FALSE(det.estimate());
}

}  // namespace
