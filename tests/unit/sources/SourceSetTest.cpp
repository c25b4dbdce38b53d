// SourceSet over fake sources, the evidence aggregator, the soft-dirty source over a fake tracker
// and fixture maps, and kernel-tiering detection on fixture trees.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <filesystem>
#include <cstring>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <set>
#include <sstream>

#include "core/Log.h"
#include "fakes/sources/FakeSoftDirtyTracker.h"
#include "fakes/sources/FakeSource.h"
#include "sources/DamonSource.h"
#include "sources/SamplingSource.h"
#include "sources/SoftDirtySource.h"
#include "sources/SourceSet.h"
#include "sys/ProcStat.h"
#include "support/TestSupport.h"
#include "sys/access/DamonSysfs.h"
#include "sys/access/Sysctl.h"

namespace tt::sources {
namespace {

namespace fs = std::filesystem;

AccessEvidence ev(pid_t tgid, uint64_t page, AccessKind kind = AccessKind::Load, uint32_t weight = 1) {
  AccessEvidence e;
  e.tgid = tgid;
  e.page = page;
  e.kind = kind;
  e.weight = weight;
  return e;
}

// A page's record keeps the slowest memory any of its samples was served by: slow tier, then
// another node's DRAM, then local DRAM, then a cache, whatever the order the samples came in.
TEST(EvidenceAggregator, KeepsTheSlowestMemoryThatServedAPage) {
  auto merged = [](std::initializer_list<ServedBy> seen) {
    EvidenceAggregator agg;
    for (ServedBy s : seen) agg.add(1, 0x1000, AccessKind::Load, 1, s, 0);
    std::vector<AccessEvidence> out;
    (void)agg.flush(out);
    return out.at(0).servedBy;
  };
  EXPECT_EQ(merged({ServedBy::Cache, ServedBy::FastTier}), ServedBy::FastTier);
  EXPECT_EQ(merged({ServedBy::FastTier, ServedBy::Cache}), ServedBy::FastTier);
  EXPECT_EQ(merged({ServedBy::RemoteRam, ServedBy::FastTier, ServedBy::Unknown}), ServedBy::RemoteRam);
  EXPECT_EQ(merged({ServedBy::FastTier, ServedBy::RemoteRam}), ServedBy::RemoteRam);
  EXPECT_EQ(merged({ServedBy::RemoteRam, ServedBy::SlowTier, ServedBy::Cache}), ServedBy::SlowTier);
  EXPECT_EQ(merged({ServedBy::Unknown}), ServedBy::Unknown);
}

TEST(EvidenceAggregator, MergesPerTgidPageAndKind) {
  EvidenceAggregator agg;
  agg.add(1, 0x1234, AccessKind::Load, 1, ServedBy::FastTier, 100);
  agg.add(1, 0x1fff, AccessKind::Load, 2, ServedBy::SlowTier, 300);  // same page
  agg.add(1, 0x1000, AccessKind::Store, 1);
  agg.add(2, 0x1000, AccessKind::Load, 1);
  std::vector<AccessEvidence> out;
  EXPECT_EQ(agg.flush(out), 3U);
  ASSERT_EQ(out.size(), 3U);
  EXPECT_EQ(out[0].tgid, 1);
  EXPECT_EQ(out[0].page, 0x1000U);
  EXPECT_EQ(out[0].kind, AccessKind::Load);
  EXPECT_EQ(out[0].weight, 3U);
  EXPECT_EQ(out[0].servedBy, ServedBy::SlowTier);
  EXPECT_EQ(out[0].latencyCycles, 300);
  EXPECT_EQ(out[1].kind, AccessKind::Store);
  EXPECT_EQ(out[2].tgid, 2);
  EXPECT_EQ(agg.size(), 0U);
}

// max_tracked_processes bounds the tracked set for every source (the BPF filters are bitmaps
// over every possible pid with no limit of their own): one more is refused with EUSERS, sources untouched.
TEST(SourceSet, RefusesMoreThanMaxTrackedProcesses) {
  auto a = std::make_unique<fakes::FakeSource>("a", true, "runs");
  auto* pa = a.get();
  std::vector<std::unique_ptr<Source>> v;
  v.push_back(std::move(a));
  tensortier::v1::SourcesConfig c;
  c.set_max_tracked_processes(2);
  SourceSet set(std::move(v), c);
  ASSERT_TRUE(set.addProcess(10).ok());
  ASSERT_TRUE(set.addProcess(11).ok());
  ASSERT_TRUE(set.addProcess(11).ok());  // already tracked: not one more
  auto third = set.addProcess(12);
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.error().code, EUSERS);
  EXPECT_FALSE(pa->tracked.contains(12));
  ASSERT_TRUE(set.removeProcess(10).ok());
  EXPECT_TRUE(set.addProcess(12).ok());
}

TEST(SourceSet, FansOutProcessesAndSkipsUnavailableSources) {
  auto a = std::make_unique<fakes::FakeSource>("a", true, "runs");
  auto b = std::make_unique<fakes::FakeSource>("b", false, "no kernel support");
  auto* pa = a.get();
  auto* pb = b.get();
  pa->next = {ev(10, 0x1000), ev(11, 0x2000)};
  std::vector<std::unique_ptr<Source>> v;
  v.push_back(std::move(a));
  v.push_back(std::move(b));
  SourceSet set(std::move(v));
  ASSERT_TRUE(set.addProcess(10).ok());
  EXPECT_TRUE(pa->tracked.contains(10));
  EXPECT_FALSE(pb->tracked.contains(10));
  std::vector<AccessEvidence> out;
  ASSERT_TRUE(tt::test::collectRecords(set, out).ok());
  ASSERT_EQ(out.size(), 1U);
  EXPECT_EQ(out[0].tgid, 10);
  EXPECT_EQ(pb->collects, 0);
  EXPECT_EQ(set.availableCount(), 1U);
  const auto lines = set.statusLines();
  ASSERT_EQ(lines.size(), 2U);
  EXPECT_EQ(lines[0], "a: ok: runs");
  EXPECT_EQ(lines[1], "b: unavailable: no kernel support");
  ASSERT_TRUE(set.removeProcess(10).ok());
  EXPECT_FALSE(pa->tracked.contains(10));
  EXPECT_TRUE(set.tracked().empty());
}

TEST(SourceSet, OneFailingSourceDoesNotLoseTheOthers) {
  auto a = std::make_unique<fakes::FakeSource>("a", true);
  auto b = std::make_unique<fakes::FakeSource>("b", true);
  a->failCollect = true;
  a->failAdd = true;
  b->next = {ev(5, 0x3000)};
  auto* pb = b.get();
  std::vector<std::unique_ptr<Source>> v;
  v.push_back(std::move(a));
  v.push_back(std::move(b));
  SourceSet set(std::move(v));
  auto added = set.addProcess(5);
  EXPECT_FALSE(added.ok());
  EXPECT_NE(added.error().context.find("a: scripted add failure"), std::string::npos);
  EXPECT_TRUE(pb->tracked.contains(5));
  std::vector<AccessEvidence> out;
  auto r = tt::test::collectRecords(set, out);
  EXPECT_FALSE(r.ok());
  ASSERT_EQ(out.size(), 1U);
  EXPECT_EQ(out[0].page, 0x3000U);
}

// A source failing the same way every epoch says so once at Warn, again when the error changes
// (with how often the last one repeated), and once at Info when it collects again.
TEST(SourceSet, CollectErrorsAreLoggedWhenTheyChangeNotEveryEpoch) {
  auto a = std::make_unique<fakes::FakeSource>("a", true);
  auto* pa = a.get();
  std::vector<std::unique_ptr<Source>> v;
  v.push_back(std::move(a));
  SourceSet set(std::move(v));
  tt::test::LogCapture log(tt::log::Level::Debug, tt::log::Level::Info);
  auto collect = [&] {
    EvidenceBatch out;
    return set.collect(out).ok();
  };
  pa->failCollect = true;
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(collect());
  const std::vector<std::string> afterFive = log.texts();
  pa->collectError = "another failure";
  EXPECT_FALSE(collect());
  EXPECT_FALSE(collect());
  pa->failCollect = false;
  EXPECT_TRUE(collect());
  EXPECT_TRUE(collect());
  const std::vector<std::string> lines = log.texts();
  ASSERT_EQ(afterFive.size(), 1U) << "five identical failures, one line at Warn or above";
  EXPECT_NE(afterFive[0].find("a: collect failed: scripted collect failure"), std::string::npos) << afterFive[0];
  ASSERT_EQ(lines.size(), 3U);
  EXPECT_NE(lines[1].find("a: collect failed: another failure (the previous error repeated 4 times)"), std::string::npos)
      << lines[1];
  EXPECT_NE(lines[2].find("a: collecting again, after 7 failed collects"), std::string::npos) << lines[2];
}

TEST(SourceSet, PassesKernelMovesThrough) {
  auto a = std::make_unique<fakes::FakeSource>("a", true);
  a->moves = {KernelMove{7, 0x5000, 1, KernelMove::Why::Promotion}};
  std::vector<std::unique_ptr<Source>> v;
  v.push_back(std::move(a));
  SourceSet set(std::move(v));
  ASSERT_TRUE(set.addProcess(7).ok());
  std::vector<KernelMove> moves;
  set.takeKernelMoves(moves);
  ASSERT_EQ(moves.size(), 1U);
  EXPECT_EQ(moves[0].why, KernelMove::Why::Promotion);
  moves.clear();
  set.takeKernelMoves(moves);
  EXPECT_TRUE(moves.empty());
}

// A kernel drain holds what a process counted until it was untracked, keyed by bare tgid: the heat
// model must not see an exited process come back, nor a reused pid inherit the old one's counts.
TEST(SourceSet, DropsWhatTheKernelCountedForProcessesUntrackedSinceTheLastCollect) {
  auto a = std::make_unique<fakes::FakeSource>("a", true);
  auto* pa = a.get();
  pa->drainsEveryTgid = true;
  pa->next = {ev(10, 0x1000), ev(11, 0x2000), ev(12, 0x3000)};
  for (pid_t tgid : {10, 11, 12}) {
    EvidenceBlock b;
    b.tgid = tgid;
    b.base = 0x200000;
    b.counts[0] = 1;
    pa->nextBlocks.push_back(b);
  }
  pa->moves = {KernelMove{10, 0x5000, 1, KernelMove::Why::Promotion}, KernelMove{11, 0x6000, 1, KernelMove::Why::Demotion}};
  std::vector<std::unique_ptr<Source>> v;
  v.push_back(std::move(a));
  SourceSet set(std::move(v));
  for (pid_t tgid : {10, 11, 12}) ASSERT_TRUE(set.addProcess(tgid).ok());
  ASSERT_TRUE(set.removeProcess(10).ok());  // exited
  ASSERT_TRUE(set.removeProcess(12).ok());  // exited, and its pid reused by a new client at once
  ASSERT_TRUE(set.addProcess(12).ok());
  auto tgids = [&] {
    EvidenceBatch batch;
    batch.records.push_back(ev(99, 0x9000));  // what the caller had: kept as it is
    EXPECT_TRUE(set.collect(batch).ok());
    EXPECT_EQ(batch.records.front().tgid, 99);
    std::set<pid_t> records, blocks;
    for (size_t i = 1; i < batch.records.size(); ++i) records.insert(batch.records[i].tgid);
    for (const auto& b : batch.blocks) blocks.insert(b.tgid);
    EXPECT_EQ(records, blocks);
    return records;
  };
  EXPECT_EQ(tgids(), (std::set<pid_t>{11}));
  // The reused pid's own evidence from the next drain on; the exited one's never.
  EXPECT_EQ(tgids(), (std::set<pid_t>{11, 12}));
  std::vector<KernelMove> moves;
  set.takeKernelMoves(moves);
  ASSERT_EQ(moves.size(), 1U);
  EXPECT_EQ(moves[0].tgid, 11);
}

// A temporary procfs or sysfs tree, written by each test.
class TempTree : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("tt-sources-" + std::to_string(::getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  void write(const std::string& rel, const std::string& text) {
    fs::create_directories((root_ / rel).parent_path());
    std::ofstream(root_ / rel) << text;
  }
  std::string read(const std::string& rel) {
    std::ifstream in(root_ / rel);
    std::string s;
    std::getline(in, s);
    return s;
  }
  fs::path root_;
};

using SourceSetTrackingTest = TempTree;

// A source's failure to track a process whose procfs entry is gone is its exit (ESRCH, which the
// epoch loop logs as Info); with the entry there it stays the sources' error.
TEST_F(SourceSetTrackingTest, AFailureToTrackAnExitedProcessIsEsrch) {
  fs::create_directories(root_ / "5");
  auto a = std::make_unique<fakes::FakeSource>("a", true);
  a->failAdd = true;
  std::vector<std::unique_ptr<Source>> v;
  v.push_back(std::move(a));
  tensortier::v1::SourcesConfig config;
  config.set_procfs_root(root_.string());
  SourceSet set(std::move(v), config);
  auto alive = set.addProcess(5);
  ASSERT_FALSE(alive.ok());
  EXPECT_EQ(alive.error().code, 0);
  EXPECT_EQ(alive.error().message(), "tracking pid 5: a: scripted add failure");
  auto gone = set.addProcess(6);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.error().code, ESRCH);
  EXPECT_NE(gone.error().context.find("tracking pid 6: the process has exited (a: scripted add failure)"),
            std::string::npos)
      << gone.error().context;
}

using SoftDirtySourceTest = TempTree;

// A soft-dirty source over `tracker` and the fixture tree at `root`, tracking pid 42 (its first
// collect only clears); null, and a test failure, when it cannot.
std::unique_ptr<SoftDirtySource> sourceTracking42(std::unique_ptr<sys::SoftDirtyTracker> tracker, const fs::path& root) {
  auto source = std::make_unique<SoftDirtySource>(std::move(tracker), sys::Fs(root.string()), 1 << 20, Result<bool>(true));
  EXPECT_TRUE(source->status().available);
  if (!source->status().available || !source->addProcess(42).ok()) {
    ADD_FAILURE() << "pid 42 not tracked";
    return nullptr;
  }
  return source;
}

// The same over a fake tracker (`tracker` points at it), its first collect (which only clears)
// done.
std::unique_ptr<SoftDirtySource> primedFakeSource(const fs::path& root, fakes::FakeSoftDirtyTracker*& tracker) {
  auto fake = std::make_unique<fakes::FakeSoftDirtyTracker>();
  tracker = fake.get();
  auto source = sourceTracking42(std::move(fake), root);
  std::vector<AccessEvidence> primed;
  if (source && !tt::test::collectRecords(*source, primed).ok()) {
    ADD_FAILURE() << "priming collect failed";
    return nullptr;
  }
  return source;
}

// One /proc/PID/maps line: [start, end), permissions, and the path ("" for anonymous memory).
std::string mapsLine(uint64_t start, uint64_t end, const std::string& perms, const std::string& path = "") {
  std::ostringstream line;
  const bool file = !path.empty() && path[0] != '[';
  line << std::hex << start << '-' << end << ' ' << perms << " 00000000 " << (file ? "08:01 123" : "00:00 0") << "    "
       << path << '\n';
  return line.str();
}

TEST_F(SoftDirtySourceTest, ReportsPagesWrittenSinceLastEpochOnly) {
  write("42/maps", mapsLine(0x7f0000000000, 0x7f0000010000, "rw-p") +
                       mapsLine(0x7f1000000000, 0x7f1000010000, "r--p", "/usr/lib/libc.so"));
  auto tracker = std::make_unique<fakes::FakeSoftDirtyTracker>();
  auto* t = tracker.get();
  auto source = sourceTracking42(std::move(tracker), root_);
  ASSERT_NE(source, nullptr);
  t->markWritten(42, 0x7f0000001000);  // dirty before the first epoch: initial state, ignored
  std::vector<AccessEvidence> out;
  ASSERT_TRUE(tt::test::collectRecords(*source, out).ok());
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(t->clears[42], 1);
  t->markWritten(42, 0x7f0000002000);
  t->markWritten(42, 0x7f1000002000);  // file mapping: not scanned
  ASSERT_TRUE(tt::test::collectRecords(*source, out).ok());
  ASSERT_EQ(out.size(), 1U);
  EXPECT_EQ(out[0].page, 0x7f0000002000U);
  EXPECT_EQ(out[0].kind, AccessKind::Store);
  out.clear();
  ASSERT_TRUE(tt::test::collectRecords(*source, out).ok());
  EXPECT_TRUE(out.empty()) << "bits cleared after each epoch";
}

// The tracker holds on to the process it was given (its /proc directory, opened at track()): a pid
// reused after that process exited names another process, whose clear_refs must never be written
// (its soft-dirty state is its own, and CRIU's). Here the pid's directory is replaced; the kernel
// goes further and fails lookups in the old one.
TEST_F(SoftDirtySourceTest, TheTrackerActsOnTheProcessItWasGivenNotOnAReusedPid) {
  write("42/clear_refs", "");
  write("42/pagemap", "");
  sys::ProcSoftDirtyTracker tracker(sys::Fs(root_.string()));
  ASSERT_TRUE(tracker.track(42).ok());
  fs::rename(root_ / "42", root_ / "42-exited");
  write("42/clear_refs", "");
  ASSERT_TRUE(tracker.clear(42).ok());
  EXPECT_EQ(read("42/clear_refs"), "") << "written to the process that has the pid now";
  EXPECT_EQ(read("42-exited/clear_refs"), "4");
  std::vector<uint64_t> dirty;
  EXPECT_TRUE(tracker.dirtyPages(42, 0x7f0000000000, 16, dirty).ok());
  tracker.untrack(42);
  const auto untracked = tracker.clear(42);
  ASSERT_FALSE(untracked.ok());
  EXPECT_EQ(untracked.error().code, ESRCH);
  EXPECT_FALSE(tracker.track(43).ok()) << "no such process";
}

// A process that exits between the read of its ranges and its pagemap has simply gone: it is
// dropped without a collect error (a normal exit is no failure to report every time).
TEST_F(SoftDirtySourceTest, AProcessExitingMidScanIsDroppedWithoutAnError) {
  auto tracker = std::make_unique<fakes::FakeSoftDirtyTracker>();
  auto* t = tracker.get();
  auto source = sourceTracking42(std::move(tracker), root_);
  ASSERT_NE(source, nullptr);
  write("42/maps", mapsLine(0x7f0000000000, 0x7f0000010000, "rw-p"));
  source->setRanges(42, {{0x7f0000000000, 0x7f0000004000}});
  std::vector<AccessEvidence> out;
  ASSERT_TRUE(tt::test::collectRecords(*source, out).ok());  // primes
  t->exited.insert(42);
  auto r = tt::test::collectRecords(*source, out);
  EXPECT_TRUE(r.ok()) << r.error().message();
  EXPECT_TRUE(out.empty());
  t->exited.clear();
  ASSERT_TRUE(tt::test::collectRecords(*source, out).ok());
  EXPECT_EQ(t->clears[42], 1) << "the exited process is still scanned";
}

TEST_F(SoftDirtySourceTest, ScansOnlyTheRegisteredRangesOnceSet) {
  write("42/maps", mapsLine(0x7f0000000000, 0x7f0000010000, "rw-p"));
  auto tracker = std::make_unique<fakes::FakeSoftDirtyTracker>();
  auto* t = tracker.get();
  auto source = sourceTracking42(std::move(tracker), root_);
  ASSERT_NE(source, nullptr);
  source->setRanges(42, {{0x7f0000000000, 0x7f0000004000}});
  std::vector<AccessEvidence> out;
  ASSERT_TRUE(tt::test::collectRecords(*source, out).ok());  // primes
  t->markWritten(42, 0x7f0000001000);     // inside the region
  t->markWritten(42, 0x7f0000008000);     // written, but outside every registered region
  ASSERT_TRUE(tt::test::collectRecords(*source, out).ok());
  ASSERT_EQ(out.size(), 1U);
  EXPECT_EQ(out[0].page, 0x7f0000001000U);
  // Back to every anonymous mapping when the process has no region left.
  source->setRanges(42, {});
  out.clear();
  t->markWritten(42, 0x7f0000008000);
  ASSERT_TRUE(tt::test::collectRecords(*source, out).ok());
  ASSERT_EQ(out.size(), 1U);
  EXPECT_EQ(out[0].page, 0x7f0000008000U);
}

// clear_refs clears the whole process every epoch, so pages past the budget must still be read
// in some epoch: the window moves on by the budget, wrapping around the ranges (two here), and
// every page read stands for the epochs between two reads of it.
TEST_F(SoftDirtySourceTest, ThePageBudgetIsAWindowThatVisitsEveryPage) {
  auto tracker = std::make_unique<fakes::FakeSoftDirtyTracker>();
  auto* t = tracker.get();
  SoftDirtySource source(std::move(tracker), sys::Fs(root_.string()), 4, Result<bool>(true));
  ASSERT_TRUE(source.addProcess(42).ok());
  constexpr uint64_t kA = 0x7f0000000000, kB = 0x7f1000000000;
  write("42/maps", mapsLine(kA, kA + 6 * 4096, "rw-p") + mapsLine(kB, kB + 4 * 4096, "rw-p"));
  source.setRanges(42, {{kA, kA + 6 * 4096}, {kB, kB + 4 * 4096}});  // 10 pages
  std::vector<AccessEvidence> out;
  ASSERT_TRUE(tt::test::collectRecords(source, out).ok());  // primes
  std::map<uint64_t, int> reads;
  std::vector<uint32_t> weights;
  for (int epoch = 0; epoch < 5; ++epoch) {  // 20 page reads: every page twice
    for (uint64_t i = 0; i < 6; ++i) t->markWritten(42, kA + i * 4096);
    for (uint64_t i = 0; i < 4; ++i) t->markWritten(42, kB + i * 4096);
    out.clear();
    ASSERT_TRUE(tt::test::collectRecords(source, out).ok());
    EXPECT_EQ(out.size(), 4U) << "epoch " << epoch;
    for (const auto& e : out) {
      ++reads[e.page];
      EXPECT_EQ(e.weight, out[0].weight) << "one weight per epoch";
    }
    if (!out.empty()) weights.push_back(out[0].weight);
  }
  // 10 pages, 4 a window: each read stands for 2.5 epochs, in whole weights with the fraction carried.
  EXPECT_EQ(weights, (std::vector<uint32_t>{2, 3, 2, 3, 2}));
  ASSERT_EQ(reads.size(), 10U) << "pages past the budget were never read";
  for (const auto& [page, n] : reads) EXPECT_EQ(n, 2) << std::hex << page;
}

// The kernel flags a mapping it creates or grows (VM_SOFTDIRTY) and pagemap then shows every page
// of it soft-dirty until the next clear, written or not; the fake shows that as all pages written.
// Such a mapping gives no evidence until the epoch after; the mappings left as they were give
// theirs in the same epoch.
TEST_F(SoftDirtySourceTest, ANewOrResizedMappingGivesNoEvidenceUntilTheEpochAfter) {
  constexpr uint64_t kPage = 4096;
  constexpr uint64_t kHeap = 0x555500000000, kKept = 0x7f0000000000, kMerged = 0x7f1000004000, kNew = 0x7f2000000000;
  write("42/maps", mapsLine(kHeap, kHeap + 4 * kPage, "rw-p", "[heap]") + mapsLine(kKept, kKept + 4 * kPage, "rw-p") +
                       mapsLine(kMerged, kMerged + 4 * kPage, "rw-p"));
  fakes::FakeSoftDirtyTracker* t = nullptr;
  auto source = primedFakeSource(root_, t);
  ASSERT_NE(source, nullptr);
  std::vector<AccessEvidence> out;
  // Since the clear: brk grew the heap, an mmap merged below kMerged, another one is new.
  const std::vector<std::pair<uint64_t, uint64_t>> now = {{kHeap, kHeap + 8 * kPage},
                                                          {kKept, kKept + 4 * kPage},
                                                          {kMerged - 4 * kPage, kMerged + 4 * kPage},
                                                          {kNew, kNew + 4 * kPage}};
  write("42/maps", mapsLine(now[0].first, now[0].second, "rw-p", "[heap]") +
                       mapsLine(now[1].first, now[1].second, "rw-p") + mapsLine(now[2].first, now[2].second, "rw-p") +
                       mapsLine(now[3].first, now[3].second, "rw-p"));
  auto dirtyEveryPage = [&] {
    for (const auto& [start, end] : now)
      for (uint64_t page = start; page < end; page += kPage) t->markWritten(42, page);
  };
  auto pagesOf = [](const std::vector<AccessEvidence>& records) {
    std::set<uint64_t> pages;
    for (const auto& e : records) pages.insert(e.page);
    return pages;
  };
  dirtyEveryPage();
  ASSERT_TRUE(tt::test::collectRecords(*source, out).ok());
  EXPECT_EQ(pagesOf(out), (std::set<uint64_t>{kKept, kKept + kPage, kKept + 2 * kPage, kKept + 3 * kPage}))
      << "only the mapping that kept its boundaries";
  out.clear();
  dirtyEveryPage();
  ASSERT_TRUE(tt::test::collectRecords(*source, out).ok());
  EXPECT_EQ(out.size(), 24U) << "every mapping, once the clear has seen its boundaries";
}

// Without registered regions the writable anonymous mappings and [heap] are scanned, found in
// /proc/PID/maps alone: smaps would make the kernel walk every page table of the process each epoch.
TEST_F(SoftDirtySourceTest, WithoutRegionsScansTheWritableAnonymousMappingsFoundInMaps) {
  constexpr uint64_t kHeap = 0x555500000000, kAnon = 0x7f0000000000, kReadOnly = 0x7f1000000000,
                     kGuard = 0x7f1000010000, kFile = 0x7f2000000000, kStack = 0x7ffd00000000;
  write("42/maps", mapsLine(kHeap, kHeap + 0x10000, "rw-p", "[heap]") + mapsLine(kAnon, kAnon + 0x10000, "rw-p") +
                       mapsLine(kReadOnly, kReadOnly + 0x10000, "r--p") + mapsLine(kGuard, kGuard + 0x10000, "---p") +
                       mapsLine(kFile, kFile + 0x10000, "rw-p", "/data/weights.bin") +
                       mapsLine(kStack, kStack + 0x10000, "rw-p", "[stack]"));  // and no smaps
  fakes::FakeSoftDirtyTracker* t = nullptr;
  auto source = primedFakeSource(root_, t);
  ASSERT_NE(source, nullptr);
  std::vector<AccessEvidence> out;
  for (uint64_t start : {kHeap, kAnon, kReadOnly, kGuard, kFile, kStack}) t->markWritten(42, start + 0x2000);
  auto r = tt::test::collectRecords(*source, out);
  ASSERT_TRUE(r.ok()) << r.error().message();
  std::set<uint64_t> pages;
  for (const auto& e : out) pages.insert(e.page);
  EXPECT_EQ(pages, (std::set<uint64_t>{kHeap + 0x2000, kAnon + 0x2000}));
}

// A registered region lies in a mapping too: when that mapping grew since the clear (a new mmap
// merged into it), the region's pages show soft-dirty with all the others, and give no evidence.
TEST_F(SoftDirtySourceTest, ARegisteredRangeInAGrownMappingGivesNoEvidenceThatEpoch) {
  constexpr uint64_t kPage = 4096, kA = 0x7f0000000000, kB = 0x7f2000000000;
  write("42/maps", mapsLine(kA, kA + 16 * kPage, "rw-p") + mapsLine(kB, kB + 16 * kPage, "rw-p"));
  auto tracker = std::make_unique<fakes::FakeSoftDirtyTracker>();
  auto* t = tracker.get();
  auto source = sourceTracking42(std::move(tracker), root_);
  ASSERT_NE(source, nullptr);
  source->setRanges(42, {{kA + kPage, kA + 3 * kPage}, {kB, kB + 2 * kPage}});
  std::vector<AccessEvidence> out;
  ASSERT_TRUE(tt::test::collectRecords(*source, out).ok());  // primes
  write("42/maps", mapsLine(kA, kA + 32 * kPage, "rw-p") + mapsLine(kB, kB + 16 * kPage, "rw-p"));
  auto dirty = [&] {
    for (uint64_t page : {kA + kPage, kA + 2 * kPage, kB + kPage}) t->markWritten(42, page);
  };
  dirty();
  ASSERT_TRUE(tt::test::collectRecords(*source, out).ok());
  ASSERT_EQ(out.size(), 1U) << "the region in the grown mapping gave evidence";
  EXPECT_EQ(out[0].page, kB + kPage);
  out.clear();
  dirty();
  ASSERT_TRUE(tt::test::collectRecords(*source, out).ok());
  EXPECT_EQ(out.size(), 3U);
}

// The fake tracker, with a hook run right after each clear: what the process does between the clear
// and the source's next read of its maps.
class HookedSoftDirtyTracker final : public sys::SoftDirtyTracker {
 public:
  Result<void> track(pid_t pid) override { return fake.track(pid); }
  void untrack(pid_t pid) override { fake.untrack(pid); }
  Result<void> clear(pid_t pid) override {
    auto r = fake.clear(pid);
    if (afterClear) afterClear();
    return r;
  }
  Result<void> dirtyPages(pid_t pid, uint64_t start, uint64_t pages, std::vector<uint64_t>& out) override {
    if (beforeScan) beforeScan();
    return fake.dirtyPages(pid, start, pages, out);
  }
  fakes::FakeSoftDirtyTracker fake;
  std::function<void()> afterClear;
  std::function<void()> beforeScan;  // run before each pagemap read: the process while it is scanned
};

// A mapping grown between the clear and the read of maps after it is flagged again after the clear:
// taking the boundaries of that read alone as the clear's would report every page of it next epoch.
TEST_F(SoftDirtySourceTest, AMappingGrownJustAfterTheClearGivesNoEvidenceNextEpoch) {
  constexpr uint64_t kPage = 4096, kHeap = 0x555500000000;
  write("42/maps", mapsLine(kHeap, kHeap + 4 * kPage, "rw-p", "[heap]"));
  auto tracker = std::make_unique<HookedSoftDirtyTracker>();
  auto* t = tracker.get();
  t->afterClear = [&] { write("42/maps", mapsLine(kHeap, kHeap + 8 * kPage, "rw-p", "[heap]")); };  // brk
  auto source = sourceTracking42(std::move(tracker), root_);
  ASSERT_NE(source, nullptr);
  std::vector<AccessEvidence> out;
  ASSERT_TRUE(tt::test::collectRecords(*source, out).ok());  // primes; the heap grows right after
  for (uint64_t page = kHeap; page < kHeap + 8 * kPage; page += kPage) t->fake.markWritten(42, page);
  ASSERT_TRUE(tt::test::collectRecords(*source, out).ok());
  EXPECT_TRUE(out.empty()) << out.size() << " pages of the heap grown after the clear";
  for (uint64_t page = kHeap; page < kHeap + 8 * kPage; page += kPage) t->fake.markWritten(42, page);
  ASSERT_TRUE(tt::test::collectRecords(*source, out).ok());
  EXPECT_EQ(out.size(), 8U);
}

// A mapping grown while it is scanned (after the maps read the scan goes by) was flagged as a whole
// before its pages were read: the scan's boundaries alone would report every page of it. Its
// boundaries differ between the read before the scan and the one after the clear: nothing of it
// counts this epoch, while another mapping's writes do.
TEST_F(SoftDirtySourceTest, AMappingGrownWhileItIsScannedGivesNoEvidenceThatEpoch) {
  constexpr uint64_t kPage = 4096, kHeap = 0x555500000000, kAnon = 0x7f0000000000;
  const std::string anon = mapsLine(kAnon, kAnon + 4 * kPage, "rw-p", "");
  write("42/maps", mapsLine(kHeap, kHeap + 4 * kPage, "rw-p", "[heap]") + anon);
  auto tracker = std::make_unique<HookedSoftDirtyTracker>();
  auto* t = tracker.get();
  auto source = sourceTracking42(std::move(tracker), root_);
  ASSERT_NE(source, nullptr);
  std::vector<AccessEvidence> out;
  ASSERT_TRUE(tt::test::collectRecords(*source, out).ok());  // primes
  t->beforeScan = [&] {  // brk while the scan runs: the kernel flags the whole heap
    write("42/maps", mapsLine(kHeap, kHeap + 8 * kPage, "rw-p", "[heap]") + anon);
    for (uint64_t page = kHeap; page < kHeap + 8 * kPage; page += kPage) t->fake.markWritten(42, page);
    t->beforeScan = nullptr;
  };
  t->fake.markWritten(42, kAnon + kPage);
  ASSERT_TRUE(tt::test::collectRecords(*source, out).ok());
  ASSERT_EQ(out.size(), 1U) << out.size() << " pages: the heap grown during the scan was reported";
  EXPECT_EQ(out[0].page, kAnon + kPage);
}

TEST(SoftDirtySource, KernelWithoutSoftDirtyIsUnavailableWithReason) {
  SoftDirtySource source(std::make_unique<fakes::FakeSoftDirtyTracker>(), sys::Fs("/proc"), 100, Result<bool>(false));
  EXPECT_FALSE(source.status().available);
  EXPECT_NE(source.status().detail.find("CONFIG_MEM_SOFT_DIRTY"), std::string::npos);
}

using PidNamespaceTest = TempTree;

// BPF programs see the initial pid namespace's pids: the daemon tells whether it is in it from
// /proc/self/ns/pid (the kernel's PROC_PID_INIT_INO), on a fixture tree here.
TEST_F(PidNamespaceTest, TheInitialNamespaceIsToldFromSelfNsPid) {
  fs::create_directories(root_ / "self/ns");
  fs::create_symlink("pid:[4026531836]", root_ / "self/ns/pid");
  auto initial = sys::inInitialPidNamespace(sys::Fs(root_.string()));
  ASSERT_TRUE(initial.ok()) << initial.error().message();
  EXPECT_TRUE(*initial);
  fs::remove(root_ / "self/ns/pid");
  fs::create_symlink("pid:[4026532417]", root_ / "self/ns/pid");  // a container's
  auto own = sys::inInitialPidNamespace(sys::Fs(root_.string()));
  ASSERT_TRUE(own.ok());
  EXPECT_FALSE(*own);
  fs::remove(root_ / "self/ns/pid");
  EXPECT_FALSE(sys::inInitialPidNamespace(sys::Fs(root_.string())).ok()) << "no link: unknown, not a guess";
  EXPECT_TRUE(sys::inInitialPidNamespace(sys::Fs("/proc")).ok());
}

using KernelTieringTest = TempTree;

TEST_F(KernelTieringTest, DetectsTieringModeAndDemotion) {
  write("proc/sys/kernel/numa_balancing", "2\n");
  write("sys/kernel/mm/numa/demotion_enabled", "true\n");
  auto t = sys::readKernelTiering(sys::Fs((root_ / "proc").string()), sys::Fs((root_ / "sys").string()));
  ASSERT_TRUE(t.ok()) << t.error().message();
  EXPECT_TRUE(t->tieringMode());
  EXPECT_TRUE(t->demotion());
  EXPECT_NE(t->describe().find("numa_balancing=2 (tiering"), std::string::npos) << t->describe();
}

TEST_F(KernelTieringTest, AbsentKnobsMeanNoTiering) {
  fs::create_directories(root_ / "proc");
  fs::create_directories(root_ / "sys");
  auto t = sys::readKernelTiering(sys::Fs((root_ / "proc").string()), sys::Fs((root_ / "sys").string()));
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->tieringMode());
  EXPECT_FALSE(t->demotion());
  EXPECT_FALSE(t->numaBalancing.has_value());
}

