// Inside the VM: a 64 MiB buffer moved node 0 -> 1 -> 0 through daemon/sys keeps its checksum and
// every page reports the expected node after each move.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "sys/MemPolicy.h"
#include "sys/PageMover.h"

namespace {

constexpr size_t kBytes = 64ULL << 20;
constexpr size_t kPage = 4096;

uint64_t checksum(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

void expectAllOn(tt::sys::PageMover& mover, std::vector<void*>& pages, int node) {
  std::vector<int> status(pages.size(), -1000);
  auto q = mover.queryPages(0, pages, status);
  ASSERT_TRUE(q) << q.error().message();
  size_t wrong = 0;
  for (int s : status) wrong += s != node;
  EXPECT_EQ(wrong, 0u) << wrong << " of " << pages.size() << " pages are not on node " << node;
}

TEST(MoverInVm, SixtyFourMiBRoundTripKeepsDataAndPlacement) {
  ASSERT_EQ(sysconf(_SC_PAGESIZE), static_cast<long>(kPage));
  void* mem = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  ASSERT_EQ(madvise(mem, kBytes, MADV_NOHUGEPAGE), 0);
  auto bound = tt::sys::bindToNode(mem, kBytes, 0, tt::sys::BindMove::FutureOnly);
  ASSERT_TRUE(bound) << bound.error().message();
  auto* buf = static_cast<uint8_t*>(mem);
  uint64_t x = 0x9e3779b97f4a7c15ULL;
  for (size_t i = 0; i < kBytes; i += 8) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift: every page holds distinct data
    std::memcpy(buf + i, &x, 8);
  }
  const uint64_t before = checksum(buf, kBytes);

  std::vector<void*> pages(kBytes / kPage);
  for (size_t i = 0; i < pages.size(); ++i) pages[i] = buf + i * kPage;
  tt::sys::LinuxPageMover mover;
  expectAllOn(mover, pages, 0);
  for (int target : {1, 0}) {
    std::vector<int> nodes(pages.size(), target), status(pages.size(), -1000);
    auto moved = mover.movePages(0, pages, nodes, status, false);
    ASSERT_TRUE(moved) << moved.error().message();
    EXPECT_EQ(*moved, 0) << "pages the kernel could not migrate to node " << target;
    for (size_t i = 0; i < status.size(); ++i) ASSERT_EQ(status[i], target) << "status of page " << i;
    expectAllOn(mover, pages, target);
    EXPECT_EQ(checksum(buf, kBytes), before) << "data changed by the move to node " << target;
  }
  munmap(mem, kBytes);
}

}  // namespace
