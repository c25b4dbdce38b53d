#include "config/Config.h"

#include <google/protobuf/descriptor.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <regex>

#include "support/TestSupport.h"

namespace {

using tt::config::parseConfig;
using tt::config::validateConfig;

TEST(Config, ShippedSampleParsesAndIsValid) {
  auto config = tt::config::loadConfigFile(tt::test::sourcePath("systemd/tensortierd.conf"));
  ASSERT_TRUE(config) << config.error().message();
}

// The sample is the documentation of every key: a field added to the schema without being
// described there fails this test.
TEST(Config, ShippedSampleMentionsEveryField) {
  const std::string sample = tt::test::readFileOrFail(tt::test::sourcePath("systemd/tensortierd.conf"));
  std::function<void(const google::protobuf::Descriptor&, const std::string&)> walk =
      [&](const google::protobuf::Descriptor& d, const std::string& path) {
        for (int i = 0; i < d.field_count(); ++i) {
          const auto& f = *d.field(i);
          const std::regex word("\\b" + f.name() + "\\b");
          EXPECT_TRUE(std::regex_search(sample, word)) << "sample config does not mention " << path << f.name();
          if (f.message_type() != nullptr) walk(*f.message_type(), path + f.name() + ".");
        }
      };
  walk(*tt::config::DaemonConfig::descriptor(), "");
}

TEST(Config, EmptyConfigIsValidAndUsesSchemaDefaults) {
  auto config = parseConfig("", "<string>");
  ASSERT_TRUE(config);
  EXPECT_TRUE(validateConfig(*config).ok());
  EXPECT_EQ(config->log().level(), tensortier::v1::INFO);
  EXPECT_EQ(config->topology().sysfs_root(), "/sys");
}

TEST(Config, UnknownKeyIsRejectedWithPosition) {
  auto config = parseConfig("log {\n  level: DEBUG\n  colour: true\n}\n", "test.conf");
  ASSERT_FALSE(config);
  EXPECT_NE(config.error().message().find("test.conf:3:"), std::string::npos) << config.error().message();
  EXPECT_NE(config.error().message().find("colour"), std::string::npos) << config.error().message();
}

TEST(Config, TypeErrorIsRejected) {
  EXPECT_FALSE(parseConfig("log { level: LOUD }", "x"));
  EXPECT_FALSE(parseConfig("topology { node_override { node: -1 } }", "x"));
}

TEST(Config, BoundsAreEnforced) {
  auto config = parseConfig("topology { node_override { node: 5000 tier: SLOW } }", "x");
  ASSERT_TRUE(config) << config.error().message();
  auto valid = validateConfig(*config);
  ASSERT_FALSE(valid);
  EXPECT_NE(valid.error().message().find("topology.node_override[0].node: 5000 is above the maximum 1023"),
            std::string::npos)
      << valid.error().message();
}

// NaN compares false with any bound, so it must be refused by name: a budget of NaN would
// otherwise pass validation (from the file or from `tensortierctl tune --sampling-budget nan`).
TEST(Config, NotANumberIsRejectedWhereBoundsApply) {
  auto config = parseConfig("sources { cpu_budget_percent: nan }", "x");
  ASSERT_TRUE(config) << config.error().message();
  ASSERT_TRUE(std::isnan(config->sources().cpu_budget_percent()));
  auto valid = validateConfig(*config);
  ASSERT_FALSE(valid);
  EXPECT_NE(valid.error().message().find("sources.cpu_budget_percent: not a number"), std::string::npos)
      << valid.error().message();
  auto finite = parseConfig("sources { cpu_budget_percent: 1.5 }", "x");
  ASSERT_TRUE(finite);
  EXPECT_TRUE(validateConfig(*finite)) << "a finite budget within bounds stays valid";
}

TEST(Config, CrossFieldRulesAreEnforced) {
  auto dup = parseConfig("topology { node_override { node: 1 tier: SLOW } node_override { node: 1 tier: FAST } }", "x");
  ASSERT_TRUE(dup);
  EXPECT_FALSE(validateConfig(*dup));
  auto incomplete = parseConfig("topology { node_override { node: 1 } }", "x");
  ASSERT_TRUE(incomplete);
  EXPECT_FALSE(validateConfig(*incomplete));
  auto relative = parseConfig("topology { sysfs_root: \"sys\" }", "x");
  ASSERT_TRUE(relative);
  EXPECT_FALSE(validateConfig(*relative));
}

// A per-uid share above the thread count means every thread (RequestWorkers clamps it), so one
// request thread alone is a valid config with the default share of two; a per-uid connection limit
// above the total is refused, since it could never apply.
TEST(Config, ServiceLimitsBetweenEachOther) {
  auto oneThread = parseConfig("service { request_threads: 1 }", "x");
  ASSERT_TRUE(oneThread) << oneThread.error().message();
  EXPECT_EQ(oneThread->service().request_threads_per_uid(), 2u);
  EXPECT_TRUE(validateConfig(*oneThread)) << "request_threads: 1 alone must validate";
  auto noThreads = parseConfig("service { request_threads: 0 }", "x");
  ASSERT_TRUE(noThreads);
  auto zero = validateConfig(*noThreads);
  ASSERT_FALSE(zero);
  EXPECT_NE(zero.error().message().find("service.request_threads"), std::string::npos) << zero.error().message();
  auto connections = parseConfig("service { max_connections: 4 max_connections_per_uid: 5 }", "x");
  ASSERT_TRUE(connections);
  auto over = validateConfig(*connections);
  ASSERT_FALSE(over);
  EXPECT_NE(over.error().message().find("max_connections_per_uid: must not exceed max_connections"), std::string::npos)
      << over.error().message();
}

TEST(Config, ExplicitUnspecifiedEnumIsRejected) {
  auto config = parseConfig("log { level: LOG_LEVEL_UNSPECIFIED }", "x");
  ASSERT_TRUE(config);
  EXPECT_FALSE(validateConfig(*config));
}

TEST(Config, MissingFileIsAnErrnoError) {
  auto config = tt::config::loadConfigFile("/nonexistent/tensortierd.conf");
  ASSERT_FALSE(config);
  EXPECT_EQ(config.error().code, ENOENT);
}

// A directory opens but cannot be read: an error, not an empty (and so valid) config.
TEST(Config, ADirectoryIsNotAnEmptyConfig) {
  auto config = tt::config::loadConfigFile(std::filesystem::temp_directory_path().string());
  ASSERT_FALSE(config);
  EXPECT_EQ(config.error().code, EISDIR) << config.error().message();
}

TEST(Config, EffectiveConfigFillsDefaultsAndRoundTrips) {
  auto config = parseConfig("log { level: DEBUG }", "x");
  ASSERT_TRUE(config);
  const std::string text = tt::config::effectiveConfigText(*config);
  EXPECT_NE(text.find("level: DEBUG"), std::string::npos) << text;
  EXPECT_NE(text.find("sysfs_root: \"/sys\""), std::string::npos) << text;
  // Unset, the slow-access penalty comes from the firmware: the default is not pinned.
  EXPECT_EQ(text.find("slow_access_penalty_ns"), std::string::npos) << text;
  auto pinned = parseConfig("policy { slow_access_penalty_ns: 300 }", "x");
  ASSERT_TRUE(pinned);
  EXPECT_NE(tt::config::effectiveConfigText(*pinned).find("slow_access_penalty_ns: 300"), std::string::npos);
  auto again = parseConfig(text, "effective");
  ASSERT_TRUE(again) << again.error().message();
  EXPECT_TRUE(validateConfig(*again).ok());
}

}  // namespace
