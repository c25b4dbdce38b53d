#include "migrate/RateLimiter.h"

#include <gtest/gtest.h>

#include "fakes/migrate/FakeMigrationDeps.h"

namespace {

using namespace std::chrono_literals;

TEST(MigrateTokenBucket, StartsFullThenChargesExactlyTheRate) {
  tt::fakes::FakeClock clock;
  tt::migrate::TokenBucket bucket(clock);
  bucket.configure(1'000'000, 100'000);  // 1 MB/s, 100 kB burst
  EXPECT_EQ(bucket.reserve(100'000), 0ns);
  // The next 500 kB are debt: half a second of rate.
  const auto wait = bucket.reserve(500'000);
  EXPECT_NEAR(std::chrono::duration<double>(wait).count(), 0.5, 1e-6);
  clock.advance(wait);
  // Paid off exactly: a further 1 kB costs 1 ms.
  EXPECT_NEAR(std::chrono::duration<double>(bucket.reserve(1'000)).count(), 0.001, 1e-6);
}

TEST(MigrateTokenBucket, RefillIsCappedAtTheBurst) {
  tt::fakes::FakeClock clock;
  tt::migrate::TokenBucket bucket(clock);
  bucket.configure(1'000'000, 100'000);
  EXPECT_EQ(bucket.reserve(100'000), 0ns);
  clock.advance(10s);  // would be 10 MB of tokens without the cap
  EXPECT_EQ(bucket.reserve(100'000), 0ns);
  EXPECT_GT(bucket.reserve(100'000), 0ns);
}

TEST(MigrateTokenBucket, RefundGivesBackUnusedTokens) {
  tt::fakes::FakeClock clock;
  tt::migrate::TokenBucket bucket(clock);
  bucket.configure(1'000'000, 100'000);
  EXPECT_EQ(bucket.reserve(100'000), 0ns);
  bucket.refund(100'000);
  EXPECT_EQ(bucket.reserve(100'000), 0ns);
  EXPECT_GT(bucket.reserve(1), 0ns);
}

TEST(MigrateTokenBucket, ZeroRateIsUnlimited) {
  tt::fakes::FakeClock clock;
  tt::migrate::TokenBucket bucket(clock);
  bucket.configure(0, 0);
  EXPECT_EQ(bucket.reserve(1ULL << 40), 0ns);
}

TEST(MigrateTokenBucket, ReconfiguringChangesTheRateLive) {
  tt::fakes::FakeClock clock;
  tt::migrate::TokenBucket bucket(clock);
  bucket.configure(1'000'000, 1'000);
  EXPECT_EQ(bucket.reserve(1'000), 0ns);
  bucket.configure(4'000'000, 1'000);
  EXPECT_NEAR(std::chrono::duration<double>(bucket.reserve(1'000'000)).count(), 0.25, 1e-6);
}

}  // namespace
