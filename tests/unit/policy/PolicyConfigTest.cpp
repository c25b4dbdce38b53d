// The policy section's cross-field rules (checkPolicy in daemon/config/Config.cpp).
#include <gtest/gtest.h>

#include "config/Config.h"

namespace {

std::string errorsOf(const std::string& text) {
  auto config = tt::config::parseConfig(text, "test");
  EXPECT_TRUE(config) << config.error().message();
  if (!config) return "";
  auto valid = tt::config::validateConfig(*config);
  return valid ? "" : valid.error().message();
}

TEST(PolicyConfig, DefaultsAreValid) { EXPECT_EQ(errorsOf("policy {}"), ""); }

TEST(PolicyConfig, PeriodRangeMustBeOrderedAndFitTheHistory) {
  EXPECT_NE(errorsOf("policy { period_min_ms: 500 period_max_ms: 400 }").find("policy.period_min_ms"), std::string::npos);
  EXPECT_NE(errorsOf("policy { period_bin_ms: 10 period_min_ms: 15 }").find("two period_bin_ms"), std::string::npos);
  EXPECT_NE(errorsOf("policy { period_bin_ms: 1 period_history_bins: 100 period_max_ms: 1000 }").find("three periods"),
            std::string::npos);
}

TEST(PolicyConfig, QuotaAndBudgetRules) {
  EXPECT_NE(errorsOf("policy { fast_budget_bytes: 8192 per_process_quota_bytes: 16384 }").find("per_process_quota_bytes"),
            std::string::npos);
  EXPECT_NE(errorsOf("policy { fast_budget_bytes: 5000 }").find("multiples of 4096"), std::string::npos);
  EXPECT_NE(errorsOf("policy { max_run_bytes: 5000 }").find("max_run_bytes"), std::string::npos);
  EXPECT_EQ(errorsOf("policy { fast_budget_bytes: 1073741824 per_process_quota_bytes: 536870912 }"), "");
}

TEST(PolicyConfig, BoundsApply) {
  EXPECT_NE(errorsOf("policy { hysteresis_margin: 11 }").find("policy.hysteresis_margin"), std::string::npos);
  EXPECT_NE(errorsOf("policy { feature_weight_floor: 0.25 }").find("feature_weight_floor"), std::string::npos);
  // A multiplicative update cannot bring back a weight that reached zero.
  EXPECT_NE(errorsOf("policy { feature_weight_floor: 0 }").find("feature_weight_floor"), std::string::npos);
  EXPECT_NE(errorsOf("policy { schedule_buckets: 0 }").find("policy.schedule_buckets"), std::string::npos);
}

}  // namespace
