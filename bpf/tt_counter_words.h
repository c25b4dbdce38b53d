/* Word-at-a-time helpers of the chunk counters (tt_chunk_counts.h): eight u8 page counters in one
 * u64 word. Plain C over tt_events.h's fixed-width types, so the daemon's unit tests run the very
 * code the BPF programs run (tests/unit/sources/CounterWordsTest.cpp). Include after tt_events.h. */
#ifndef TT_COUNTER_WORDS_H
#define TT_COUNTER_WORDS_H

#ifdef __bpf__
#define TT_WORDS_INLINE static __always_inline
#else
#define TT_WORDS_INLINE static inline
#endif

/* Index of the lowest set bit of a non-zero word: de Bruijn multiplication (BPF has no ctz). */
#define TT_DEBRUIJN64 0x03f79d71b4cb0a89ULL
static const tt_u8 tt_debruijn_index[64] = {
    0,  1,  48, 2,  57, 49, 28, 3,  61, 58, 50, 42, 38, 29, 17, 4,  62, 55, 59, 36, 53, 51,
    43, 22, 45, 39, 33, 30, 24, 18, 12, 5,  63, 47, 56, 27, 60, 41, 37, 16, 54, 35, 52, 21,
    44, 32, 23, 11, 46, 26, 40, 15, 34, 20, 31, 10, 25, 14, 19, 9,  13, 8,  7,  6,
};

TT_WORDS_INLINE tt_u32 tt_lowest_bit(tt_u64 nonzero) {
  /* & 63 keeps the index provably in bounds for the verifier */
  return tt_debruijn_index[((nonzero & (0 - nonzero)) * TT_DEBRUIJN64) >> 58] & 63U;
}

/* Eight u8 counters added lane by lane, each saturating at 255 (no carry between lanes). Adds the
 * events the saturation discarded to *lost. */
TT_WORDS_INLINE tt_u64 tt_add_u8x8_saturating(tt_u64 a, tt_u64 b, tt_u32* lost) {
  const tt_u64 high = 0x8080808080808080ULL;
  const tt_u64 ones = 0x0101010101010101ULL;
  tt_u64 sum = ((a & ~high) + (b & ~high)) ^ ((a ^ b) & high);
  tt_u64 carry = ((a & b) | ((a | b) & ~sum)) & high; /* carry out of each lane's bit 7 */
  if (!carry) return sum;
  tt_u64 overflowed = carry >> 7; /* 1 in each lane whose a + b passed 255 */
  /* Such a lane holds a + b - 256, so it lost a + b - 255 = lane + 1 events. Horizontal byte sum
   * in 16-bit lanes first: eight lanes of up to 255 do not fit one byte. */
  tt_u64 wrapped = sum & (overflowed * 0xff);
  tt_u64 pairs = (wrapped & 0x00ff00ff00ff00ffULL) + ((wrapped >> 8) & 0x00ff00ff00ff00ffULL);
  *lost += (tt_u32)((pairs * 0x0001000100010001ULL) >> 48) + (tt_u32)((overflowed * ones) >> 56);
  return sum | (overflowed * 0xff);
}

/* Sum of the eight u8 counters of a word. */
TT_WORDS_INLINE tt_u32 tt_u8x8_sum(tt_u64 w) {
  tt_u64 pairs = (w & 0x00ff00ff00ff00ffULL) + ((w >> 8) & 0x00ff00ff00ff00ffULL);
  return (tt_u32)((pairs * 0x0001000100010001ULL) >> 48);
}

#endif
