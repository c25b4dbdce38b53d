#include "migrate/Batching.h"

#include <gtest/gtest.h>

namespace {

using tt::MoveRequest;
using tt::migrate::coalesce;
using tt::migrate::MoveRun;
using tt::migrate::Segment;
using tt::migrate::splitHuge;

constexpr uint64_t kPage = 4096;
constexpr uint64_t kHuge = 2ULL << 20;

TEST(MigrateCoalesce, MergesAdjacentAndOverlappingRequestsIntoMaximalRuns) {
  std::vector<MoveRequest> moves;
  // 100 adjacent 3-page requests in shuffled order, plus one overlapping the middle.
  for (int i = 99; i >= 0; --i) moves.push_back({7, 0x100000 + uint64_t(i) * 3 * kPage, 3 * kPage, 0, 0, 0});
  moves.push_back({7, 0x100000 + 10 * kPage, 50 * kPage, 0, 0, 0});
  const auto runs = coalesce(moves);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0], (MoveRun{7, 0x100000, 300 * kPage, 0, 0, 0}));
}

TEST(MigrateCoalesce, KeepsDifferentProcessesNodesPrioritiesAndRegionsApart) {
  const std::vector<MoveRequest> moves = {
      {7, 0x100000, kPage, 0, 0, 0},
      {7, 0x101000, kPage, 1, 0, 0},   // adjacent, other node
      {8, 0x102000, kPage, 0, 0, 0},   // other process
      {7, 0x103000, kPage, 0, 5, 0},   // other priority
      {7, 0x104000, kPage, 0, 0, 42},  // other region
      {7, 0x200000, kPage, 0, 0, 0},   // same key, not adjacent
  };
  EXPECT_EQ(coalesce(moves).size(), 6u);
}

TEST(MigrateCoalesce, OrdersByPriorityThenProcessThenAddress) {
  const std::vector<MoveRequest> moves = {
      {9, 0x300000, kPage, 0, 1, 0},
      {8, 0x500000, kPage, 0, 1, 0},
      {8, 0x100000, kPage, 1, 1, 0},
      {7, 0x100000, kPage, 0, 9, 0},
  };
  const auto runs = coalesce(moves);
  ASSERT_EQ(runs.size(), 4u);
  EXPECT_EQ(runs[0].tgid, 7);
  EXPECT_EQ(runs[1].tgid, 8);
  EXPECT_EQ(runs[1].start, 0x100000u);
  EXPECT_EQ(runs[2].start, 0x500000u);
  EXPECT_EQ(runs[3].tgid, 9);
}

TEST(MigrateCoalesce, WidensUnalignedEdgesAndDropsEmptyRequests) {
  const std::vector<MoveRequest> moves = {{7, 0x100010, 10, 0, 0, 0}, {7, 0x900000, 0, 0, 0, 0}};
  const auto runs = coalesce(moves);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].start, 0x100000u);
  EXPECT_EQ(runs[0].length, kPage);
}

TEST(MigrateSplitHuge, AlternatesBaseAndHugeSegments) {
  const uint64_t base = 0x40000000;
  const std::vector<tt::sys::HugeRange> huge = {{base + kHuge, 2 * kHuge}, {base + 4 * kHuge, kHuge}};
  const auto segs = splitHuge(base + 16 * kPage, 5 * kHuge, huge);
  const std::vector<Segment> expected = {
      {base + 16 * kPage, kHuge - 16 * kPage, false},
      {base + kHuge, 2 * kHuge, true},
      {base + 3 * kHuge, kHuge, false},
      {base + 4 * kHuge, kHuge, true},
      {base + 5 * kHuge, 16 * kPage, false},
  };
  EXPECT_EQ(segs, expected);
}

TEST(MigrateSplitHuge, NoHugeRangesGiveOneBaseSegment) {
  EXPECT_EQ(splitHuge(0x1000, 3 * kPage, {}), (std::vector<Segment>{{0x1000, 3 * kPage, false}}));
}

}  // namespace
