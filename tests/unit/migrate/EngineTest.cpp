// The migration engine against a simulated kernel (FakePageMover) and fake clock, free memory,
// huge-page probe and in-process mover.
#include "migrate/Engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "fakes/migrate/FakeMigrationDeps.h"
#include "fakes/migrate/FakePageMover.h"

namespace {

using namespace std::chrono_literals;
using tt::MigrationPlan;
using tt::MoveRequest;
using tt::fakes::FakeClock;
using tt::fakes::FakeFreeMemory;
using tt::fakes::FakeHugePageProbe;
using tt::fakes::FakeInProcessMover;
using tt::fakes::FakePageMover;
using tt::migrate::Direction;
using tt::migrate::Engine;
using tt::migrate::MigrationConfig;
using tt::migrate::PlanReport;

constexpr uint64_t kPage = 4096;
constexpr uint64_t kHuge = 2ULL << 20;
constexpr uint64_t kMiB = 1ULL << 20;
constexpr uint64_t kBase = 0x10000000;  // 2 MiB aligned
constexpr int kFast = 0, kSlow = 1;

tt::topology::Topology twoTiers() {
  tt::topology::Topology t;
  tt::topology::NumaNode dram;
  dram.id = kFast;
  dram.cpus = {0, 1};
  dram.memory = {1024 * kMiB, 512 * kMiB};
  dram.tier = tt::topology::Tier::Fast;
  tt::topology::NumaNode pmem;
  pmem.id = kSlow;
  pmem.memory = {4096 * kMiB, 4096 * kMiB};
  pmem.tier = tt::topology::Tier::Slow;
  t.nodes = {dram, pmem};
  return t;
}

// Rates and guard out of the way unless a test sets them.
MigrationConfig unlimited() {
  MigrationConfig c;
  c.set_workers(1);
  c.set_batch_pages(4096);
  c.set_promote_mbps(0);
  c.set_demote_mbps(0);
  c.set_fast_node_min_free_mib(0);
  c.set_fast_node_min_free_percent(0);
  c.set_busy_backoff_ms(2);
  return c;
}

class MigrateEngine : public ::testing::Test {
 protected:
  MigrateEngine() : free_(mover_), inProcess_(mover_) {
    free_.setNode(kFast, 64ULL << 30, 0);
    free_.setNode(kSlow, 64ULL << 30, 0);
  }
  std::unique_ptr<Engine> make(const MigrationConfig& config, bool withInProcess = false) {
    return std::make_unique<Engine>(topology_, mover_, free_, config,
                                    tt::migrate::EngineHooks{&clock_, &probe_, withInProcess ? &inProcess_ : nullptr});
  }
  static MigrationPlan plan(uint64_t generation, std::vector<MoveRequest> moves) { return {generation, std::move(moves)}; }
  size_t movedPagesInCalls(pid_t pid) const {
    size_t n = 0;
    for (const auto& c : mover_.calls()) n += c.pid == pid ? c.pages.size() : 0;
    return n;
  }

  tt::topology::Topology topology_ = twoTiers();
  FakePageMover mover_;
  FakeClock clock_;
  FakeFreeMemory free_;
  FakeHugePageProbe probe_;
  FakeInProcessMover inProcess_;
};

TEST_F(MigrateEngine, MovesEveryPageInBatchesOfBatchPages) {
  mover_.map(100, kBase, 10000 * kPage, kSlow);
  auto engine = make(unlimited());
  const PlanReport report = engine->execute(plan(1, {{100, kBase, 10000 * kPage, kFast, 0, 0}}));
  ASSERT_EQ(report.runs.size(), 1u);
  EXPECT_EQ(report.runs[0].outcome.moved, 10000u);
  EXPECT_EQ(report.runs[0].outcome.total(), 10000u);
  EXPECT_EQ(mover_.pagesOn(kFast), 10000u);
  const auto calls = mover_.calls();
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[0].pages.size() + calls[1].pages.size() + calls[2].pages.size(), 10000u);
  for (const auto& c : calls) EXPECT_LE(c.pages.size(), 4096u);
  const auto counters = engine->counters();
  EXPECT_EQ(counters.of(Direction::Promote).pages.moved, 10000u);
  EXPECT_EQ(counters.of(Direction::Promote).bytesMoved, 10000 * kPage);
  EXPECT_EQ(counters.of(Direction::Promote).basePagesMoved, 10000u);
  EXPECT_EQ(counters.of(Direction::Promote).moveCalls, 3u);
  EXPECT_EQ(counters.of(Direction::Demote).pages.moved, 0u);
}

TEST_F(MigrateEngine, ManySmallRequestsAreCoalescedIntoFewCalls) {
  mover_.map(100, kBase, 10000 * kPage, kSlow);
  std::vector<MoveRequest> moves;
  for (uint64_t i = 0; i < 1000; ++i) moves.push_back({100, kBase + i * 10 * kPage, 10 * kPage, kFast, 0, 0});
  auto engine = make(unlimited());
  const PlanReport report = engine->execute(plan(1, moves));
  EXPECT_EQ(report.runs.size(), 1u);
  EXPECT_EQ(report.total().moved, 10000u);
  EXPECT_EQ(mover_.calls().size(), 3u);  // ceil(10000 / 4096), not 1000
}

TEST_F(MigrateEngine, PagesAlreadyOnTheTargetAreLeftOutOfTheCalls) {
  mover_.map(100, kBase, 8192 * kPage, kSlow);
  for (uint64_t i = 0; i < 8192; i += 128) mover_.map(100, kBase + i * kPage, 64 * kPage, kFast);  // half already there
  auto engine = make(unlimited());
  const PlanReport report = engine->execute(plan(1, {{100, kBase, 8192 * kPage, kFast, 0, 0}}));
  EXPECT_EQ(report.total().alreadyThere, 4096u);
  EXPECT_EQ(report.total().moved, 4096u);
  const auto calls = mover_.calls();
  // The 4096 pages to move fill exactly one full batch: the query keeps batches whole.
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].pages.size(), 4096u);
  for (uint64_t a : calls[0].pages) EXPECT_EQ(((a - kBase) / kPage) % 128 >= 64, true) << std::hex << a;
}