class KernelTieringGuardTest : public TempTree {
 protected:
  // The runtime directory's parent, as /run is; the daemon makes /run/tensortier if missing.
  void SetUp() override {
    TempTree::SetUp();
    fs::create_directories(root_ / "run");
  }
  sys::Fs procfs() const { return sys::Fs((root_ / "proc").string()); }
  sys::Fs sysfs() const { return sys::Fs((root_ / "sys").string()); }
  std::string state() const { return (root_ / "run/tensortier/kernel-tiering.state").string(); }
  tensortier::v1::SourcesConfig config(tensortier::v1::KernelTieringMode mode) const {
    tensortier::v1::SourcesConfig c;
    c.set_kernel_tiering(mode);
    c.set_kernel_tiering_state_file(state());
    return c;
  }
  static bool has(const std::vector<std::string>& lines, const std::string& text) {
    for (const auto& l : lines)
      if (l.find(text) != std::string::npos) return true;
    return false;
  }
};

// Classic balancing (bit 0) still pulls pages off slow nodes towards the accessing CPU, so "off"
// is numa_balancing 0, not just the tiering bit cleared; the exact old value comes back.
TEST_F(KernelTieringGuardTest, TurnsBalancingAndDemotionOffAndRestoresTheExactValues) {
  // Same-length values: Fs::writeFile does not truncate (sysfs files need no truncation).
  write("proc/sys/kernel/numa_balancing", "3\n");  // normal balancing + tiering
  write("sys/kernel/mm/numa/demotion_enabled", "1\n");
  {
    auto guard = sys::KernelTieringGuard::disable(procfs(), sysfs(), state());
    ASSERT_TRUE(guard.ok()) << guard.error().message();
    EXPECT_EQ(read("proc/sys/kernel/numa_balancing"), "0");
    EXPECT_EQ(read("sys/kernel/mm/numa/demotion_enabled"), "0");
    EXPECT_EQ(guard->changes(), "numa_balancing 3 -> 0, demotion_enabled true -> false");
    // Saved before anything changed, for a restore after a crash.
    auto saved = sys::loadKernelTiering(state());
    ASSERT_TRUE(saved.ok() && saved->has_value());
    EXPECT_EQ((*saved)->numaBalancing, 3);
    EXPECT_EQ((*saved)->demotionEnabled, true);
  }
  EXPECT_EQ(read("proc/sys/kernel/numa_balancing"), "3");
  EXPECT_EQ(read("sys/kernel/mm/numa/demotion_enabled"), "1");
  EXPECT_FALSE(fs::exists(state())) << "a clean exit removes the state file";
}

