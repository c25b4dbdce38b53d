#include "core/Parse.h"

#include <gtest/gtest.h>

namespace {

TEST(Parse, IdListRangesAndSingles) {
  auto ids = tt::parseIdList("0-3,8,10-11\n");
  ASSERT_TRUE(ids) << ids.error().message();
  EXPECT_EQ(*ids, (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
}

TEST(Parse, EmptyIdListIsCpuLessNode) {
  auto ids = tt::parseIdList("\n");
  ASSERT_TRUE(ids);
  EXPECT_TRUE(ids->empty());
}

TEST(Parse, IdListRejectsGarbageAndReversedRanges) {
  EXPECT_FALSE(tt::parseIdList("0-x"));
  EXPECT_FALSE(tt::parseIdList("5-3"));
  EXPECT_FALSE(tt::parseIdList("1,,2"));
}

TEST(Parse, UintStrict) {
  EXPECT_EQ(tt::parseUint(" 42\n").value_or(0), 42u);
  EXPECT_FALSE(tt::parseUint("42kB"));
  EXPECT_FALSE(tt::parseUint(""));
  EXPECT_FALSE(tt::parseUint("-1"));
}

TEST(Parse, IntList) {
  auto v = tt::parseIntList("10 21  17\t28\n");
  ASSERT_TRUE(v);
  EXPECT_EQ(*v, (std::vector<int>{10, 21, 17, 28}));
  EXPECT_FALSE(tt::parseIntList("10 x"));
}

TEST(Parse, SizesWithBinaryUnits) {
  EXPECT_EQ(tt::parseSize("4096").value_or(0), 4096u);
  EXPECT_EQ(tt::parseSize("64K").value_or(0), 64u << 10);
  EXPECT_EQ(tt::parseSize("256m").value_or(0), 256u << 20);
  EXPECT_EQ(tt::parseSize("2G").value_or(0), 2ULL << 30);
  EXPECT_FALSE(tt::parseSize("2T"));
  EXPECT_FALSE(tt::parseSize("99999999999999999999G"));
}

}  // namespace
