// Expansion of the in-kernel count blocks (one per tgid and 2 MiB chunk, 512 per-page counters)
// into per-page evidence: what SamplingSource::collect emits on the in-kernel path.
#include <gtest/gtest.h>

#include "sources/SamplingSource.h"
#include "tt_events.h"

namespace tt::sources {
namespace {

using sys::bpf::ChunkCounts;
using sys::bpf::kChunkBytes;
using sys::bpf::kChunkPages;

ChunkCounts chunk(uint32_t tgid, uint64_t base) {
  ChunkCounts c;
  c.tgid = tgid;
  c.base = base;
  return c;
}

TEST(ChunkEvidence, OneRecordPerSampledPageWeightedByItsCount) {
  std::vector<ChunkCounts> chunks;
  chunks.push_back(chunk(7, 3 * kChunkBytes));
  chunks.back().counts[0] = 3;
  chunks.back().counts[kChunkPages - 1] = sys::bpf::kChunkCountMax;  // a saturated counter
  chunks.push_back(chunk(7, 5 * kChunkBytes));                      // nothing sampled: no records
  chunks.push_back(chunk(7, 1 * kChunkBytes));
  chunks.back().counts[100] = 1;

  std::vector<AccessEvidence> out;
  EXPECT_EQ(appendChunkEvidence(chunks, AccessKind::Load, 1, out), 3U);
  ASSERT_EQ(out.size(), 3U);
  EXPECT_EQ(out[0].page, 1 * kChunkBytes + 100 * 4096);
  EXPECT_EQ(out[0].weight, 1U);
  EXPECT_EQ(out[1].page, 3 * kChunkBytes);
  EXPECT_EQ(out[1].weight, 3U);
  EXPECT_EQ(out[2].page, 3 * kChunkBytes + (kChunkPages - 1) * 4096);
  EXPECT_EQ(out[2].weight, 255U);
  for (const auto& e : out) {
    EXPECT_EQ(e.tgid, 7);
    EXPECT_EQ(e.kind, AccessKind::Load);
    EXPECT_EQ(e.servedBy, ServedBy::Unknown);
  }
}

TEST(ChunkEvidence, SortedByProcessThenPageLikeTheAggregatorsFlush) {
  std::vector<ChunkCounts> chunks;
  for (uint32_t tgid : {9U, 4U}) {
    for (uint64_t c : {2U, 0U}) {
      chunks.push_back(chunk(tgid, c * kChunkBytes));
      chunks.back().counts[10] = 2;
      chunks.back().counts[5] = 1;
    }
  }
  std::vector<AccessEvidence> out;
  out.push_back(AccessEvidence{});  // evidence already there stays first
  out.back().tgid = 99;
  ASSERT_EQ(appendChunkEvidence(chunks, AccessKind::Fault, 1, out), 8U);
  ASSERT_EQ(out.size(), 9U);
  EXPECT_EQ(out[0].tgid, 99);
  for (size_t i = 2; i < out.size(); ++i)
    EXPECT_LT(std::tie(out[i - 1].tgid, out[i - 1].page), std::tie(out[i].tgid, out[i].page)) << i;
  EXPECT_EQ(out[1].tgid, 4);
  EXPECT_EQ(out[1].page, 5U * 4096);
  EXPECT_EQ(out[8].tgid, 9);
  EXPECT_EQ(out[8].page, 2 * kChunkBytes + 10 * 4096);
  EXPECT_EQ(out[8].weight, 2U);
}

// A sample stands for `period` events: the weight is the accesses the page's samples stand for
// (AccessEvidence::weight), so traces and the heat model see rates, not sample counts.
TEST(ChunkEvidence, WeightsAreSampleCountsTimesThePeriodSaturating) {
  std::vector<sys::bpf::ChunkCounts> chunks(1);
  chunks[0].tgid = 7;
  chunks[0].base = 0;
  chunks[0].counts[0] = 3;
  chunks[0].counts[1] = 255;
  std::vector<AccessEvidence> out;
  ASSERT_EQ(appendChunkEvidence(chunks, AccessKind::Fault, 4096, out), 2U);
  EXPECT_EQ(out[0].weight, 3U * 4096);
  EXPECT_EQ(out[1].weight, 255U * 4096);
  EXPECT_EQ(scaledWeight(255, uint64_t{1} << 40), UINT32_MAX);
  EXPECT_EQ(scaledWeight(1, 0), 1U);  // a period of 0 is treated as 1
}

// The in-kernel path counts each event's samples as the event's kind (PEBS loads and stores apart,
// from the BPF attach cookie): blocks of one chunk with different kinds give one record per page
// and kind, still sorted by page; the default kind maps to the source's.
TEST(ChunkEvidence, BlocksOfDifferentKindsStaySortedByPage) {
  std::vector<ChunkCounts> chunks;
  chunks.push_back(chunk(7, kChunkBytes));
  chunks.back().kind = TT_KIND_STORE;
  chunks.back().counts[5] = 2;
  chunks.back().counts[1] = 1;
  chunks.push_back(chunk(7, kChunkBytes));
  chunks.back().kind = TT_KIND_LOAD;
  chunks.back().counts[1] = 3;
  chunks.push_back(chunk(7, 0));  // TT_KIND_DEFAULT
  chunks.back().counts[0] = 1;
  std::vector<AccessEvidence> out;
  EXPECT_EQ(appendChunkEvidence(chunks, AccessKind::Fault, 1, out), 4U);
  ASSERT_EQ(out.size(), 4U);
  EXPECT_EQ(out[0].page, 0U);
  EXPECT_EQ(out[0].kind, AccessKind::Fault);
  EXPECT_EQ(out[1].page, kChunkBytes + 4096);
  EXPECT_EQ(out[1].kind, AccessKind::Load);
  EXPECT_EQ(out[1].weight, 3U);
  EXPECT_EQ(out[2].page, kChunkBytes + 4096);
  EXPECT_EQ(out[2].kind, AccessKind::Store);
  EXPECT_EQ(out[3].page, kChunkBytes + 5 * 4096);
  EXPECT_EQ(out[3].kind, AccessKind::Store);
  for (AccessKind k : {AccessKind::Load, AccessKind::Store, AccessKind::Access})
    EXPECT_EQ(sampleKindOf(sampleKindCode(k), AccessKind::Fault), k);
  EXPECT_EQ(sampleKindOf(sampleKindCode(AccessKind::Fault), AccessKind::Hint), AccessKind::Hint);
}

// On events that record data_src the in-kernel path also marks, per page, every memory that served
// it (one bit per page and tier in the block): a page's record names the slowest, as the ring
// path's EvidenceAggregator keeps it (a page sampled from two tiers in one epoch was migrated in
// between, or is half cached); pages without bits are Unknown; the kinds stay apart.
TEST(ChunkEvidence, TierBitsBecomeServedByTheSlowestMemory) {
  std::vector<ChunkCounts> chunks;
  chunks.push_back(chunk(7, 0));
  chunks.back().kind = TT_KIND_LOAD;
  chunks.back().counts[2] = 10;
  chunks.back().setServedBy(2, TT_TIER_FAST);
  chunks.back().setServedBy(2, TT_TIER_SLOW);
  chunks.back().setServedBy(2, TT_TIER_CACHE);
  chunks.back().counts[3] = 1;
  chunks.back().setServedBy(3, TT_TIER_REMOTE_RAM);
  chunks.back().setServedBy(3, TT_TIER_CACHE);
  chunks.back().counts[4] = 1;  // no bits: the PMU did not say
  chunks.back().counts[kChunkPages - 1] = 1;
  chunks.back().setServedBy(kChunkPages - 1, TT_TIER_CACHE);
  chunks.push_back(chunk(7, 0));
  chunks.back().kind = TT_KIND_STORE;
  chunks.back().counts[2] = 2;
  chunks.back().setServedBy(2, TT_TIER_FAST);
  std::vector<AccessEvidence> out;
  EXPECT_EQ(appendChunkEvidence(chunks, AccessKind::Fault, 10, out), 5U);
  ASSERT_EQ(out.size(), 5U);
  EXPECT_EQ(out[0].page, 2U * 4096);
  EXPECT_EQ(out[0].kind, AccessKind::Load);
  EXPECT_EQ(out[0].weight, 100U);
  EXPECT_EQ(out[0].servedBy, ServedBy::SlowTier);
  EXPECT_EQ(out[1].page, 2U * 4096);
  EXPECT_EQ(out[1].kind, AccessKind::Store);
  EXPECT_EQ(out[1].servedBy, ServedBy::FastTier);
  EXPECT_EQ(out[2].servedBy, ServedBy::RemoteRam);
  EXPECT_EQ(out[3].servedBy, ServedBy::Unknown);
  EXPECT_EQ(out[4].page, (kChunkPages - 1) * 4096ULL);
  EXPECT_EQ(out[4].servedBy, ServedBy::Cache);
  EXPECT_EQ(servedByOfTier(TT_TIER_CACHE), ServedBy::Cache);
  EXPECT_EQ(servedByOfTier(99), ServedBy::Unknown);
  // The bits are those of the BPF block layout: tier t of page i is word (t - 1) * 8 + i / 64.
  ChunkCounts c;
  c.setServedBy(65, TT_TIER_REMOTE_RAM);
  EXPECT_EQ(c.tiers[2 * 8 + 1], uint64_t{1} << 1);
  EXPECT_TRUE(c.servedBy(65, TT_TIER_REMOTE_RAM));
  EXPECT_FALSE(c.servedBy(65, TT_TIER_SLOW));
  EXPECT_FALSE(c.servedBy(65, TT_TIER_UNKNOWN));
}

// The drain's last step: what the CPUs had staged is added to the blocks drained from the hash.
TEST(StagedMerge, AddsIntoTheDrainedBlockOfTheSameChunkSaturating) {
  std::vector<ChunkCounts> out;
  out.push_back(chunk(9, 0));  // drained by an earlier map: not merged into (before `from`)
  out.push_back(chunk(7, 2 * kChunkBytes));
  out.back().counts[0] = 200;
  out.back().counts[1] = 4;
  std::vector<ChunkCounts> staged;
  staged.push_back(chunk(7, 2 * kChunkBytes));
  staged.back().counts[0] = 100;  // 300: saturates, 45 lost
  staged.back().counts[2] = 5;
  staged.push_back(chunk(9, 0));  // the same chunk as out[0], but out[0] is not this drain's
  staged.back().counts[0] = 6;
  const auto r = sys::bpf::mergeStaged(staged, out, 1);
  EXPECT_EQ(r.appended, 1U);
  EXPECT_EQ(r.saturated, 300U - sys::bpf::kChunkCountMax);
  ASSERT_EQ(out.size(), 3U);
  EXPECT_EQ(out[1].counts[0], sys::bpf::kChunkCountMax);
  EXPECT_EQ(out[1].counts[1], 4);
  EXPECT_EQ(out[1].counts[2], 5);
  EXPECT_EQ(out[0].counts[0], 0);  // untouched
  EXPECT_EQ(out[2].tgid, 9U);      // appended as this drain's own block
  EXPECT_EQ(out[2].counts[0], 6);
}

TEST(StagedMerge, AppendsChunksNotDrainedAndMergesTwoCpusStagingTheSameOne) {
  std::vector<ChunkCounts> out;
  out.push_back(chunk(7, 0));
  out.back().counts[3] = 1;
  std::vector<ChunkCounts> staged;
  staged.push_back(chunk(7, kChunkBytes));  // same tgid, another chunk
  staged.back().counts[4] = 2;
  staged.push_back(chunk(8, 0));  // same chunk address, another process
  staged.back().counts[3] = 6;
  staged.push_back(chunk(7, kChunkBytes));  // the second CPU staging the first's chunk
  staged.back().counts[4] = 3;
  const auto r = sys::bpf::mergeStaged(staged, out, 0);
  EXPECT_EQ(r.appended, 2U);
  EXPECT_EQ(r.saturated, 0U);
  ASSERT_EQ(out.size(), 3U);
  EXPECT_EQ(out[0].counts[3], 1);  // tgid 8's counts did not land in tgid 7's block
  EXPECT_EQ(out[1].tgid, 7U);
  EXPECT_EQ(out[1].base, kChunkBytes);
  EXPECT_EQ(out[1].counts[4], 5);
  EXPECT_EQ(out[2].tgid, 8U);
  EXPECT_EQ(out[2].counts[3], 6);
}

// A staged block's tier bits join those of the drained block of its chunk (or-ed), like its counts.
TEST(StagedMerge, OrsTierBits) {
  std::vector<ChunkCounts> out;
  out.push_back(chunk(7, 0));
  out.back().counts[0] = 1;
  out.back().setServedBy(0, TT_TIER_FAST);
  std::vector<ChunkCounts> staged;
  staged.push_back(chunk(7, 0));
  staged.back().counts[0] = 2;
  staged.back().setServedBy(0, TT_TIER_SLOW);
  staged.back().counts[9] = 1;
  staged.back().setServedBy(9, TT_TIER_CACHE);
  const auto r = sys::bpf::mergeStaged(staged, out, 0);
  EXPECT_EQ(r.appended, 0U);
  ASSERT_EQ(out.size(), 1U);
  EXPECT_EQ(out[0].counts[0], 3);
  EXPECT_TRUE(out[0].servedBy(0, TT_TIER_FAST));
  EXPECT_TRUE(out[0].servedBy(0, TT_TIER_SLOW));
  EXPECT_TRUE(out[0].servedBy(9, TT_TIER_CACHE));
  EXPECT_FALSE(out[0].servedBy(9, TT_TIER_FAST));
}

}  // namespace
}  // namespace tt::sources