TEST_F(KernelTieringGuardTest, DisableModeTurnsClassicBalancingOffToo) {
  write("proc/sys/kernel/numa_balancing", "1\n");  // classic balancing only, no tiering bit
  write("sys/kernel/mm/numa/demotion_enabled", "0\n");
  std::vector<std::string> lines;
  {
    auto guard = SourceSet::openKernelTiering(config(tensortier::v1::DISABLE), procfs(), sysfs(), lines);
    ASSERT_NE(guard.get(), nullptr);
    EXPECT_EQ(read("proc/sys/kernel/numa_balancing"), "0");
    EXPECT_EQ(read("sys/kernel/mm/numa/demotion_enabled"), "0");
    ASSERT_EQ(lines.size(), 1U);
    EXPECT_TRUE(has(lines, "turned off until the daemon exits (numa_balancing 1 -> 0; the old values saved in " +
                               state() + ")"))
        << lines[0];
  }
  EXPECT_EQ(read("proc/sys/kernel/numa_balancing"), "1");
}

// A daemon killed while tiering was off left the originals in the state file: the next start puts
// them back before reading the kernel's values (else the "off" values would be saved as the
// originals) and says so; then DISABLE turns it off again over the right originals.
TEST_F(KernelTieringGuardTest, StartAfterACrashRestoresFromTheStateFileFirst) {
  // What a killed DISABLE run leaves: its saved originals, and the kernel's values it set.
  write("proc/sys/kernel/numa_balancing", "0\n");
  write("sys/kernel/mm/numa/demotion_enabled", "0\n");
  ASSERT_TRUE(sys::saveKernelTiering(state(), {3, true}).ok());
  ASSERT_EQ(read("proc/sys/kernel/numa_balancing"), "0");
  ASSERT_TRUE(fs::exists(state()));
  std::vector<std::string> lines;
  {
    auto guard = SourceSet::openKernelTiering(config(tensortier::v1::DISABLE), procfs(), sysfs(), lines);
    ASSERT_NE(guard.get(), nullptr);
    ASSERT_EQ(lines.size(), 2U);
    EXPECT_TRUE(has(lines, "a previous run exited without restoring it: restored numa_balancing=3")) << lines[0];
    EXPECT_TRUE(has(lines, "was numa_balancing=3")) << lines[1];
    EXPECT_EQ(read("proc/sys/kernel/numa_balancing"), "0");
  }
  EXPECT_EQ(read("proc/sys/kernel/numa_balancing"), "3");
  EXPECT_EQ(read("sys/kernel/mm/numa/demotion_enabled"), "1");
  EXPECT_FALSE(fs::exists(state()));
}