TEST_F(MigrateEngine, WithoutTheQueryStatusesStillCountAlreadyThere) {
  mover_.map(100, kBase, 1024 * kPage, kFast);
  mover_.map(100, kBase + 1024 * kPage, 1024 * kPage, kSlow);
  auto config = unlimited();
  config.set_query_before_move(false);
  auto engine = make(config);
  const PlanReport report = engine->execute(plan(1, {{100, kBase, 2048 * kPage, kFast, 0, 0}}));
  // move_pages reports pages already there with the target node: counted as moved (indistinguishable).
  EXPECT_EQ(report.total().moved, 2048u);
  EXPECT_EQ(mover_.queryCalls(), 0u);
  EXPECT_EQ(movedPagesInCalls(100), 2048u);
}

TEST_F(MigrateEngine, HugePagesMoveAsOneEntryPerFolio) {
  mover_.map(100, kBase, 4 * kMiB, kFast);                  // 1024 base pages
  mover_.map(100, kBase + 4 * kMiB, 8 * kMiB, kFast, true);  // 4 THPs
  probe_.add(100, {kBase + 4 * kMiB, 8 * kMiB});
  auto config = unlimited();
  config.set_batch_pages(1024);  // two huge pages per call
  auto engine = make(config);
  const PlanReport report = engine->execute(plan(1, {{100, kBase, 12 * kMiB, kSlow, 0, 0}}));
  ASSERT_EQ(report.runs.size(), 1u);
  EXPECT_EQ(report.runs[0].hugeRanges, (std::vector<tt::sys::HugeRange>{{kBase + 4 * kMiB, 8 * kMiB}}));
  EXPECT_EQ(report.total().moved, 3072u);
  EXPECT_EQ(report.total().movedHugeFolios, 4u);
  size_t hugeEntries = 0;
  for (const auto& c : mover_.calls())
    for (uint64_t a : c.pages)
      if (a >= kBase + 4 * kMiB) {
        ++hugeEntries;
        EXPECT_EQ(a % kHuge, 0u) << "a huge page was addressed by a non-head page";
      }
  EXPECT_EQ(hugeEntries, 4u);
  EXPECT_EQ(mover_.calls().size(), 3u);  // 1024 base pages, then 2 x 2 huge pages
  const auto counters = engine->counters().of(Direction::Demote);
  EXPECT_EQ(counters.hugePagesMoved, 4u);
  EXPECT_EQ(counters.basePagesMoved, 1024u);
  EXPECT_EQ(counters.bytesMoved, 12 * kMiB);
}

TEST_F(MigrateEngine, HugeRangesAreProbedOncePerProcessAndOnlyWholeFoliosGoAsHuge) {
  mover_.map(100, kBase, 8 * kMiB, kFast, true);
  probe_.add(100, {kBase, 8 * kMiB});
  auto engine = make(unlimited());
  // Two runs (different priorities) of one process; the second starts 1 MiB into a THP.
  const PlanReport report = engine->execute(plan(1, {{100, kBase, 2 * kMiB, kSlow, 1, 0},
                                                     {100, kBase + 3 * kMiB, 5 * kMiB, kSlow, 0, 0}}));
  EXPECT_EQ(probe_.calls(), 1u);
  ASSERT_EQ(report.runs.size(), 2u);
  EXPECT_EQ(report.runs[0].hugeRanges, (std::vector<tt::sys::HugeRange>{{kBase, 2 * kMiB}}));
  EXPECT_EQ(report.runs[1].hugeRanges, (std::vector<tt::sys::HugeRange>{{kBase + 4 * kMiB, 4 * kMiB}}));
  // The partly covered THP [2, 4) MiB went as 4 KiB entries; the kernel moved its folio whole on
  // the first, and the rest were already there.
  EXPECT_EQ(report.runs[1].outcome.total(), 5 * kMiB / kPage);
  EXPECT_EQ(report.total().movedHugeFolios, 3u);
  // [2, 3) MiB was in no run, but its folio moved whole with [3, 4) MiB (as the kernel's would).
  EXPECT_EQ(mover_.pagesOn(kSlow), 8 * kMiB / kPage);
}

TEST_F(MigrateEngine, HugeDetectionFailureFallsBackToBasePages) {
  mover_.map(100, kBase, 4 * kMiB, kFast, true);
  probe_.failWith(EACCES);
  auto engine = make(unlimited());
  const PlanReport report = engine->execute(plan(1, {{100, kBase, 4 * kMiB, kSlow, 0, 0}}));
  EXPECT_EQ(report.total().moved, 1024u);
  EXPECT_TRUE(report.runs[0].hugeRanges.empty());
  ASSERT_FALSE(report.errors.empty());
  EXPECT_NE(report.errors[0].find("huge-page detection"), std::string::npos);
}

// The engine's busy time (what the service turns into the policy's migration rates) is the
// time of its move calls, not of the backoff between busy-page retries.
TEST_F(MigrateEngine, BusyTimeCountsMoveCallsButNotBackoff) {
  mover_.map(100, kBase, 8192 * kPage, kSlow);
  mover_.setBusy(100, kBase + 10 * kPage, 1);  // one retry after a 2 ms backoff
  mover_.onMove([this](size_t) { clock_.advance(5ms); });  // each move_pages call takes 5 ms
  auto engine = make(unlimited());
  const PlanReport report = engine->execute(plan(1, {{100, kBase, 8192 * kPage, kFast, 0, 0}}));
  EXPECT_EQ(report.total().moved, 8192u);
  const auto calls = mover_.calls().size();  // two batches and one retry
  ASSERT_EQ(calls, 3u);
  EXPECT_EQ(clock_.slept(), 2ms);
  const auto c = engine->counters().of(Direction::Promote);
  EXPECT_EQ(c.busyNs, static_cast<uint64_t>(std::chrono::nanoseconds(5ms).count()) * calls);
  EXPECT_EQ(c.busyBytes, 8192 * kPage);
  EXPECT_EQ(engine->counters().of(Direction::Demote).busyNs, 0u);
}

TEST_F(MigrateEngine, BusyPagesAreRetriedWithBackoffThenReported) {
  mover_.map(100, kBase, 512 * kPage, kSlow);
  mover_.setBusy(100, kBase + 10 * kPage, 2);   // busy twice, then movable
  mover_.setBusy(100, kBase + 20 * kPage, 100);  // busy for good
  auto engine = make(unlimited());  // 3 retries, 2 ms doubling
  const PlanReport report = engine->execute(plan(1, {{100, kBase, 512 * kPage, kFast, 0, 0}}));
  EXPECT_EQ(report.total().moved, 511u);
  EXPECT_EQ(report.total().busy, 1u);
  EXPECT_EQ(mover_.nodeOf(100, kBase + 10 * kPage), kFast);
  EXPECT_EQ(mover_.nodeOf(100, kBase + 20 * kPage), kSlow);
  EXPECT_EQ(engine->counters().of(Direction::Promote).busyRetries, 3u);
  EXPECT_EQ(clock_.slept(), 2ms + 4ms + 8ms);
  // Retries resend only the busy pages.
  const auto calls = mover_.calls();
  ASSERT_EQ(calls.size(), 4u);
  EXPECT_EQ(calls[1].pages.size(), 2u);
  EXPECT_EQ(calls[3].pages.size(), 1u);
}

