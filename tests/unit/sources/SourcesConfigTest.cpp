// The `sources {}` config section: defaults are valid, cross-field rules (checkSources) reject
// inconsistent values with a message naming the key.
#include <gtest/gtest.h>

#include "config/Config.h"

namespace tt::config {
namespace {

bool mentions(const std::vector<std::string>& errors, const std::string& text) {
  for (const auto& e : errors)
    if (e.find(text) != std::string::npos) return true;
  return false;
}

TEST(SourcesConfig, DefaultsAreValid) {
  auto c = parseConfig("sources {}", "<string>");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(validationErrors(*c).empty());
  EXPECT_EQ(c->sources().aggregation(), tensortier::v1::IN_KERNEL);
  EXPECT_EQ(c->sources().kernel_tiering(), tensortier::v1::COOPERATE);
  EXPECT_DOUBLE_EQ(c->sources().cpu_budget_percent(), 2.0);
}

TEST(SourcesConfig, RejectsInconsistentPeriodsAndRegions) {
  auto c = parseConfig(
      "sources { pmu { min_period: 5000 max_period: 1000 initial_period: 2000 ring_pages: 3 } "
      "damon { min_regions: 50 max_regions: 10 sample_interval_us: 100000 aggregate_interval_us: 150000 } "
      "procfs_root: \"proc\" }",
      "<string>");
  ASSERT_TRUE(c.ok()) << c.error().message();
  const auto errors = validationErrors(*c);
  EXPECT_TRUE(mentions(errors, "sources.pmu: min_period must not exceed max_period"));
  EXPECT_TRUE(mentions(errors, "sources.pmu: initial_period must lie within"));
  EXPECT_TRUE(mentions(errors, "sources.pmu.ring_pages: must be a power of two"));
  EXPECT_TRUE(mentions(errors, "sources.damon: min_regions must not exceed max_regions"));
  EXPECT_TRUE(mentions(errors, "sources.damon: aggregate_interval_us must be at least twice"));
  EXPECT_TRUE(mentions(errors, "sources.procfs_root: must be an absolute path"));
}

TEST(SourcesConfig, BoundsApply) {
  auto c = parseConfig("sources { cpu_budget_percent: 0 software_faults { period: 0 } }", "<string>");
  ASSERT_TRUE(c.ok());
  const auto errors = validationErrors(*c);
  EXPECT_TRUE(mentions(errors, "cpu_budget_percent"));
  EXPECT_TRUE(mentions(errors, "period"));
}

TEST(SourcesConfig, UnknownKeyIsAnError) {
  EXPECT_FALSE(parseConfig("sources { pebs_period: 3 }", "<string>").ok());
}

}  // namespace
}  // namespace tt::config
