// The in-kernel count blocks (one per tgid, kind and 2 MiB chunk, 512 per-page counters) as
// evidence blocks: what SamplingSource::collect emits on the in-kernel path.
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

TEST(ChunkEvidence, OneBlockPerDrainedChunkWithItsCounts) {
  std::vector<ChunkCounts> chunks;
  chunks.push_back(chunk(7, 3 * kChunkBytes));
  chunks.back().counts[0] = 3;
  chunks.back().counts[kChunkPages - 1] = sys::bpf::kChunkCountMax;  // a saturated counter
  chunks.push_back(chunk(7, 5 * kChunkBytes));                      // nothing sampled: no block
  chunks.push_back(chunk(8, 1 * kChunkBytes));
  chunks.back().counts[100] = 1;

  std::vector<EvidenceBlock> out(1);  // blocks already there stay first
  out[0].tgid = 99;
  EXPECT_EQ(appendChunkBlocks(chunks, AccessKind::Load, 1, out), 3U);
  ASSERT_EQ(out.size(), 3U);
  EXPECT_EQ(out[0].tgid, 99);
  EXPECT_EQ(out[1].tgid, 7);
  EXPECT_EQ(out[1].base, 3 * kChunkBytes);
  EXPECT_EQ(out[1].counts, chunks[0].counts);
  EXPECT_EQ(out[1].pages(), 2U);
  EXPECT_EQ(out[2].tgid, 8);
  EXPECT_EQ(out[2].base, 1 * kChunkBytes);
  EXPECT_EQ(out[2].pages(), 1U);
  for (size_t b = 1; b < out.size(); ++b) {
    EXPECT_EQ(out[b].kind, AccessKind::Load);
    EXPECT_FALSE(out[b].tiered());
  }
  // What the heat model and the recorder see of a page: the record it stands for.
  const AccessEvidence e = out[1].record(kChunkPages - 1);
  EXPECT_EQ(e.tgid, 7);
  EXPECT_EQ(e.page, 3 * kChunkBytes + (kChunkPages - 1) * 4096);
  EXPECT_EQ(e.weight, 255U);
  EXPECT_EQ(e.kind, AccessKind::Load);
  EXPECT_EQ(e.servedBy, ServedBy::Unknown);
}

// A sample stands for `period` events: the weight is the accesses the page's samples stand for
// (AccessEvidence::weight), so traces and the heat model see rates, not sample counts.
TEST(ChunkEvidence, WeightsAreSampleCountsTimesThePeriodSaturating) {
  std::vector<sys::bpf::ChunkCounts> chunks(1);
  chunks[0].tgid = 7;
  chunks[0].base = 0;
  chunks[0].counts[0] = 3;
  chunks[0].counts[1] = 255;
  std::vector<EvidenceBlock> out;
  ASSERT_EQ(appendChunkBlocks(chunks, AccessKind::Fault, 4096, out), 2U);
  ASSERT_EQ(out.size(), 1U);
  EXPECT_EQ(out[0].weightPerCount, 4096U);
  EXPECT_EQ(out[0].weight(0), 3U * 4096);
  EXPECT_EQ(out[0].weight(1), 255U * 4096);
  EXPECT_EQ(out[0].weight(2), 0U);
  out.clear();
  ASSERT_EQ(appendChunkBlocks(chunks, AccessKind::Fault, uint64_t{1} << 40, out), 2U);
  EXPECT_EQ(out[0].weight(0), UINT32_MAX);
  EXPECT_EQ(out[0].weight(1), UINT32_MAX);
  EXPECT_EQ(scaledWeight(255, uint64_t{1} << 40), UINT32_MAX);
  EXPECT_EQ(scaledWeight(1, 0), 1U);  // a period of 0 is treated as 1
  out.clear();
  ASSERT_EQ(appendChunkBlocks(chunks, AccessKind::Fault, 0, out), 2U);
  EXPECT_EQ(out[0].weight(0), 3U);
}

// The in-kernel path counts each event's samples as the event's kind (PEBS loads and stores apart,
// from the BPF attach cookie): each block keeps its kind; the default kind maps to the source's.
TEST(ChunkEvidence, BlocksKeepTheirKinds) {
  std::vector<ChunkCounts> chunks;
  chunks.push_back(chunk(7, kChunkBytes));
  chunks.back().kind = TT_KIND_STORE;
  chunks.back().counts[5] = 2;
  chunks.push_back(chunk(7, kChunkBytes));
  chunks.back().kind = TT_KIND_LOAD;
  chunks.back().counts[1] = 3;
  chunks.push_back(chunk(7, 0));  // TT_KIND_DEFAULT
  chunks.back().counts[0] = 1;
  std::vector<EvidenceBlock> out;
  EXPECT_EQ(appendChunkBlocks(chunks, AccessKind::Fault, 1, out), 3U);
  ASSERT_EQ(out.size(), 3U);
  EXPECT_EQ(out[0].kind, AccessKind::Store);
  EXPECT_EQ(out[1].kind, AccessKind::Load);
  EXPECT_EQ(out[2].kind, AccessKind::Fault);
  for (AccessKind k : {AccessKind::Load, AccessKind::Store, AccessKind::Access})
    EXPECT_EQ(sampleKindOf(sampleKindCode(k), AccessKind::Fault), k);
  EXPECT_EQ(sampleKindOf(sampleKindCode(AccessKind::Fault), AccessKind::Hint), AccessKind::Hint);
}