// The report says where the busy pages are (the service holds them back from later plans), the
// huge ones as whole folios.
TEST_F(MigrateEngine, TheReportSaysWhereTheBusyPagesAre) {
  mover_.map(100, kBase, 512 * kPage, kFast);
  mover_.map(100, kBase + 4 * kMiB, 4 * kMiB, kFast, true);  // 2 THPs
  for (uint64_t p : {20, 21, 22, 300}) mover_.setPinned(100, kBase + p * kPage, 1000);
  mover_.setBusy(100, kBase + 40 * kPage, 1);  // busy once, then moves: not reported
  mover_.setBusy(100, kBase + 4 * kMiB + 2 * kMiB, 1000);  // the second THP's head
  probe_.add(100, {kBase + 4 * kMiB, 4 * kMiB});
  auto engine = make(unlimited());
  const PlanReport report =
      engine->execute(plan(1, {{100, kBase, 512 * kPage, kSlow, 0, 0}, {100, kBase + 4 * kMiB, 4 * kMiB, kSlow, 0, 0}}));
  ASSERT_EQ(report.runs.size(), 2u);
  EXPECT_EQ(report.runs[0].outcome.busy, 4u);
  EXPECT_EQ(report.runs[0].busy,
            (std::vector<tt::AddressRange>{{kBase + 20 * kPage, 3 * kPage}, {kBase + 300 * kPage, kPage}}));
  EXPECT_EQ(report.runs[1].outcome.busy, 512u);
  EXPECT_EQ(report.runs[1].busy, (std::vector<tt::AddressRange>{{kBase + 6 * kMiB, 2 * kMiB}}));
  EXPECT_EQ(mover_.nodeOf(100, kBase + 40 * kPage), kSlow);
}

// Through the client's mbind the same: pages it could not move are named.
TEST_F(MigrateEngine, TheReportSaysWhereAnMbindLeftPages) {
  mover_.map(100, kBase, 256 * kPage, kFast);
  mover_.setPinned(100, kBase + 9 * kPage, 1000);
  inProcess_.accept(100);
  auto engine = make(unlimited(), true);
  const PlanReport report = engine->execute(plan(1, {{100, kBase, 256 * kPage, kSlow, 0, 7}}));
  ASSERT_EQ(report.runs.size(), 1u);
  EXPECT_TRUE(report.runs[0].viaMbind);
  EXPECT_EQ(report.runs[0].outcome.busy, 1u);
  EXPECT_EQ(report.runs[0].busy, (std::vector<tt::AddressRange>{{kBase + 9 * kPage, kPage}}));
}

// Busy pages are kept as at most kMaxBusyRanges ranges: beyond that the closest are joined, so
// what is held back takes in as few moved pages as it can.
TEST(BusyPages, AreMergedAndBoundedByJoiningTheSmallestGaps) {
  constexpr size_t kMax = tt::migrate::RunReport::kMaxBusyRanges;
  std::vector<tt::AddressRange> ranges;
  std::vector<void*> pages;
  // kMax + 2 single pages: every 10th page, except two pairs only 2 pages apart.
  for (uint64_t i = 0; i < kMax + 2; ++i) pages.push_back(reinterpret_cast<void*>(kBase + i * 10 * kPage));
  pages.push_back(reinterpret_cast<void*>(kBase + 52 * kPage));
  pages.push_back(reinterpret_cast<void*>(kBase + 202 * kPage));
  std::reverse(pages.begin(), pages.end());  // any order
  tt::migrate::addBusyPages(ranges, pages, kPage);
  ASSERT_EQ(ranges.size(), kMax);
  // Four gaps must go: the two of 1 page (50 to 52, 200 to 202), then the two of 7 (52 to 60,
  // 202 to 210); the 9-page gaps between the others stay.
  EXPECT_EQ(ranges[4], (tt::AddressRange{kBase + 40 * kPage, kPage}));
  EXPECT_EQ(ranges[5], (tt::AddressRange{kBase + 50 * kPage, 11 * kPage})) << "50, 52 and 60 joined";
  EXPECT_EQ(ranges[6], (tt::AddressRange{kBase + 70 * kPage, kPage}));
  EXPECT_EQ(ranges[19], (tt::AddressRange{kBase + 200 * kPage, 11 * kPage})) << "200, 202 and 210 joined";
  uint64_t covered = 0;
  for (size_t i = 0; i < ranges.size(); ++i) {
    covered += ranges[i].length;
    if (i > 0) {
      EXPECT_GT(ranges[i].start, ranges[i - 1].start + ranges[i - 1].length) << "sorted, apart";
    }
  }
  EXPECT_EQ(covered, (kMax + 4 + 1 + 7 + 1 + 7) * kPage) << "only the joined gaps were added";
  // Adjacent and repeated pages merge without joining anything.
  std::vector<tt::AddressRange> adjacent;
  std::vector<void*> run = {reinterpret_cast<void*>(kBase + kPage), reinterpret_cast<void*>(kBase),
                            reinterpret_cast<void*>(kBase + kPage)};
  tt::migrate::addBusyPages(adjacent, run, kPage);
  EXPECT_EQ(adjacent, (std::vector<tt::AddressRange>{{kBase, 2 * kPage}}));
}

TEST_F(MigrateEngine, PinnedPagesWithUnwrittenStatusesAreLookedUpNotMiscounted) {
  mover_.map(100, kBase, 512 * kPage, kSlow);
  mover_.setPinned(100, kBase + 7 * kPage, 1000);
  auto config = unlimited();
  config.set_busy_retries(1);
  auto engine = make(config);
  const PlanReport report = engine->execute(plan(1, {{100, kBase, 512 * kPage, kFast, 0, 0}}));
  EXPECT_EQ(report.total().moved, 511u);
  EXPECT_EQ(report.total().busy, 1u);
  EXPECT_EQ(report.total().failed, 0u);
}

