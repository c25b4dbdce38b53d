// Replay mechanics: determinism, sampling rate, marks, hint faults.
#include <gtest/gtest.h>

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

TEST(TiersimReplay, RejectsABadTrace) {
  Trace trace = oneStepTrace(4, 1000, {SimAccess{0, 9, 1, false}});
  ScriptedPolicy policy;
  auto result = simulate(trace, policy, twoTierConfig(1), false);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.error().message().find("outside"), std::string::npos) << result.error().message();
}

}  // namespace
}  // namespace tt::tiersim
