// DAMON's sysfs on this host's kernel when another tool runs a kdamond: the kernel refuses to grow
// nr_kdamonds while any kdamond runs (EBUSY), and the daemon's slots are then the kdamonds that
// exist, the running one left alone. (The fixture-tree tests in tests/unit/sources cannot make
// the write fail the kernel's way.)
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/TestSupport.h"
#include "sys/access/DamonSysfs.h"

namespace {

constexpr const char* kAdmin = "kernel/mm/damon/admin/kdamonds";

class DamonSysfsPrivilegedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TT_REQUIRE_ROOT();
    ASSERT_TRUE(sysfs_.exists(admin("nr_kdamonds")))
        << "no DAMON sysfs on this kernel (CONFIG_DAMON_SYSFS): this test exercises it for real";
    auto nr = sysfs_.readLine(admin("nr_kdamonds"));
    ASSERT_TRUE(nr.ok()) << nr.error().message();
    original_ = *nr;
    for (int k = 0; k < std::stoi(original_); ++k) {
      auto state = sysfs_.readLine(admin(std::to_string(k) + "/state"));
      ASSERT_TRUE(state.ok()) << state.error().message();
      ASSERT_EQ(*state, "off") << "kdamond " << k << " runs (another tool?): this test needs DAMON to itself";
    }
    ASSERT_TRUE(sysfs_.writeFile(admin("nr_kdamonds"), "2").ok());
  }
  void TearDown() override {
    (void)sysfs_.writeFile(admin("0/state"), "off");
    if (!original_.empty()) (void)sysfs_.writeFile(admin("nr_kdamonds"), original_);
  }
  static std::string admin(const std::string& rest) { return std::string(kAdmin) + "/" + rest; }

  tt::sys::Fs sysfs_{"/sys"};
  std::string original_;
};

TEST_F(DamonSysfsPrivilegedTest, ARunningKdamondLeavesTheSlotsThatExist) {
  // "Another tool" runs kdamond 0: physical-address monitoring, which every DAMON build has (this
  // host's kernel has no vaddr operations).
  for (const auto& [path, value] : {std::pair<std::string, std::string>{"0/contexts/nr_contexts", "1"},
                                    {"0/contexts/0/operations", "paddr"},
                                    {"0/state", "on"}}) {
    auto w = sysfs_.writeFile(admin(path), value);
    ASSERT_TRUE(w.ok()) << path << ": " << w.error().message();
  }
  tt::sys::DamonSysfs damon(sysfs_, 0, 3);
  auto busy = damon.prepare();
  ASSERT_TRUE(busy.ok()) << busy.error().message();
  EXPECT_EQ(*busy, std::vector<uint32_t>{0}) << "kdamond 0 is another tool's, running";
  EXPECT_EQ(damon.slots(), 2u);
  EXPECT_NE(damon.shortfall().find("a kdamond runs"), std::string::npos) << damon.shortfall();
  EXPECT_EQ(*sysfs_.readLine(admin("nr_kdamonds")), "2");
  EXPECT_EQ(*sysfs_.readLine(admin("0/state")), "on");
  EXPECT_EQ(*sysfs_.readLine(admin("0/contexts/0/operations")), "paddr") << "the other tool's kdamond was touched";
  // The free slot got its context, ready for a start.
  EXPECT_EQ(*sysfs_.readLine(admin("1/contexts/nr_contexts")), "1");
  auto running = damon.running(1);
  EXPECT_TRUE(running.ok() && !*running);
}

}  // namespace