TEST_F(MigrateEngine, UnmappedPagesAreCountedAndAreNotErrors) {
  mover_.map(100, kBase, 100 * kPage, kSlow);
  mover_.map(100, kBase + 200 * kPage, 100 * kPage, kSlow);
  for (bool query : {true, false}) {
    auto config = unlimited();
    config.set_query_before_move(query);
    mover_.map(100, kBase, 100 * kPage, kSlow);
    mover_.map(100, kBase + 200 * kPage, 100 * kPage, kSlow);
    auto engine = make(config);
    const PlanReport report = engine->execute(plan(1, {{100, kBase, 300 * kPage, kFast, 0, 0}}));
    EXPECT_EQ(report.total().moved, 200u) << "query " << query;
    EXPECT_EQ(report.total().notMapped, 100u) << "query " << query;
    EXPECT_TRUE(report.errors.empty()) << report.errors[0];
  }
}

TEST_F(MigrateEngine, NoMemoryOnTargetStopsMovesToThatNodeForThePlan) {
  mover_.map(100, kBase, 5120 * kPage, kSlow);
  mover_.map(200, kBase, 512 * kPage, kFast);
  mover_.setNodeCapacity(kFast, 1000 + 512);
  auto config = unlimited();
  config.set_batch_pages(512);
  auto engine = make(config);
  const PlanReport report = engine->execute(plan(1, {{100, kBase, 5120 * kPage, kFast, 1, 0},
                                                     {200, kBase, 512 * kPage, kSlow, 0, 0}}));
  const auto& promote = report.runs[0].outcome;
  EXPECT_EQ(promote.moved, 1000u);
  EXPECT_GE(promote.noMemory, 1u);
  EXPECT_EQ(promote.moved + promote.noMemory + promote.skippedTargetFull, 5120u);
  EXPECT_LT(mover_.calls().size(), 10u) << "kept calling into a full node";
  // Demotion to the other node is unaffected.
  EXPECT_EQ(report.runs[1].outcome.moved, 512u);
}

TEST_F(MigrateEngine, PermissionDeniedNamesWhatIsMissing) {
  mover_.map(100, kBase, 64 * kPage, kSlow);
  mover_.failCallsWith(100, EPERM);
  auto config = unlimited();
  config.set_query_before_move(false);
  auto engine = make(config);
  const PlanReport report = engine->execute(plan(1, {{100, kBase, 64 * kPage, kFast, 0, 0}}));
  EXPECT_EQ(report.total().permissionDenied, 64u);
  ASSERT_EQ(report.errors.size(), 1u);
  EXPECT_NE(report.errors[0].find("ptrace"), std::string::npos) << report.errors[0];
}

TEST_F(MigrateEngine, SharedPagesNeedMoveAllAndSaySo) {
  mover_.map(100, kBase, 64 * kPage, kSlow);
  mover_.setShared(100, kBase + 3 * kPage);
  {
    auto engine = make(unlimited());
    const PlanReport report = engine->execute(plan(1, {{100, kBase, 64 * kPage, kFast, 0, 0}}));
    EXPECT_EQ(report.total().permissionDenied, 1u);
    EXPECT_EQ(report.total().moved, 63u);
    ASSERT_FALSE(report.errors.empty());
    EXPECT_NE(report.errors[0].find("CAP_SYS_NICE"), std::string::npos) << report.errors[0];
  }
  auto config = unlimited();
  config.set_move_shared_pages(true);
  auto engine = make(config);
  const PlanReport report = engine->execute(plan(2, {{100, kBase, 64 * kPage, kFast, 0, 0}}));
  EXPECT_EQ(report.total().moved, 1u);
  EXPECT_TRUE(mover_.calls().back().moveAll);
}

TEST_F(MigrateEngine, ProcessExitMidPlanStopsOnlyItsMoves) {
  mover_.map(100, kBase, 16384 * kPage, kSlow);
  mover_.map(200, kBase, 4096 * kPage, kSlow);
  auto engine = make(unlimited());
  // The process exits just before the third move_pages call on it: that call fails with ESRCH.
  mover_.onMove([&](size_t call) {
    if (call == 2) {
      mover_.exitNow(100);
    }
  });
  const PlanReport report = engine->execute(plan(1, {{100, kBase, 16384 * kPage, kFast, 1, 0},
                                                     {200, kBase, 4096 * kPage, kFast, 0, 0}}));
  const auto& gone = report.runs[0].outcome;
  EXPECT_EQ(gone.moved, 8192u);
  EXPECT_EQ(gone.cancelled, 8192u);
  EXPECT_EQ(gone.failed, 0u);
  EXPECT_EQ(report.runs[1].outcome.moved, 4096u);
  EXPECT_EQ(engine->counters().processesGone, 1u);
  EXPECT_FALSE(report.superseded);
}

// Between exit and reaping, move_pages fails with EINVAL (the task has no mm any more).
TEST_F(MigrateEngine, ExitingProcessWithoutAddressSpaceCountsAsGoneNotFailed) {
  mover_.map(100, kBase, 1024 * kPage, kSlow);
  mover_.failCallsWith(100, EINVAL);
  auto engine = make(unlimited());
  const PlanReport report = engine->execute(plan(1, {{100, kBase, 1024 * kPage, kFast, 0, 0}}));
  EXPECT_EQ(report.total().cancelled, 1024u);
  EXPECT_EQ(report.total().failed, 0u);
  EXPECT_EQ(engine->counters().processesGone, 1u);
}

TEST_F(MigrateEngine, CapacityGuardKeepsTheFastNodeAboveItsWatermark) {
  mover_.map(100, kBase, 51200 * kPage, kSlow);  // 200 MiB to promote
  mover_.map(200, kBase, 1024 * kPage, kFast);   // and 4 MiB to demote
  free_.setNode(kFast, 1024 * kMiB, 1024 * kMiB - 300 * kMiB - 4 * kMiB);  // 300 MiB free before the plan
  auto config = unlimited();
  config.set_fast_node_min_free_mib(256);
  auto engine = make(config);
  const PlanReport report = engine->execute(plan(1, {{100, kBase, 51200 * kPage, kFast, 1, 0},
                                                     {200, kBase, 1024 * kPage, kSlow, 0, 0}}));
  const auto& promote = report.runs[0].outcome;
  EXPECT_EQ(promote.moved, 8192u);  // two 16 MiB batches fit above 256 MiB, a third would not
  EXPECT_EQ(promote.skippedTargetFull, 51200u - 8192u);
  EXPECT_GE(free_.lowestFree(kFast), 256 * kMiB);
  EXPECT_EQ(engine->counters().guardTrips, 1u);
  EXPECT_EQ(report.runs[1].outcome.moved, 1024u);  // demotion is not held by the fast node's guard
  ASSERT_FALSE(report.errors.empty());
  EXPECT_NE(report.errors[0].find("capacity guard"), std::string::npos);
}

