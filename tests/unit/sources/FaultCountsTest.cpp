// The fault trace's not-present fault counts (drained per epoch from the kernel's chunk blocks)
// become Fault evidence for a page's first fault ever and Hint evidence for every later one.
#include <gtest/gtest.h>

#include <algorithm>
#include <tuple>

#include "sources/FaultTraceSource.h"

namespace tt::sources {
namespace {

using sys::bpf::ChunkCounts;
using sys::bpf::kChunkBytes;

ChunkCounts block(uint32_t tgid, uint64_t base, std::initializer_list<std::pair<uint32_t, uint8_t>> counts) {
  ChunkCounts c;
  c.tgid = tgid;
  c.base = base;
  for (auto [page, n] : counts) c.counts[page] = n;
  return c;
}

void expectRecord(const AccessEvidence& e, uint64_t page, AccessKind kind, uint32_t weight) {
  EXPECT_EQ(e.page, page);
  EXPECT_EQ(e.kind, kind);
  EXPECT_EQ(e.weight, weight);
}

// The evidence appendFaultBlocks makes of `blocks`, as records sorted by (tgid, page, kind),
// and the faults it counted. Every block it makes has a page with evidence, and one kind.
std::pair<std::vector<AccessEvidence>, uint64_t> expand(std::vector<ChunkCounts> blocks, FaultedPages& faulted) {
  EvidenceBatch batch;
  const uint64_t n = appendFaultBlocks(blocks, faulted, batch.blocks);
  for (const EvidenceBlock& b : batch.blocks) {
    EXPECT_GT(b.pages(), 0U) << "an empty block";
    EXPECT_TRUE(b.kind == AccessKind::Fault || b.kind == AccessKind::Hint || b.kind == AccessKind::Store);
  }
  auto out = batch.flattened();
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return std::tie(a.tgid, a.page, a.kind) < std::tie(b.tgid, b.page, b.kind); });
  return {out, n};
}

TEST(FaultCounts, FirstFaultOfAPageIsItsFirstTouchLaterOnesAreHints) {
  FaultedPages faulted;
  // Page 3 faulted once, page 7 three times (first touch, then e.g. two NUMA hinting faults).
  const auto [first, n1] = expand({block(5, 2 * kChunkBytes, {{7, 3}, {3, 1}})}, faulted);
  EXPECT_EQ(n1, 4U);
  ASSERT_EQ(first.size(), 3U);
  expectRecord(first[0], 2 * kChunkBytes + 3 * 4096, AccessKind::Fault, 1);
  expectRecord(first[1], 2 * kChunkBytes + 7 * 4096, AccessKind::Fault, 1);
  expectRecord(first[2], 2 * kChunkBytes + 7 * 4096, AccessKind::Hint, 2);

  // Next epoch: page 3 faults again (a hinting fault: it was touched before), page 4 is new.
  const auto [second, n2] = expand({block(5, 2 * kChunkBytes, {{3, 2}, {4, 1}})}, faulted);
  EXPECT_EQ(n2, 3U);
  ASSERT_EQ(second.size(), 2U);
  expectRecord(second[0], 2 * kChunkBytes + 3 * 4096, AccessKind::Hint, 2);
  expectRecord(second[1], 2 * kChunkBytes + 4 * 4096, AccessKind::Fault, 1);
}

TEST(FaultCounts, ProcessesAreRememberedApart) {
  FaultedPages faulted;
  EXPECT_EQ(expand({block(5, 0, {{0, 1}})}, faulted).second, 1U);
  // The same address in another process is that process's first touch.
  const auto [out, n] = expand({block(6, 0, {{0, 1}}), block(5, kChunkBytes, {{1, 1}}), block(5, 0, {{0, 1}})}, faulted);
  EXPECT_EQ(n, 3U);
  ASSERT_EQ(out.size(), 3U);
  EXPECT_EQ(out[0].tgid, 5);
  expectRecord(out[0], 0, AccessKind::Hint, 1);
  EXPECT_EQ(out[1].tgid, 5);
  expectRecord(out[1], kChunkBytes + 4096, AccessKind::Fault, 1);
  EXPECT_EQ(out[2].tgid, 6);
  expectRecord(out[2], 0, AccessKind::Fault, 1);
  // Forgetting a process (it was untracked) makes its next fault a first touch again.
  faulted.erase(5);
  EXPECT_EQ(expand({block(5, 0, {{0, 1}})}, faulted).first.at(0).kind, AccessKind::Fault);
}