// COOPERATE leaves the kernel's values alone, but a crashed DISABLE run's values are still put back.
TEST_F(KernelTieringGuardTest, CooperateStillRestoresWhatACrashedRunLeft) {
  write("proc/sys/kernel/numa_balancing", "0\n");
  write("sys/kernel/mm/numa/demotion_enabled", "0\n");
  ASSERT_TRUE(sys::saveKernelTiering(state(), {2, true}).ok());
  std::vector<std::string> lines;
  auto guard = SourceSet::openKernelTiering(config(tensortier::v1::COOPERATE), procfs(), sysfs(), lines);
  EXPECT_EQ(guard.get(), nullptr);
  EXPECT_EQ(read("proc/sys/kernel/numa_balancing"), "2");
  EXPECT_EQ(read("sys/kernel/mm/numa/demotion_enabled"), "1");
  EXPECT_FALSE(fs::exists(state()));
  EXPECT_TRUE(has(lines, "restored numa_balancing=2"));
  EXPECT_TRUE(has(lines, "cooperating"));
}

// A state file that cannot be applied is kept, and nothing is turned off (saving now would
// overwrite the originals it holds).
TEST_F(KernelTieringGuardTest, UnreadableStateFileIsKeptAndNothingIsChanged) {
  write("proc/sys/kernel/numa_balancing", "2\n");
  write("run/tensortier/kernel-tiering.state", "numa_balancing=banana\n");
  std::vector<std::string> lines;
  auto guard = SourceSet::openKernelTiering(config(tensortier::v1::DISABLE), procfs(), sysfs(), lines);
  EXPECT_EQ(guard.get(), nullptr);
  EXPECT_EQ(read("proc/sys/kernel/numa_balancing"), "2");
  EXPECT_TRUE(fs::exists(state()));
  EXPECT_TRUE(has(lines, "could NOT restore the values a previous run saved")) << lines.at(0);
  EXPECT_TRUE(has(lines, "not turned off"));
}

// --restore-kernel-tiering (the unit's ExecStopPost) after a clean exit finds no file: no-op.
TEST_F(KernelTieringGuardTest, RestoreWithoutAStateFileChangesNothing) {
  write("proc/sys/kernel/numa_balancing", "0\n");
  auto r = sys::restoreKernelTiering(procfs(), sysfs(), state());
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_FALSE(r->has_value());
  EXPECT_EQ(read("proc/sys/kernel/numa_balancing"), "0");
}

// The guard is refused (and nothing written) when the originals cannot be saved.
TEST_F(KernelTieringGuardTest, NoChangeWithoutASavedCopy) {
  write("proc/sys/kernel/numa_balancing", "2\n");
  write("run/blocker", "a file where the state directory should be\n");
  auto guard = sys::KernelTieringGuard::disable(procfs(), sysfs(), (root_ / "run/blocker/kernel-tiering.state").string());
  ASSERT_FALSE(guard.ok());
  EXPECT_NE(guard.error().message().find("nothing changed"), std::string::npos) << guard.error().message();
  EXPECT_EQ(read("proc/sys/kernel/numa_balancing"), "2");
}

// A knob the admin set while the daemon ran is theirs: the exit restores only the knobs that still
// hold what the daemon wrote, and says which it left.
TEST_F(KernelTieringGuardTest, AKnobChangedWhileTheDaemonRanIsNotRestored) {
  write("proc/sys/kernel/numa_balancing", "2\n");
  write("sys/kernel/mm/numa/demotion_enabled", "1\n");
  {
    auto guard = sys::KernelTieringGuard::disable(procfs(), sysfs(), state());
    ASSERT_TRUE(guard.ok()) << guard.error().message();
    write("proc/sys/kernel/numa_balancing", "1\n");  // the admin, meanwhile
  }
  EXPECT_EQ(read("proc/sys/kernel/numa_balancing"), "1");
  EXPECT_EQ(read("sys/kernel/mm/numa/demotion_enabled"), "1");
  EXPECT_FALSE(fs::exists(state()));
}

// The same after a crash, from the state file (ExecStopPost, or the next start).
TEST_F(KernelTieringGuardTest, RestoringFromTheStateFileLeavesWhatTheAdminChanged) {
  write("proc/sys/kernel/numa_balancing", "0\n");
  write("sys/kernel/mm/numa/demotion_enabled", "1\n");  // turned back on by the admin
  ASSERT_TRUE(sys::saveKernelTiering(state(), {2, true}).ok());
  std::string left;
  auto r = sys::restoreKernelTiering(procfs(), sysfs(), state(), &left);
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ(read("proc/sys/kernel/numa_balancing"), "2");
  EXPECT_EQ(read("sys/kernel/mm/numa/demotion_enabled"), "1");
  EXPECT_EQ(left, "demotion_enabled (now true)");
  EXPECT_FALSE(fs::exists(state()));
}

// Under the unit its ExecStartPre turns tiering off with full privileges and marks the state file
// as its own; the daemon then leaves both alone (no restore at start, none at exit), and
// ExecStopPost restores, after every stop.
TEST_F(KernelTieringGuardTest, TheUnitTurnsItOffAndBackAndTheDaemonLeavesThatToIt) {
  write("proc/sys/kernel/numa_balancing", "3\n");
  write("sys/kernel/mm/numa/demotion_enabled", "1\n");
  std::vector<std::string> lines;
  ASSERT_TRUE(SourceSet::prepareKernelTiering(config(tensortier::v1::DISABLE), procfs(), sysfs(), lines));
  EXPECT_TRUE(has(lines, "turned off for the service (numa_balancing 3 -> 0, demotion_enabled true -> false")) << lines.at(0);
  EXPECT_EQ(read("proc/sys/kernel/numa_balancing"), "0");
  EXPECT_EQ(read("sys/kernel/mm/numa/demotion_enabled"), "0");
  auto saved = sys::loadKernelTieringState(state());
  ASSERT_TRUE(saved.ok() && saved->has_value());
  EXPECT_TRUE((*saved)->byUnit);
  EXPECT_EQ((*saved)->values.numaBalancing, 3);

  lines.clear();
  {
    auto guard = SourceSet::openKernelTiering(config(tensortier::v1::DISABLE), procfs(), sysfs(), lines);
    EXPECT_EQ(guard.get(), nullptr) << "the daemon would restore at exit what the unit restores";
    EXPECT_TRUE(has(lines, "turned off by the service's ExecStartPre")) << lines.at(0);
    EXPECT_EQ(read("proc/sys/kernel/numa_balancing"), "0");
    EXPECT_TRUE(fs::exists(state()));
  }
  EXPECT_EQ(read("proc/sys/kernel/numa_balancing"), "0");
  // ExecStopPost.
  auto r = sys::restoreKernelTiering(procfs(), sysfs(), state());
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(read("proc/sys/kernel/numa_balancing"), "3");
  EXPECT_EQ(read("sys/kernel/mm/numa/demotion_enabled"), "1");
  EXPECT_FALSE(fs::exists(state()));
}

