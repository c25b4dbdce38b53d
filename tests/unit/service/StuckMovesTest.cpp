// Busy pages of the policy's plans held back from the plans after, with a doubling backoff.
#include "service/StuckMoves.h"

#include <gtest/gtest.h>

namespace {

using tt::StuckRange;
using tt::service::FinishedRun;
using tt::service::StuckMoves;

constexpr uint64_t kPage = 4096;
constexpr uint64_t kBase = 0x10000000;

// A demotion run of `pages` pages at kBase + first * kPage that left `busy` busy.
FinishedRun demotion(uint64_t first, uint64_t pages, std::vector<tt::AddressRange> busy, pid_t tgid = 10) {
  FinishedRun r;
  r.tgid = tgid;
  r.start = kBase + first * kPage;
  r.length = pages * kPage;
  r.targetNode = 1;
  r.settled = busy.empty();
  r.generation = 1;
  r.demotion = true;
  r.busy = std::move(busy);
  return r;
}

// Plans until the range is due a retry, checking that it is held (not retry) before: how many.
int plansHeld(StuckMoves& stuck) {
  for (int n = 0; n < 1000; ++n) {
    const auto ranges = stuck.nextPlan();
    if (ranges.empty()) return -1;
    if (ranges.front().retry) return n;
  }
  return 1000;
}

TEST(StuckMoves, ABusyRangeIsHeldThenDueARetryThatDoublesEachTimeItFails) {
  StuckMoves stuck;
  const tt::AddressRange busy{kBase + 5 * kPage, 2 * kPage};
  stuck.onFinishedPlan(std::vector{demotion(0, 512, {busy})});
  auto ranges = stuck.nextPlan();
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_EQ(ranges[0].tgid, 10);
  EXPECT_EQ(ranges[0].start, busy.start);
  EXPECT_EQ(ranges[0].length, busy.length);
  EXPECT_TRUE(ranges[0].onFast) << "a failed demotion leaves the pages on the fast tier";
  EXPECT_FALSE(ranges[0].retry);
  EXPECT_EQ(1 + plansHeld(stuck), static_cast<int>(StuckMoves::kFirstHoldPlans));
  EXPECT_TRUE(stuck.nextPlan().front().retry) << "a retry stays due until a run covers it";
  // The retry's run leaves the pages busy again: held twice as long, and so on up to the cap.
  uint32_t expected = 2 * StuckMoves::kFirstHoldPlans;
  for (int failure = 0; failure < 8; ++failure) {
    stuck.onFinishedPlan(std::vector{demotion(0, 512, {busy})});
    EXPECT_EQ(plansHeld(stuck), static_cast<int>(expected)) << "failure " << failure;
    expected = std::min(2 * expected, StuckMoves::kMaxHoldPlans);
  }
  EXPECT_EQ(stuck.totals().fastPages, 2u);
  // A retry that moves them: nothing held.
  stuck.onFinishedPlan(std::vector{demotion(0, 512, {})});
  EXPECT_TRUE(stuck.nextPlan().empty());
  EXPECT_EQ(stuck.totals().ranges, 0u);
}

// A run settles only its own range: holds next to it, or partly inside, keep the rest.
TEST(StuckMoves, ARunSettlesOnlyItsOwnRange) {
  StuckMoves stuck;
  stuck.onFinishedPlan(std::vector{demotion(0, 1024, {{kBase + 100 * kPage, 200 * kPage}, {kBase + 600 * kPage, kPage}})});
  // A later run over pages 150..650 moves everything it covers.
  stuck.onFinishedPlan(std::vector{demotion(150, 500, {})});
  const auto ranges = stuck.nextPlan();
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_EQ(ranges[0].start, kBase + 100 * kPage);
  EXPECT_EQ(ranges[0].length, 50 * kPage) << "the part before the run stays held";
  EXPECT_FALSE(ranges[0].retry) << "and keeps its own count";
  // Another process's run changes nothing.
  stuck.onFinishedPlan(std::vector{demotion(0, 1024, {}, 11)});
  EXPECT_EQ(stuck.nextPlan().size(), 1u);
}

// A run cut short (cancelled, the target full, failed) says nothing of the pages it did not try:
// the holds in its range stay, with their counts, but for its own busy ranges.
TEST(StuckMoves, ARunCutShortSettlesOnlyItsBusyRanges) {
  StuckMoves stuck;
  stuck.onFinishedPlan(std::vector{demotion(0, 1024, {{kBase + 100 * kPage, kPage}, {kBase + 600 * kPage, kPage}})});
  FinishedRun cut = demotion(0, 1024, {{kBase + 600 * kPage, kPage}});
  cut.tried = false;
  stuck.onFinishedPlan(std::vector{cut});
  const auto ranges = stuck.nextPlan();
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[0].start, kBase + 100 * kPage) << "a hold the run did not try was dropped";
  EXPECT_EQ(ranges[1].start, kBase + 600 * kPage);
  // The second is a failed retry: held twice as long as the first.
  int first = -1, second = -1;
  for (int n = 0; n < 100 && (first < 0 || second < 0); ++n) {
    const auto r = stuck.nextPlan();
    if (first < 0 && r[0].retry) first = n;
    if (second < 0 && r[1].retry) second = n;
  }
  EXPECT_EQ(first, static_cast<int>(StuckMoves::kFirstHoldPlans) - 1);
  EXPECT_EQ(second, static_cast<int>(2 * StuckMoves::kFirstHoldPlans) - 1);
}

