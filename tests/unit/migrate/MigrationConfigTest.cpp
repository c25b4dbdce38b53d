// The migration section of the config: schema defaults are valid, cross-field rules of
// checkMigration() reject what the engine cannot run with.
#include <gtest/gtest.h>

#include "config/Config.h"

namespace {

bool hasError(const std::vector<std::string>& errors, const std::string& needle) {
  for (const auto& e : errors)
    if (e.find(needle) != std::string::npos) return true;
  return false;
}

TEST(MigrationConfig, DefaultsAreValid) {
  auto config = tt::config::parseConfig("", "<string>");
  ASSERT_TRUE(config);
  EXPECT_TRUE(tt::config::validationErrors(*config).empty());
  EXPECT_EQ(config->migration().batch_pages() % 512, 0u);
}

TEST(MigrationConfig, BatchNotAMultipleOfTheKernelBatchIsRejected) {
  auto config = tt::config::parseConfig("migration { batch_pages: 1000 }", "<string>");
  ASSERT_TRUE(config);
  EXPECT_TRUE(hasError(tt::config::validationErrors(*config), "migration.batch_pages"));
}

TEST(MigrationConfig, BoundsAndRelativeProcfsRootAreRejected) {
  auto config = tt::config::parseConfig("migration { workers: 0 fast_node_min_free_percent: 95 procfs_root: \"proc\" }",
                                        "<string>");
  ASSERT_TRUE(config);
  const auto errors = tt::config::validationErrors(*config);
  EXPECT_TRUE(hasError(errors, "migration.workers"));
  EXPECT_TRUE(hasError(errors, "migration.fast_node_min_free_percent"));
  EXPECT_TRUE(hasError(errors, "migration.procfs_root"));
}

}  // namespace