// A second daemon (another socket, same config) started while the first has tiering turned off
// neither restores the first one's saved values nor removes its record; the first restores them
// at its exit as it would have.
TEST_F(KernelTieringGuardTest, ASecondDaemonLeavesTheFirstOnesValuesAlone) {
  write("proc/sys/kernel/numa_balancing", "2\n");
  write("sys/kernel/mm/numa/demotion_enabled", "1\n");
  {
    std::vector<std::string> first;
    auto a = SourceSet::openKernelTiering(config(tensortier::v1::DISABLE), procfs(), sysfs(), first);
    ASSERT_NE(a.get(), nullptr);
    for (auto mode : {tensortier::v1::COOPERATE, tensortier::v1::DISABLE}) {
      std::vector<std::string> second;
      auto b = SourceSet::openKernelTiering(config(mode), procfs(), sysfs(), second);
      EXPECT_EQ(b.get(), nullptr);
      EXPECT_EQ(read("proc/sys/kernel/numa_balancing"), "0");
      EXPECT_EQ(read("sys/kernel/mm/numa/demotion_enabled"), "0");
      EXPECT_TRUE(fs::exists(state()));
      EXPECT_TRUE(has(second, "another tensortierd has the kernel's tiering in its care")) << second.at(0);
    }
    // ExecStopPost of a unit while the other daemon runs: the same.
    EXPECT_FALSE(sys::restoreKernelTiering(procfs(), sysfs(), state()).ok());
    EXPECT_EQ(read("proc/sys/kernel/numa_balancing"), "0");
  }
  EXPECT_EQ(read("proc/sys/kernel/numa_balancing"), "2");
  EXPECT_EQ(read("sys/kernel/mm/numa/demotion_enabled"), "1");
  EXPECT_FALSE(fs::exists(state()));
}

// A start that finds a crashed run's values restores them and turns tiering off again under one
// hold of the lock (openKernelTiering, prepareKernelTiering): the restore runs under the caller's
// lock, which the guard then keeps, so no other daemon can act in between.
TEST_F(KernelTieringGuardTest, RestoreAndTurningOffAgainShareOneHoldOfTheLock) {
  write("proc/sys/kernel/numa_balancing", "0\n");
  write("sys/kernel/mm/numa/demotion_enabled", "0\n");
  ASSERT_TRUE(sys::saveKernelTiering(state(), {3, true}).ok());
  auto lock = sys::KernelTieringLock::acquire(state());
  ASSERT_TRUE(lock.ok()) << lock.error().message();
  EXPECT_FALSE(sys::restoreKernelTiering(procfs(), sysfs(), state()).ok()) << "a second taker of the lock is refused";
  EXPECT_EQ(read("proc/sys/kernel/numa_balancing"), "0");
  auto restored = sys::restoreKernelTiering(procfs(), sysfs(), state(), *lock);
  ASSERT_TRUE(restored.ok()) << restored.error().message();
  ASSERT_TRUE(restored->has_value());
  EXPECT_EQ(read("proc/sys/kernel/numa_balancing"), "3");
  EXPECT_FALSE(fs::exists(state()));
  {
    auto guard = sys::KernelTieringGuard::disable(procfs(), sysfs(), state(), std::move(*lock));
    ASSERT_TRUE(guard.ok()) << guard.error().message();
    EXPECT_EQ(read("proc/sys/kernel/numa_balancing"), "0");
    EXPECT_FALSE(sys::KernelTieringLock::acquire(state()).ok()) << "the guard keeps the lock it was given";
  }
  EXPECT_EQ(read("proc/sys/kernel/numa_balancing"), "3");
  EXPECT_TRUE(sys::KernelTieringLock::acquire(state()).ok()) << "and lets it go with it";
}

// The start line says what cooperating gets: hint faults are not-present faults, which the fault
// trace drops with first_touch off.
TEST_F(KernelTieringGuardTest, CooperatingSaysWhetherHintFaultsAreEvidence) {
  write("proc/sys/kernel/numa_balancing", "2\n");
  write("sys/kernel/mm/numa/demotion_enabled", "0\n");
  auto c = config(tensortier::v1::COOPERATE);
  std::vector<std::string> lines;
  (void)SourceSet::openKernelTiering(c, procfs(), sysfs(), lines);
  EXPECT_TRUE(has(lines, "its hint faults are evidence")) << lines.at(0);
  c.mutable_fault_trace()->set_first_touch(false);
  lines.clear();
  (void)SourceSet::openKernelTiering(c, procfs(), sysfs(), lines);
  EXPECT_TRUE(has(lines, "its hint faults are not evidence")) << lines.at(0);
}

// COOPERATE: the unit's ExecStartPre changes nothing (but restores what a dead run left).
TEST_F(KernelTieringGuardTest, TheUnitLeavesItOnWhenCooperating) {
  write("proc/sys/kernel/numa_balancing", "2\n");
  write("sys/kernel/mm/numa/demotion_enabled", "1\n");
  std::vector<std::string> lines;
  EXPECT_TRUE(SourceSet::prepareKernelTiering(config(tensortier::v1::COOPERATE), procfs(), sysfs(), lines));
  EXPECT_EQ(read("proc/sys/kernel/numa_balancing"), "2");
  EXPECT_EQ(read("sys/kernel/mm/numa/demotion_enabled"), "1");
  EXPECT_FALSE(fs::exists(state()));
}

// Nothing to do when the kernel moves no pages by itself.
TEST_F(KernelTieringGuardTest, KernelThatMovesNothingIsLeftAlone) {
  write("proc/sys/kernel/numa_balancing", "0\n");
  write("sys/kernel/mm/numa/demotion_enabled", "0\n");
  std::vector<std::string> lines;
  auto guard = SourceSet::openKernelTiering(config(tensortier::v1::DISABLE), procfs(), sysfs(), lines);
  EXPECT_EQ(guard.get(), nullptr);
  EXPECT_FALSE(fs::exists(state()));
  ASSERT_EQ(lines.size(), 1U);
  EXPECT_TRUE(has(lines, "kernel-tiering: off"));
}

TEST_F(KernelTieringTest, GarbageValueIsAClearError) {
  write("proc/sys/kernel/numa_balancing", "0\n");
  write("sys/kernel/mm/numa/demotion_enabled", "maybe\n");
  auto t = sys::readKernelTiering(sys::Fs((root_ / "proc").string()), sys::Fs((root_ / "sys").string()));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().context.find("maybe"), std::string::npos);
}

