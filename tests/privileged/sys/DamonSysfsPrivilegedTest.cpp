// DAMON's sysfs on this host's kernel when another tool runs a kdamond: the kernel refuses to grow
// nr_kdamonds while any kdamond runs (EBUSY), and the daemon's slots are then the kdamonds that
// exist, the running one left alone. (The fixture-tree tests in tests/unit/sources cannot make
// the write fail the kernel's way.)
//
// Some machines run a kdamond of their own from boot (seen on a CI machine: kdamond 0 on,
// physical-address monitoring, started by the platform). That is the case under test, for real:
// the test then plays against that kdamond and changes nothing of it. Otherwise it starts one
// itself as "the other tool" and puts everything back afterwards.
#include <gtest/gtest.h>

#include <cstdio>
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
      if (*state == "off") {
        idleForeign_.push_back(k);
      } else {
        runningForeign_.push_back(static_cast<uint32_t>(k));
      }
    }
    if (!runningForeign_.empty()) return;  // the machine's own kdamond is the other tool
    ASSERT_TRUE(sysfs_.writeFile(admin("nr_kdamonds"), "2").ok());
    owned_ = true;
  }
  void TearDown() override {
    if (!owned_) return;  // nothing of another tool's is touched
    (void)sysfs_.writeFile(admin("0/state"), "off");
    (void)sysfs_.writeFile(admin("nr_kdamonds"), original_);
  }
  static std::string admin(const std::string& rest) { return std::string(kAdmin) + "/" + rest; }
  // What the kernel shows of kdamond `k`'s setup (state, contexts, operations).
  std::string setupOf(int k) const {
    const std::string d = std::to_string(k) + "/";
    std::string out;
    for (const char* f : {"state", "contexts/nr_contexts", "contexts/0/operations"}) {
      auto v = sysfs_.readLine(admin(d + f));
      out += std::string(f) + "=" + (v.ok() ? *v : "-") + " ";
    }
    return out;
  }

  tt::sys::Fs sysfs_{"/sys"};
  std::string original_;
  std::vector<uint32_t> runningForeign_;  // kdamonds found running: another tool's
  std::vector<int> idleForeign_;          // kdamonds found off (another tool may have set them up)
  bool owned_ = false;                    // this test grew nr_kdamonds and runs kdamond 0
};

TEST_F(DamonSysfsPrivilegedTest, ARunningKdamondLeavesTheSlotsThatExist) {
  if (!runningForeign_.empty()) {
    const int existing = std::stoi(original_);
    std::printf("kdamond(s) of another tool run on this machine (%zu of %d): the daemon's slots are checked against "
                "them, and nothing of them is changed\n",
                runningForeign_.size(), existing);
    std::vector<std::string> before;
    for (int k = 0; k < existing; ++k) before.push_back(setupOf(k));
    // From kdamond 0 when every kdamond runs, asking for one more than exist: growing is refused
    // by the kernel (EBUSY) and every slot is busy, so nothing is written. With one set up but
    // off, from past the last one: a configured kdamond below kdamond_index is never regrown
    // away, and there is no slot at all.
    const bool allRun = idleForeign_.empty();
    tt::sys::DamonSysfs damon(sysfs_, allRun ? 0 : static_cast<uint32_t>(existing),
                              allRun ? static_cast<uint32_t>(existing) + 1 : 3);
    auto busy = damon.prepare();
    if (allRun) {
      ASSERT_TRUE(busy.ok()) << busy.error().message();
      EXPECT_EQ(*busy, runningForeign_) << "the other tool's kdamonds are busy slots";
      EXPECT_EQ(damon.slots(), static_cast<uint32_t>(existing));
      EXPECT_NE(damon.shortfall().find("a kdamond runs"), std::string::npos) << damon.shortfall();
    } else {
      ASSERT_FALSE(busy.ok()) << "no slot can exist past another tool's kdamonds";
      EXPECT_NE(busy.error().message().find("another tool's"), std::string::npos) << busy.error().message();
    }
    EXPECT_EQ(*sysfs_.readLine(admin("nr_kdamonds")), original_);
    for (int k = 0; k < existing; ++k) EXPECT_EQ(setupOf(k), before[static_cast<size_t>(k)]) << "kdamond " << k;
    return;
  }
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
