#include "core/Result.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <string>

namespace {

tt::Result<int> half(int v) {
  if (v % 2) return tt::logicError("odd value " + std::to_string(v));
  return v / 2;
}

TEST(Result, CarriesValueOrError) {
  auto ok = half(8);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 4);
  auto bad = half(3);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, 0);
  EXPECT_EQ(bad.error().message(), "odd value 3");
  EXPECT_EQ(bad.value_or(-1), -1);
}

TEST(Result, SystemErrorMessageNamesContextAndErrno) {
  const tt::Error e = tt::systemError(ENOENT, "open /sys/x");
  EXPECT_EQ(e.code, ENOENT);
  EXPECT_EQ(e.message(), "open /sys/x: No such file or directory");
}

TEST(Result, ErrnoErrorCapturesCurrentErrno) {
  errno = EACCES;
  EXPECT_EQ(tt::errnoError("x").code, EACCES);
}

TEST(Result, VoidResultAndContextChaining) {
  tt::Result<void> fine;
  EXPECT_TRUE(fine.ok());
  tt::Result<void> failed = tt::withContext(tt::systemError(EBUSY, "move_pages"), "migrating region w1");
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().code, EBUSY);
  EXPECT_EQ(failed.error().context, "migrating region w1: move_pages");
}

}  // namespace
