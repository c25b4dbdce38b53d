// The fault trace's storm guard: pause over the CPU budget, resume under half of it; and the
// machine's fault count it reads from a (fake) procfs vmstat.
#include "sources/FaultStormGuard.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

#include "sys/VmStat.h"

namespace {

using tt::sources::FaultStormGuard;

// 100 ns per fault, 2% budget: 200k faults/s is the budget exactly.
constexpr double kCostNs = 100, kBudget = 2.0;

TEST(FaultStormGuard, PausesOnlyWhenTheEpochsFaultsCostMoreThanTheBudget) {
  FaultStormGuard g;
  EXPECT_FALSE(g.update(200000, 1.0, kCostNs, kBudget)) << "at the budget is within it";
  EXPECT_DOUBLE_EQ(g.costPercent(), 2.0);
  EXPECT_TRUE(g.update(100001, 0.5, kCostNs, kBudget));
  EXPECT_TRUE(g.paused());
  EXPECT_EQ(g.pauses(), 1U);
  EXPECT_NEAR(g.costPercent(), 2.00002, 1e-9);
}

TEST(FaultStormGuard, ResumesOnlyUnderHalfTheBudgetSoARateNearItDoesNotFlap) {
  FaultStormGuard g;
  ASSERT_TRUE(g.update(1000000, 1.0, kCostNs, kBudget));  // 10%
  EXPECT_TRUE(g.update(150000, 1.0, kCostNs, kBudget)) << "1.5%: under the budget, not under half";
  EXPECT_TRUE(g.update(100001, 1.0, kCostNs, kBudget));
  EXPECT_FALSE(g.update(100000, 1.0, kCostNs, kBudget)) << "1%: half the budget";
  EXPECT_FALSE(g.update(199999, 1.0, kCostNs, kBudget));
  EXPECT_TRUE(g.update(400000, 1.0, kCostNs, kBudget));
  EXPECT_EQ(g.pauses(), 2U);
}

TEST(FaultStormGuard, TheBudgetAndCostOfEachEpochApply) {
  FaultStormGuard g;
  EXPECT_FALSE(g.update(1000000, 1.0, kCostNs, 20.0));   // 10% of a 20% budget
  EXPECT_TRUE(g.update(1000000, 1.0, 1000.0, 20.0));     // a dearer fault: 100%
  EXPECT_FALSE(g.update(1000000, 1.0, 1.0, 20.0));       // a cheaper one: 0.1%
}

TEST(FaultStormGuard, AnEpochShorterThanTheMinimumIsNotJudged) {
  FaultStormGuard g;
  EXPECT_FALSE(g.update(100000, 0.099, kCostNs, kBudget)) << "10% of a CPU, but over 99 ms only";
  EXPECT_DOUBLE_EQ(g.costPercent(), 0.0);
  ASSERT_TRUE(g.update(1000000, 1.0, kCostNs, kBudget));
  EXPECT_TRUE(g.update(0, 0.0, kCostNs, kBudget));
  EXPECT_TRUE(g.update(0, 0.05, kCostNs, kBudget));
  EXPECT_DOUBLE_EQ(g.costPercent(), 10.0) << "the last judged epoch's estimate stays";
  EXPECT_FALSE(g.update(0, FaultStormGuard::kMinEpochSeconds, kCostNs, kBudget));
}

TEST(FaultStormGuard, ResetForgetsThePauseAndTheEstimate) {
  FaultStormGuard g;
  ASSERT_TRUE(g.update(1000000, 1.0, kCostNs, kBudget));
  g.reset();
  EXPECT_FALSE(g.paused());
  EXPECT_DOUBLE_EQ(g.costPercent(), 0.0);
  EXPECT_EQ(g.pauses(), 1U) << "the count of pauses is history, not state";
}

class VmStat : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tt-vmstat-" + std::to_string(::getpid()) + "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void write(const std::string& text) { std::ofstream(dir_ / "vmstat") << text; }
  std::filesystem::path dir_;
};

TEST_F(VmStat, ReadsTheNamedCounterNotOneItIsAPrefixOf) {
  write("nr_free_pages 12345\npgfault_x 7\npgfault 987654321012\npgmajfault 42\n");
  auto v = tt::sys::readVmstat(tt::sys::Fs(dir_.string()), "pgfault");
  ASSERT_TRUE(v.ok()) << v.error().message();
  EXPECT_EQ(*v, 987654321012ULL);
  auto last = tt::sys::readVmstat(tt::sys::Fs(dir_.string()), "pgmajfault");
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(*last, 42U);
}

TEST_F(VmStat, AMissingCounterOrFileAndAValueThatIsNotACountAreErrors) {
  write("nr_free_pages 12345\npgfault 12a\n");
  auto bad = tt::sys::readVmstat(tt::sys::Fs(dir_.string()), "pgfault");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, EINVAL);
  EXPECT_NE(bad.error().message().find("pgfault"), std::string::npos);
  auto missing = tt::sys::readVmstat(tt::sys::Fs(dir_.string()), "pgmajfault");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ENOENT);
  std::filesystem::remove(dir_ / "vmstat");
  EXPECT_FALSE(tt::sys::readVmstat(tt::sys::Fs(dir_.string()), "pgfault").ok());
}

}  // namespace