// A batch the kernel has moved is counted in the node's free memory and in the plan's in-flight
// bytes until its worker returns; a guard read in that window stopped promotion a batch early (CI
// caught it, ~5% of runs under load). Here the window is held open: the first call is slow to
// return, and the second batch's guard read comes only once the first call's pages are on the node.
TEST_F(MigrateEngine, CapacityGuardDoesNotCountABatchTwiceWhileItsWorkerReturns) {
  mover_.map(100, kBase, 51200 * kPage, kSlow);
  free_.setNode(kFast, 1024 * kMiB, 1024 * kMiB - 300 * kMiB);  // 300 MiB free
  std::atomic<bool> firstMoved{false};
  mover_.afterMove([&](size_t call) {
    if (call != 0) return;
    firstMoved = true;
    std::this_thread::sleep_for(50ms);
  });
  free_.onRead([&](size_t read) {
    if (read != 1) return;  // read 0: the first batch's guard; read 1: the second's
    for (int i = 0; i < 5000 && !firstMoved; ++i) std::this_thread::sleep_for(1ms);
  });
  auto config = unlimited();
  config.set_fast_node_min_free_mib(256);
  auto engine = make(config);
  const PlanReport report = engine->execute(plan(1, {{100, kBase, 51200 * kPage, kFast, 1, 0}}));
  ASSERT_TRUE(firstMoved);
  EXPECT_EQ(report.runs[0].outcome.moved, 8192u) << "284 MiB free after the first batch: the second fits";
  EXPECT_EQ(report.runs[0].outcome.skippedTargetFull, 51200u - 8192u);
  EXPECT_GE(free_.lowestFree(kFast), 256 * kMiB);
  EXPECT_EQ(engine->counters().guardTrips, 1u);
}

// The planner orders a plan's demotions first, to make room for its promotions. Queued to the
// workers, the demotions free the fast node's memory only when they land: the guard lets them
// land before it refuses, instead of marking the node full for the rest of the plan. Here the
// demotion's call is held until the promotion's guard has read the node once.
TEST_F(MigrateEngine, DemotionsQueuedAheadMakeRoomForThePlansPromotions) {
  mover_.map(100, kBase, 4096 * kPage, kFast);  // 16 MiB cold, to demote
  mover_.map(200, kBase, 4096 * kPage, kSlow);  // 16 MiB hot, to promote
  free_.setNode(kFast, 1024 * kMiB, 1024 * kMiB - 16 * kMiB - 256 * kMiB - 4 * kMiB);  // 4 MiB above the floor
  std::atomic<bool> guardRead{false};
  free_.onRead([&](size_t) { guardRead = true; });
  mover_.onMove([&](size_t call) {
    if (call != 0) return;
    for (int i = 0; i < 5000 && !guardRead; ++i) std::this_thread::sleep_for(1ms);
  });
  auto config = unlimited();
  config.set_fast_node_min_free_mib(256);
  auto engine = make(config);
  const PlanReport report = engine->execute(plan(1, {{100, kBase, 4096 * kPage, kSlow, 1500, 0, true},
                                                     {200, kBase, 4096 * kPage, kFast, 500, 0, true}}));
  ASSERT_TRUE(guardRead);
  ASSERT_EQ(report.runs.size(), 2u);
  EXPECT_EQ(report.runs[0].outcome.moved, 4096u);  // the demotion
  EXPECT_EQ(report.runs[1].outcome.moved, 4096u) << "the promotion was refused before the demotion landed";
  EXPECT_EQ(report.runs[1].outcome.skippedTargetFull, 0u);
  EXPECT_GE(free_.lowestFree(kFast), 256 * kMiB);
  EXPECT_EQ(engine->counters().guardTrips, 0u);
}

TEST_F(MigrateEngine, UnreadableFreeMemoryStopsPromotionNotDemotion) {
  mover_.map(100, kBase, 1024 * kPage, kSlow);
  mover_.map(200, kBase, 1024 * kPage, kFast);
  free_.failReads(EIO);
  auto engine = make(unlimited());
  const PlanReport report = engine->execute(plan(1, {{100, kBase, 1024 * kPage, kFast, 1, 0},
                                                     {200, kBase, 1024 * kPage, kSlow, 0, 0}}));
  EXPECT_EQ(report.runs[0].outcome.moved, 0u);
  EXPECT_EQ(report.runs[0].outcome.skippedTargetFull, 1024u);
  EXPECT_EQ(report.runs[1].outcome.moved, 1024u);
}

TEST_F(MigrateEngine, RateLimitPacesEachDirectionAndRetunesLive) {
  mover_.map(100, kBase, 65536 * kPage, kSlow);  // 256 MiB
  auto config = unlimited();
  config.set_promote_mbps(100);  // 10^8 B/s; burst = max(10 MB, one 16 MiB batch)
  auto engine = make(config);
  auto t0 = clock_.now();
  engine->execute(plan(1, {{100, kBase, 65536 * kPage, kFast, 0, 0}}));
  const double first = std::chrono::duration<double>(clock_.now() - t0).count();
  EXPECT_NEAR(first, double(256 * kMiB - 16 * kMiB) / 1e8, 0.01);
  // Demotion is unlimited: no time passes.
  t0 = clock_.now();
  engine->execute(plan(2, {{100, kBase, 65536 * kPage, kSlow, 0, 0}}));
  EXPECT_EQ(clock_.now(), t0);
  // Doubling the promotion rate live halves the wait (the bucket is full again after the pause).
  config.set_promote_mbps(200);
  ASSERT_TRUE(engine->applyConfig(config));
  clock_.advance(10s);
  t0 = clock_.now();
  engine->execute(plan(3, {{100, kBase, 65536 * kPage, kFast, 0, 0}}));
  EXPECT_NEAR(std::chrono::duration<double>(clock_.now() - t0).count(), double(256 * kMiB - 20 * kMiB) / 2e8, 0.01);
}