// On events that record data_src the in-kernel path also marks, per page, every memory that served
// it (one bit per page and tier in the block). The evidence block takes the kernel's bit planes as
// they are: this checks that they line up (a page's record names the slowest memory, as the ring
// path's EvidenceAggregator keeps it; a page sampled from two tiers in one epoch was migrated in
// between, or is half cached; pages without bits are Unknown; the kinds stay apart).
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
  chunks.back().counts[70] = 1;
  chunks.back().setServedBy(70, TT_TIER_FAST);
  chunks.push_back(chunk(7, 0));
  chunks.back().kind = TT_KIND_STORE;
  chunks.back().counts[2] = 2;
  chunks.back().setServedBy(2, TT_TIER_FAST);
  std::vector<EvidenceBlock> out;
  EXPECT_EQ(appendChunkBlocks(chunks, AccessKind::Fault, 10, out), 6U);
  ASSERT_EQ(out.size(), 2U);
  EXPECT_TRUE(out[0].tiered());
  EXPECT_EQ(out[0].record(2).weight, 100U);
  EXPECT_EQ(out[0].servedBy(2), ServedBy::SlowTier);
  EXPECT_EQ(out[0].servedBy(3), ServedBy::RemoteRam);
  EXPECT_EQ(out[0].servedBy(4), ServedBy::Unknown);
  EXPECT_EQ(out[0].servedBy(70), ServedBy::FastTier);
  EXPECT_EQ(out[0].servedBy(kChunkPages - 1), ServedBy::Cache);
  EXPECT_EQ(out[0].record(3).servedBy, ServedBy::RemoteRam);
  EXPECT_EQ(out[1].kind, AccessKind::Store);
  EXPECT_EQ(out[1].servedBy(2), ServedBy::FastTier);
  // Every kernel tier lands on the plane of the memory servedByOfTier names for it.
  for (uint32_t tier = TT_TIER_CACHE; tier <= TT_TIER_SLOW; ++tier) {
    std::vector<ChunkCounts> one{chunk(7, 0)};
    one[0].counts[130] = 1;
    one[0].setServedBy(130, tier);
    std::vector<EvidenceBlock> b;
    ASSERT_EQ(appendChunkBlocks(one, AccessKind::Load, 1, b), 1U);
    EXPECT_EQ(b[0].servedBy(130), servedByOfTier(tier)) << tier;
    EXPECT_EQ(b[0].servedBy(129), ServedBy::Unknown);
  }
  EXPECT_EQ(servedByOfTier(99), ServedBy::Unknown);
  // The bits are those of the BPF block layout: tier t of page i is word (t - 1) * 8 + i / 64.
  ChunkCounts c;
  c.setServedBy(65, TT_TIER_REMOTE_RAM);
  EXPECT_EQ(c.tiers[2 * 8 + 1], uint64_t{1} << 1);
  EXPECT_TRUE(c.servedBy(65, TT_TIER_REMOTE_RAM));
  EXPECT_FALSE(c.servedBy(65, TT_TIER_SLOW));
  EXPECT_FALSE(c.servedBy(65, TT_TIER_UNKNOWN));
}

// Records (EvidenceAggregator) and blocks keep the same memory for a page served by several: the
// slowest, Unknown below all.
TEST(EvidenceBatch, SlowerOfOrdersMemoriesLikeTheBlockPlanes) {
  EXPECT_EQ(slowerOf(ServedBy::Unknown, ServedBy::Cache), ServedBy::Cache);
  EXPECT_EQ(slowerOf(ServedBy::Cache, ServedBy::Unknown), ServedBy::Cache);
  EXPECT_EQ(slowerOf(ServedBy::FastTier, ServedBy::Cache), ServedBy::FastTier);
  EXPECT_EQ(slowerOf(ServedBy::RemoteRam, ServedBy::FastTier), ServedBy::RemoteRam);
  EXPECT_EQ(slowerOf(ServedBy::RemoteRam, ServedBy::SlowTier), ServedBy::SlowTier);
  for (ServedBy a : kBlockTiers)
    for (ServedBy b : kBlockTiers) {
      EvidenceBlock block;
      block.counts[0] = 1;
      block.setServedBy(0, a);
      block.setServedBy(0, b);
      EXPECT_EQ(block.servedBy(0), slowerOf(a, b));
    }
}

// A batch counts a block page as the record it stands for, and hands out records first, then each
// block's pages in page order.
TEST(EvidenceBatch, CountsAndFlattensBlockPagesAsRecords) {
  EvidenceBatch batch;
  AccessEvidence r;
  r.tgid = 3;
  r.page = 0x5000;
  r.weight = 7;
  batch.records.push_back(r);
  EvidenceBlock& b = batch.blocks.emplace_back();
  b.tgid = 4;
  b.base = kBlockBytes * 2;
  b.kind = AccessKind::Store;
  b.weightPerCount = 10;
  b.counts[9] = 2;
  b.counts[1] = 1;
  b.setServedBy(9, ServedBy::SlowTier);
  EXPECT_FALSE(batch.empty());
  EXPECT_EQ(batch.pages(), 3U);
  EXPECT_EQ(batch.weight(), 7U + 10 + 20);
  const auto flat = batch.flattened();
  ASSERT_EQ(flat.size(), 3U);
  EXPECT_EQ(flat[0].page, 0x5000U);
  EXPECT_EQ(flat[1].tgid, 4);
  EXPECT_EQ(flat[1].page, kBlockBytes * 2 + 4096);
  EXPECT_EQ(flat[1].weight, 10U);
  EXPECT_EQ(flat[1].kind, AccessKind::Store);
  EXPECT_EQ(flat[1].servedBy, ServedBy::Unknown);
  EXPECT_EQ(flat[2].page, kBlockBytes * 2 + 9 * 4096);
  EXPECT_EQ(flat[2].weight, 20U);
  EXPECT_EQ(flat[2].servedBy, ServedBy::SlowTier);
  batch.clear();
  EXPECT_TRUE(batch.empty());
  EXPECT_EQ(batch.pages(), 0U);
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
