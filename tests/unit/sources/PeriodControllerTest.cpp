// The sample-period controller (sources/PeriodController.h) against a simulated workload: the
// test plays the kernel and the clock, feeding each epoch's cost (samples taken at the current
// period and the daemon's CPU for them) and checking where the period goes. No sleeps, no perf.
#include "sources/PeriodController.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace tt::sources {
namespace {

constexpr uint64_t kEpochNs = 1'000'000'000;  // the daemon's default epoch, 1 s

// A workload taking `eventsPerSec` sampled events, and a daemon spending `daemonNsPerSample`
// per sample it drains plus `daemonFixedNs` per epoch.
struct SimLoad {
  double eventsPerSec = 0;
  double daemonNsPerSample = 20;
  double daemonFixedNs = 50'000;
};

EpochCost epochAt(uint64_t period, const SimLoad& load, double noise = 1.0) {
  EpochCost e;
  e.wallNs = kEpochNs;
  const double samples = load.eventsPerSec * noise * (static_cast<double>(kEpochNs) / 1e9) / static_cast<double>(period);
  e.overflows = static_cast<uint64_t>(samples);
  e.daemonCpuNs = static_cast<uint64_t>(samples * load.daemonNsPerSample + load.daemonFixedNs);
  return e;
}

// The true cost of sampling in an epoch at `period`, percent of one CPU (what the budget bounds).
double truePercent(uint64_t period, const SimLoad& load, double sampleCostNs) {
  const EpochCost e = epochAt(period, load);
  return 100.0 * (static_cast<double>(e.overflows) * sampleCostNs + static_cast<double>(e.daemonCpuNs)) /
         static_cast<double>(e.wallNs);
}

PeriodLimits limits(uint64_t minPeriod = 1, uint64_t maxPeriod = 1'000'000, double budget = 3.0,
                    double costNs = 2000, uint64_t floor = 1) {
  PeriodLimits l;
  l.minPeriod = minPeriod;
  l.maxPeriod = maxPeriod;
  l.budgetPercent = budget;
  l.sampleCostNs = costNs;
  l.floorPeriod = floor;
  return l;
}

TEST(PeriodController, ConvergesUnderTheBudgetInOneEpochAndStaysThere) {
  const PeriodLimits l = limits();
  for (double rate : {5e4, 2e5, 1e6, 5e6}) {
    PeriodController c(1, l);
    const SimLoad load{rate};
    c.update(epochAt(c.period(), load));
    const uint64_t settled = c.period();
    EXPECT_LE(truePercent(settled, load, l.sampleCostNs), l.budgetPercent) << rate << " events/s";
    for (int i = 0; i < 20; ++i) {
      c.update(epochAt(c.period(), load));
      EXPECT_EQ(c.period(), settled) << rate << " events/s, epoch " << i;
    }
    // Inside the stated band: not far under the budget either (sampling is not given away).
    EXPECT_GE(truePercent(settled, load, l.sampleCostNs), l.budgetPercent / 4) << rate << " events/s";
  }
}

TEST(PeriodController, ChargesTheKernelSideCostNotOnlyTheDaemonsCpu) {
  // 200k samples/s at 2 us each is 40% of a CPU in the sampled threads while the daemon spends
  // 0.4%: the controller must act on the former.
  PeriodController c(1, limits());
  const SimLoad load{2e5};
  c.update(epochAt(1, load));
  EXPECT_GT(c.lastCostPercent(), 40.0);
  EXPECT_GT(c.period(), 1U);
  EXPECT_LE(truePercent(c.period(), load, 2000), 3.0);
}

TEST(PeriodController, RisesWithinOneEpochUnderAStorm) {
  const PeriodLimits l = limits();
  PeriodController c(1, l);
  const SimLoad quiet{500};
  for (int i = 0; i < 5; ++i) c.update(epochAt(c.period(), quiet));
  EXPECT_EQ(c.period(), 1U);
  EXPECT_LE(truePercent(1, quiet, l.sampleCostNs), l.budgetPercent);
  // A storm 10000x the quiet rate: one epoch over budget, the next under it.
  const SimLoad storm{5e6};
  EXPECT_GT(truePercent(c.period(), storm, l.sampleCostNs), 100 * l.budgetPercent);
  c.update(epochAt(c.period(), storm));
  EXPECT_LE(truePercent(c.period(), storm, l.sampleCostNs), l.budgetPercent);
}

TEST(PeriodController, StormFloorBoundsASingleThreadsSamplingShareBeforeAnyEpochEnds) {
  // A thread doing nothing but taking events (eventNs each, plus countNs for the counting and
  // sampleNs per sample at period P) is slowed by (countNs + sampleNs / P) / eventNs: at the floor
  // that slowdown is within half the budget, one period below it is not.
  for (double sampleNs : {300.0, 2000.0, 4500.0}) {
    for (double eventNs : {1000.0, 5000.0}) {
      for (double budget : {1.0, 3.0, 10.0}) {
        const double countNs = 0.2 * PeriodController::kSetpoint * budget / 100 * eventNs;
        const uint64_t p = stormFloorPeriod(sampleNs, countNs, eventNs, budget);
        auto share = [&](double period) { return (countNs + sampleNs / period) / eventNs; };
        EXPECT_LE(share(static_cast<double>(p)), PeriodController::kSetpoint * budget / 100)
            << sampleNs << " " << eventNs << " " << budget;
        if (p > 1) {
          EXPECT_GT(share(static_cast<double>(p - 1)), PeriodController::kSetpoint * budget / 100);
        }
      }
    }
  }
  EXPECT_EQ(stormFloorPeriod(0, 0, 5000, 3), 1U);  // unknown costs: no floor
  EXPECT_EQ(stormFloorPeriod(2000, 0, 0, 3), 1U);
  // Counting alone over half the budget: no period is enough, the controller goes to max.
  EXPECT_EQ(stormFloorPeriod(2000, 100, 5000, 3), UINT64_MAX);
  PeriodController over(1, limits(1, 65536, 3.0, 2000, stormFloorPeriod(2000, 100, 5000, 3)));
  EXPECT_EQ(over.period(), 65536U);
  // The controller never goes under the floor, even idle.
  PeriodController c(1, limits(1, 1'000'000, 3.0, 2000, 27));
  EXPECT_EQ(c.period(), 27U);
  for (int i = 0; i < 10; ++i) c.update(epochAt(c.period(), SimLoad{0}));
  EXPECT_EQ(c.period(), 27U);
  EXPECT_EQ(c.lowestPeriod(), 27U);
}

// The kernel throttling the events means it dropped samples the period asked for, which the
// overflow count does not show: an epoch that was throttled at least doubles the period, even
// when the estimated cost is under the budget, and holds it for kLossMemoryEpochs quiet epochs
// before halvings resume (the throttling is per tick, so the quiet epoch at the raised period
// says nothing about the lower one).
TEST(PeriodController, AThrottledEpochAtLeastDoublesThePeriodAndHoldsIt) {
  const PeriodLimits l = limits();
  PeriodController c(64, l);
  const SimLoad quiet{1000};
  EpochCost e = epochAt(c.period(), quiet);
  ASSERT_LE(truePercent(c.period(), quiet, l.sampleCostNs), l.budgetPercent / 4) << "the cost alone would lower it";
  e.throttled = true;
  EXPECT_GE(c.update(e), 128U);
  const uint64_t raised = c.period();
  for (int i = 0; i < PeriodController::kLossMemoryEpochs; ++i)
    EXPECT_EQ(c.update(epochAt(c.period(), quiet)), raised) << "halved back into the throttling, epoch " << i;
  EXPECT_LT(c.update(epochAt(c.period(), quiet)), raised) << "the throttling is long past: halvings resume";
  PeriodController capped(l.maxPeriod, l);
  EpochCost t = epochAt(capped.period(), quiet);
  t.throttled = true;
  EXPECT_EQ(capped.update(t), l.maxPeriod) << "never past max_period";
}

// A load the kernel throttles at period P whose cost at 2P is under a quarter of the budget: the
// period does not swing between the two every epoch (throttled at P, cheap at 2P, halved to P).
TEST(PeriodController, ThrottlingAtALowerPeriodDoesNotMakeItSwingEveryEpoch) {
  const PeriodLimits l = limits();
  PeriodController c(256, l);
  const SimLoad load{1e6};
  const double kernelMaxPerSec = 3000;  // the kernel's per-CPU sample rate limit, in effect
  int throttledEpochs = 0;
  int changes = 0;
  for (int i = 0; i < 20; ++i) {
    const uint64_t before = c.period();
    EpochCost e = epochAt(before, load);
    e.throttled = 1e6 / static_cast<double>(before) > kernelMaxPerSec;
    if (e.throttled) {
      e.overflows = static_cast<uint64_t>(kernelMaxPerSec);
      ++throttledEpochs;
    }
    if (c.update(e) != before) ++changes;
  }
  EXPECT_LE(throttledEpochs, 3) << "20 epochs";
  EXPECT_LE(changes, 4) << "20 epochs";
}

// Samples lost to a full ring were taken and paid for but delivered to nobody, and each delivered
// sample stands for a period of events as if none were lost: the period rises so that the kernel
// takes half of what it delivered, at most 4x an epoch, even when the estimated cost is under the
// budget, and stays there for kLossMemoryEpochs quiet epochs instead of halving back into the loss.
TEST(PeriodController, ALossyEpochRaisesThePeriodUntilWhatIsTakenFitsAndHoldsIt) {
  const PeriodLimits l = limits();
  PeriodController c(100, l);
  const SimLoad quiet{1'000'000};  // 10000 samples per epoch at period 100
  EpochCost e = epochAt(c.period(), quiet);
  ASSERT_EQ(e.overflows, 10000U);
  ASSERT_LE(truePercent(c.period(), quiet, l.sampleCostNs), l.budgetPercent) << "the cost alone would not raise it";
  e.lost = 2000;  // 8000 delivered: 4000 taken at period 250, half of what was delivered
  EXPECT_EQ(c.update(e), 250U);
  for (int i = 0; i < PeriodController::kLossMemoryEpochs; ++i)
    EXPECT_EQ(c.update(epochAt(c.period(), SimLoad{0})), 250U) << "halved back into the loss, epoch " << i;
  EXPECT_EQ(c.update(epochAt(c.period(), SimLoad{0})), 125U) << "the loss is long past: halvings resume";
  // Everything lost (or the overflow estimate under the loss): the period is at least quadrupled.
  PeriodController all(100, l);
  EpochCost none = epochAt(all.period(), SimLoad{0});
  none.lost = 50;
  EXPECT_EQ(all.update(none), 400U);
  // The overflow count is an estimate and LOST records come an epoch late: an estimate just over
  // the loss (1 of 10001 delivered) moves the period 4x, as nothing delivered does, not 20000x.
  PeriodController noisy(100, l);
  EpochCost edge = epochAt(noisy.period(), SimLoad{1'000'100});
  ASSERT_EQ(edge.overflows, 10001U);
  edge.lost = 10000;
  EXPECT_EQ(noisy.update(edge), 400U);
  // Never past max_period.
  PeriodController capped(l.maxPeriod, l);
  EpochCost t = epochAt(capped.period(), quiet);
  t.lost = 1;
  EXPECT_EQ(capped.update(t), l.maxPeriod);
}

TEST(PeriodController, FallsBackWhenTheLoadDropsWithoutOvershooting) {
  const PeriodLimits l = limits();
  PeriodController c(1, l);
  const SimLoad storm{5e6}, quiet{1000};
  for (int i = 0; i < 3; ++i) c.update(epochAt(c.period(), storm));
  const uint64_t high = c.period();
  ASSERT_GT(high, 100U);
  uint64_t previous = high;
  int epochs = 0;
  while (c.period() > 1 && epochs < 64) {
    c.update(epochAt(c.period(), quiet));
    ++epochs;
    EXPECT_LE(c.period(), previous) << "rose while the load was quiet";
    EXPECT_GE(c.period(), previous / 2) << "fell more than half in one epoch";
    EXPECT_LE(truePercent(c.period(), quiet, l.sampleCostNs), l.budgetPercent);
    previous = c.period();
  }
  EXPECT_EQ(c.period(), 1U);
  EXPECT_LE(epochs, static_cast<int>(std::ceil(std::log2(static_cast<double>(high)))) + 1);
}

TEST(PeriodController, FallsOnlyAsFarAsTheLoadAllows) {
  // A moderate load whose cost at period 1 is ~10x the budget: the period comes down from a
  // storm level but stops where the cost is still under the budget.
  const PeriodLimits l = limits();
  PeriodController c(100'000, l);
  const SimLoad moderate{1.5e5};
  for (int i = 0; i < 40; ++i) {
    c.update(epochAt(c.period(), moderate));
    EXPECT_LE(truePercent(c.period(), moderate, l.sampleCostNs), l.budgetPercent) << "epoch " << i;
  }
  EXPECT_GT(c.period(), 1U);
  EXPECT_GE(truePercent(c.period(), moderate, l.sampleCostNs), l.budgetPercent / 4);
}

TEST(PeriodController, RespectsMinAndMaxPeriod) {
  PeriodController c(1, limits(16, 4096));
  EXPECT_EQ(c.period(), 16U);  // the initial period is clamped in
  c.update(epochAt(c.period(), SimLoad{1e9}));
  EXPECT_EQ(c.period(), 4096U);  // would need more: stops at max
  c.update(epochAt(c.period(), SimLoad{1e9}));
  EXPECT_EQ(c.period(), 4096U);
  for (int i = 0; i < 30; ++i) c.update(epochAt(c.period(), SimLoad{0}));
  EXPECT_EQ(c.period(), 16U);  // idle: stops at min
  // Live limits clamp the running period at once.
  EXPECT_EQ(c.setLimits(limits(100, 200)), 100U);
  EXPECT_EQ(c.setLimits(limits(1, 50)), 50U);
  // A fixed period (min == max) never moves.
  PeriodController fixed(8, limits(8, 8));
  fixed.update(epochAt(8, SimLoad{1e9}));
  EXPECT_EQ(fixed.period(), 8U);
  fixed.update(epochAt(8, SimLoad{0}));
  EXPECT_EQ(fixed.period(), 8U);
}

// IBS takes only multiples of 16 (perf_ibs_check_period): with a granularity every period the
// controller gives is one, from bounds that are not (the default min_period 1009), through
// raises, halvings and throttling; and the rounding never stalls a move.
TEST(PeriodController, EveryPeriodIsAMultipleOfTheGranularity) {
  PeriodLimits l = limits(1009, 1000003);
  l.granularity = 16;
  PeriodController c(10007, l);
  EXPECT_EQ(c.period(), 10016U);  // the initial period rounded up
  EXPECT_EQ(c.lowestPeriod(), 1024U);
  std::vector<uint64_t> seen{c.period()};
  for (int i = 0; i < 40; ++i) seen.push_back(c.update(epochAt(c.period(), SimLoad{0})));  // idle: halvings
  EXPECT_EQ(c.period(), 1024U);  // down to the rounded minimum, not stuck above it
  // Over the budget: raised, onto a multiple.
  const uint64_t before = c.period();
  const double budgetSamples = 3.0 / 100 * 1e9 / 2000;  // samples per second at the budget
  seen.push_back(c.update(epochAt(before, SimLoad{1.05 * budgetSamples * static_cast<double>(before)})));
  EXPECT_GT(c.period(), before);
  for (int i = 0; i < 5; ++i) seen.push_back(c.update(epochAt(c.period(), SimLoad{1e12})));  // storm
  EXPECT_EQ(c.period(), 1000000U);  // the maximum rounded down
  EpochCost throttled = epochAt(c.period(), SimLoad{0});
  throttled.throttled = true;
  c.setLimits(l);
  seen.push_back(c.update(throttled));
  for (uint64_t p : seen) {
    EXPECT_EQ(p % 16, 0U) << p;
    EXPECT_GE(p, 1024U);
    EXPECT_LE(p, 1000000U);
  }
  // Bounds closer together than one unit: the rounded minimum wins.
  PeriodLimits narrow = limits(1009, 1010);
  narrow.granularity = 16;
  EXPECT_EQ(c.setLimits(narrow), 1024U);
}

TEST(PeriodController, DoesNotOscillateUnderNoisyLoad) {
  // Stated band: under a load whose epoch-to-epoch noise stays within +-25%, the period changes
  // only while converging (at most two epochs) and the true mean cost stays in [budget/4, budget].
  const PeriodLimits l = limits();
  for (double rate : {3e4, 2e5, 3e6}) {
    PeriodController c(1, l);
    const SimLoad load{rate};
    uint32_t lcg = 12345;
    auto noise = [&] {
      lcg = lcg * 1664525U + 1013904223U;
      return 0.75 + 0.5 * static_cast<double>(lcg >> 8) / static_cast<double>(1U << 24);
    };
    std::vector<uint64_t> periods;
    for (int i = 0; i < 100; ++i) {
      c.update(epochAt(c.period(), load, noise()));
      periods.push_back(c.period());
    }
    int changes = 0;
    for (size_t i = 2; i < periods.size(); ++i) changes += periods[i] != periods[i - 1] ? 1 : 0;
    EXPECT_EQ(changes, 0) << rate << " events/s";
    const double mean = truePercent(c.period(), load, l.sampleCostNs);
    EXPECT_LE(mean, l.budgetPercent) << rate;
    EXPECT_GE(mean, l.budgetPercent / 4) << rate;
  }
}

TEST(PeriodController, CountingCostIsChargedButNotScaledByThePeriod) {
  // Every event costs countNs whatever the period. The raise aims the scalable rest at what the
  // counting leaves of half the budget.
  PeriodLimits l = limits();
  l.eventCountNs = 50;
  PeriodController c(1, l);
  EpochCost e;
  e.wallNs = kEpochNs;
  e.events = 200'000;  // 1% of a CPU counting
  e.overflows = 200'000;  // 40% sampling at period 1
  c.update(e);
  EXPECT_NEAR(c.lastCostPercent(), 41.0, 1e-9);
  const uint64_t p = c.period();
  const double atP = 1.0 + 40.0 / static_cast<double>(p);
  EXPECT_LE(atP, PeriodController::kSetpoint * l.budgetPercent + 1e-9);
  EXPECT_GT(1.0 + 40.0 / static_cast<double>(p - 1), PeriodController::kSetpoint * l.budgetPercent);
  // Counting alone over half the budget: straight to the max period.
  e.events = 40'000'000;  // 2 s of counting per second: 200% of a CPU
  e.overflows = e.events / p;
  c.update(e);
  EXPECT_EQ(c.period(), l.maxPeriod);
}

TEST(PeriodController, ZeroLengthEpochChangesNothing) {
  PeriodController c(64, limits());
  EpochCost e;
  e.overflows = 1'000'000;
  EXPECT_EQ(c.update(e), 64U);
}

}  // namespace
}  // namespace tt::sources