// The trace reports a migration both per page (remove_migration_pte, where the kernel has it) and
// per batch (mm_migrate_pages): the source hands on one view of each move, never both.
TEST(KernelMoveOf, OneViewOfEachMovePagesWhereTheKernelReportsThem) {
  tt_event page{};
  page.tgid = 7;
  page.kind = TT_EV_MIGRATE_PAGE;
  page.mig_class = TT_MIG_DEMOTE;
  page.addr = 0x3000 + 123;  // any address in the page
  page.detail = 9;           // order 9: a 2 MiB huge page
  tt_event batch{};
  batch.tgid = 7;
  batch.kind = TT_EV_MIGRATE_BATCH;
  batch.mig_class = TT_MIG_PROMOTE;
  batch.detail = 2;  // pages succeeded
  tt_event fault{};
  fault.kind = TT_EV_FAULT_HINT;

  const auto perPage = kernelMoveOf(page, true);
  ASSERT_TRUE(perPage.has_value());
  EXPECT_EQ(perPage->tgid, 7);
  EXPECT_EQ(perPage->page, 0x3000U);
  EXPECT_EQ(perPage->pages, 512U);
  EXPECT_EQ(perPage->why, KernelMove::Why::Demotion);
  EXPECT_FALSE(kernelMoveOf(batch, true).has_value()) << "the batch repeats the pages already reported";

  EXPECT_FALSE(kernelMoveOf(page, false).has_value());
  const auto perBatch = kernelMoveOf(batch, false);
  ASSERT_TRUE(perBatch.has_value());
  EXPECT_EQ(perBatch->page, 0U);
  EXPECT_EQ(perBatch->pages, 2U);
  EXPECT_EQ(perBatch->why, KernelMove::Why::Promotion);

  EXPECT_FALSE(kernelMoveOf(fault, true).has_value());
  EXPECT_FALSE(kernelMoveOf(fault, false).has_value());
}

// A huge page split on its way to another node is remapped in place (an event without a move) and
// then moved (an event each page): one move per page and reason reaches the daemon.
TEST(FaultCounts, RepeatedKernelMovesOfAPageAreCountedOnce) {
  using Why = KernelMove::Why;
  constexpr uint64_t kHuge = 0x200000, kPage = 0x1000;
  std::vector<KernelMove> moves{
      {7, kHuge + kPage, 1, Why::Promotion},   // the split's remap
      {7, kHuge, 1, Why::Promotion},
      {7, kHuge + kPage, 1, Why::Promotion},   // the move
      {7, kHuge, 1, Why::Promotion},
      {7, 2 * kHuge, 512, Why::Promotion},     // a whole huge page...
      {7, 2 * kHuge + 5 * kPage, 1, Why::Promotion},  // ...covers its pages
      {7, kHuge, 1, Why::Demotion},            // another reason: kept
      {8, kHuge, 1, Why::Promotion},           // another process: kept
      {7, 0, 40, Why::Promotion},              // batches: kept as they are
      {7, 0, 40, Why::Promotion},
  };
  dropRepeatedMoves(moves);
  uint64_t promoted7 = 0, batches = 0;
  for (const auto& m : moves) {
    if (m.page == 0) ++batches;
    else if (m.tgid == 7 && m.why == Why::Promotion) promoted7 += m.pages;
  }
  EXPECT_EQ(promoted7, 2U + 512U);
  EXPECT_EQ(batches, 2U);
  EXPECT_EQ(moves.size(), 3U + 2U + 2U);
}

