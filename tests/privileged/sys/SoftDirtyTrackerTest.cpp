// The soft-dirty tracker on real processes: a tracked process that has exited is gone for it,
// whatever holds its pid now (the kernel fails lookups in an exited process's /proc directory).
#include "sys/access/SoftDirty.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <vector>

#include "support/ChildProcess.h"
#include "support/TestSupport.h"

namespace {

TEST(SoftDirtyTracker, AnExitedProcessIsGoneNotAnotherOne) {
  TT_REQUIRE_ROOT();
  tt::test::TouchingChild child(16 * 4096);
  const pid_t pid = child.pid();
  tt::sys::ProcSoftDirtyTracker tracker(tt::sys::Fs("/proc"));
  ASSERT_TRUE(tracker.track(pid).ok());
  std::vector<uint64_t> dirty;
  ASSERT_TRUE(tracker.dirtyPages(pid, child.address(), 16, dirty).ok());
  ASSERT_TRUE(tracker.clear(pid).ok());
  child.kill();  // reaped: the pid is free for the next process
  const auto cleared = tracker.clear(pid);
  ASSERT_FALSE(cleared.ok()) << "clear_refs written after the process exited";
  EXPECT_TRUE(cleared.error().code == ENOENT || cleared.error().code == ESRCH) << cleared.error().message();
  const auto read = tracker.dirtyPages(pid, child.address(), 16, dirty);
  ASSERT_FALSE(read.ok());
  EXPECT_TRUE(read.error().code == ENOENT || read.error().code == ESRCH) << read.error().message();
}

}  // namespace