class DamonSysfsTest : public TempTree {
 protected:
  static constexpr const char* kAdmin = "kernel/mm/damon/admin/kdamonds";
  // The kernel creates the kdamond directories and files when nr_kdamonds is written; emulate
  // that with empty files (Fs::writeFile opens existing files only, as on sysfs).
  void makeKdamonds(int count) {
    write(std::string(kAdmin) + "/nr_kdamonds", "0\n");
    for (int k = 0; k < count; ++k) {
      const std::string kd = std::string(kAdmin) + "/" + std::to_string(k);
      write(kd + "/state", "");
      write(kd + "/contexts/nr_contexts", "");
      const std::string ctx = kd + "/contexts/0";
      for (const char* f : {"operations", "monitoring_attrs/intervals/sample_us", "monitoring_attrs/intervals/aggr_us",
                            "monitoring_attrs/intervals/update_us", "monitoring_attrs/nr_regions/min",
                            "monitoring_attrs/nr_regions/max", "targets/nr_targets", "targets/0/pid_target",
                            "schemes/nr_schemes", "schemes/0/action"})
        write(ctx + "/" + f, "");
      for (const char* d : {"sz", "nr_accesses", "age"})
        for (const char* m : {"min", "max"}) write(ctx + "/schemes/0/access_pattern/" + d + "/" + m, "");
    }
  }
  // An open source on two kdamonds, tracking `tracked` (on slot 0); null (and a test failure) when
  // it does not open or track.
  std::unique_ptr<DamonSource> twoSlotSource(pid_t tracked) {
    makeKdamonds(2);
    for (const char* slot : {"0", "1"})
      fs::create_directories(root_ / kAdmin / slot / "contexts/0/schemes/0/tried_regions");
    auto source = std::make_unique<DamonSource>(sys::DamonSysfs(sys::Fs(root_.string()), 0, 2), sys::DamonAttrs{}, 1024);
    source->open();
    EXPECT_TRUE(source->status().available) << source->status().detail;
    if (!source->status().available || !source->addProcess(tracked).ok()) {
      ADD_FAILURE() << "pid " << tracked << " not monitored";
      return nullptr;
    }
    return source;
  }
  // Replaces a kdamond's state file (`kd`: its directory under root_) with a FIFO: a request
  // written to it blocks until the test reads it, as the kernel's does until the kdamond answers.
  fs::path stateAsFifo(const std::string& kd) {
    const fs::path state = root_ / kd / "state";
    fs::remove(state);
    EXPECT_EQ(::mkfifo(state.c_str(), 0600), 0) << std::strerror(errno);
    return state;
  }
  // Reads the FIFO standing for a kdamond's state file until the request written to it arrives
  // (the refresher may not have reached it yet); false after 10 s.
  static bool requestArrives(int reader) {
    char request[64];
    const auto through = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < through) {
      if (::read(reader, request, sizeof request) > 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }
  // An open source on one kdamond, tracking pid 77, whose tried regions hold one region of two
  // pages (4096-12288) seen 5 times; null (and a test failure) when it does not open.
  std::unique_ptr<DamonSource> sourceWithOneRegion() {
    makeKdamonds(1);
    const std::string kd = std::string(kAdmin) + "/0";
    fs::create_directories(root_ / kd / "contexts/0/schemes/0/tried_regions");
    auto source = std::make_unique<DamonSource>(sys::DamonSysfs(sys::Fs(root_.string()), 0, 1), sys::DamonAttrs{}, 1024);
    source->open();
    EXPECT_TRUE(source->status().available) << source->status().detail;
    if (!source->status().available || !source->addProcess(77).ok()) return nullptr;
    const std::string tried = kd + "/contexts/0/schemes/0/tried_regions/0";
    write(tried + "/start", "4096\n");
    write(tried + "/end", "12288\n");
    write(tried + "/nr_accesses", "5\n");
    write(tried + "/age", "1\n");
    return source;
  }
};

TEST_F(DamonSysfsTest, ConfiguresOneKdamondPerProcessAndReadsTriedRegions) {
  const std::string admin = kAdmin;
  makeKdamonds(2);
  sys::DamonSysfs damon(sys::Fs(root_.string()), 0, 2);
  ASSERT_TRUE(damon.available());
  ASSERT_TRUE(damon.prepare().ok());
  EXPECT_EQ(read(admin + "/nr_kdamonds"), "2");
  sys::DamonAttrs attrs;
  attrs.sampleUs = 1000;
  ASSERT_TRUE(damon.start(1, 4321, attrs).ok());
  EXPECT_EQ(read(admin + "/1/contexts/0/targets/0/pid_target"), "4321");
  EXPECT_EQ(read(admin + "/1/contexts/0/operations"), "vaddr");
  EXPECT_EQ(read(admin + "/1/contexts/0/schemes/0/action"), "stat");
  EXPECT_EQ(read(admin + "/1/contexts/0/monitoring_attrs/intervals/sample_us"), "1000");
  EXPECT_EQ(read(admin + "/1/state"), "on");
  const std::string tried = admin + "/1/contexts/0/schemes/0/tried_regions";
  write(tried + "/1/start", "8192\n");
  write(tried + "/1/end", "16384\n");
  write(tried + "/1/nr_accesses", "0\n");
  write(tried + "/1/age", "3\n");
  write(tried + "/0/start", "4096\n");
  write(tried + "/0/end", "8192\n");
  write(tried + "/0/nr_accesses", "13\n");
  write(tried + "/0/age", "1\n");
  write(tried + "/total_bytes", "8192\n");
  auto regions = damon.regions(1);
  ASSERT_TRUE(regions.ok()) << regions.error().message();
  ASSERT_EQ(regions->size(), 2U);
  EXPECT_EQ((*regions)[0].start, 4096U);
  EXPECT_EQ((*regions)[0].nrAccesses, 13U);
  EXPECT_EQ((*regions)[1].end, 16384U);
  EXPECT_EQ(read(admin + "/1/state"), "update_schemes_tried_regions");
}

// Growing nr_kdamonds would make the kernel recreate every kdamond directory: with a kdamond below
// kdamond_index set up (another tool's, off), the count stays, and the slots are the kdamonds that
// exist from kdamond_index on. The source opens on those and says it has fewer.
TEST_F(DamonSysfsTest, AnotherToolsKdamondKeepsTheCountAndTheSlotsAreThoseThatExist) {
  const std::string admin = kAdmin;
  makeKdamonds(3);
  write(admin + "/nr_kdamonds", "3\n");
  write(admin + "/0/contexts/nr_contexts", "1\n");  // configured by another tool, not started
  for (const char* slot : {"1", "2"}) {
    write(admin + "/" + slot + "/contexts/nr_contexts", "0\n");
    fs::create_directories(root_ / admin / slot / "contexts/0/schemes/0/tried_regions");
  }
  sys::DamonSysfs damon(sys::Fs(root_.string()), 1, 4);
  auto busy = damon.prepare();
  ASSERT_TRUE(busy.ok()) << busy.error().message();
  EXPECT_TRUE(busy->empty());
  EXPECT_EQ(read(admin + "/nr_kdamonds"), "3") << "nr_kdamonds was rewritten";
  EXPECT_EQ(damon.slots(), 2u);
  EXPECT_NE(damon.shortfall().find("kdamond 0"), std::string::npos) << damon.shortfall();
  EXPECT_EQ(read(admin + "/0/contexts/nr_contexts"), "1") << "the other tool's kdamond was touched";
  EXPECT_EQ(read(admin + "/1/contexts/nr_contexts"), "1");  // the slots got their context

  DamonSource source(sys::DamonSysfs(sys::Fs(root_.string()), 1, 4), sys::DamonAttrs{}, 1024);
  source.open();
  ASSERT_TRUE(source.status().available) << source.status().detail;
  EXPECT_NE(source.status().detail.find("2 kdamonds (fewer than configured"), std::string::npos)
      << source.status().detail;
  EXPECT_TRUE(source.addProcess(77).ok());
  EXPECT_TRUE(source.addProcess(78).ok());
  EXPECT_FALSE(source.addProcess(79).ok()) << "a third process got a slot of two";
  EXPECT_EQ(read(admin + "/1/contexts/0/targets/0/pid_target"), "77");
  EXPECT_EQ(read(admin + "/2/contexts/0/targets/0/pid_target"), "78");
}

// DAMON's sysfs can be built without the virtual-address operations (this host's kernel lists only
// paddr): every start would fail, so the source says at open that it cannot monitor processes, and
// puts back the nr_kdamonds it grew (the machine is left as it was found).
TEST_F(DamonSysfsTest, DamonWithoutVaddrIsUnavailableWithReason) {
  const std::string admin = kAdmin;
  makeKdamonds(2);
  write(admin + "/nr_kdamonds", "0\n");  // none before: 0 is a count to put back too
  fs::create_directories(root_ / admin / "0/contexts/0/schemes/0/tried_regions");
  write(admin + "/0/contexts/0/avail_operations", "paddr\n");
  {
    DamonSource source(sys::DamonSysfs(sys::Fs(root_.string()), 0, 2), sys::DamonAttrs{}, 1024);
    source.open();
    EXPECT_FALSE(source.status().available);
    EXPECT_NE(source.status().detail.find("CONFIG_DAMON_VADDR"), std::string::npos) << source.status().detail;
    EXPECT_EQ(read(admin + "/nr_kdamonds"), "0");
  }
  write(admin + "/0/contexts/0/avail_operations", "vaddr\nfvaddr\npaddr\n");
  DamonSource source(sys::DamonSysfs(sys::Fs(root_.string()), 0, 1), sys::DamonAttrs{}, 1024);
  source.open();
  EXPECT_TRUE(source.status().available) << source.status().detail;
}

// With no kdamond from kdamond_index on and the count unable to grow, there is no slot: the
// source is unavailable and says why.
TEST_F(DamonSysfsTest, NoKdamondLeftFromTheIndexOnIsAnErrorSayingWhy) {
  const std::string admin = kAdmin;
  makeKdamonds(1);
  write(admin + "/nr_kdamonds", "1\n");
  write(admin + "/0/contexts/nr_contexts", "1\n");
  sys::DamonSysfs damon(sys::Fs(root_.string()), 1, 2);
  auto busy = damon.prepare();
  ASSERT_FALSE(busy.ok());
  EXPECT_EQ(busy.error().code, EBUSY);
  EXPECT_NE(busy.error().message().find("cannot grow"), std::string::npos) << busy.error().message();
  EXPECT_EQ(read(admin + "/nr_kdamonds"), "1");
}

// Linux 6.1 has DAMON's sysfs but not a scheme's tried_regions (6.2): the source must say it cannot
// read what DAMON monitors at open, not fail every epoch afterwards.
TEST_F(DamonSysfsTest, KernelWithoutTriedRegionsIsUnavailableWithReason) {
  const std::string kd = "kernel/mm/damon/admin/kdamonds";
  write(kd + "/nr_kdamonds", "1\n");
  write(kd + "/0/state", "off\n");
  write(kd + "/0/contexts/nr_contexts", "");
  write(kd + "/0/contexts/0/schemes/nr_schemes", "");
  DamonSource old(sys::DamonSysfs(sys::Fs(root_.string()), 0, 1), sys::DamonAttrs{}, 1024);
  old.open();
  EXPECT_FALSE(old.status().available);
  EXPECT_NE(old.status().detail.find("tried_regions"), std::string::npos) << old.status().detail;
  fs::create_directories(root_ / kd / "0/contexts/0/schemes/0/tried_regions");
  DamonSource current(sys::DamonSysfs(sys::Fs(root_.string()), 0, 1), sys::DamonAttrs{}, 1024);
  current.open();
  EXPECT_TRUE(current.status().available) << current.status().detail;
}

// Asking a kdamond for its regions blocks until its aggregation interval ends (100 ms each by
// default); the source asks on a thread of its own, so collect() never waits. Here the kdamond's
// state file is a FIFO: a request blocks until the test reads it, as the kernel's does until the
// kdamond answers.
TEST_F(DamonSysfsTest, CollectDoesNotWaitForTheKdamonds) {
  const std::string kd = std::string(kAdmin) + "/0";
  auto opened = sourceWithOneRegion();
  ASSERT_NE(opened, nullptr);
  DamonSource& source = *opened;
  const fs::path state = stateAsFifo(kd);

  EvidenceBatch out;
  const auto began = std::chrono::steady_clock::now();
  for (int epoch = 0; epoch < 3; ++epoch) ASSERT_TRUE(source.collect(out).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - began, std::chrono::seconds(1)) << "collect() waited for the kdamond";
  EXPECT_TRUE(out.blocks.empty()) << "evidence before the kdamond answered";

  // The kdamond answers: a reader on the FIFO lets the request in flight through, and a regular
  // state file saying "on" takes the next ones (and the source's reads of the state, which the
  // kernel answers at once: they would wait for a writer on a FIFO).
  const int reader = ::open(state.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  // The request must have come through before the FIFO goes: the refresher may not have reached
  // it yet (it would then find no state file and fail the request).
  ASSERT_TRUE(requestArrives(reader)) << "the request in flight never reached the kdamond";
  fs::remove(state);
  write(kd + "/state", "on\n");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (out.blocks.empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    auto collected = source.collect(out);
    ASSERT_TRUE(collected.ok()) << collected.error().message();
  }
  ASSERT_EQ(out.blocks.size(), 1U) << "no evidence after the kdamond answered";
  EXPECT_EQ(out.blocks[0].tgid, 77);
  EXPECT_EQ(out.blocks[0].counts[1], 5);
  EXPECT_EQ(out.blocks[0].counts[2], 5);
  (void)source.removeProcess(77);
  ::close(reader);
}

// addProcess and removeProcess run on the epoch thread, which also sends the watchdog's
// keep-alives: they do not wait for a request in flight (up to two aggregation intervals per
// kdamond, seconds at a long one). A process added meanwhile is started, and a removed one's
// kdamond stopped, at a later collect. Slot 0's state file is a FIFO: its request blocks until
// the test reads it.
TEST_F(DamonSysfsTest, AddingAndRemovingDoNotWaitForARequestInFlight) {
  const std::string kd0 = std::string(kAdmin) + "/0", kd1 = std::string(kAdmin) + "/1";
  auto opened = twoSlotSource(77);
  ASSERT_NE(opened, nullptr);
  DamonSource& source = *opened;
  const fs::path state = stateAsFifo(kd0);
  EvidenceBatch out;
  ASSERT_TRUE(source.collect(out).ok());  // slot 0's request: blocked on the FIFO
  std::this_thread::sleep_for(std::chrono::milliseconds(200));

  // Lets the request in flight through (a reader on the FIFO) and waits until it came.
  int reader = -1;
  auto release = [&] {
    reader = ::open(state.c_str(), O_RDONLY | O_NONBLOCK);
    return reader >= 0 && requestArrives(reader);
  };
  auto added = std::async(std::launch::async, [&] { return source.addProcess(88); });
  const bool addReturned = added.wait_for(std::chrono::seconds(1)) == std::future_status::ready;
  auto removed = std::async(std::launch::async, [&] { return source.removeProcess(77); });
  const bool removeReturned = removed.wait_for(std::chrono::seconds(1)) == std::future_status::ready;
  // The request comes through; the next collect stops 77's kdamond and hands its slot to 88.
  ASSERT_TRUE(release()) << "the request in flight never reached the kdamond";
  EXPECT_TRUE(addReturned) << "addProcess waited for the request in flight";
  EXPECT_TRUE(removeReturned) << "removeProcess waited for the request in flight";
  EXPECT_TRUE(added.get().ok());
  EXPECT_TRUE(removed.get().ok());
  fs::remove(state);
  write(kd0 + "/state", "on\n");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (read(kd0 + "/contexts/0/targets/0/pid_target") != "88" && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    (void)source.collect(out);
  }
  EXPECT_EQ(read(kd0 + "/contexts/0/targets/0/pid_target"), "88") << "77's kdamond was not stopped and reused";
  EXPECT_EQ(read(kd1 + "/contexts/0/targets/0/pid_target"), "") << "slot 1 was never needed";
  (void)source.removeProcess(88);
  ::close(reader);
}

// With a request in flight and no slot free, adding a process still says at once that it waits
// for a slot (the daemon logs that), instead of deferring silently.
TEST_F(DamonSysfsTest, AddingWithoutAFreeSlotWhileARequestIsInFlightSaysSo) {
  const std::string kd = std::string(kAdmin) + "/0";
  auto opened = sourceWithOneRegion();  // one slot, pid 77 on it
  ASSERT_NE(opened, nullptr);
  DamonSource& source = *opened;
  const fs::path state = stateAsFifo(kd);
  EvidenceBatch out;
  ASSERT_TRUE(source.collect(out).ok());  // the request: blocked on the FIFO
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto added = std::async(std::launch::async, [&] { return source.addProcess(88); });
  const bool returned = added.wait_for(std::chrono::seconds(1)) == std::future_status::ready;
  const int reader = ::open(state.c_str(), O_RDONLY | O_NONBLOCK);  // lets the request through
  ASSERT_GE(reader, 0);
  EXPECT_TRUE(returned) << "addProcess waited for the request in flight";
  auto r = added.get();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("no free kdamond slot"), std::string::npos) << r.error().message();
  EXPECT_TRUE(requestArrives(reader));
  fs::remove(state);
  write(kd + "/state", "on\n");
  (void)source.removeProcess(88);
  (void)source.removeProcess(77);
  ::close(reader);
}

// Kdamonds running at start: those the state file lists for the pid they monitor were left by a
// run of the daemon that died, and are stopped; any other is another tool's (damo's default is
// kdamond 0), never touched, even when its process is tracked, and handed out only once it stops
// by itself (a kdamond stops when its process exits). The state file follows the kdamonds the
// source runs and is gone once none runs. (The fixture's files are written in place, not
// truncated, as on sysfs: values are chosen so that what the source writes over them reads back
// whole.)
TEST_F(DamonSysfsTest, OnlyTheDaemonsOwnLeftoverKdamondsAreStoppedAtStart) {
  makeKdamonds(4);
  const std::string admin = kAdmin;
  write(admin + "/nr_kdamonds", "4\n");
  write(admin + "/0/state", "on\n");
  write(admin + "/0/contexts/0/targets/0/pid_target", "5\n");  // another tool's
  write(admin + "/1/state", "on\n");
  write(admin + "/1/contexts/0/targets/0/pid_target", "77\n");  // the dead daemon's, for pid 77
  write(admin + "/2/state", "on\n");
  write(admin + "/2/contexts/0/targets/0/pid_target", "66\n");  // once the dead daemon's, since restarted by another tool
  for (const char* slot : {"1", "3"}) fs::create_directories(root_ / admin / slot / "contexts/0/schemes/0/tried_regions");
  const std::string state = (root_ / "run/damon.state").string();
  fs::create_directories(root_ / "run");
  {
    std::ofstream f(state);
    f << "kdamond=1 pid=77\nkdamond=2 pid=65\nkdamond=9 pid=1\n";
  }
  auto owner = std::make_unique<DamonSource>(sys::DamonSysfs(sys::Fs(root_.string()), 0, 4), sys::DamonAttrs{}, 1024, state);
  DamonSource& source = *owner;
  source.open();
  ASSERT_TRUE(source.status().available) << source.status().detail;
  EXPECT_EQ(read(admin + "/1/state"), "off") << "the dead run's kdamond was not stopped";
  EXPECT_EQ(read(admin + "/0/state"), "on") << "another tool's kdamond was touched";
  EXPECT_EQ(read(admin + "/2/state"), "on") << "a kdamond restarted by another tool was touched";
  EXPECT_FALSE(fs::exists(state)) << "nothing of the daemon's runs now";
  // Its process is tracked again: it gets a free slot like any other.
  ASSERT_TRUE(source.addProcess(77).ok());
  EXPECT_EQ(read(admin + "/1/contexts/0/targets/0/pid_target"), "77");
  EXPECT_EQ(read(admin + "/1/contexts/0/operations"), "vaddr");
  // The other tool's process tracked: not taken over.
  ASSERT_TRUE(source.addProcess(5).ok());
  EXPECT_EQ(read(admin + "/3/contexts/0/targets/0/pid_target"), "5");
  EXPECT_EQ(read(admin + "/0/contexts/0/operations"), "") << "another tool's kdamond was reconfigured";
  auto listed = sys::loadOwnedKdamonds(state);
  ASSERT_TRUE(listed.ok()) << listed.error().message();
  EXPECT_EQ(*listed, (std::vector<sys::OwnedKdamond>{{1, 77}, {3, 5}}));
  const auto full = source.addProcess(99);
  ASSERT_FALSE(full.ok());
  EXPECT_NE(full.error().message().find("2 were running at start for others"), std::string::npos) << full.error().message();
  // The other tool's kdamond stops: its slot is free from the next collect on.
  write(admin + "/0/state", "off\n");
  EvidenceBatch out;
  (void)source.collect(out);
  ASSERT_TRUE(source.addProcess(99).ok());
  EXPECT_EQ(read(admin + "/0/contexts/0/targets/0/pid_target"), "99");
  // A stop waits for a request in flight (the refresher's, after that collect) until a collect.
  (void)source.removeProcess(77);
  for (int i = 0; i < 200; ++i) {
    listed = sys::loadOwnedKdamonds(state);
    ASSERT_TRUE(listed.ok()) << listed.error().message();
    if (listed->size() < 3) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    (void)source.collect(out);
  }
  EXPECT_EQ(*listed, (std::vector<sys::OwnedKdamond>{{0, 99}, {3, 5}}));
  owner.reset();  // stops the rest
  EXPECT_FALSE(fs::exists(state)) << "the state file outlived the kdamonds";
}

// A state file that cannot be read leaves every running kdamond alone.
TEST_F(DamonSysfsTest, AMalformedStateFileLeavesEveryRunningKdamondAlone) {
  makeKdamonds(2);
  const std::string admin = kAdmin;
  write(admin + "/nr_kdamonds", "2\n");
  write(admin + "/0/state", "on\n");
  write(admin + "/0/contexts/0/targets/0/pid_target", "77\n");
  fs::create_directories(root_ / admin / "1/contexts/0/schemes/0/tried_regions");
  const std::string state = (root_ / "damon.state").string();
  {
    std::ofstream f(state);
    f << "kdamond=0 pid=77\nkdamond 1\n";
  }
  EXPECT_FALSE(sys::loadOwnedKdamonds(state).ok());
  DamonSource source(sys::DamonSysfs(sys::Fs(root_.string()), 0, 2), sys::DamonAttrs{}, 1024, state);
  source.open();
  ASSERT_TRUE(source.status().available) << source.status().detail;
  EXPECT_EQ(read(admin + "/0/state"), "on");
}

// An open that fails before it has read the state file (here a kdamond whose state cannot be
// read; in the kernel, nr_kdamonds that cannot grow with no kdamond from kdamond_index on) leaves the file as it was, so the next
// start still finds the kdamond a dead run left and stops it.
TEST_F(DamonSysfsTest, AnOpenThatFailsKeepsTheDeadRunsStateFile) {
  makeKdamonds(2);
  const std::string admin = kAdmin;
  write(admin + "/nr_kdamonds", "2\n");
  write(admin + "/0/state", "on\n");
  write(admin + "/0/contexts/0/targets/0/pid_target", "77\n");
  fs::remove(root_ / admin / "1/state");
  const std::string state = (root_ / "damon.state").string();
  {
    std::ofstream f(state);
    f << "kdamond=0 pid=77\n";
  }
  {
    DamonSource source(sys::DamonSysfs(sys::Fs(root_.string()), 0, 2), sys::DamonAttrs{}, 1024, state);
    source.open();
    ASSERT_FALSE(source.status().available) << "the open was meant to fail";
  }
  auto listed = sys::loadOwnedKdamonds(state);
  ASSERT_TRUE(listed.ok()) << "the dead run's state file is gone: " << listed.error().message();
  EXPECT_EQ(*listed, (std::vector<sys::OwnedKdamond>{{0, 77}}));
  EXPECT_EQ(read(admin + "/0/state"), "on");
  // The next start can read every kdamond: it stops the dead run's.
  write(admin + "/1/state", "");
  for (const char* slot : {"0", "1"}) fs::create_directories(root_ / admin / slot / "contexts/0/schemes/0/tried_regions");
  DamonSource source(sys::DamonSysfs(sys::Fs(root_.string()), 0, 2), sys::DamonAttrs{}, 1024, state);
  source.open();
  ASSERT_TRUE(source.status().available) << source.status().detail;
  EXPECT_EQ(read(admin + "/0/state"), "off") << "the dead run's kdamond was not stopped";
  EXPECT_FALSE(fs::exists(state)) << "nothing of the daemon's runs now";
}

// A kdamond that would not stop when its process was removed keeps its slot off the free ones (a
// start there would fail, and its process would seem unmonitorable), is stopped again at each
// collect, and is handed out once it has stopped. A start that fails on one slot tries the next.
TEST_F(DamonSysfsTest, ASlotThatWouldNotStopIsRetriedAndNotHandedOut) {
  const std::string kd0 = std::string(kAdmin) + "/0", kd1 = std::string(kAdmin) + "/1";
  auto opened = twoSlotSource(77);
  ASSERT_NE(opened, nullptr);
  DamonSource& source = *opened;
  ASSERT_EQ(read(kd0 + "/contexts/0/targets/0/pid_target"), "77");
  // Slot 0's state cannot be read or written: its stop fails.
  fs::remove(root_ / kd0 / "state");
  fs::create_directories(root_ / kd0 / "state");
  EXPECT_FALSE(source.removeProcess(77).ok());
  ASSERT_TRUE(source.addProcess(88).ok());
  EXPECT_EQ(read(kd1 + "/contexts/0/targets/0/pid_target"), "88") << "the slot still running was handed out";
  EXPECT_FALSE(source.addProcess(99).ok()) << "no free slot";
  // It can be stopped now: the next collect does, and hands it to the process that waited.
  fs::remove(root_ / kd0 / "state");
  write(kd0 + "/state", "on\n");
  EvidenceBatch out;
  (void)source.collect(out);
  EXPECT_EQ(read(kd0 + "/contexts/0/targets/0/pid_target"), "99");
  ASSERT_TRUE(source.addProcess(99).ok()) << "already monitored: nothing to do";
  (void)source.removeProcess(88);
  (void)source.removeProcess(99);
}

// A request the kdamond did not answer refreshed nothing: tried_regions still holds what an
// earlier request left (here: written by the test), already reported then, not to be reported
// again.
TEST_F(DamonSysfsTest, RegionsLeftFromAnEarlierRequestAreNotReportedForAFailedOne) {
  const std::string kd = std::string(kAdmin) + "/0";
  auto opened = sourceWithOneRegion();
  ASSERT_NE(opened, nullptr);
  DamonSource& source = *opened;
  auto collectUntil = [&](auto done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      EvidenceBatch out;
      const bool ok = source.collect(out).ok();
      if (done(ok, out)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  };
  // Requests fail from now on (the state file cannot be written).
  fs::remove(root_ / kd / "state");
  fs::create_directories(root_ / kd / "state");
  bool reportedAgain = false;
  ASSERT_TRUE(collectUntil([&](bool ok, const EvidenceBatch& out) {
    reportedAgain = reportedAgain || !out.blocks.empty();
    return !ok;  // the failed request's error
  }));
  EXPECT_FALSE(reportedAgain) << "the regions of the last answered request were reported again";
  fs::remove(root_ / kd / "state");
  write(kd + "/state", "on\n");
  (void)source.removeProcess(77);
}

// DAMON's regions become one block per 2 MiB chunk they cover, each page counted nr_accesses
// (saturating at 255); unaccessed regions give nothing; at most maxPages pages.
TEST(DamonRegionBlocks, OneBlockPerChunkWithEachPagesAccesses) {
  constexpr uint64_t k2M = 2ULL << 20;
  const std::vector<sys::DamonRegion> regions = {
      {0x1000, 0x3000, 13, 0},             // pages 1, 2 of chunk 0
      {0x3000, k2M - 0x1000, 0, 0},        // not accessed
      {k2M - 0x1000, k2M + 0x2000, 300, 0},  // page 511 of chunk 0, pages 0, 1 of chunk 1
  };
  std::vector<EvidenceBlock> blocks;
  EXPECT_EQ(appendRegionBlocks(7, regions, 1000, blocks), 5U);
  ASSERT_EQ(blocks.size(), 2U);
  EXPECT_EQ(blocks[0].tgid, 7);
  EXPECT_EQ(blocks[0].kind, AccessKind::Access);
  EXPECT_EQ(blocks[0].base, 0U);
  EXPECT_EQ(blocks[0].pages(), 3U);
  EXPECT_EQ(blocks[0].weight(1), 13U);
  EXPECT_EQ(blocks[0].weight(2), 13U);
  EXPECT_EQ(blocks[0].weight(3), 0U);
  EXPECT_EQ(blocks[0].weight(511), 255U);
  EXPECT_EQ(blocks[1].base, k2M);
  EXPECT_EQ(blocks[1].pages(), 2U);
  EXPECT_EQ(blocks[1].weight(0), 255U);
  blocks.clear();
  // The budget goes to the most accessed region first: its three pages, in two chunks.
  EXPECT_EQ(appendRegionBlocks(7, regions, 3, blocks), 3U);
  ASSERT_EQ(blocks.size(), 2U);
  EXPECT_EQ(blocks[0].pages(), 1U);
  EXPECT_EQ(blocks[0].weight(511), 255U);
  EXPECT_EQ(blocks[0].weight(1), 0U);
  EXPECT_EQ(blocks[1].pages(), 2U);
  blocks.clear();
  EXPECT_EQ(appendRegionBlocks(7, regions, 4, blocks), 4U);  // and what is left to the next
  ASSERT_EQ(blocks.size(), 2U);
  EXPECT_EQ(blocks[0].pages(), 2U);
  EXPECT_EQ(blocks[0].weight(1), 13U);
  EXPECT_EQ(blocks[0].weight(2), 0U);
}

// Over the page budget a fixed prefix by address would give the low (heap, early buffers, often
// cold) regions all of it every epoch and the hot tensors at high addresses none: the budget goes
// to the regions DAMON saw accessed most.
TEST(DamonRegionBlocks, OverTheBudgetTheMostAccessedRegionsComeFirst) {
  const std::vector<sys::DamonRegion> regions = {
      {0x10000000, 0x10000000 + 8 * kBasePageSize, 1, 0},
      {0x7f0000000000, 0x7f0000000000 + 8 * kBasePageSize, 200, 0},
  };
  std::vector<EvidenceBlock> blocks;
  EXPECT_EQ(appendRegionBlocks(7, regions, 8, blocks), 8U);
  ASSERT_EQ(blocks.size(), 1U);
  EXPECT_EQ(blocks[0].base, 0x7f0000000000U);
  EXPECT_EQ(blocks[0].pages(), 8U);
  EXPECT_EQ(blocks[0].weight(0), 200U);
}

// A process refused for want of a kdamond slot is not left unmonitored for good: it gets the next
// slot that frees (here, when the process that had it is removed), at the next collect.
TEST_F(DamonSysfsTest, AProcessRefusedForWantOfASlotGetsTheNextThatFrees) {
  makeKdamonds(1);
  const std::string kd0 = std::string(kAdmin) + "/0";
  fs::create_directories(root_ / kd0 / "contexts/0/schemes/0/tried_regions");
  DamonSource source(sys::DamonSysfs(sys::Fs(root_.string()), 0, 1), sys::DamonAttrs{}, 1024);
  source.open();
  ASSERT_TRUE(source.status().available) << source.status().detail;
  ASSERT_TRUE(source.addProcess(77).ok());
  auto refused = source.addProcess(88);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message().find("gets the next that frees"), std::string::npos) << refused.error().message();
  ASSERT_TRUE(source.removeProcess(77).ok());
  EvidenceBatch out;
  (void)source.collect(out);
  EXPECT_EQ(read(kd0 + "/contexts/0/targets/0/pid_target"), "88");
  // One removed while it waits does not get a slot later.
  ASSERT_FALSE(source.addProcess(99).ok());
  ASSERT_TRUE(source.removeProcess(99).ok());
  ASSERT_TRUE(source.removeProcess(88).ok());
  (void)source.collect(out);
  EXPECT_EQ(read(kd0 + "/contexts/0/targets/0/pid_target"), "88") << "the slot went to a process no longer tracked";
  (void)source.removeProcess(88);
}

TEST_F(DamonSysfsTest, MissingDamonIsUnavailable) {
  sys::DamonSysfs damon(sys::Fs(root_.string()), 0, 1);
  EXPECT_FALSE(damon.available());
}

// --- live tuning (SourceSet::applyConfig) ---

tensortier::v1::SourcesConfig liveTuned(const tensortier::v1::SourcesConfig& base) {
  auto c = base;
  c.set_cpu_budget_percent(7.5);
  c.mutable_pmu()->set_min_period(2003);
  c.mutable_pmu()->set_max_period(50021);
  c.mutable_software_faults()->set_period(4);
  c.mutable_pmu()->set_sample_cost_ns(1500);
  c.mutable_software_faults()->set_max_period(4096);
  c.mutable_software_faults()->set_sample_cost_ns(3000);
  c.mutable_fault_trace()->set_fault_cost_ns(250);
  return c;
}

TEST(SourceSetLiveConfig, ClassifiesLiveAndRestartKeys) {
  const tensortier::v1::SourcesConfig base;
  auto next = liveTuned(base);
  next.mutable_fault_trace()->set_ring_kib(2048);
  next.set_aggregation(tensortier::v1::USER_RING);
  const auto changes = SourceSet::classifyChanges(base, next);
  EXPECT_EQ(changes.live, (std::vector<std::string>{"sources.pmu.min_period", "sources.pmu.max_period",
                                                    "sources.pmu.sample_cost_ns", "sources.software_faults.period",
                                                    "sources.software_faults.max_period",
                                                    "sources.software_faults.sample_cost_ns",
                                                    "sources.fault_trace.fault_cost_ns",
                                                    "sources.cpu_budget_percent"}));
  EXPECT_EQ(changes.restart, (std::vector<std::string>{"sources.aggregation", "sources.fault_trace.ring_kib"}));
  // A key set to its default value is no change.
  tensortier::v1::SourcesConfig explicitDefault;
  explicitDefault.set_cpu_budget_percent(base.cpu_budget_percent());
  const auto none = SourceSet::classifyChanges(base, explicitDefault);
  EXPECT_TRUE(none.live.empty());
  EXPECT_TRUE(none.restart.empty());
}

TEST(SourceSetLiveConfig, WithLiveKeysTakesOnlyTheLiveKeys) {
  const tensortier::v1::SourcesConfig base;
  auto next = liveTuned(base);
  next.mutable_damon()->set_enabled(true);
  const auto merged = SourceSet::withLiveKeys(base, next);
  EXPECT_DOUBLE_EQ(merged.cpu_budget_percent(), 7.5);
  EXPECT_EQ(merged.pmu().min_period(), 2003U);
  EXPECT_EQ(merged.pmu().max_period(), 50021U);
  EXPECT_EQ(merged.software_faults().period(), 4U);
  EXPECT_FALSE(merged.damon().enabled());
}

TEST(SourceSetLiveConfig, SoftwareMaxPeriodAtOrBelowPeriodFixesThePeriod) {
  auto sw = std::make_unique<fakes::FakeSource>("software-faults", true);
  auto* ps = sw.get();
  std::vector<std::unique_ptr<Source>> v;
  v.push_back(std::move(sw));
  const tensortier::v1::SourcesConfig base;
  SourceSet set(std::move(v), base);
  auto next = base;
  next.mutable_software_faults()->set_period(16);
  next.mutable_software_faults()->set_max_period(2);
  ASSERT_TRUE(set.applyConfig(next).ok());
  ASSERT_TRUE(ps->limits.has_value());
  EXPECT_EQ(ps->limits->minPeriod, 16U);
  EXPECT_EQ(ps->limits->maxPeriod, 16U);
}

TEST(SourceSetLiveConfig, TunesEachSamplingSourceWithItsOwnBounds) {
  auto pmu = std::make_unique<fakes::FakeSource>("pmu", true);
  auto sw = std::make_unique<fakes::FakeSource>("software-faults", true);
  auto trace = std::make_unique<fakes::FakeSource>("fault-trace", true);
  auto *pp = pmu.get(), *ps = sw.get(), *pt = trace.get();
  std::vector<std::unique_ptr<Source>> v;
  v.push_back(std::move(pmu));
  v.push_back(std::move(sw));
  v.push_back(std::move(trace));
  const tensortier::v1::SourcesConfig base;
  SourceSet set(std::move(v), base);
  auto next = liveTuned(base);
  next.mutable_fault_trace()->set_ring_kib(2048);  // needs a restart
  auto changes = set.applyConfig(next);
  ASSERT_TRUE(changes.ok()) << changes.error().message();
  EXPECT_EQ(changes->live.size(), 8U);
  EXPECT_EQ(changes->restart, std::vector<std::string>{"sources.fault_trace.ring_kib"});
  ASSERT_TRUE(pp->limits.has_value());
  EXPECT_DOUBLE_EQ(pp->limits->cpuBudgetPercent, 7.5);
  EXPECT_EQ(pp->limits->minPeriod, 2003U);
  EXPECT_EQ(pp->limits->maxPeriod, 50021U);
  EXPECT_DOUBLE_EQ(pp->limits->sampleCostNs, 1500);
  ASSERT_TRUE(ps->limits.has_value());
  EXPECT_DOUBLE_EQ(ps->limits->cpuBudgetPercent, 7.5);
  EXPECT_EQ(ps->limits->minPeriod, 4U);  // `period` is the finest period
  EXPECT_EQ(ps->limits->maxPeriod, 4096U);
  EXPECT_DOUBLE_EQ(ps->limits->sampleCostNs, 3000);
  // The fault trace takes the budget and its per-fault cost (the storm guard's), no periods.
  ASSERT_TRUE(pt->limits.has_value());
  EXPECT_DOUBLE_EQ(pt->limits->cpuBudgetPercent, 7.5);
  EXPECT_DOUBLE_EQ(pt->limits->sampleCostNs, 250);
  // The running config has the live keys only; the restart key is still pending.
  EXPECT_DOUBLE_EQ(set.config().cpu_budget_percent(), 7.5);
  EXPECT_EQ(set.config().fault_trace().ring_kib(), base.fault_trace().ring_kib());
  auto again = set.applyConfig(next);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->live.empty());
  EXPECT_EQ(again->restart, std::vector<std::string>{"sources.fault_trace.ring_kib"});
}