// Pending kernel moves are capped. At the cap they are merged into ranges once (reclaim demotes a
// buffer page by page, out of address order); after that a move that continues the last range
// extends it, any other is dropped.
TEST(KernelMoveOf, MovesBeyondTheCapAreMergedIntoRangesOrDropped) {
  std::vector<KernelMove> moves;
  bool merged = false;
  const auto demoted = [](uint64_t page, uint64_t pages = 1) {
    return KernelMove{7, page, pages, KernelMove::Why::Demotion};
  };
  constexpr size_t kCap = 4;
  // Below the cap: appended as they come, out of order, one repeated.
  for (uint64_t page : {0x22000, 0x20000, 0x21000, 0x21000}) EXPECT_TRUE(appendKernelMove(moves, demoted(page), kCap, merged));
  ASSERT_EQ(moves.size(), 4U);
  EXPECT_FALSE(merged);
  // At the cap: merged into one range of three pages, then appended.
  EXPECT_TRUE(appendKernelMove(moves, demoted(0x40000), kCap, merged));
  EXPECT_TRUE(merged);
  ASSERT_EQ(moves.size(), 2U);
  EXPECT_EQ(moves[0].page, 0x20000U);
  EXPECT_EQ(moves[0].pages, 3U);
  EXPECT_TRUE(appendKernelMove(moves, demoted(0x50000), kCap, merged));
  EXPECT_TRUE(appendKernelMove(moves, demoted(0x60000), kCap, merged));
  ASSERT_EQ(moves.size(), kCap);
  // Merged once already: the next page of the last range extends it, anything else is dropped.
  EXPECT_TRUE(appendKernelMove(moves, demoted(0x61000, 512), kCap, merged));
  EXPECT_EQ(moves.back().pages, 513U);
  EXPECT_FALSE(appendKernelMove(moves, demoted(0x30000), kCap, merged)) << "not the next page";
  KernelMove promoted = demoted(0x60000 + 513 * 4096);
  promoted.why = KernelMove::Why::Promotion;
  EXPECT_FALSE(appendKernelMove(moves, promoted, kCap, merged)) << "another reason";
  KernelMove other = demoted(0x60000 + 513 * 4096);
  other.tgid = 8;
  EXPECT_FALSE(appendKernelMove(moves, other, kCap, merged)) << "another process";
  EXPECT_FALSE(appendKernelMove(moves, KernelMove{7, 0, 40, KernelMove::Why::Demotion}, kCap, merged)) << "a batch";
  ASSERT_EQ(moves.size(), kCap);
  uint64_t pages = 0;
  for (const auto& m : moves) pages += m.pages;
  EXPECT_EQ(pages, 3U + 1 + 1 + 513);
}

// Write-protect faults (counted in kernel with the store kind) are stores of their pages, as
// often as they faulted; they do not make a page's first touch, nor mark it touched.
TEST(FaultCounts, WriteProtectFaultsAreStores) {
  FaultedPages faulted;
  ChunkCounts wp = block(5, 2 * kChunkBytes, {{1, 2}, {9, 1}});
  wp.kind = TT_KIND_STORE;
  const auto [out, n] = expand({wp}, faulted);
  EXPECT_EQ(n, 3U);
  ASSERT_EQ(out.size(), 2U);
  expectRecord(out[0], 2 * kChunkBytes + 1 * 4096, AccessKind::Store, 2);
  expectRecord(out[1], 2 * kChunkBytes + 9 * 4096, AccessKind::Store, 1);
  // Page 1's first not-present fault later is still its first touch.
  const auto [later, n2] = expand({block(5, 2 * kChunkBytes, {{1, 1}})}, faulted);
  ASSERT_EQ(later.size(), 1U);
  expectRecord(later[0], 2 * kChunkBytes + 1 * 4096, AccessKind::Fault, 1);
}

}  // namespace
}  // namespace tt::sources
