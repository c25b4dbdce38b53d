// move_pages(2) through daemon/sys on another live process, as the daemon will use it. The host
// has one NUMA node, so these check the query path, per-page errors and process-exit handling;
// moves between nodes are tested in the VM (tests/e2e).
#include "sys/PageMover.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <vector>

#include "support/ChildProcess.h"
#include "support/TestSupport.h"

namespace {

constexpr size_t kPage = 4096;

std::vector<void*> pagesOf(uintptr_t base, size_t count) {
  std::vector<void*> pages(count);
  for (size_t i = 0; i < count; ++i) pages[i] = reinterpret_cast<void*>(base + i * kPage);
  return pages;
}

TEST(PageMover, QueriesAnotherProcessPages) {
  TT_REQUIRE_ROOT();
  tt::test::TouchingChild child(64 * kPage);
  auto pages = pagesOf(child.address(), 64);
  std::vector<int> status(pages.size(), -1000);
  tt::sys::LinuxPageMover mover;
  auto q = mover.queryPages(child.pid(), pages, status);
  ASSERT_TRUE(q) << q.error().message();
  for (size_t i = 0; i < status.size(); ++i) EXPECT_EQ(status[i], 0) << "page " << i;
}

TEST(PageMover, UnmappedAddressReportsEfaultPerPage) {
  TT_REQUIRE_ROOT();
  tt::test::TouchingChild child(4 * kPage);
  // Page 0 is never mapped in a user process.
  std::vector<void*> pages{reinterpret_cast<void*>(child.address()), nullptr};
  std::vector<int> status(2, 0);
  tt::sys::LinuxPageMover mover;
  ASSERT_TRUE(mover.queryPages(child.pid(), pages, status));
  EXPECT_EQ(status[0], 0);
  EXPECT_EQ(status[1], -EFAULT);
}

TEST(PageMover, MoveToCurrentNodeLeavesPagesInPlace) {
  TT_REQUIRE_ROOT();
  tt::test::TouchingChild child(32 * kPage);
  auto pages = pagesOf(child.address(), 32);
  std::vector<int> nodes(pages.size(), 0), status(pages.size(), -1000);
  tt::sys::LinuxPageMover mover;
  auto moved = mover.movePages(child.pid(), pages, nodes, status, false);
  ASSERT_TRUE(moved) << moved.error().message();
  EXPECT_EQ(*moved, 0);
  for (int s : status) EXPECT_EQ(s, 0);
}

TEST(PageMover, ExitedProcessIsEsrchWithHint) {
  TT_REQUIRE_ROOT();
  tt::test::TouchingChild child(kPage);
  const pid_t pid = child.pid();
  const auto addr = child.address();
  child.kill();
  std::vector<void*> pages{reinterpret_cast<void*>(addr)};
  std::vector<int> nodes{0}, status{0};
  tt::sys::LinuxPageMover mover;
  auto moved = mover.movePages(pid, pages, nodes, status, false);
  ASSERT_FALSE(moved);
  EXPECT_EQ(moved.error().code, ESRCH);
  EXPECT_NE(moved.error().message().find("exited"), std::string::npos) << moved.error().message();
}

TEST(PageMover, MismatchedArraysAreRejectedBeforeTheSyscall) {
  tt::sys::LinuxPageMover mover;
  std::vector<void*> pages(2, nullptr);
  std::vector<int> nodes(1, 0), status(2, 0);
  auto moved = mover.movePages(getpid(), pages, nodes, status, false);
  ASSERT_FALSE(moved);
  EXPECT_EQ(moved.error().code, 0);
}

}  // namespace