TEST(SourceSetLiveConfig, RestartOnlyChangesTouchNoSource) {
  auto pmu = std::make_unique<fakes::FakeSource>("pmu", true);
  auto* pp = pmu.get();
  std::vector<std::unique_ptr<Source>> v;
  v.push_back(std::move(pmu));
  SourceSet set(std::move(v));
  tensortier::v1::SourcesConfig next;
  next.set_max_tracked_processes(7);
  auto changes = set.applyConfig(next);
  ASSERT_TRUE(changes.ok());
  EXPECT_TRUE(changes->live.empty());
  EXPECT_EQ(changes->restart, std::vector<std::string>{"sources.max_tracked_processes"});
  EXPECT_FALSE(pp->limits.has_value());
}

TEST(SourceSetLiveConfig, AFailingSourceIsReportedAndTheOthersAreTuned) {
  auto pmu = std::make_unique<fakes::FakeSource>("pmu", true);
  auto sw = std::make_unique<fakes::FakeSource>("software-faults", true);
  pmu->failTune = true;
  auto* ps = sw.get();
  std::vector<std::unique_ptr<Source>> v;
  v.push_back(std::move(pmu));
  v.push_back(std::move(sw));
  SourceSet set(std::move(v));
  auto changes = set.applyConfig(liveTuned(tensortier::v1::SourcesConfig()));
  ASSERT_FALSE(changes.ok());
  EXPECT_NE(changes.error().message().find("pmu: scripted tune failure"), std::string::npos)
      << changes.error().message();
  ASSERT_TRUE(ps->limits.has_value());
  EXPECT_EQ(ps->limits->minPeriod, 4U);
}

