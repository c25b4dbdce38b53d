// The epoch loop with fake stages: registry changes reach sources and policy, evidence reaches
// the policy, plans reach the executor with increasing generations, heat comes back to the
// registry, counters reach the metrics, process exits cancel moves.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>

#include <atomic>
#include <thread>

#include "fakes/registry/FakeAddressSpace.h"
#include "fakes/service/FakeStages.h"
#include "core/Log.h"
#include "service/EpochLoop.h"
#include "support/TestSupport.h"

namespace {

using tt::MigrationRates;
using tt::service::EpochLoop;
MigrationRates bothWays(double bytesPerSec) { return {bytesPerSec, bytesPerSec}; }
constexpr uint64_t kPage = tt::kBasePageSize;
constexpr uint64_t kBase = 0x7f0000000000;
constexpr uint64_t kSecond = 1000000000ULL;

class EpochLoopTest : public ::testing::Test {
 protected:
  EpochLoopTest()
      : registry(space, {}), loop(registry, {&source, &policy, &executor, nullptr}, metrics) {
    space.map(10, kBase, kBase + (1ULL << 30));
  }
  uint64_t addRegion(uint64_t offset, uint64_t length) {
    tt::registry::RegisterRequest r;
    r.address = kBase + offset;
    r.length = length;
    auto info = registry.registerRegion(peer, r);
    EXPECT_TRUE(info.ok()) << info.error().message();
    return info.ok() ? info->id : 0;
  }
  // One region of `length` bytes at kBase of an attached process, and the policy's plan to promote
  // all of it, made at the second epoch and submitted to the idle engine (the stuck-page tests).
  void policyPromotesOneRegion(uint64_t length) {
    registry.attachProcess(peer, "t", false);
    addRegion(0, length);
    loop.runOnce(1 * kSecond);
    policy.nextPlan.moves.push_back({10, kBase, length, 1, 1500, 0, true});
    loop.runOnce(2 * kSecond);
  }
  // Three regions of 4 pages, 16 pages apart from kBase, of an attached process; their ids.
  std::array<uint64_t, 3> threeRegions() {
    registry.attachProcess(peer, "t", false);
    return {addRegion(0, 4 * kPage), addRegion(16 * kPage, 4 * kPage), addRegion(32 * kPage, 4 * kPage)};
  }
  // With the loop's thread waiting out a 10-minute period: an epoch on this thread whose plan the
  // busy engine holds back (the engine's plan ends by itself after `inFlightReadsLeft` more looks
  // at it; 0 = when the test says), and the plan the policy makes next queued behind it.
  void holdBackAPlan(int inFlightReadsLeft = 0) {
    policy.nextPlan.moves.push_back({10, kBase, kPage, 0, 0, 1});
    policy.laterPlans.emplace_back();
    policy.laterPlans.back().moves.push_back({10, kBase, kPage, 0, 0, 1});
    {
      std::lock_guard lock(executor.mutex);
      executor.current.planInFlight = true;
      executor.inFlightReadsLeft = inFlightReadsLeft;
    }
    loop.runOnce(1 * kSecond);
  }
  tt::test::FakeAddressSpace space;
  tt::registry::Registry registry;
  tt::metrics::Registry metrics;
  tt::test::FakeEvidenceSource source;
  tt::test::FakePolicy policy;
  tt::test::FakeExecutor executor;
  EpochLoop loop;
  tt::registry::Peer peer{10, 1000, 1000};
};

TEST_F(EpochLoopTest, RegistryChangesReachSourcesAndPolicy) {
  registry.attachProcess(peer, "t", false);
  const uint64_t id = addRegion(0, 4 * kPage);
  tt::IterationMark mark;
  mark.step = 5;
  registry.mark(peer, mark);
  loop.runOnce(1 * kSecond);
  EXPECT_EQ(source.tracked.count(10), 1u);
  ASSERT_EQ(policy.regions.count(id), 1u);
  EXPECT_EQ(policy.regions[id].length, 4 * kPage);
  ASSERT_EQ(policy.marks.size(), 1u);
  EXPECT_EQ(policy.marks[0].tgid, 10);
  ASSERT_TRUE(registry.unregisterRegion(peer, id).ok());
  loop.runOnce(2 * kSecond);
  EXPECT_EQ(policy.regions.count(id), 0u);
}

// A process that exited before the sources could track it (ESRCH) is the normal race of a short
// client: Info. Any other failure to track is the sources' and stays a warning.
TEST_F(EpochLoopTest, AProcessGoneBeforeItsTrackingIsInfoOtherTrackingErrorsWarn) {
  tt::test::LogCapture log;
  registry.attachProcess(peer, "t", false);
  source.addError = tt::systemError(ESRCH, "tracking pid 10: the process has exited (soft-dirty: open /proc/10)");
  loop.runOnce(1 * kSecond);
  tt::registry::Peer other{11, 1000, 1000};
  space.map(11, kBase, kBase + kPage);
  registry.attachProcess(other, "u", false);
  source.addError = tt::logicError("tracking pid 11: fault-trace: attach: Permission denied");
  loop.runOnce(2 * kSecond);
  EXPECT_EQ(log.levelOf("tracking pid 10: the process has exited"), tt::log::Level::Info);
  EXPECT_EQ(log.levelOf("tracking pid 11: fault-trace: attach"), tt::log::Level::Warn);
}

TEST_F(EpochLoopTest, TheTraceSinkSeesRegionsMarksEvidenceAndExitsInOrder) {
  tt::test::FakeTraceSink sink;
  EpochLoop traced(registry, {&source, &policy, &executor, nullptr, &sink}, metrics);
  registry.attachProcess(peer, "t", false);
  const uint64_t id = addRegion(0, 4 * kPage);
  tt::IterationMark mark;
  mark.step = 5;
  registry.mark(peer, mark);
  source.next = {{10, kBase + kPage, 7}, {10, kBase + 2 * kPage, 3}};
  traced.runOnce(1 * kSecond);
  (void)registry.removeProcess(10);
  traced.runOnce(2 * kSecond);
  const std::vector<std::string> expected = {"region:" + std::to_string(id), "mark:5", "evidence:2@0-1000000000",
                                             "end@1000000000",  "exit:10@2000000000", "evidence:0@1000000000-2000000000",
                                             "end@2000000000"};
  EXPECT_EQ(sink.calls, expected);
}

// Sources that scan ranges (soft-dirty) get the process's registered regions, merged where they
// touch, after every change; none left is an empty list.
TEST_F(EpochLoopTest, SourcesGetTheRegisteredRangesAfterEachChange) {
  registry.attachProcess(peer, "t", false);
  const uint64_t a = addRegion(0, 4 * kPage);
  addRegion(4 * kPage, 2 * kPage);  // touches a: one range
  const uint64_t c = addRegion(16 * kPage, kPage);
  loop.runOnce(1 * kSecond);
  using Ranges = std::vector<std::pair<uint64_t, uint64_t>>;
  EXPECT_EQ(source.ranges[10], (Ranges{{kBase, kBase + 6 * kPage}, {kBase + 16 * kPage, kBase + 17 * kPage}}));
  ASSERT_TRUE(registry.unregisterRegion(peer, a).ok());
  ASSERT_TRUE(registry.unregisterRegion(peer, c).ok());
  loop.runOnce(2 * kSecond);
  EXPECT_EQ(source.ranges[10], (Ranges{{kBase + 4 * kPage, kBase + 6 * kPage}}));
}

TEST_F(EpochLoopTest, EvidenceFlowsToThePolicyAndHeatBackToTheRegistry) {
  registry.attachProcess(peer, "t", false);
  const uint64_t hot = addRegion(0, 4 * kPage);
  const uint64_t cold = addRegion(16 * kPage, 4 * kPage);
  loop.runOnce(1 * kSecond);
  source.next = {{10, kBase + kPage, 7}, {10, kBase + 2 * kPage, 3}};
  loop.runOnce(2 * kSecond);
  EXPECT_EQ(policy.observed, 2u);
  EXPECT_EQ(policy.lastObserveNs, 2 * kSecond);
  // Gathered since the previous epoch; the plan may use the engine until the next one.
  EXPECT_EQ(policy.lastObserveSinceNs, 1 * kSecond);
  EXPECT_EQ(policy.lastIntervalNs, 1 * kSecond);  // the loop's default period
  EXPECT_DOUBLE_EQ(registry.region(hot)->heat, 10.0);
  EXPECT_DOUBLE_EQ(registry.region(cold)->heat, 0.0);
}

// In-kernel sources hand over blocks: they reach the policy and the trace sink with the records
// of the same epoch, and the next epoch starts from an empty batch.
TEST_F(EpochLoopTest, EvidenceBlocksReachThePolicyAndTheTraceWithTheRecords) {
  tt::test::FakeTraceSink sink;
  EpochLoop traced(registry, {&source, &policy, &executor, nullptr, &sink}, metrics);
  registry.attachProcess(peer, "t", false);
  const uint64_t hot = addRegion(0, 4 * kPage);
  const uint64_t other = addRegion(tt::kBlockBytes, 4 * kPage);
  traced.runOnce(1 * kSecond);
  source.next = {{10, kBase + kPage, 7}};
  tt::EvidenceBlock& b = source.nextBlocks.emplace_back();
  b.tgid = 10;
  b.base = kBase;  // the chunk of `hot`
  b.weightPerCount = 2;
  b.counts[2] = 3;  // 6 accesses in `hot`
  b.counts[3] = 1;  // 2 more
  b.counts[9] = 5;  // outside every region
  traced.runOnce(2 * kSecond);
  EXPECT_EQ(policy.observed, 4u);  // one record and three block pages
  EXPECT_DOUBLE_EQ(registry.region(hot)->heat, 7.0 + 6.0 + 2.0);
  EXPECT_DOUBLE_EQ(registry.region(other)->heat, 0.0);
  traced.runOnce(3 * kSecond);
  EXPECT_EQ(policy.observed, 4u) << "the batch is emptied between epochs";
  const auto& calls = sink.calls;
  EXPECT_NE(std::find(calls.begin(), calls.end(), "evidence:4@1000000000-2000000000"), calls.end());
  EXPECT_NE(std::find(calls.begin(), calls.end(), "evidence:0@2000000000-3000000000"), calls.end());
}

TEST_F(EpochLoopTest, PlansGetIncreasingGenerationsAndEmptyPlansAreNotSubmitted) {
  loop.runOnce(1 * kSecond);
  EXPECT_TRUE(executor.submitted.empty());
  policy.nextPlan.moves.push_back({10, kBase, kPage, 0, 0, 1});
  loop.runOnce(2 * kSecond);
  tt::MigrationPlan manual;
  manual.moves.push_back({10, kBase, kPage, 1, 0, 1});
  ASSERT_TRUE(loop.submitManual(manual).ok());
  policy.nextPlan.moves.push_back({10, kBase, kPage, 0, 0, 1});
  loop.runOnce(3 * kSecond);
  ASSERT_EQ(executor.submitted.size(), 3u);
  EXPECT_LT(executor.submitted[0].generation, executor.submitted[1].generation);
  EXPECT_LT(executor.submitted[1].generation, executor.submitted[2].generation);
  EXPECT_EQ(executor.submitted[1].moves[0].targetNode, 1);
  EXPECT_EQ(loop.stats().plansSubmitted, 2u);
}

TEST_F(EpochLoopTest, ProcessExitCancelsMovesAndUntracks) {
  registry.attachProcess(peer, "t", false);
  addRegion(0, kPage);
  loop.runOnce(1 * kSecond);
  registry.removeProcess(10);
  loop.runOnce(2 * kSecond);
  EXPECT_EQ(executor.cancelled, std::vector<pid_t>{10});
  EXPECT_EQ(source.removed, std::vector<pid_t>{10});
  EXPECT_EQ(policy.removedProcesses, std::vector<pid_t>{10});
  EXPECT_TRUE(policy.regions.empty());
}

// The policy plans each direction's copies with the engine's busy-time throughput that way, not
// bytes moved per epoch: smoothed, only from epochs that moved enough to time, capped by that
// direction's rate limit. A direction not timed yet copies as fast as the other (either way).
TEST_F(EpochLoopTest, ThePolicyGetsTheEnginesMeasuredRateOfEachDirection) {
  auto step = [&](uint64_t promoteBytes, uint64_t promoteNs, uint64_t demoteBytes, uint64_t demoteNs, uint64_t nowNs) {
    {
      std::lock_guard lock(executor.mutex);
      executor.current.promoteTiming.busyBytes += promoteBytes;
      executor.current.promoteTiming.busyNs += promoteNs;
      executor.current.demoteTiming.busyBytes += demoteBytes;
      executor.current.demoteTiming.busyNs += demoteNs;
    }
    loop.runOnce(nowNs);
  };
  auto limits = [&](double promote, double demote) {
    std::lock_guard lock(executor.mutex);
    executor.current.promoteTiming.rateLimitBytesPerSec = promote;
    executor.current.demoteTiming.rateLimitBytesPerSec = demote;
  };
  step(0, 0, 0, 0, 1 * kSecond);
  EXPECT_EQ(policy.lastRates, bothWays(1e9));  // nothing measured: the initial value
  EXPECT_EQ(loop.stats().migrationRates, MigrationRates{}) << "status: not measured";
  step(64ULL << 20, 50'000'000, 0, 0, 2 * kSecond);  // 64 MiB promoted in 50 ms of busy time
  const double first = (64.0 * 1048576) / 0.05;
  EXPECT_EQ(policy.lastRates, bothWays(first)) << "demotions, not timed yet, copy as fast";
  EXPECT_EQ(loop.stats().migrationRates, (MigrationRates{first, 0})) << "status: demotions not timed";
  step(1ULL << 20, 100'000'000, 1ULL << 20, 100'000'000, 3 * kSecond);  // too little to time: kept
  EXPECT_EQ(policy.lastRates, bothWays(first));
  step(64ULL << 20, 100'000'000, 0, 0, 4 * kSecond);  // half the speed: smoothed halfway
  const double second = 0.5 * first + 0.5 * (64.0 * 1048576) / 0.1;
  EXPECT_EQ(policy.lastRates, bothWays(second));
  step(0, 0, 64ULL << 20, 400'000'000, 5 * kSecond);  // demotions timed: 64 MiB in 400 ms, their own
  const double out = (64.0 * 1048576) / 0.4;
  EXPECT_EQ(policy.lastRates, (MigrationRates{second, out}));
  EXPECT_EQ(loop.stats().migrationRates, (MigrationRates{second, out}));
  limits(100e6, 0);  // a promotion limit below it caps promotions only
  step(0, 0, 0, 0, 6 * kSecond);
  EXPECT_EQ(policy.lastRates, (MigrationRates{100e6, out}));
  limits(0, 50e6);  // and a demotion limit demotions only
  step(0, 0, 0, 0, 7 * kSecond);
  EXPECT_EQ(policy.lastRates, (MigrationRates{second, 50e6}));
  // Operators see the same pair.
  const std::string text = metrics.render();
  EXPECT_NE(text.find("tensortier_migration_rate_bytes_per_second{direction=\"demote\"} 5e+07\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("tensortier_migration_rate_bytes_per_second{direction=\"promote\"} "), std::string::npos) << text;
}

// Only demotions timed (a fast tier emptied before anything comes back): promotions are planned as
// fast, under their own limit.
TEST_F(EpochLoopTest, PromotionsNotTimedYetArePlannedAsTheDemotionsRate) {
  {
    std::lock_guard lock(executor.mutex);
    executor.current.demoteTiming.busyBytes = 64ULL << 20;
    executor.current.demoteTiming.busyNs = 200'000'000;
  }
  loop.runOnce(1 * kSecond);
  const double out = (64.0 * 1048576) / 0.2;
  EXPECT_EQ(policy.lastRates, bothWays(out));
  EXPECT_EQ(loop.stats().migrationRates, (MigrationRates{0, out})) << "status: promotions not timed";
  {
    std::lock_guard lock(executor.mutex);
    executor.current.promoteTiming.rateLimitBytesPerSec = 100e6;
  }
  loop.runOnce(2 * kSecond);
  EXPECT_EQ(policy.lastRates, (MigrationRates{100e6, out}));
}

// Before the engine's bandwidth is measured, a promotion rate limit below the initial bandwidth is
// what the policy plans with: with a low limit an epoch moves less than a sample's worth, so the
// bandwidth would never be measured and every plan would be sized for the initial 1 GB/s. Above
// it, the initial value, as the daemon set it (a reload changes it).
TEST_F(EpochLoopTest, ARateLimitBelowTheInitialBandwidthIsPlannedWithBeforeAnyMeasurement) {
  auto limit = [&](double promote, double demote) {
    std::lock_guard lock(executor.mutex);
    executor.current.promoteTiming.rateLimitBytesPerSec = promote;
    executor.current.demoteTiming.rateLimitBytesPerSec = demote;
  };
  limit(100e6, 30e6);  // each direction under its own limit
  loop.runOnce(1 * kSecond);
  EXPECT_EQ(policy.lastRates, (MigrationRates{100e6, 30e6}));
  EXPECT_EQ(loop.stats().migrationRates, MigrationRates{}) << "status: not measured";
  // Raised above the initial bandwidth: the initial one again, handed over (the heat model keeps
  // the last value it was given, so 0 would leave it at the old limit).
  limit(2e9, 0);
  loop.runOnce(2 * kSecond);
  EXPECT_EQ(policy.lastRates, bothWays(1e9));
  loop.setInitialMigrationBandwidth(40e6);  // a reloaded initial_migration_bandwidth below the limit
  limit(100e6, 100e6);
  loop.runOnce(3 * kSecond);
  EXPECT_EQ(policy.lastRates, bothWays(40e6));
}

// A plan made while the engine still moves the previous one is not submitted: its residency
// misses the batch in flight, and superseding could overshoot the budget by that batch.
TEST_F(EpochLoopTest, NoPlanIsSubmittedWhileTheEngineStillRunsThePreviousOne) {
  policy.nextPlan.moves.push_back({10, kBase, kPage, 0, 0, 1});
  {
    std::lock_guard lock(executor.mutex);
    executor.current.planInFlight = true;
  }
  loop.runOnce(1 * kSecond);
  EXPECT_TRUE(executor.submitted.empty());
  EXPECT_EQ(loop.stats().plansDeferred, 1u);
  {
    std::lock_guard lock(executor.mutex);
    executor.current.planInFlight = false;
  }
  policy.nextPlan.moves.push_back({10, kBase, kPage, 0, 0, 1});
  loop.runOnce(2 * kSecond);
  ASSERT_EQ(executor.submitted.size(), 1u);
  EXPECT_EQ(loop.stats().plansSubmitted, 1u);
}

// Waits up to 10 s (the tests' periods are minutes) for the executor to have `n` plans.
bool waitForSubmitted(tt::test::FakeExecutor& executor, size_t n) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < until) {
    {
      std::lock_guard lock(executor.mutex);
      if (executor.submitted.size() >= n) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// A plan held back while the engine ran is made again as soon as the engine is idle: the loop
// runs its next epoch then, not a period later. An engine going idle when no plan was held back
// wakes nothing.
TEST_F(EpochLoopTest, AnEngineGoingIdleAfterAPlanWasHeldBackStartsTheNextEpochAtOnce) {
  loop.setPeriod(std::chrono::minutes(10));
  loop.start();
  executor.finishPlan();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(loop.stats().epochs, 0u);
  holdBackAPlan();
  EXPECT_EQ(loop.stats().plansDeferred, 1u);
  executor.finishPlan();
  EXPECT_TRUE(waitForSubmitted(executor, 1)) << "no epoch ran when the engine went idle";
  loop.stop();
  EXPECT_EQ(loop.stats().epochs, 2u);
  EXPECT_EQ(loop.stats().earlyEpochs, 1u);
  EXPECT_EQ(loop.stats().plansSubmitted, 1u);
  EXPECT_EQ(metrics.counter("tensortier_plans_deferred_total", "").value(), 1.0);
  EXPECT_EQ(metrics.counter("tensortier_early_epochs_total", "").value(), 1.0);
}

// The engine finishes between the epoch's look at it and the plan being held back: its idle
// callback came too early to ask for the early epoch, which the loop then asks for itself.
TEST_F(EpochLoopTest, AnEngineThatGoesIdleWhileAPlanIsHeldBackStillGetsTheEarlyEpoch) {
  loop.setPeriod(std::chrono::minutes(10));
  loop.start();
  holdBackAPlan(1);  // the epoch's look sees the plan; the next finds it done
  EXPECT_EQ(loop.stats().plansDeferred, 1u);
  EXPECT_TRUE(waitForSubmitted(executor, 1)) << "the held-back plan waited for the period";
  loop.stop();
  EXPECT_EQ(loop.stats().earlyEpochs, 1u);
}

// A callback that comes late, when the engine has taken another plan meanwhile, wakes the loop
// only to find it busy: the loop waits for that plan's end instead of holding another plan back.
TEST_F(EpochLoopTest, ALateIdleCallbackWaitsForThePlanTheEngineRunsNow) {
  loop.setPeriod(std::chrono::minutes(10));
  loop.start();
  holdBackAPlan();
  ASSERT_EQ(loop.stats().plansDeferred, 1u);
  executor.callIdle();  // late: the engine still (again) runs a plan
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(loop.stats().epochs, 1u) << "an epoch ran while the engine was busy";
  executor.finishPlan();
  EXPECT_TRUE(waitForSubmitted(executor, 1)) << "no epoch when the engine went idle after the late callback";
  loop.stop();
  EXPECT_EQ(loop.stats().plansDeferred, 1u);
  EXPECT_EQ(loop.stats().earlyEpochs, 1u);
}

// While the engine runs a submitted plan, each plan is told its moves, so that the policy keeps
// asking where those pages are; once the engine is idle, nothing.
TEST_F(EpochLoopTest, ThePolicyIsToldWhichMovesTheEngineStillMakes) {
  policy.nextPlan.moves.push_back({10, kBase, 4 * kPage, 0, 0, 1});
  loop.runOnce(1 * kSecond);
  ASSERT_EQ(executor.submitted.size(), 1u);
  EXPECT_TRUE(policy.lastStillMoving.empty());
  {
    std::lock_guard lock(executor.mutex);
    executor.current.planInFlight = true;
  }
  for (uint64_t s = 2; s <= 4; ++s) {
    loop.runOnce(s * kSecond);
    ASSERT_EQ(policy.lastStillMoving.size(), 1u) << "epoch " << s;
    EXPECT_EQ(policy.lastStillMoving[0].start, kBase);
    EXPECT_EQ(policy.lastStillMoving[0].length, 4 * kPage);
  }
  {
    std::lock_guard lock(executor.mutex);
    executor.current.planInFlight = false;
  }
  loop.runOnce(5 * kSecond);
  EXPECT_TRUE(policy.lastStillMoving.empty());
}

TEST_F(EpochLoopTest, CountersBecomeMetricsAndRates) {
  loop.runOnce(1 * kSecond);
  {
    std::lock_guard lock(executor.mutex);
    executor.current.promotedBytes = 8 * kPage;
    executor.current.promotedPages = 8;
    executor.current.failedPages["busy"] = 3;
  }
  tt::service::SourceReport report;
  report.name = "software-faults";
  report.active = true;
  report.detail = "ok";
  report.samples = 40;
  report.cpuPercent = 1.0;
  report.lost = 5;
  report.throttled = 2;
  report.kernelMoves.promoted = 7;
  report.kernelMoves.syscall = 9;
  tt::service::SourceReport trace;
  trace.name = "fault-trace";
  trace.active = true;
  trace.paused = true;
  trace.pauses = 3;
  source.reports = {report, trace};
  loop.runOnce(3 * kSecond);  // two seconds later
  const auto st = loop.stats();
  EXPECT_DOUBLE_EQ(st.promoteBytesPerSec, 8.0 * kPage / 2.0);
  EXPECT_EQ(policy.lastRates, bothWays(1e9));  // the initial value: moved-per-epoch is not the engine's bandwidth
  const std::string text = metrics.render();
  EXPECT_NE(text.find("tensortier_promoted_bytes_total 32768\n"), std::string::npos) << text;
  EXPECT_NE(text.find("tensortier_migration_failed_pages_total{reason=\"busy\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("tensortier_samples_total{source=\"software-faults\"} 40\n"), std::string::npos) << text;
  EXPECT_NE(text.find("tensortier_sampling_cpu_seconds_total{source=\"software-faults\"} 0.02\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("tensortier_epoch_duration_seconds_count 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("tensortier_source_lost_total{source=\"software-faults\"} 5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("tensortier_source_throttled_total{source=\"software-faults\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("tensortier_kernel_moved_pages_total{reason=\"promoted\"} 7\n"), std::string::npos) << text;
  EXPECT_NE(text.find("tensortier_kernel_moved_pages_total{reason=\"syscall\"} 9\n"), std::string::npos) << text;
  EXPECT_NE(text.find("tensortier_kernel_moved_pages_total{reason=\"demoted\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("tensortier_source_paused{source=\"fault-trace\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("tensortier_source_paused{source=\"software-faults\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("tensortier_source_pauses_total{source=\"fault-trace\"} 3\n"), std::string::npos) << text;
  // Counters only grow by the delta: a third epoch without new moves adds nothing, and a source's
  // running totals add only what changed.
  source.reports[0].lost = 6;
  source.reports[0].kernelMoves.promoted = 10;
  source.reports[1].paused = false;  // resumed; the pause count stays
  loop.runOnce(4 * kSecond);
  const std::string third = metrics.render();
  EXPECT_NE(third.find("tensortier_promoted_bytes_total 32768\n"), std::string::npos);
  EXPECT_NE(third.find("tensortier_samples_total{source=\"software-faults\"} 40\n"), std::string::npos) << third;
  EXPECT_NE(third.find("tensortier_source_lost_total{source=\"software-faults\"} 6\n"), std::string::npos) << third;
  EXPECT_NE(third.find("tensortier_kernel_moved_pages_total{reason=\"promoted\"} 10\n"), std::string::npos) << third;
  EXPECT_NE(third.find("tensortier_source_paused{source=\"fault-trace\"} 0\n"), std::string::npos) << third;
  EXPECT_NE(third.find("tensortier_source_pauses_total{source=\"fault-trace\"} 3\n"), std::string::npos) << third;
  ASSERT_EQ(loop.stats().sources.size(), 2u);
}

// The kernel's migrations on the whole machine (kswapd's demotions are charged to no tracked
// process) become counters by reason and result, growing by what changed between epochs; so do the
// entries of tracked pages mapped back instead of moved, where the trace can tell them.
TEST_F(EpochLoopTest, SystemWideKernelMigrationsAndUndoneEntriesBecomeCounters) {
  tt::service::SourceReport report;
  report.name = "fault-trace";
  report.active = true;
  tt::sources::SystemMigrations m;
  m.demotion = {4096, 12};
  m.promotion = {100, 0};
  m.trackedUndone = 512;
  report.systemMigrations = m;
  source.reports = {report};
  loop.runOnce(1 * kSecond);
  const std::string first = metrics.render();
  EXPECT_NE(first.find("tensortier_kernel_migrated_pages_system_total{reason=\"demoted\",result=\"succeeded\"} 4096\n"),
            std::string::npos)
      << first;
  EXPECT_NE(first.find("tensortier_kernel_migrated_pages_system_total{reason=\"demoted\",result=\"failed\"} 12\n"),
            std::string::npos)
      << first;
  EXPECT_NE(first.find("tensortier_kernel_migrated_pages_system_total{reason=\"promoted\",result=\"succeeded\"} 100\n"),
            std::string::npos)
      << first;
  EXPECT_NE(first.find("tensortier_kernel_undone_entries_total 512\n"), std::string::npos) << first;
  source.reports[0].systemMigrations->demotion.succeeded = 5000;
  source.reports[0].systemMigrations->trackedUndone = 1024;
  loop.runOnce(2 * kSecond);
  loop.runOnce(3 * kSecond);  // unchanged totals add nothing
  const std::string later = metrics.render();
  EXPECT_NE(later.find("tensortier_kernel_migrated_pages_system_total{reason=\"demoted\",result=\"succeeded\"} 5000\n"),
            std::string::npos)
      << later;
  EXPECT_NE(later.find("tensortier_kernel_migrated_pages_system_total{reason=\"promoted\",result=\"succeeded\"} 100\n"),
            std::string::npos)
      << later;
  EXPECT_NE(later.find("tensortier_kernel_undone_entries_total 1024\n"), std::string::npos) << later;
  // Where the trace cannot tell undone entries apart, no such series (0 would claim none happened).
  tt::metrics::Registry unknown;
  source.reports[0].systemMigrations->trackedUndone.reset();
  EpochLoop loop3(registry, {&source, nullptr, nullptr, nullptr}, unknown);
  loop3.runOnce(1 * kSecond);
  EXPECT_EQ(unknown.render().find("tensortier_kernel_undone_entries_total"), std::string::npos) << unknown.render();
  // A source without system-wide totals exports no such series.
  tt::metrics::Registry other;
  tt::test::FakeEvidenceSource plain;
  plain.reports = {tt::service::SourceReport{}};
  plain.reports[0].name = "pmu";
  EpochLoop loop2(registry, {&plain, nullptr, nullptr, nullptr}, other);
  loop2.runOnce(1 * kSecond);
  EXPECT_EQ(other.render().find("tensortier_kernel_migrated_pages_system_total"), std::string::npos);
}

// The sources' start notes (kernel tiering, sources not opened) are in the stats before any epoch.
TEST_F(EpochLoopTest, SourceNotesAreKnownFromTheStart) {
  tt::test::FakeEvidenceSource noted;
  noted.noteLines = {"kernel-tiering: off (numa_balancing=0 (off), demotion_enabled=false)"};
  EpochLoop fresh(registry, {&noted, nullptr, nullptr, nullptr}, metrics);
  EXPECT_EQ(fresh.stats().sourceNotes, noted.noteLines);
}

TEST_F(EpochLoopTest, MissingStagesAreSkipped) {
  EpochLoop bare(registry, {}, metrics);
  registry.attachProcess(peer, "t", false);
  addRegion(0, kPage);
  bare.runOnce(1 * kSecond);
  EXPECT_EQ(bare.stats().epochs, 1u);
  EXPECT_FALSE(bare.submitManual({}).ok());
}

// --- manual pins (tensortierctl migrate) ---

tt::MigrationPlan manualMove(uint64_t start, uint64_t length, int node, uint64_t regionId) {
  tt::MigrationPlan plan;
  plan.moves.push_back({10, start, length, node, EpochLoop::kManualPriority, regionId});
  return plan;
}

TEST_F(EpochLoopTest, ManualMigrationPinsTheRangeForThePolicyUntilItExpires) {
  registry.attachProcess(peer, "t", false);
  const uint64_t id = addRegion(0, 4 * kPage);
  loop.runOnce(1 * kSecond);
  ASSERT_TRUE(loop.submitManual(manualMove(kBase, 4 * kPage, 1, id), 1 * kSecond, 300 * kSecond).ok());
  ASSERT_EQ(executor.submitted.size(), 1u);

  // The policy is told; a plan of its own, submitted to the idle engine, is just its own moves
  // (the manual plan is done: APinWhoseManualMoveIsDoneIsNotMovedAgainByLaterPlans).
  policy.nextPlan.moves.push_back({10, kBase + 64 * kPage, kPage, 0, 5, 0});
  loop.runOnce(2 * kSecond);
  ASSERT_EQ(policy.lastPins.size(), 1u);
  EXPECT_EQ(policy.lastPins[0].tgid, 10);
  EXPECT_EQ(policy.lastPins[0].start, kBase);
  EXPECT_EQ(policy.lastPins[0].length, 4 * kPage);
  EXPECT_EQ(policy.lastPins[0].node, 1);
  EXPECT_EQ(policy.lastPins[0].expiresNs, 301 * kSecond);
  ASSERT_EQ(executor.submitted.size(), 2u);
  ASSERT_EQ(executor.submitted[1].moves.size(), 1u);
  EXPECT_EQ(executor.submitted[1].moves[0].start, kBase + 64 * kPage);

  // An empty policy plan submits nothing: the manual plan keeps running in the engine.
  loop.runOnce(3 * kSecond);
  EXPECT_EQ(executor.submitted.size(), 2u);
  EXPECT_EQ(policy.lastPins.size(), 1u);

  // Just before the expiry still pinned; at it, planned normally again.
  loop.runOnce(301 * kSecond - 1);
  EXPECT_EQ(policy.lastPins.size(), 1u);
  policy.nextPlan.moves.push_back({10, kBase, kPage, 0, 5, id});
  loop.runOnce(301 * kSecond);
  EXPECT_TRUE(policy.lastPins.empty());
  EXPECT_TRUE(loop.pins().empty());
  ASSERT_EQ(executor.submitted.size(), 3u);
  ASSERT_EQ(executor.submitted[2].moves.size(), 1u);
  EXPECT_EQ(executor.submitted[2].moves[0].targetNode, 0);
}

// Once the engine has finished the manual plan (it is idle again), the pinned range is where the
// user put it: later plans leave it to the pin alone, however many there are. Moving it again in
// each of them cost the engine a pass over the whole range per plan, rate tokens and free-memory
// checks included.
TEST_F(EpochLoopTest, APinWhoseManualMoveIsDoneIsNotMovedAgainByLaterPlans) {
  registry.attachProcess(peer, "t", false);
  const uint64_t id = addRegion(0, 4 * kPage);
  loop.runOnce(1 * kSecond);
  ASSERT_TRUE(loop.submitManual(manualMove(kBase, 4 * kPage, 1, id), 1 * kSecond, 0).ok());
  auto engineBusy = [&](bool busy) {
    std::lock_guard lock(executor.mutex);
    executor.current.planInFlight = busy;
  };
  engineBusy(true);  // the manual plan runs
  policy.nextPlan.moves.push_back({10, kBase + 64 * kPage, kPage, 0, 5, 0});
  loop.runOnce(2 * kSecond);
  ASSERT_EQ(executor.submitted.size(), 1u) << "a plan went to a busy engine";
  engineBusy(false);  // and is done
  for (uint64_t s = 3; s <= 5; ++s) {
    policy.nextPlan.moves.push_back({10, kBase + 64 * kPage, kPage, 0, 5, 0});
    loop.runOnce(s * kSecond);
    EXPECT_EQ(policy.lastPins.size(), 1u) << "epoch " << s << ": the policy must still leave the range alone";
  }
  ASSERT_EQ(executor.submitted.size(), 4u);
  for (size_t i = 1; i < executor.submitted.size(); ++i)
    for (const auto& m : executor.submitted[i].moves)
      EXPECT_NE(m.priority, EpochLoop::kManualPriority) << "plan " << i << " moves the pinned range again";
}

// A manual move the engine finished with pages left off the pin's node (busy pages, the node full:
// an unsettled run in its plan's runs) is retried with the next plan to the idle engine, even an empty
// one, since the pin keeps the planner from moving those pages; while it stays unsettled, after 1,
// 2, 4 ... epochs (pinned pages may never move); once it has settled, nothing is carried. Plans
// that do not mention the pin, finished in between, change nothing.
TEST_F(EpochLoopTest, AnUnsettledPinnedMoveIsRetriedWithBackoffUntilItSettles) {
  registry.attachProcess(peer, "t", false);
  const uint64_t id = addRegion(0, 4 * kPage);
  loop.runOnce(1 * kSecond);
  ASSERT_TRUE(loop.submitManual(manualMove(kBase, 4 * kPage, 1, id), 1 * kSecond, 0).ok());
  ASSERT_EQ(executor.submitted.size(), 1u);
  // The last plan submitted finishes with `runs`.
  auto lastRuns = [&](std::vector<tt::service::FinishedRun> runs) {
    std::lock_guard lock(executor.mutex);
    for (auto& r : runs) r.generation = executor.submitted.back().generation;
    executor.runs = std::move(runs);
  };
  lastRuns({{10, kBase, 4 * kPage, 1, false, 0, false, true, {}}, {10, kBase + 64 * kPage, kPage, 0, false, 0, false, true, {}}});  // the second: not pinned
  std::vector<uint64_t> retriedAt;
  for (uint64_t s = 2; s <= 12; ++s) {
    const size_t before = executor.submitted.size();
    loop.runOnce(s * kSecond);  // the policy plans nothing
    if (executor.submitted.size() == before) continue;
    ASSERT_EQ(executor.submitted.back().moves.size(), 1u);
    const auto& m = executor.submitted.back().moves[0];
    EXPECT_EQ(m.start, kBase);
    EXPECT_EQ(m.length, 4 * kPage);
    EXPECT_EQ(m.targetNode, 1);
    EXPECT_EQ(m.priority, EpochLoop::kManualPriority);
    EXPECT_EQ(m.regionId, id);
    retriedAt.push_back(s);
    if (s == 2) lastRuns({{10, kBase + 64 * kPage, kPage, 0, true, 0, false, true, {}}});  // a policy plan finished: no word of the pin
    else lastRuns({{10, kBase, 4 * kPage, 1, false, 0, false, true, {}}});                  // the retry: still unsettled
  }
  EXPECT_EQ(retriedAt, (std::vector<uint64_t>{2, 4, 7, 12})) << "retried every epoch, or lost";
  lastRuns({{10, kBase, 4 * kPage, 1, true, 0, false, true, {}}});  // the last retry settled it
  const size_t settled = executor.submitted.size();
  for (uint64_t s = 13; s <= 40; ++s) loop.runOnce(s * kSecond);
  EXPECT_EQ(executor.submitted.size(), settled) << "a settled pin was moved again";
}

// More manual plans finish within one epoch than the pins read: a pin whose plan is not among those
// read, and which may have been left unsettled, is retried once, not taken for settled.
TEST_F(EpochLoopTest, APinOfAPlanPastThoseReadIsRetriedNotTakenForSettled) {
  registry.attachProcess(peer, "t", false);
  const uint64_t first = addRegion(0, 4 * kPage);
  loop.runOnce(1 * kSecond);
  auto finish = [&](uint64_t start, bool settled) {
    std::lock_guard lock(executor.mutex);
    executor.runs.push_back({10, start, 4 * kPage, 1, settled, executor.submitted.back().generation, false, true, {}});
  };
  ASSERT_TRUE(loop.submitManual(manualMove(kBase, 4 * kPage, 1, first), 1 * kSecond, 0).ok());
  finish(kBase, false);  // left unsettled (busy pages)
  for (uint64_t i = 1; i <= EpochLoop::kPinPlansRead; ++i) {
    const uint64_t start = kBase + 16 * i * kPage;
    const uint64_t id = addRegion(16 * i * kPage, 4 * kPage);
    ASSERT_TRUE(loop.submitManual(manualMove(start, 4 * kPage, 1, id), 1 * kSecond, 0).ok());
    finish(start, true);
  }
  const size_t before = executor.submitted.size();
  loop.runOnce(2 * kSecond);
  ASSERT_EQ(executor.submitted.size(), before + 1) << "nothing retried";
  const auto& moves = executor.submitted.back().moves;
  ASSERT_EQ(moves.size(), 1u) << "only the pin no plan read mentions is retried";
  EXPECT_EQ(moves[0].start, kBase);
  EXPECT_EQ(moves[0].regionId, first);
  // Its retry settles it: not moved again.
  finish(kBase, true);
  const size_t settled = executor.submitted.size();
  for (uint64_t s = 3; s <= 20; ++s) loop.runOnce(s * kSecond);
  EXPECT_EQ(executor.submitted.size(), settled) << "a settled pin was moved again";
}

// Pages the engine left busy in the policy's own plan reach the policy's next plans as stuck
// ranges (held, then due a retry), and the status and metrics count them; a manual plan's busy
// pages do not, and a process's exit drops its ranges.
TEST_F(EpochLoopTest, BusyPagesOfThePolicysPlanAreHandedToItsNextPlans) {
  policyPromotesOneRegion(64 * kPage);
  ASSERT_EQ(executor.submitted.size(), 1u);
  const uint64_t generation = executor.submitted[0].generation;
  auto finished = [&](uint64_t gen, std::vector<tt::AddressRange> busy) {
    tt::service::FinishedRun r{10, kBase, 64 * kPage, 1, busy.empty(), gen, true, true, std::move(busy)};
    std::lock_guard lock(executor.mutex);
    executor.runs = {r};
  };
  finished(generation, {{kBase + 3 * kPage, 2 * kPage}});
  loop.runOnce(3 * kSecond);
  ASSERT_EQ(policy.lastStuck.size(), 1u);
  EXPECT_EQ(policy.lastStuck[0].tgid, 10);
  EXPECT_EQ(policy.lastStuck[0].start, kBase + 3 * kPage);
  EXPECT_EQ(policy.lastStuck[0].length, 2 * kPage);
  EXPECT_TRUE(policy.lastStuck[0].onFast);
  EXPECT_FALSE(policy.lastStuck[0].retry);
  EXPECT_EQ(loop.stats().stuck.fastPages, 2u);
  EXPECT_NE(metrics.render().find("tensortier_stuck_pages{tier=\"fast\"} 2"), std::string::npos) << metrics.render();
  // The same report read again (no new plan finished) changes nothing: held until it is due.
  int held = 1;
  for (uint64_t s = 4; s < 20 && !policy.lastStuck.empty() && !policy.lastStuck[0].retry; ++s, ++held) loop.runOnce(s * kSecond);
  EXPECT_EQ(held, static_cast<int>(tt::service::StuckMoves::kFirstHoldPlans) + 1) << "held for the first hold, then due";

  // A manual plan that leaves pages busy: the pins' business, not held here.
  ASSERT_TRUE(loop.submitManual({0, {{10, kBase + 32 * kPage, kPage, 0, EpochLoop::kManualPriority, 0}}}).ok());
  finished(executor.submitted.back().generation, {{kBase + 32 * kPage, kPage}});
  loop.runOnce(30 * kSecond);
  ASSERT_EQ(policy.lastStuck.size(), 1u);
  EXPECT_EQ(policy.lastStuck[0].start, kBase + 3 * kPage);

  (void)registry.removeProcess(10);
  loop.runOnce(31 * kSecond);
  EXPECT_TRUE(policy.lastStuck.empty());
  EXPECT_EQ(loop.stats().stuck.fastPages, 0u);
}

// A manual plan that finishes after the policy's, before the loop has read the policy's runs,
// does not hide them: the policy's busy pages are held all the same.
TEST_F(EpochLoopTest, BusyPagesOfThePolicysPlanAreHeldWhenAManualPlanFinishedAfterIt) {
  policyPromotesOneRegion(64 * kPage);
  ASSERT_EQ(executor.submitted.size(), 1u);
  const uint64_t policyGeneration = executor.submitted[0].generation;
  ASSERT_TRUE(loop.submitManual({0, {{10, kBase + 32 * kPage, kPage, 0, EpochLoop::kManualPriority, 0}}}).ok());
  const uint64_t manualGeneration = executor.submitted.back().generation;
  ASSERT_GT(manualGeneration, policyGeneration);
  {
    std::lock_guard lock(executor.mutex);
    executor.runs = {{10, kBase, 64 * kPage, 1, false, policyGeneration, true, true, {{kBase + 3 * kPage, 2 * kPage}}},
                     {10, kBase + 32 * kPage, kPage, 0, true, manualGeneration, false, true, {}}};
  }
  loop.runOnce(3 * kSecond);
  ASSERT_EQ(policy.lastStuck.size(), 1u) << "the policy's busy pages were lost behind the manual plan's report";
  EXPECT_EQ(policy.lastStuck[0].start, kBase + 3 * kPage);
  EXPECT_EQ(policy.lastStuck[0].length, 2 * kPage);
  EXPECT_EQ(loop.stats().stuck.fastPages, 2u);
}

// Busy ranges past the holds' bound are counted in a metric, each once.
TEST_F(EpochLoopTest, BusyRangesPastTheHoldsBoundAreCounted) {
  const uint64_t length = 2 * (tt::service::StuckMoves::kMaxRanges + 3) * kPage;
  policyPromotesOneRegion(length);
  ASSERT_EQ(executor.submitted.size(), 1u);
  std::vector<tt::AddressRange> busy;
  for (uint64_t i = 0; i < tt::service::StuckMoves::kMaxRanges + 3; ++i) busy.push_back({kBase + 2 * i * kPage, kPage});
  {
    std::lock_guard lock(executor.mutex);
    executor.runs = {{10, kBase, length, 1, false, executor.submitted[0].generation, true, true, std::move(busy)}};
  }
  loop.runOnce(3 * kSecond);
  loop.runOnce(4 * kSecond);  // the same report: nothing counted twice
  EXPECT_EQ(loop.stats().stuck.fastPages, tt::service::StuckMoves::kMaxRanges);
  EXPECT_NE(metrics.render().find("tensortier_stuck_ranges_not_held_total 3\n"), std::string::npos) << metrics.render();
}

// A process that exits after its plan finished, before the loop has read the plan's runs: its
// busy pages are not held (they would count against the holds' bound for good, and a reused pid
// would inherit them). A manual move over a held range takes it over.
TEST_F(EpochLoopTest, BusyPagesOfAnExitedProcessOrMovedByHandAreNotHeld) {
  registry.attachProcess(peer, "t", false);
  addRegion(0, 64 * kPage);
  loop.runOnce(1 * kSecond);
  auto planAndFinish = [&](uint64_t second, std::vector<tt::AddressRange> busy) {
    policy.nextPlan.moves.push_back({10, kBase, 64 * kPage, 1, 1500, 0, true});
    loop.runOnce(second * kSecond);
    tt::service::FinishedRun r{10, kBase, 64 * kPage, 1, false, executor.submitted.back().generation, true, true, std::move(busy)};
    std::lock_guard lock(executor.mutex);
    executor.runs = {r};
  };
  planAndFinish(2, {{kBase + 3 * kPage, 2 * kPage}});
  loop.runOnce(3 * kSecond);
  ASSERT_EQ(policy.lastStuck.size(), 1u);
  ASSERT_TRUE(loop.submitManual({0, {{10, kBase, 8 * kPage, 1, EpochLoop::kManualPriority, 0}}}).ok());
  loop.runOnce(4 * kSecond);
  EXPECT_TRUE(policy.lastStuck.empty()) << "a hold outlived a manual move over it";
  EXPECT_EQ(loop.stats().stuck.fastPages, 0u);

  planAndFinish(5, {{kBase + 9 * kPage, kPage}});
  (void)registry.removeProcess(10);
  loop.runOnce(6 * kSecond);
  EXPECT_TRUE(policy.lastStuck.empty()) << "the exited process's busy pages came back";
  EXPECT_EQ(loop.stats().stuck.fastPages, 0u);
}

// A manual plan supersedes the engine's: one submitted while an earlier manual plan may still be
// running brings that plan's pinned moves along, except those it replaces; once the engine has
// been seen idle they are done and nothing is carried.
TEST_F(EpochLoopTest, AManualPlanSupersedingAnUnfinishedOneCarriesItsPinnedMoves) {
  const auto [a, b, c] = threeRegions();
  loop.runOnce(1 * kSecond);
  auto engineBusy = [&](bool busy) {
    std::lock_guard lock(executor.mutex);
    executor.current.planInFlight = busy;
  };
  ASSERT_TRUE(loop.submitManual(manualMove(kBase, 4 * kPage, 1, a), 1 * kSecond, 0).ok());
  engineBusy(true);
  ASSERT_TRUE(loop.submitManual(manualMove(kBase + 16 * kPage, 4 * kPage, 1, b), 1 * kSecond, 0).ok());
  ASSERT_EQ(executor.submitted.size(), 2u);
  const auto& second = executor.submitted[1].moves;
  ASSERT_EQ(second.size(), 2u);
  EXPECT_EQ(second[0].regionId, b);
  EXPECT_EQ(second[1].regionId, a) << "region a's unfinished manual move was dropped";
  EXPECT_EQ(second[1].start, kBase);
  EXPECT_EQ(second[1].length, 4 * kPage);
  EXPECT_EQ(second[1].targetNode, 1);
  EXPECT_EQ(second[1].priority, EpochLoop::kManualPriority);
  // Region a moved elsewhere by hand while that runs: its new move replaces the old, b comes along.
  ASSERT_TRUE(loop.submitManual(manualMove(kBase, 4 * kPage, 0, a), 1 * kSecond, 0).ok());
  ASSERT_EQ(executor.submitted.size(), 3u);
  const auto& third = executor.submitted[2].moves;
  ASSERT_EQ(third.size(), 2u);
  EXPECT_EQ(third[0].regionId, a);
  EXPECT_EQ(third[0].targetNode, 0);
  EXPECT_EQ(third[1].regionId, b);
  // The engine is seen idle: every manual plan is done.
  engineBusy(false);
  loop.runOnce(2 * kSecond);
  engineBusy(true);
  ASSERT_TRUE(loop.submitManual(manualMove(kBase + 32 * kPage, 4 * kPage, 1, c), 2 * kSecond, 0).ok());
  ASSERT_EQ(executor.submitted.size(), 4u);
  EXPECT_EQ(executor.submitted[3].moves.size(), 1u);
  EXPECT_EQ(loop.pins().size(), 3u);
}

// The policy did not plan a manual move: it is told of it at its next plan (among the moves still
// moving, whose ranges it reads again), even when the engine has finished it, and once only.
TEST_F(EpochLoopTest, ThePolicyIsToldOfAManualMoveAtItsNextPlan) {
  registry.attachProcess(peer, "t", false);
  const uint64_t id = addRegion(0, 4 * kPage);
  loop.runOnce(1 * kSecond);
  ASSERT_TRUE(loop.submitManual(manualMove(kBase, 4 * kPage, 1, id), 1 * kSecond, 0).ok());
  executor.current.planInFlight = true;
  loop.runOnce(2 * kSecond);
  ASSERT_EQ(policy.lastStillMoving.size(), 1u);
  EXPECT_EQ(policy.lastStillMoving[0].start, kBase);
  EXPECT_EQ(policy.lastStillMoving[0].length, 4 * kPage);
  EXPECT_EQ(policy.lastStillMoving[0].targetNode, 1);
  executor.current.planInFlight = false;
  loop.runOnce(3 * kSecond);
  EXPECT_TRUE(policy.lastStillMoving.empty());
  // Done before the next plan: told all the same, once.
  ASSERT_TRUE(loop.submitManual(manualMove(kBase, 4 * kPage, 0, id), 3 * kSecond, 0).ok());
  loop.runOnce(4 * kSecond);
  ASSERT_EQ(policy.lastStillMoving.size(), 1u);
  EXPECT_EQ(policy.lastStillMoving[0].targetNode, 0);
  loop.runOnce(5 * kSecond);
  EXPECT_TRUE(policy.lastStillMoving.empty());
}

TEST_F(EpochLoopTest, PinWithoutExpiryLastsUntilUnpinned) {
  registry.attachProcess(peer, "t", false);
  const uint64_t id = addRegion(0, 4 * kPage);
  ASSERT_TRUE(loop.submitManual(manualMove(kBase, 4 * kPage, 1, id), 1 * kSecond, 0).ok());
  loop.runOnce(1000000 * kSecond);
  ASSERT_EQ(policy.lastPins.size(), 1u);
  EXPECT_EQ(policy.lastPins[0].expiresNs, 0u);
  EXPECT_EQ(loop.unpin(10, id + 1), 0u);  // another region: nothing
  EXPECT_EQ(loop.unpin(10, id), 1u);
  loop.runOnce(1000001 * kSecond);
  EXPECT_TRUE(policy.lastPins.empty());
}

TEST_F(EpochLoopTest, ANewerPinOfTheSameRangeReplacesTheOlder) {
  registry.attachProcess(peer, "t", false);
  const uint64_t id = addRegion(0, 4 * kPage);
  ASSERT_TRUE(loop.submitManual(manualMove(kBase, 4 * kPage, 1, id), 1 * kSecond, 10 * kSecond).ok());
  ASSERT_TRUE(loop.submitManual(manualMove(kBase, 4 * kPage, 0, id), 2 * kSecond, 10 * kSecond).ok());
  const auto pins = loop.pins();
  ASSERT_EQ(pins.size(), 1u);
  EXPECT_EQ(pins[0].node, 0);
  EXPECT_EQ(pins[0].expiresNs, 12 * kSecond);
}

TEST_F(EpochLoopTest, PinsEndWithTheirRegionOrProcess) {
  const auto [a, b, c] = threeRegions();
  loop.runOnce(1 * kSecond);
  auto plan = manualMove(kBase, 4 * kPage, 1, a);
  plan.moves.push_back({10, kBase + 16 * kPage, 4 * kPage, 1, EpochLoop::kManualPriority, b});
  plan.moves.push_back({10, kBase + 32 * kPage, 4 * kPage, 1, EpochLoop::kManualPriority, c});
  ASSERT_TRUE(loop.submitManual(plan, 1 * kSecond, 0).ok());
  ASSERT_EQ(loop.pins().size(), 3u);
  ASSERT_TRUE(registry.unregisterRegion(peer, a).ok());
  loop.runOnce(2 * kSecond);
  ASSERT_EQ(policy.lastPins.size(), 2u);
  EXPECT_NE(policy.lastPins[0].regionId, a);
  EXPECT_NE(policy.lastPins[1].regionId, a);
  registry.removeProcess(10);
  loop.runOnce(3 * kSecond);
  EXPECT_TRUE(policy.lastPins.empty());
  EXPECT_TRUE(loop.pins().empty());
}

TEST_F(EpochLoopTest, ARefusedManualPlanPinsNothing) {
  EpochLoop bare(registry, {}, metrics);
  EXPECT_FALSE(bare.submitManual(manualMove(kBase, kPage, 1, 1), 1 * kSecond, 10 * kSecond).ok());
  EXPECT_TRUE(bare.pins().empty());
}

TEST_F(EpochLoopTest, ThreadRunsEpochsAndKeepAlivesAndStopsPromptly) {
  std::atomic<int> keepAlives{0};
  loop.setPeriod(std::chrono::milliseconds(400));
  loop.setKeepAlive([&] { ++keepAlives; }, std::chrono::milliseconds(20));
  loop.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  const auto stopAsked = std::chrono::steady_clock::now();
  loop.stop();
  const auto stopTook = std::chrono::steady_clock::now() - stopAsked;
  EXPECT_GE(source.collects, 1);
  EXPECT_LE(source.collects, 3);
  // Keep-alives come between epochs, not only after them.
  EXPECT_GT(keepAlives.load(), source.collects + 5);
  EXPECT_LT(stopTook, std::chrono::milliseconds(300));
}

TEST_F(EpochLoopTest, TasksRunOnTheLoopBeforeTheNextEpoch) {
  int ran = 0;
  loop.runBeforeNextEpoch([&] {
    ran = policy.plans + 1;  // runs before the epoch's plan
  });
  loop.runOnce(1 * kSecond);
  EXPECT_EQ(ran, 1);
}

}  // namespace
