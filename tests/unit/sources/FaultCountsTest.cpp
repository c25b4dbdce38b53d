// The fault trace's not-present fault counts (drained per epoch from the kernel's chunk blocks)
// become Fault evidence for a page's first fault ever and Hint evidence for every later one.
#include <gtest/gtest.h>

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

std::vector<AccessEvidence> flushed(EvidenceAggregator& a) {
  std::vector<AccessEvidence> out;
  a.flush(out);
  return out;
}

TEST(FaultCounts, FirstFaultOfAPageIsItsFirstTouchLaterOnesAreHints) {
  FaultedPages faulted;
  EvidenceAggregator agg;
  // Page 3 faulted once, page 7 three times (first touch, then e.g. two NUMA hinting faults).
  EXPECT_EQ(addNotPresentFaults({block(5, 2 * kChunkBytes, {{3, 1}, {7, 3}})}, faulted, agg), 4U);
  const auto first = flushed(agg);
  ASSERT_EQ(first.size(), 3U);
  EXPECT_EQ(first[0].page, 2 * kChunkBytes + 3 * 4096);
  EXPECT_EQ(first[0].kind, AccessKind::Fault);
  EXPECT_EQ(first[0].weight, 1U);
  EXPECT_EQ(first[1].page, 2 * kChunkBytes + 7 * 4096);
  EXPECT_EQ(first[1].kind, AccessKind::Fault);
  EXPECT_EQ(first[1].weight, 1U);
  EXPECT_EQ(first[2].page, 2 * kChunkBytes + 7 * 4096);
  EXPECT_EQ(first[2].kind, AccessKind::Hint);
  EXPECT_EQ(first[2].weight, 2U);

  // Next epoch: page 3 faults again (a hinting fault: it was touched before), page 4 is new.
  EXPECT_EQ(addNotPresentFaults({block(5, 2 * kChunkBytes, {{3, 2}, {4, 1}})}, faulted, agg), 3U);
  const auto second = flushed(agg);
  ASSERT_EQ(second.size(), 2U);
  EXPECT_EQ(second[0].page, 2 * kChunkBytes + 3 * 4096);
  EXPECT_EQ(second[0].kind, AccessKind::Hint);
  EXPECT_EQ(second[0].weight, 2U);
  EXPECT_EQ(second[1].page, 2 * kChunkBytes + 4 * 4096);
  EXPECT_EQ(second[1].kind, AccessKind::Fault);
}

TEST(FaultCounts, ProcessesAreRememberedApart) {
  FaultedPages faulted;
  EvidenceAggregator agg;
  EXPECT_EQ(addNotPresentFaults({block(5, 0, {{0, 1}})}, faulted, agg), 1U);
  flushed(agg);
  // The same address in another process is that process's first touch.
  EXPECT_EQ(addNotPresentFaults({block(6, 0, {{0, 1}}), block(5, 0, {{0, 1}})}, faulted, agg), 2U);
  const auto out = flushed(agg);
  ASSERT_EQ(out.size(), 2U);
  EXPECT_EQ(out[0].tgid, 5);
  EXPECT_EQ(out[0].kind, AccessKind::Hint);
  EXPECT_EQ(out[1].tgid, 6);
  EXPECT_EQ(out[1].kind, AccessKind::Fault);
  // Forgetting a process (it was untracked) makes its next fault a first touch again.
  faulted.erase(5);
  EXPECT_EQ(addNotPresentFaults({block(5, 0, {{0, 1}})}, faulted, agg), 1U);
  EXPECT_EQ(flushed(agg).at(0).kind, AccessKind::Fault);
}

}  // namespace
}  // namespace tt::sources