// Without open() a sampling source has no events: the limits and the clamped period are recorded.
TEST(SamplingSourceLimits, ClampsThePeriodIntoNewBoundsAndRejectsEmptyOnes) {
  SamplingOptions o;
  o.name = "software-faults";
  o.events = {softwareFaultAttr(10007)};
  o.minPeriod = 1009;
  o.maxPeriod = 1000003;
  SamplingSource s(o, sys::Fs("/nonexistent"));
  ASSERT_EQ(s.period(), 10007U);
  ASSERT_TRUE(s.setSamplingLimits({5.0, 20011, 40009}).ok());
  EXPECT_EQ(s.period(), 20011U);
  EXPECT_EQ(s.counters().period, 20011U);
  ASSERT_TRUE(s.setSamplingLimits({5.0, 100, 300}).ok());
  EXPECT_EQ(s.period(), 300U);
  ASSERT_TRUE(s.setSamplingLimits({5.0, 100, 1000}).ok());
  EXPECT_EQ(s.period(), 300U);  // inside the bounds: unchanged
  EXPECT_FALSE(s.setSamplingLimits({5.0, 500, 400}).ok());
  EXPECT_FALSE(s.setSamplingLimits({5.0, 0, 400}).ok());
  EXPECT_EQ(s.period(), 300U);
}

}  // namespace
}  // namespace tt::sources
