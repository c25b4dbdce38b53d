#include <gtest/gtest.h>

#include "fakes/migrate/FakePageMover.h"
#include "ipc/Placement.h"

namespace {

constexpr uint64_t kPage = tt::kBasePageSize;

TEST(Placement, CountsBytesPerNodeAndUnfaultedPages) {
  tt::fakes::FakePageMover mover;
  mover.map(10, 0x100000, 6 * kPage, 0);
  mover.map(10, 0x100000 + 6 * kPage, 2 * kPage, 1);
  tt::ipc::PlacementReader reader(mover);
  auto p = reader.read(10, 0x100000, 10 * kPage);
  ASSERT_TRUE(p.ok()) << p.error().message();
  EXPECT_EQ(p->bytesPerNode[0], 6 * kPage);
  EXPECT_EQ(p->bytesPerNode[1], 2 * kPage);
  EXPECT_EQ(p->unmappedBytes, 2 * kPage);
}

TEST(Placement, StrideSamplesAndScalesToTheWholeRange) {
  tt::fakes::FakePageMover mover;
  mover.map(10, 0x200000, 64 * kPage, 1);
  tt::ipc::PlacementReader reader(mover);
  auto p = reader.read(10, 0x200000, 64 * kPage, 8);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->bytesPerNode[1], 64 * kPage);
  EXPECT_EQ(mover.queryCalls(), 1u);
}

}  // namespace
