// libbpf's messages through TT_LOG, and LibbpfLogHold: what libbpf says while a hold lives is
// logged only when the hold's owner says at which level, or as it came when the hold ends. libbpf
// is made to warn by opening a BPF object from bytes that are no ELF file (no privileges needed).
#include <bpf/libbpf.h>
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "core/Log.h"
#include "support/TestSupport.h"
#include "sys/bpf/LibbpfLog.h"

namespace {

using tt::log::Level;
using tt::sys::bpf::LibbpfLogHold;

class LibbpfLogTest : public ::testing::Test {
 protected:
  void SetUp() override { tt::sys::bpf::routeLibbpfLogs(); }
  // Makes libbpf log at least one warning; false if it opened the bytes after all.
  static bool makeLibbpfWarn() {
    static const char notElf[] = "this is not an ELF object";
    bpf_object* obj = bpf_object__open_mem(notElf, sizeof notElf, nullptr);
    if (obj == nullptr) return true;
    bpf_object__close(obj);
    return false;
  }
  [[nodiscard]] size_t countAt(Level level) const { return log.count(level, "libbpf: "); }

  tt::test::LogCapture log;
};

TEST_F(LibbpfLogTest, WithoutAHoldLibbpfWarningsAreWarnings) {
  ASSERT_TRUE(makeLibbpfWarn());
  EXPECT_GE(countAt(Level::Warn), 1U);
}

TEST_F(LibbpfLogTest, AHoldKeepsLibbpfLinesUntilItsOwnerLogsThemAtTheLevelItChooses) {
  LibbpfLogHold hold;
  ASSERT_TRUE(makeLibbpfWarn());
  EXPECT_EQ(countAt(Level::Warn), 0U) << "logged while held";
  const size_t held = hold.held();
  EXPECT_GE(held, 1U);
  hold.emitAt(Level::Debug);
  EXPECT_EQ(countAt(Level::Debug), held);
  EXPECT_EQ(countAt(Level::Warn), 0U);
  EXPECT_EQ(hold.held(), 0U);
}

TEST_F(LibbpfLogTest, LinesStillHeldWhenTheHoldEndsGoOutAsLibbpfGaveThem) {
  {
    LibbpfLogHold hold;
    ASSERT_TRUE(makeLibbpfWarn());
    EXPECT_EQ(countAt(Level::Warn), 0U);
  }
  EXPECT_GE(countAt(Level::Warn), 1U);
  log.clear();
  ASSERT_TRUE(makeLibbpfWarn());  // no hold left on this thread
  EXPECT_GE(countAt(Level::Warn), 1U);
}

TEST_F(LibbpfLogTest, HoldsNestAndAreThreadLocal) {
  LibbpfLogHold outer;
  {
    LibbpfLogHold inner;
    ASSERT_TRUE(makeLibbpfWarn());
    EXPECT_GE(inner.held(), 1U);
    EXPECT_EQ(outer.held(), 0U);
    inner.emitAt(Level::Info);
  }
  ASSERT_TRUE(makeLibbpfWarn());
  EXPECT_GE(outer.held(), 1U);
  size_t otherThreadWarnings = 0;
  std::thread([&] {
    const size_t before = countAt(Level::Warn);
    (void)makeLibbpfWarn();
    otherThreadWarnings = countAt(Level::Warn) - before;
  }).join();
  EXPECT_GE(otherThreadWarnings, 1U) << "another thread's libbpf lines were held by this thread's hold";
  outer.emitAt(Level::Debug);
}

}  // namespace