TEST_F(MigrateEngine, NewerPlanSupersedesTheInFlightOne) {
  mover_.map(100, kBase, 65536 * kPage, kSlow);
  mover_.map(200, kBase, 1024 * kPage, kSlow);
  auto engine = make(unlimited());
  std::vector<PlanReport> reports;
  std::mutex m;
  engine->setReportCallback([&](const PlanReport& r) {
    std::lock_guard l(m);
    reports.push_back(r);
  });
  mover_.onMove([&](size_t call) {
    if (call == 0) {
      EXPECT_TRUE(engine->submit(plan(2, {{200, kBase, 1024 * kPage, kFast, 0, 0}})));
    }
  });
  ASSERT_TRUE(engine->submit(plan(1, {{100, kBase, 65536 * kPage, kFast, 0, 0}})));
  engine->waitIdle();
  std::lock_guard l(m);
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].generation, 1u);
  EXPECT_TRUE(reports[0].superseded);
  EXPECT_GT(reports[0].total().cancelled, 0u);
  EXPECT_EQ(reports[0].total().total(), 65536u);  // every page accounted for
  EXPECT_LE(reports[0].total().moved, 2 * 4096u);  // at most the batches already handed out
  EXPECT_EQ(reports[1].generation, 2u);
  EXPECT_EQ(reports[1].total().moved, 1024u);
  EXPECT_EQ(engine->counters().plansSuperseded, 1u);
}

// The idle callback comes once a plan has finished and none waits (idle() holds then): not
// between a superseded plan and the plan queued behind it. Once removed it is not called.
TEST_F(MigrateEngine, TellsItsIdleCallbackWhenNoPlanRunsOrWaits) {
  mover_.map(100, kBase, 65536 * kPage, kSlow);
  mover_.map(200, kBase, 1024 * kPage, kSlow);
  auto engine = make(unlimited());
  std::mutex m;
  std::condition_variable cv;
  int calls = 0;
  bool idleInEveryCall = true;
  engine->setIdleCallback([&] {
    const bool idle = engine->idle();
    std::lock_guard l(m);
    ++calls;
    idleInEveryCall = idleInEveryCall && idle;
    cv.notify_all();
  });
  mover_.onMove([&](size_t call) {
    if (call == 0) {
      EXPECT_TRUE(engine->submit(plan(2, {{200, kBase, 1024 * kPage, kFast, 0, 0}})));
    }
  });
  ASSERT_TRUE(engine->submit(plan(1, {{100, kBase, 65536 * kPage, kFast, 0, 0}})));
  {
    std::unique_lock l(m);
    ASSERT_TRUE(cv.wait_for(l, 10s, [&] { return calls > 0; })) << "no idle callback after the plans";
  }
  engine->setIdleCallback({});
  ASSERT_TRUE(engine->submit(plan(3, {{200, kBase, 1024 * kPage, kSlow, 0, 0}})));
  engine->waitIdle();
  engine->shutdown();  // joins the coordinator: a callback it would still make has been made
  std::lock_guard l(m);
  EXPECT_EQ(calls, 1);  // after plan 2 only: plan 1 ended with plan 2 queued, plan 3 after the removal
  EXPECT_TRUE(idleInEveryCall);
  EXPECT_EQ(engine->counters().plansSuperseded, 1u);
}

TEST_F(MigrateEngine, IsIdleOnlyWhenNoPlanRunsOrWaits) {
  mover_.map(100, kBase, 8192 * kPage, kSlow);
  auto engine = make(unlimited());
  EXPECT_TRUE(engine->idle());
  std::atomic<int> busyInCalls{0};
  mover_.onMove([&](size_t) {
    if (!engine->idle()) ++busyInCalls;
  });
  ASSERT_TRUE(engine->submit(plan(1, {{100, kBase, 8192 * kPage, kFast, 0, 0}})));
  engine->waitIdle();
  EXPECT_EQ(busyInCalls.load(), 2);  // both batches ran while the plan counted as in flight
  EXPECT_TRUE(engine->idle());
}

TEST_F(MigrateEngine, StaleGenerationIsRejected) {
  auto engine = make(unlimited());
  ASSERT_TRUE(engine->submit(plan(5, {})));
  auto stale = engine->submit(plan(5, {}));
  ASSERT_FALSE(stale);
  EXPECT_NE(stale.error().message().find("not newer"), std::string::npos);
  engine->waitIdle();
  EXPECT_EQ(engine->counters().plansRejected, 1u);
}

TEST_F(MigrateEngine, CancelProcessStopsItsMovesInFlight) {
  mover_.map(100, kBase, 65536 * kPage, kSlow);
  mover_.map(200, kBase, 1024 * kPage, kSlow);
  auto engine = make(unlimited());
  mover_.onMove([&](size_t call) {
    if (call == 0) {
      engine->cancelProcess(100);
    }
  });
  const PlanReport report = engine->execute(plan(1, {{100, kBase, 65536 * kPage, kFast, 1, 0},
                                                     {200, kBase, 1024 * kPage, kFast, 0, 0}}));
  EXPECT_GT(report.runs[0].outcome.cancelled, 0u);
  EXPECT_EQ(report.runs[0].outcome.total(), 65536u);
  EXPECT_EQ(report.runs[1].outcome.moved, 1024u);
  EXPECT_EQ(engine->counters().processesGone, 1u);
}

// A plan the coordinator has taken from the queue but cannot run yet (execute() holds the engine)
// is neither queued nor running: a process cancelled then (it exited) must still have none of its
// moves applied when the plan runs, or a reused pid would get them.
TEST_F(MigrateEngine, CancelProcessReachesAPlanTakenButNotRunningYet) {
  mover_.map(100, kBase, 1024 * kPage, kSlow);
  mover_.map(200, kBase, 1024 * kPage, kSlow);
  auto engine = make(unlimited());
  std::atomic<bool> once{false};
  mover_.onMove([&](size_t) {
    if (once.exchange(true)) return;
    // execute()'s plan is in its first move: the submitted plan is taken by the coordinator,
    // which then waits for execute() to finish.
    ASSERT_TRUE(engine->submit(plan(2, {{200, kBase, 1024 * kPage, kFast, 0, 0}})));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    engine->cancelProcess(200);
  });
  const PlanReport first = engine->execute(plan(1, {{100, kBase, 1024 * kPage, kFast, 0, 0}}));
  EXPECT_EQ(first.runs[0].outcome.moved, 1024u);
  engine->waitIdle();
  for (const auto& call : mover_.calls())
    EXPECT_NE(call.pid, 200) << "a move of the cancelled process ran";
  EXPECT_EQ(mover_.nodeOf(200, kBase), kSlow);
  EXPECT_EQ(engine->counters().processesGone, 1u);
}