// Plans made while the engine is busy (which the loop drops) do not wear the holds down.
TEST(StuckMoves, OnlyPlansThatCanGoOutCountDown) {
  StuckMoves stuck;
  stuck.onFinishedPlan(std::vector{demotion(0, 64, {{kBase, kPage}})});
  for (int n = 0; n < 100; ++n) EXPECT_FALSE(stuck.nextPlan(false).front().retry);
  EXPECT_EQ(plansHeld(stuck), static_cast<int>(StuckMoves::kFirstHoldPlans));
}

TEST(StuckMoves, AFailedPromotionIsHeldOnTheSlowTier) {
  StuckMoves stuck;
  FinishedRun r = demotion(0, 64, {{kBase, kPage}});
  r.demotion = false;
  r.targetNode = 0;
  stuck.onFinishedPlan(std::vector{r});
  const auto ranges = stuck.nextPlan();
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_FALSE(ranges[0].onFast);
  EXPECT_EQ(stuck.totals().slowPages, 1u);
  EXPECT_EQ(stuck.totals().fastPages, 0u);
}

// Busy pages a run reports outside its own range (a whole 2 MiB folio) are held only inside it.
TEST(StuckMoves, BusyPagesAreHeldOnlyInsideTheirRun) {
  StuckMoves stuck;
  stuck.onFinishedPlan(std::vector{demotion(16, 16, {{kBase, 512 * kPage}})});
  const auto ranges = stuck.nextPlan();
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_EQ(ranges[0].start, kBase + 16 * kPage);
  EXPECT_EQ(ranges[0].length, 16 * kPage);
}

TEST(StuckMoves, AnExitedProcessOrARemovedRegionDropsItsHolds) {
  StuckMoves stuck;
  stuck.onFinishedPlan(std::vector{demotion(0, 64, {{kBase, kPage}, {kBase + 32 * kPage, 4 * kPage}}, 10),
                                   demotion(0, 64, {{kBase, kPage}}, 11)});
  EXPECT_EQ(stuck.totals().ranges, 3u);
  stuck.removeRange(10, kBase + 30 * kPage, 4 * kPage);  // takes two of the four pages
  auto ranges = stuck.nextPlan();
  ASSERT_EQ(ranges.size(), 3u);
  EXPECT_EQ(ranges[1].tgid, 10);
  EXPECT_EQ(ranges[1].start, kBase + 34 * kPage);
  EXPECT_EQ(ranges[1].length, 2 * kPage);
  stuck.removeProcess(10);
  ranges = stuck.nextPlan();
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_EQ(ranges[0].tgid, 11);
}

// Bounded: past kMaxRanges nothing more is held, and that is counted.
TEST(StuckMoves, HoldsAreBounded) {
  StuckMoves stuck;
  std::vector<FinishedRun> runs;
  for (uint64_t i = 0; i < StuckMoves::kMaxRanges + 10; ++i) runs.push_back(demotion(2 * i, 2, {{kBase + 2 * i * kPage, kPage}}));
  stuck.onFinishedPlan(runs);
  EXPECT_EQ(stuck.totals().ranges, StuckMoves::kMaxRanges);
  EXPECT_EQ(stuck.totals().notHeld, 10u);
  EXPECT_EQ(stuck.nextPlan().size(), StuckMoves::kMaxRanges);
}

}  // namespace
