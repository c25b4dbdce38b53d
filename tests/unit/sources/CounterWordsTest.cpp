// The word helpers the BPF chunk counters merge with (bpf/tt_counter_words.h), run here as the
// same C code: exhaustively over lane values, against a lane-by-lane reference.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>

#include "tt_events.h"
// Plain C shared with the BPF programs: C casts and implicit narrowing that C++ warnings flag.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wold-style-cast"
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wsign-conversion"
#pragma GCC diagnostic ignored "-Wuseless-cast"
#pragma GCC diagnostic ignored "-Wunused-function"
#include "tt_counter_words.h"
#pragma GCC diagnostic pop

namespace {

// Lane-by-lane reference: each u8 lane a + b saturating at 255; *lost += what saturation discarded.
uint64_t referenceAdd(uint64_t a, uint64_t b, uint32_t* lost) {
  uint64_t out = 0;
  for (int lane = 0; lane < 8; ++lane) {
    const uint32_t x = static_cast<uint32_t>((a >> (8 * lane)) & 0xff);
    const uint32_t y = static_cast<uint32_t>((b >> (8 * lane)) & 0xff);
    uint32_t sum = x + y;
    if (sum > 255) {
      *lost += sum - 255;
      sum = 255;
    }
    out |= uint64_t{sum} << (8 * lane);
  }
  return out;
}

uint64_t broadcast(uint32_t v) { return uint64_t{v} * 0x0101010101010101ULL; }

TEST(CounterWords, LowestBitOfEveryPositionAndOfMixedWords) {
  for (uint32_t i = 0; i < 64; ++i) EXPECT_EQ(tt_lowest_bit(uint64_t{1} << i), i);
  std::mt19937_64 rng(7);
  for (int n = 0; n < 100000; ++n) {
    const uint64_t w = rng() | (uint64_t{1} << 63);  // never zero
    EXPECT_EQ(tt_lowest_bit(w), static_cast<uint32_t>(__builtin_ctzll(w))) << std::hex << w;
  }
}

// Every pair of lane values, in all eight lanes at once (so every lane overflows together when
// one does) and in one lane between others that do not overflow.
TEST(CounterWords, SaturatingAddOfEveryLanePair) {
  for (uint32_t x = 0; x < 256; ++x)
    for (uint32_t y = 0; y < 256; ++y) {
      uint32_t lost = 0, expectedLost = 0;
      const uint64_t got = tt_add_u8x8_saturating(broadcast(x), broadcast(y), &lost);
      ASSERT_EQ(got, referenceAdd(broadcast(x), broadcast(y), &expectedLost)) << x << " + " << y;
      ASSERT_EQ(lost, expectedLost) << x << " + " << y;
      const uint64_t a = (uint64_t{x} << 24) | 0x0000000100000007ULL, b = (uint64_t{y} << 24) | 0x02000000000000f0ULL;
      lost = expectedLost = 0;
      ASSERT_EQ(tt_add_u8x8_saturating(a, b, &lost), referenceAdd(a, b, &expectedLost)) << x << " + " << y;
      ASSERT_EQ(lost, expectedLost);
    }
}

TEST(CounterWords, SaturatingAddOfRandomWordsAccumulatesLost) {
  std::mt19937_64 rng(11);
  uint32_t lost = 0, expectedLost = 0;
  for (int n = 0; n < 200000; ++n) {
    uint64_t a = rng(), b = rng();
    if (n % 3 == 0) {  // lanes near the top: most overflow
      a |= 0xc0c0c0c0c0c0c0c0ULL;
      b |= 0xc0c0c0c0c0c0c0c0ULL;
    }
    ASSERT_EQ(tt_add_u8x8_saturating(a, b, &lost), referenceAdd(a, b, &expectedLost)) << std::hex << a << " " << b;
  }
  EXPECT_EQ(lost, expectedLost);
  EXPECT_GT(lost, 0U);
}

TEST(CounterWords, SumOfTheEightLanes) {
  EXPECT_EQ(tt_u8x8_sum(0), 0U);
  EXPECT_EQ(tt_u8x8_sum(~uint64_t{0}), 8U * 255U);  // the most a word holds: more than a byte
  std::mt19937_64 rng(13);
  for (int n = 0; n < 100000; ++n) {
    const uint64_t w = rng();
    uint32_t expected = 0;
    for (int lane = 0; lane < 8; ++lane) expected += static_cast<uint32_t>((w >> (8 * lane)) & 0xff);
    ASSERT_EQ(tt_u8x8_sum(w), expected) << std::hex << w;
  }
}

}  // namespace