// The planner's moves are between tiers: on a machine with two DRAM nodes, a promotion to one
// leaves the pages already on the other where they are (and does not go through mbind, which
// would move them); a manual move (tensortierctl migrate) takes every page to its node.
TEST_F(MigrateEngine, MovesBetweenTiersLeavePagesOnAnotherNodeOfTheTargetsTier) {
  constexpr int kFast2 = 2;
  tt::topology::NumaNode dram2 = topology_.nodes[0];
  dram2.id = kFast2;
  topology_.nodes.push_back(dram2);
  free_.setNode(kFast2, 64ULL << 30, 0);
  mover_.map(100, kBase, 256 * kPage, kSlow);
  mover_.map(100, kBase, 128 * kPage, kFast2);  // the first half already in DRAM, on the other node
  mover_.map(200, kBase, 256 * kPage, kSlow);
  mover_.map(200, kBase, 128 * kPage, kFast2);
  inProcess_.accept(100);
  auto engine = make(unlimited(), true);
  MoveRequest tiers{100, kBase, 256 * kPage, kFast, 0, 7, true};
  MoveRequest manual{200, kBase, 256 * kPage, kFast, 0, 0, false};
  const PlanReport report = engine->execute(plan(1, {tiers, manual}));
  EXPECT_TRUE(inProcess_.requests().empty()) << "mbind would pull the other DRAM node's pages";
  for (const auto& run : report.runs) {
    if (run.tgid == 100) {
      EXPECT_EQ(run.outcome.moved, 128u);
      EXPECT_EQ(run.outcome.alreadyThere, 128u);
    } else {
      EXPECT_EQ(run.outcome.moved, 256u);
    }
  }
  EXPECT_EQ(mover_.nodeOf(100, kBase), kFast2);
  EXPECT_EQ(mover_.nodeOf(100, kBase + 200 * kPage), kFast);
  EXPECT_EQ(mover_.nodeOf(200, kBase), kFast);
}

TEST_F(MigrateEngine, RegisteredRegionsOfAcceptingClientsGoToTheInProcessMover) {
  mover_.map(100, kBase, 256 * kPage, kSlow);  // accepts mbind, region 7
  mover_.map(200, kBase, 256 * kPage, kSlow);  // does not accept
  mover_.map(300, kBase, 256 * kPage, kSlow);  // accepts, but the range is no registered region
  inProcess_.accept(100);
  inProcess_.accept(300);
  auto engine = make(unlimited(), true);
  const PlanReport report = engine->execute(plan(1, {{100, kBase, 256 * kPage, kFast, 0, 7},
                                                     {200, kBase, 256 * kPage, kFast, 0, 8},
                                                     {300, kBase, 256 * kPage, kFast, 0, 0}}));
  const auto requests = inProcess_.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].tgid, 100);
  EXPECT_EQ(requests[0].regionId, 7u);
  EXPECT_EQ(requests[0].start, kBase);
  EXPECT_EQ(requests[0].length, 256 * kPage);
  EXPECT_EQ(requests[0].node, kFast);
  EXPECT_EQ(movedPagesInCalls(100), 0u);
  EXPECT_EQ(movedPagesInCalls(200), 256u);
  EXPECT_EQ(movedPagesInCalls(300), 256u);
  for (const auto& run : report.runs) {
    EXPECT_EQ(run.outcome.moved, 256u) << run.tgid;
    EXPECT_EQ(run.viaMbind, run.tgid == 100) << run.tgid;
  }
  EXPECT_EQ(engine->counters().mbindRequests, 1u);
}

// A pinned region carried into a plan is usually on its node already: it must neither pay the
// promotion rate for its whole length nor be held against the fast node's free memory (256 MiB
// already there would look like 256 MiB more to come, over the floor, and the node would be
// marked full for the plan's own promotions).
TEST_F(MigrateEngine, ARegionAlreadyOnItsNodeNeitherWaitsForTokensNorStopsOtherPromotions) {
  mover_.map(100, kBase, 65536 * kPage, kFast);  // 256 MiB pinned region 7, already on the fast node
  mover_.map(200, kBase, 1024 * kPage, kSlow);   // 4 MiB the planner promotes
  free_.setNode(kFast, 1024 * kMiB, 1024 * kMiB - 256 * kMiB - 400 * kMiB);  // 400 MiB free
  inProcess_.accept(100);
  auto config = unlimited();
  config.set_fast_node_min_free_mib(256);
  config.set_promote_mbps(100);  // 256 MiB would be ~2.5 s of tokens
  auto engine = make(config, true);
  const PlanReport report = engine->execute(plan(1, {{100, kBase, 65536 * kPage, kFast, 2000, 7},
                                                     {200, kBase, 1024 * kPage, kFast, 500, 0, true}}));
  ASSERT_EQ(report.runs.size(), 2u);
  ASSERT_EQ(report.runs[0].tgid, 100);
  EXPECT_EQ(report.runs[0].outcome.alreadyThere, 65536u);
  EXPECT_EQ(report.runs[0].outcome.moved, 0u) << "pages already there are not moves";
  EXPECT_TRUE(inProcess_.requests().empty()) << "nothing to bind";
  EXPECT_EQ(report.runs[1].outcome.moved, 1024u);
  EXPECT_EQ(report.runs[1].outcome.skippedTargetFull, 0u);
  EXPECT_EQ(clock_.slept(), 0ns) << "waited for the pinned region's tokens";
  EXPECT_EQ(engine->counters().guardTrips, 0u);
  EXPECT_EQ(engine->counters().of(Direction::Promote).pages.moved, 1024u);
}

// A region half on its node and half not touched yet: nothing to copy, but the bind still goes
// out, as it places the untouched half on the node at its first touch (MPOL_BIND).
TEST_F(MigrateEngine, ARegionWithUntouchedPagesIsStillBoundThoughNothingIsCopied) {
  mover_.map(100, kBase, 128 * kPage, kFast);
  inProcess_.accept(100);
  auto engine = make(unlimited(), true);
  const PlanReport report = engine->execute(plan(1, {{100, kBase, 256 * kPage, kFast, 0, 7}}));
  ASSERT_EQ(report.runs.size(), 1u);
  EXPECT_EQ(inProcess_.requests().size(), 1u) << "the untouched half was left to its old policy";
  EXPECT_TRUE(report.runs[0].viaMbind);
  EXPECT_EQ(report.runs[0].outcome.alreadyThere, 128u);
  EXPECT_EQ(report.runs[0].outcome.notMapped, 128u);
  EXPECT_EQ(report.runs[0].outcome.moved, 0u);
}

