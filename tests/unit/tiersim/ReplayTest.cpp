// Replay mechanics: determinism, sampling rate, marks, hint faults.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>

#include "Simulator.h"
#include "Sweep.h"
#include "TestTraces.h"
#include "traces/ModelTraces.h"

namespace tt::tiersim {
namespace {

using test::oneStepTrace;
using test::ScriptedPolicy;
using test::twoTierConfig;

Trace smallModelTrace() {
  ModelTraceOptions options;
  options.steps = 3;
  options.scaleDivisor = 64;
  auto trace = generateModelTrace("resnet50", options);
  EXPECT_TRUE(trace.ok());
  return trace.ok() ? *trace : Trace{};
}

SimResult runNamed(const Trace& trace, const std::string& name, uint64_t seed) {
  SweepOptions options;
  options.seed = seed;
  options.warmupSteps = 1;
  const auto* entry = findPolicy(name);
  EXPECT_NE(entry, nullptr) << name;
  auto config = makeSimConfig(options, trace, 0.2, *entry);
  EXPECT_TRUE(config.ok());
  auto policy = entry->make(makePolicyContext(trace, *config));
  auto result = simulate(trace, *policy, *config, entry->offline);
  EXPECT_TRUE(result.ok());
  return result.ok() ? *result : SimResult{};
}

TEST(TiersimReplay, SameSeedGivesTheSameResult) {
  const Trace trace = smallModelTrace();
  for (const std::string name : {"tpp", "hemem", "memtis"}) {
    const SimResult a = runNamed(trace, name, 7);
    const SimResult b = runNamed(trace, name, 7);
    ASSERT_EQ(a.steps.size(), 3U) << name;
    ASSERT_EQ(a.steps.size(), b.steps.size()) << name;
    for (size_t i = 0; i < a.steps.size(); ++i) {
      EXPECT_EQ(a.steps[i].timeNs, b.steps[i].timeNs) << name << " step " << i;
      EXPECT_EQ(a.steps[i].migratedBytes, b.steps[i].migratedBytes) << name << " step " << i;
    }
    EXPECT_EQ(a.samples, b.samples) << name;
    EXPECT_EQ(a.hintFaults, b.hintFaults) << name;
    EXPECT_EQ(a.promotedPages, b.promotedPages) << name;
  }
}

TEST(TiersimReplay, SamplesAtTheConfiguredRate) {
  std::vector<SimAccess> accesses;
  for (uint64_t i = 0; i < 20'000; ++i) accesses.push_back(SimAccess{i, i % 100, 1, false});
  const Trace trace = oneStepTrace(100, 20'000, accesses);
  SimConfig config = twoTierConfig(100);
  config.samplePeriod = 10;
  ScriptedPolicy policy;
  auto result = simulate(trace, policy, config, false);
  ASSERT_TRUE(result.ok());
  // Binomial(20000, 0.1): mean 2000, sd 42; 6 sd either side.
  EXPECT_GT(policy.samples.size(), 1750U);
  EXPECT_LT(policy.samples.size(), 2250U);
  EXPECT_EQ(result->samples, policy.samples.size());
  // A record delivered as a sample keeps its own count.
  for (const auto& s : policy.samples) ASSERT_EQ(s.count, 1U);
}

TEST(TiersimReplay, SamplesTheLinesARecordStandsFor) {
  // A recording made at 1 in 100: each one-line record stands for 100 lines, as the cost model
  // charges it. Sampled at 1 in 199, a record yields Binomial(100, 1/199) samples: 20000 records
  // give 20000 x 100 / 199 = 10050 samples (sd 100), from 20000 x (1 - (198/199)^100) = 7915
  // records (sd 69). One sample per record at most would give 7915; the record's count alone, 100.
  std::vector<SimAccess> accesses;
  for (uint64_t i = 0; i < 20'000; ++i) accesses.push_back(SimAccess{i, i % 100, 1, false});
  Trace trace = oneStepTrace(100, 20'000, accesses);
  trace.samplePeriod = 100;
  SimConfig config = twoTierConfig(100);
  config.samplePeriod = 199;
  ScriptedPolicy policy;
  auto result = simulate(trace, policy, config, false);
  ASSERT_TRUE(result.ok());
  EXPECT_GT(policy.samples.size(), 9'450U);
  EXPECT_LT(policy.samples.size(), 10'650U);
  EXPECT_EQ(result->samples, policy.samples.size());
  std::set<uint64_t> records;  // simulated times differ from record to record
  for (const auto& s : policy.samples) {
    ASSERT_EQ(s.count, 1U);
    records.insert(s.timeNs);
  }
  EXPECT_GT(records.size(), 7'500U);
  EXPECT_LT(records.size(), 8'330U);

  // A policy that adds 1 per sample (HeMem, Memtis) then counts lines / period, as one that
  // weighs a sample by the period (tensortier) does: a record of 64 lines at 1 in 16, 4 samples.
  std::vector<SimAccess> wide;
  for (uint64_t i = 0; i < 5'000; ++i) wide.push_back(SimAccess{i, i % 100, 64, false});
  const Trace wideTrace = oneStepTrace(100, 5'000, wide);
  config.samplePeriod = 16;
  ScriptedPolicy widePolicy;
  ASSERT_TRUE(simulate(wideTrace, widePolicy, config, false).ok());
  // Binomial(64 x 5000, 1/16): mean 20000, sd 137.
  EXPECT_GT(widePolicy.samples.size(), 19'170U);
  EXPECT_LT(widePolicy.samples.size(), 20'830U);

  // Records of a million lines, whose chance of no sample underflows a double: 10 x Binomial(10^6,
  // 1/199), mean 50251, sd 223.
  std::vector<SimAccess> huge;
  for (uint64_t i = 0; i < 10; ++i) huge.push_back(SimAccess{i * 1000, i, 1'000'000, false});
  const Trace hugeTrace = oneStepTrace(100, 10'000, huge);
  config.samplePeriod = 199;
  ScriptedPolicy hugePolicy;
  ASSERT_TRUE(simulate(hugeTrace, hugePolicy, config, false).ok());
  EXPECT_GT(hugePolicy.samples.size(), 48'900U);
  EXPECT_LT(hugePolicy.samples.size(), 51'600U);
}

TEST(TiersimReplay, SamplingIsDeterministicBySeed) {
  std::vector<SimAccess> accesses;
  for (uint64_t i = 0; i < 2'000; ++i) accesses.push_back(SimAccess{i, i % 10, static_cast<uint32_t>(1 + i % 300), false});
  const Trace trace = oneStepTrace(10, 2'000, accesses);
  SimConfig config = twoTierConfig(10);
  config.samplePeriod = 50;
  auto times = [&](uint64_t seed) {
    config.seed = seed;
    ScriptedPolicy policy;
    EXPECT_TRUE(simulate(trace, policy, config, false).ok());
    std::vector<uint64_t> t;
    for (const auto& s : policy.samples) t.push_back(s.timeNs);
    return t;
  };
  EXPECT_EQ(times(3), times(3));
  EXPECT_NE(times(3), times(4));
}

TEST(TiersimReplay, MarksArriveInOrderWithSimulatedTimestamps) {
  const Trace trace = oneStepTrace(10, 100'000, {SimAccess{0, 0, 1, false}});
  ScriptedPolicy policy;
  auto result = simulate(trace, policy, twoTierConfig(0), false);
  ASSERT_TRUE(result.ok());
  ASSERT_EQ(policy.marks.size(), 2U);
  EXPECT_EQ(policy.marks[0].type, MarkType::StepBegin);
  EXPECT_EQ(policy.marks[1].type, MarkType::StepEnd);
  EXPECT_EQ(policy.marks[1].tgid, kSimTgid);
  // The step end arrives after the slow-tier access's stall was added.
  EXPECT_EQ(policy.marks[1].timestampNs, 100'000U + 305U);
}

TEST(TiersimReplay, AStepsLastWindowIsChargedToThatStep) {
  // The access shares its cost-model window with the step end: its stall still belongs to the step.
  const Trace trace = oneStepTrace(1, 100'000, {SimAccess{99'999, 0, 1, false}});
  SimConfig config = twoTierConfig(0);
  config.windowNs = 1'000'000;
  ScriptedPolicy policy;
  auto result = simulate(trace, policy, config, false);
  ASSERT_TRUE(result.ok());
  EXPECT_DOUBLE_EQ(result->steps[0].timeNs, 100'000 + 305.0);
  EXPECT_DOUBLE_EQ(result->steps[0].stallNs, 305.0);
}

TEST(TiersimReplay, HintFaultsOnlyForSlowTierPagesWhenScanning) {
  std::vector<SimAccess> accesses;
  for (uint64_t round = 0; round < 20; ++round) {
    for (PageId page = 0; page < 10; ++page) accesses.push_back(SimAccess{round * 100'000 + page, page, 1, false});
  }
  const Trace trace = oneStepTrace(10, 2'000'000, accesses);
  SimConfig config = twoTierConfig(5);
  config.epochNs = 50'000;
  config.hintScanBytesPerSec = 1e12;  // every page, every epoch
  ScriptedPolicy policy;
  std::vector<TierId> tierOf;
  policy.epoch = [&](const EpochContext& context, std::vector<PageMove>&) { tierOf = *context.tierOf; };
  auto result = simulate(trace, policy, config, false);
  ASSERT_TRUE(result.ok());
  ASSERT_FALSE(policy.hints.empty());
  for (const auto& hint : policy.hints) EXPECT_GE(hint.page, 5U) << "fast-tier pages are not scanned";
  EXPECT_EQ(result->hintFaults, policy.hints.size());
  EXPECT_DOUBLE_EQ(result->steps[0].hintFaultNs, static_cast<double>(policy.hints.size()) * config.hintFaultNs);

  config.hintScanBytesPerSec = 0;
  ScriptedPolicy quiet;
  ASSERT_TRUE(simulate(trace, quiet, config, false).ok());
  EXPECT_TRUE(quiet.hints.empty());
}

TEST(TiersimReplay, RejectsATraceItCannotHoldOrFinish) {
  // Per-page state for 2^50 pages cannot be allocated; a scale divisor of 10^6 makes every
  // policy period a nanosecond. Both are errors before the replay starts.
  ScriptedPolicy policy;
  Trace huge = oneStepTrace(4, 1000, {SimAccess{0, 0, 1, false}});
  huge.totalPages = uint64_t{1} << 50;
  auto hugeResult = simulate(huge, policy, twoTierConfig(1), false);
  ASSERT_FALSE(hugeResult.ok());
  EXPECT_NE(hugeResult.error().message().find("pages"), std::string::npos) << hugeResult.error().message();
  Trace scaled = oneStepTrace(4, 1000, {SimAccess{0, 0, 1, false}});
  scaled.scaleDivisor = 1'000'000;
  auto scaledResult = simulate(scaled, policy, twoTierConfig(1), false);
  ASSERT_FALSE(scaledResult.ok());
  EXPECT_NE(scaledResult.error().message().find("scale divisor"), std::string::npos) << scaledResult.error().message();
  // A record of 2^31 samples of a 2^24 period is 2^55 lines, each sampled: no end in sight.
  Trace heavy = oneStepTrace(4, 1000, {SimAccess{0, 0, 0x7FFFFFFF, false}});
  heavy.samplePeriod = 1U << 24;
  auto heavyResult = simulate(heavy, policy, twoTierConfig(1), false);
  ASSERT_FALSE(heavyResult.ok());
  EXPECT_NE(heavyResult.error().message().find("lines"), std::string::npos) << heavyResult.error().message();
}

TEST(TiersimReplay, RejectsACopyEngineWithoutBandwidth) {
  // At 0 bytes per ns the first copy would take for ever: the replay would never end.
  std::vector<SimAccess> accesses;
  for (uint64_t t = 0; t < 400'000; t += 1000) accesses.push_back(SimAccess{t, t / 1000 % 4, 1, false});
  const Trace trace = oneStepTrace(4, 400'000, accesses);
  for (const double rate : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    ScriptedPolicy policy;
    policy.firstTouch = [](PageId) { return TierId{1}; };
    policy.epoch = [](const EpochContext&, std::vector<PageMove>& out) { out.push_back({0, 0}); };
    SimConfig config = twoTierConfig(4);
    config.migrationCopyBytesPerNs = rate;
    auto result = simulate(trace, policy, config, false);
    ASSERT_FALSE(result.ok()) << rate;
    EXPECT_NE(result.error().message().find("copy bandwidth"), std::string::npos) << result.error().message();
  }
}

TEST(TiersimReplay, RejectsABadTrace) {
  Trace trace = oneStepTrace(4, 1000, {SimAccess{0, 9, 1, false}});
  ScriptedPolicy policy;
  auto result = simulate(trace, policy, twoTierConfig(1), false);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.error().message().find("outside"), std::string::npos) << result.error().message();
}

}  // namespace
}  // namespace tt::tiersim
