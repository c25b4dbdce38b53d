#include "sys/Fs.h"

#include <gtest/gtest.h>

#include "support/TestSupport.h"

namespace {

TEST(Fs, ResolvesRelativeToRoot) {
  tt::sys::Fs fs("/tmp/root/");
  EXPECT_EQ(fs.resolve("devices/system/node/online"), "/tmp/root/devices/system/node/online");
  EXPECT_EQ(fs.resolve("/devices"), "/tmp/root/devices");
  EXPECT_EQ(tt::sys::Fs("/").resolve("proc/1/maps"), "/proc/1/maps");
}

TEST(Fs, ReadsLinesAndListsSorted) {
  tt::sys::Fs fs(tt::test::fixture("topology/dram_pmem_2socket/sys"));
  auto online = fs.readLine("devices/system/node/online");
  ASSERT_TRUE(online) << online.error().message();
  EXPECT_EQ(*online, "0-3");
  auto tiers = fs.listDir("devices/virtual/memory_tiering");
  ASSERT_TRUE(tiers);
  EXPECT_EQ(*tiers, (std::vector<std::string>{"memory_tier22", "memory_tier4"}));
}

TEST(Fs, MissingFileReportsErrnoAndPath) {
  tt::sys::Fs fs(tt::test::fixture("topology/single_node/sys"));
  auto missing = fs.readFile("devices/system/node/node7/meminfo");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ENOENT);
  EXPECT_NE(missing.error().message().find("node7/meminfo"), std::string::npos);
  EXPECT_FALSE(fs.exists("devices/system/node/node7"));
}

}  // namespace