// Such a bind copies nothing now: a fast node short of room for the untouched pages does not
// refuse it, nor mark the node full for the plan's other promotions.
TEST_F(MigrateEngine, ABindThatCopiesNothingDoesNotMarkTheFastNodeFull) {
  mover_.map(100, kBase, 128 * kPage, kFast);  // of a 256 MiB region, 512 KiB touched, on the node
  mover_.map(200, kBase, 1024 * kPage, kSlow);
  free_.setNode(kFast, 1024 * kMiB, 1024 * kMiB - 300 * kMiB);  // 300 MiB free
  inProcess_.accept(100);
  auto config = unlimited();
  config.set_fast_node_min_free_mib(256);
  auto engine = make(config, true);
  const PlanReport report = engine->execute(plan(1, {{100, kBase, 65536 * kPage, kFast, 2000, 7},
                                                     {200, kBase, 1024 * kPage, kFast, 500, 0, true}}));
  ASSERT_EQ(report.runs.size(), 2u);
  EXPECT_EQ(inProcess_.requests().size(), 1u);
  EXPECT_EQ(report.runs[0].outcome.skippedTargetFull, 0u);
  EXPECT_EQ(report.runs[1].outcome.moved, 1024u) << "the other promotion was stopped";
  EXPECT_EQ(report.runs[1].outcome.skippedTargetFull, 0u);
}

// A region half on its node: the bind moves the other half, which alone pays the rate limit and
// counts as moved.
TEST_F(MigrateEngine, InProcessBindPaysForAndCountsOnlyThePagesItMoves) {
  mover_.map(100, kBase, 65536 * kPage, kSlow);
  mover_.map(100, kBase, 32768 * kPage, kFast);  // the first 128 MiB already there
  inProcess_.accept(100);
  auto config = unlimited();
  config.set_promote_mbps(100);  // 10^8 B/s, burst one 16 MiB batch
  auto engine = make(config, true);
  const PlanReport report = engine->execute(plan(1, {{100, kBase, 65536 * kPage, kFast, 0, 7}}));
  ASSERT_EQ(report.runs.size(), 1u);
  EXPECT_TRUE(report.runs[0].viaMbind);
  EXPECT_EQ(report.runs[0].outcome.moved, 32768u);
  EXPECT_EQ(report.runs[0].outcome.alreadyThere, 32768u);
  EXPECT_EQ(report.runs[0].outcome.total(), 65536u);
  EXPECT_EQ(mover_.pagesOn(kFast), 65536u);
  EXPECT_NEAR(std::chrono::duration<double>(clock_.slept()).count(), double(128 * kMiB - 16 * kMiB) / 1e8, 0.01);
  EXPECT_EQ(engine->counters().of(Direction::Promote).bytesMoved, 128 * kMiB);
}

TEST_F(MigrateEngine, FailedInProcessBindFallsBackToMovePages) {
  mover_.map(100, kBase, 256 * kPage, kSlow);
  inProcess_.accept(100);
  inProcess_.failWith(ETIMEDOUT);
  auto engine = make(unlimited(), true);
  const PlanReport report = engine->execute(plan(1, {{100, kBase, 256 * kPage, kFast, 0, 7}}));
  EXPECT_EQ(inProcess_.requests().size(), 1u);
  EXPECT_EQ(report.total().moved, 256u);
  EXPECT_FALSE(report.runs[0].viaMbind);
  EXPECT_EQ(movedPagesInCalls(100), 256u);
  EXPECT_EQ(engine->counters().mbindFailures, 1u);
}

TEST_F(MigrateEngine, InProcessMoverCanBeSwitchedOff) {
  mover_.map(100, kBase, 256 * kPage, kSlow);
  inProcess_.accept(100);
  auto config = unlimited();
  config.set_in_process_mover(false);
  auto engine = make(config, true);
  const PlanReport report = engine->execute(plan(1, {{100, kBase, 256 * kPage, kFast, 0, 7}}));
  EXPECT_TRUE(inProcess_.requests().empty());
  EXPECT_EQ(report.total().moved, 256u);
}

TEST_F(MigrateEngine, CountersSeparatePromotionFromDemotion) {
  mover_.map(100, kBase, 300 * kPage, kSlow);
  mover_.map(100, kBase + 1000 * kPage, 200 * kPage, kFast);
  auto engine = make(unlimited());
  engine->execute(plan(1, {{100, kBase, 300 * kPage, kFast, 0, 0}, {100, kBase + 1000 * kPage, 200 * kPage, kSlow, 0, 0}}));
  const auto c = engine->counters();
  EXPECT_EQ(c.of(Direction::Promote).pages.moved, 300u);
  EXPECT_EQ(c.of(Direction::Demote).pages.moved, 200u);
  EXPECT_EQ(c.of(Direction::Demote).bytesMoved, 200 * kPage);
  EXPECT_EQ(c.plansExecuted, 1u);
}

TEST_F(MigrateEngine, UnknownTargetNodeIsAFailureNotACrash) {
  mover_.map(100, kBase, 16 * kPage, kSlow);
  auto engine = make(unlimited());
  const PlanReport report = engine->execute(plan(1, {{100, kBase, 16 * kPage, 7, 0, 0}}));
  EXPECT_EQ(report.total().failed, 16u);
  EXPECT_TRUE(mover_.calls().empty());
  ASSERT_EQ(report.errors.size(), 1u);
  EXPECT_NE(report.errors[0].find("node 7"), std::string::npos);
}

TEST_F(MigrateEngine, TwoWorkersIssueCallsInParallel) {
  mover_.map(100, kBase, 16 * 4096 * kPage, kSlow);
  auto config = unlimited();
  config.set_workers(2);
  auto engine = make(config);
  // Each call takes a little real time, so the second worker's call starts before the first ends.
  mover_.onMove([](size_t) { std::this_thread::sleep_for(30ms); });
  const PlanReport report = engine->execute(plan(1, {{100, kBase, 16 * 4096 * kPage, kFast, 0, 0}}));
  EXPECT_EQ(report.total().moved, 16u * 4096);
  EXPECT_EQ(mover_.maxConcurrentCalls(), 2u);
}

}  // namespace
