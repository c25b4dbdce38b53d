// The eBPF fault-trace source and the software page-fault sampling source (both aggregation
// paths) on the real host kernel: a child touches a known set of fresh pages; each source must
// report those pages (precision and recall >= 0.95 over the child's buffer), nothing of an
// untracked process, and pick up a process added at run time.
#include <gtest/gtest.h>
#include <linux/perf_event.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "PatternChild.h"
#include "TierReaderCheck.h"
#include "sources/FaultTraceSource.h"
#include "sources/SamplingSource.h"
#include "sources/SourceSet.h"
#include "support/TestSupport.h"
#include "sys/ProcStat.h"
#include "sys/bpf/PerfSampleAgg.h"
#include "sys/bpf/TgidBitmap.h"
#include "sys/perf/PerfEvent.h"
#include "tt_events.h"

namespace tt::sources {
namespace {

constexpr uint64_t kPages = 4096;  // 16 MiB

struct Score {
  double precision = 0, recall = 0;
  size_t reported = 0;
};

// Pages of `tgid` inside [base, base + kPages*4096) reported by `evidence`, scored against `truth`.
Score score(const std::vector<AccessEvidence>& evidence, pid_t tgid, uint64_t base, const std::set<uint64_t>& truth) {
  std::set<uint64_t> reported;
  for (const auto& e : evidence)
    if (e.tgid == tgid && e.page >= base && e.page < base + kPages * 4096) reported.insert(e.page);
  size_t hit = 0;
  for (uint64_t p : reported) hit += truth.contains(p) ? 1 : 0;
  Score s;
  s.reported = reported.size();
  s.precision = reported.empty() ? 0 : static_cast<double>(hit) / static_cast<double>(reported.size());
  s.recall = truth.empty() ? 0 : static_cast<double>(hit) / static_cast<double>(truth.size());
  return s;
}

// The pages of `child`'s buffer that `evidence` reports. The child's other faults (its stack, a
// page of its own written for the first time since the fork) are its own too, and counted, but
// are not what a test touched.
std::set<uint64_t> bufferPagesOf(const std::vector<AccessEvidence>& evidence, const test::PatternChild& child) {
  std::set<uint64_t> out;
  for (const auto& e : evidence)
    if (e.tgid == child.pid() && e.page >= child.base() && e.page < child.base() + child.pages() * 4096) out.insert(e.page);
  return out;
}

size_t countOf(const std::vector<AccessEvidence>& evidence, pid_t tgid) {
  return static_cast<size_t>(std::count_if(evidence.begin(), evidence.end(), [&](const auto& e) { return e.tgid == tgid; }));
}

// Runs the shared scenario against one source.
void exercise(Source& source) {
  test::PatternChild tracked(kPages);
  test::PatternChild other(kPages);
  ASSERT_TRUE(source.addProcess(tracked.pid()).ok());

  std::vector<AccessEvidence> evidence;
  ASSERT_TRUE(tt::test::collectRecords(source, evidence).ok());  // drop whatever came before
  evidence.clear();
  const auto truth = tracked.touch(3, 0);  // every third page
  (void)other.touch(3, 0);
  ASSERT_TRUE(tt::test::collectRecords(source, evidence).ok());
  const Score s = score(evidence, tracked.pid(), tracked.base(), truth);
  EXPECT_GE(s.precision, 0.95) << source.name() << ": reported " << s.reported << " pages, truth " << truth.size();
  EXPECT_GE(s.recall, 0.95) << source.name() << ": reported " << s.reported << " pages, truth " << truth.size();
  EXPECT_EQ(countOf(evidence, other.pid()), 0U) << source.name() << " reported an untracked process";

  // A process added at run time is picked up from then on.
  ASSERT_TRUE(source.addProcess(other.pid()).ok());
  evidence.clear();
  const auto truthOther = other.touch(3, 1);
  ASSERT_TRUE(tt::test::collectRecords(source, evidence).ok());
  const Score so = score(evidence, other.pid(), other.base(), truthOther);
  EXPECT_GE(so.precision, 0.95) << source.name() << " after addProcess: reported " << so.reported;
  EXPECT_GE(so.recall, 0.95) << source.name() << " after addProcess: reported " << so.reported;

  // And dropped after removeProcess.
  ASSERT_TRUE(source.removeProcess(tracked.pid()).ok());
  evidence.clear();
  (void)tracked.touch(3, 2);
  ASSERT_TRUE(tt::test::collectRecords(source, evidence).ok());
  EXPECT_EQ(countOf(evidence, tracked.pid()), 0U) << source.name() << " still reports a removed process";
}

TEST(SourcesPrivileged, FaultTraceReportsTouchedPagesOfTrackedProcessesOnly) {
  TT_REQUIRE_ROOT();
  FaultTraceSource source(sys::bpf::FaultTrace::Options{}, FaultTraceSource::Guard{.pauseOverBudget = false}, sys::Fs("/proc"));
  source.open();
  ASSERT_TRUE(source.status().available) << source.status().detail;
  exercise(source);
}

// Write-protect faults come in storms too: copy-on-write after fork, and every written page once an
// epoch under soft-dirty tracking. 40000 of them in one epoch, more than the fault trace's 1 MiB
// ring holds as records (about 21000), all reach the daemon as Store evidence of their pages: they
// are counted per page in kernel, as first touches are.
TEST(SourcesPrivileged, FaultTraceCountsAStormOfWriteProtectFaultsWithoutLosingAny) {
  TT_REQUIRE_ROOT();
  FaultTraceSource source(sys::bpf::FaultTrace::Options{}, FaultTraceSource::Guard{.pauseOverBudget = false}, sys::Fs("/proc"));
  source.open();
  ASSERT_TRUE(source.status().available) << source.status().detail;
  constexpr uint64_t kCowPages = 40000;
  test::PatternChild child(kCowPages);
  (void)child.writeRange(0, kCowPages);  // populated: the copies below are the only faults
  ASSERT_TRUE(source.addProcess(child.pid()).ok());
  std::vector<AccessEvidence> evidence;
  ASSERT_TRUE(tt::test::collectRecords(source, evidence).ok());
  evidence.clear();
  const auto written = child.cowWriteRange(0, kCowPages);
  ASSERT_TRUE(tt::test::collectRecords(source, evidence).ok());
  std::set<uint64_t> stores;
  for (const auto& e : evidence)
    if (e.tgid == child.pid() && e.kind == AccessKind::Store && e.page >= child.base() &&
        e.page < child.base() + kCowPages * 4096)
      stores.insert(e.page);
  std::cout << "write-protect faults: " << stores.size() << " pages reported as stores of " << written.size() << "\n";
  EXPECT_EQ(stores, written);
  EXPECT_EQ(source.counters().lost, 0U) << "events lost";

  // Left to soft-dirty when it runs (it write-protects every page each epoch and reports the
  // writes itself): not counted at all.
  sys::bpf::FaultTrace::Options leftToSoftDirty;
  leftToSoftDirty.reportWriteProtect = false;
  FaultTraceSource quiet(leftToSoftDirty, FaultTraceSource::Guard{.pauseOverBudget = false}, sys::Fs("/proc"));
  quiet.open();
  ASSERT_TRUE(quiet.status().available) << quiet.status().detail;
  EXPECT_NE(quiet.status().detail.find("left to soft-dirty"), std::string::npos) << quiet.status().detail;
  ASSERT_TRUE(quiet.addProcess(child.pid()).ok());
  evidence.clear();
  ASSERT_TRUE(tt::test::collectRecords(quiet, evidence).ok());
  evidence.clear();
  (void)child.cowWriteRange(0, kCowPages);
  ASSERT_TRUE(tt::test::collectRecords(quiet, evidence).ok());
  size_t quietStores = 0;
  for (const auto& e : evidence) quietStores += e.tgid == child.pid() && e.kind == AccessKind::Store ? 1 : 0;
  EXPECT_EQ(quietStores, 0U);
}

// The page-fault program runs on every user fault of every process while attached, so it is
// attached only while something is tracked, and counting works again after a re-attach.
TEST(SourcesPrivileged, FaultProgramIsAttachedOnlyWhileAProcessIsTracked) {
  TT_REQUIRE_ROOT();
  auto trace = sys::bpf::FaultTrace::start(sys::bpf::FaultTrace::Options{});
  ASSERT_TRUE(trace.ok()) << trace.error().message();
  auto& t = **trace;
  EXPECT_FALSE(t.faultProgramAttached());
  test::PatternChild a(8), b(8);
  ASSERT_TRUE(t.track(a.pid()).ok());
  EXPECT_TRUE(t.faultProgramAttached());
  ASSERT_TRUE(t.track(b.pid()).ok());
  ASSERT_TRUE(t.untrack(a.pid()).ok());
  EXPECT_TRUE(t.faultProgramAttached()) << "b is still tracked";
  ASSERT_TRUE(t.untrack(b.pid()).ok());
  EXPECT_FALSE(t.faultProgramAttached());
  std::vector<sys::bpf::ChunkCounts> blocks;
  ASSERT_TRUE(t.drainFaultCounts(blocks).ok());
  blocks.clear();
  (void)a.touch(1, 0);  // nothing tracked, nothing attached: not counted
  ASSERT_TRUE(t.track(b.pid()).ok());
  EXPECT_TRUE(t.faultProgramAttached());
  const auto touched = b.touch(1, 0);
  ASSERT_TRUE(t.drainFaultCounts(blocks).ok());
  uint64_t ofA = 0, ofB = 0;
  for (const auto& block : blocks)
    for (uint32_t i = 0; i < sys::bpf::kChunkPages; ++i) {
      if (block.counts[i] == 0) continue;
      if (block.tgid == static_cast<uint32_t>(a.pid())) ++ofA;
      if (block.tgid == static_cast<uint32_t>(b.pid()) && touched.count(block.base + uint64_t{i} * 4096)) ++ofB;
    }
  EXPECT_EQ(ofA, 0U);
  EXPECT_EQ(ofB, touched.size());
}

// A fault-trace source opened with the default storm guard over the vmstat of `procfs`, and what
// its status line says of the guard.
constexpr const char* kDefaultGuard = "; paused while faults would cost over 2% of a CPU (150 ns per fault)";
std::unique_ptr<FaultTraceSource> openGuarded(const std::string& procfs) {
  auto source = std::make_unique<FaultTraceSource>(sys::bpf::FaultTrace::Options{}, FaultTraceSource::Guard{},
                                                   sys::Fs(procfs));
  source->open();
  return source;
}

// The storm guard: over the CPU budget the page-fault program is detached (the tracked child's
// faults go uncounted, what was counted before is kept), and once the estimate is under half the
// budget it is attached again. The machine's fault count comes from a fake procfs whose vmstat the
// test writes (the real one counts every process, and tests may run in parallel); the guard reads
// it on its own thread every 0.1 s.
class StormGuardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("tt-storm-guard-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    setFaults(1000);
  }
  void TearDown() override {
    stopStorm();
    source_.reset();
    std::filesystem::remove_all(dir_);
  }
  void setFaults(uint64_t n) {
    const auto tmp = dir_ / "vmstat.tmp";
    if (garbled_)
      std::ofstream(tmp) << "nr_free_pages 1\npgfault many\n";
    else
      std::ofstream(tmp) << "nr_free_pages 1\npgfault " << n << "\npgmajfault 0\n";
    std::filesystem::rename(tmp, dir_ / "vmstat");
  }
  // A fake storm: 250k more faults every 5 ms (50M faults/s) until stopStorm(). Frequent writes,
  // so a stalled writer does not give the guard's 0.1 s window a quiet spell.
  void startStorm() {
    storming_ = true;
    storm_ = std::thread([this] {
      for (uint64_t n = 2000000; storming_; n += 250000) {
        setFaults(n);
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    });
  }
  void stopStorm() {
    storming_ = false;
    if (storm_.joinable()) storm_.join();
  }
  // Opens the guarded source over the fake vmstat, tracks `child` and storms until it pauses.
  void pausedByAStorm(const test::PatternChild& child) {
    source_ = openGuarded(dir_.string());
    ASSERT_TRUE(source_->status().available) << source_->status().detail;
    ASSERT_TRUE(source_->addProcess(child.pid()).ok());
    startStorm();  // 50M faults/s x 150 ns: 750% of a CPU
    ASSERT_TRUE(waitFor([&] { return source_->faultProgramPaused(); })) << "no pause in 3 s";
  }
  static bool waitFor(const std::function<bool()>& done) {
    for (int i = 0; i < 300 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return done();
  }
  std::filesystem::path dir_;
  std::unique_ptr<FaultTraceSource> source_;  // pausedByAStorm's
  std::atomic<bool> garbled_{false};           // the storm writes a count that is no number
  std::atomic<bool> storming_{false};
  std::thread storm_;
};

TEST_F(StormGuardTest, PausesTheFaultProgramOverBudgetKeepsWhatWasCountedAndResumesUnderHalfOfIt) {
  TT_REQUIRE_ROOT();
  auto guarded = openGuarded(dir_.string());
  FaultTraceSource& source = *guarded;
  ASSERT_TRUE(source.status().available) << source.status().detail;
  EXPECT_NE(source.status().detail.find(kDefaultGuard), std::string::npos) << source.status().detail;
  test::PatternChild child(256);
  ASSERT_TRUE(source.addProcess(child.pid()).ok());
  std::vector<AccessEvidence> evidence;
  ASSERT_TRUE(tt::test::collectRecords(source, evidence).ok());
  ASSERT_NE(source.trace(), nullptr);
  EXPECT_TRUE(source.trace()->faultProgramAttached());
  // Counted before the storm, collected after the pause: kept.
  const auto before = child.touch(4, 0);
  startStorm();
  ASSERT_TRUE(waitFor([&] { return source.faultProgramPaused(); })) << "no pause in 3 s";
  EXPECT_FALSE(source.trace()->faultProgramAttached());
  EXPECT_EQ(source.pauses(), 1U);
  evidence.clear();
  ASSERT_TRUE(tt::test::collectRecords(source, evidence).ok());
  EXPECT_EQ(bufferPagesOf(evidence, child), before);
  // The status shows what the program would cost; the counters what it costs: nothing, detached.
  EXPECT_TRUE(source.counters().paused);
  EXPECT_EQ(source.counters().pauses, 1U);
  EXPECT_EQ(source.counters().costPercent, 0.0);
  EXPECT_NE(source.status().detail.find("PAUSED: faults would cost"), std::string::npos) << source.status().detail;
  // Paused: the child's faults are not counted; tracking another process keeps the program
  // detached. (With nothing tracked the guard starts afresh: NothingTrackedNothingPaused.)
  (void)child.touch(4, 1);
  test::PatternChild other(16);
  ASSERT_TRUE(source.addProcess(other.pid()).ok());
  EXPECT_FALSE(source.trace()->faultProgramAttached()) << "tracking a process while paused";
  (void)other.touch(1, 0);
  ASSERT_TRUE(source.removeProcess(other.pid()).ok());
  evidence.clear();
  ASSERT_TRUE(tt::test::collectRecords(source, evidence).ok());
  EXPECT_EQ(countOf(evidence, child.pid()), 0U);
  EXPECT_EQ(countOf(evidence, other.pid()), 0U);
  EXPECT_TRUE(source.faultProgramPaused()) << "the storm goes on, so does the pause";
  // The storm ends: at most half the budget, attached again, counting again.
  stopStorm();
  ASSERT_TRUE(waitFor([&] { return !source.faultProgramPaused(); })) << "no resume in 3 s";
  EXPECT_TRUE(source.trace()->faultProgramAttached());
  const auto after = child.touch(4, 2);
  evidence.clear();
  ASSERT_TRUE(tt::test::collectRecords(source, evidence).ok());
  EXPECT_EQ(bufferPagesOf(evidence, child), after);
  EXPECT_EQ(source.status().detail.find("PAUSED"), std::string::npos) << source.status().detail;
  EXPECT_FALSE(source.counters().paused);
  EXPECT_EQ(source.pauses(), 1U);
}

// The budget is live (tensortierctl tune): raised over what the storm costs, the program resumes
// while the storm goes on.
TEST_F(StormGuardTest, ABudgetRaisedLiveResumesTheProgram) {
  TT_REQUIRE_ROOT();
  test::PatternChild child(16);
  ASSERT_NO_FATAL_FAILURE(pausedByAStorm(child));
  FaultTraceSource& source = *source_;
  SamplingLimits limits;
  limits.cpuBudgetPercent = 100;
  limits.sampleCostNs = 1;  // 5-10% of a CPU, under half the new budget
  ASSERT_TRUE(source.setSamplingLimits(limits).ok());
  ASSERT_TRUE(waitFor([&] { return !source.faultProgramPaused(); })) << "no resume in 3 s";
  EXPECT_TRUE(source.trace()->faultProgramAttached());
  EXPECT_NE(source.status().detail.find("over 100% of a CPU (1 ns per fault)"), std::string::npos)
      << source.status().detail;
}

// With nothing tracked the program is detached anyway: a storm pauses nothing (and logs nothing)
// until a process is tracked; untracking the last one ends the pause, and tracking again judges
// afresh.
TEST_F(StormGuardTest, NothingTrackedNothingPaused) {
  TT_REQUIRE_ROOT();
  source_ = openGuarded(dir_.string());
  ASSERT_TRUE(source_->status().available) << source_->status().detail;
  startStorm();
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_FALSE(source_->faultProgramPaused());
  EXPECT_EQ(source_->pauses(), 0U);
  test::PatternChild child(16);
  ASSERT_TRUE(source_->addProcess(child.pid()).ok());
  EXPECT_TRUE(waitFor([&] { return source_->faultProgramPaused(); })) << "no pause in 3 s once tracking";
  EXPECT_EQ(source_->pauses(), 1U);
  ASSERT_TRUE(source_->removeProcess(child.pid()).ok());
  EXPECT_TRUE(waitFor([&] { return !source_->faultProgramPaused(); })) << "still paused with nothing tracked";
  ASSERT_TRUE(source_->addProcess(child.pid()).ok());
  EXPECT_TRUE(waitFor([&] { return source_->faultProgramPaused(); })) << "no pause in 3 s once tracking again";
  EXPECT_EQ(source_->pauses(), 2U);
}

// The thread of this process named `name` (/proc/self/task/TID/comm), if any.
std::optional<pid_t> threadNamed(const std::string& name) {
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string line;
    if (std::getline(comm, line) && line == name) return static_cast<pid_t>(std::stol(task.path().filename()));
  }
  return std::nullopt;
}

// How often a thread of this process went to sleep by itself (voluntary_ctxt_switches): its waits.
uint64_t voluntarySwitches(pid_t tid) {
  const std::string status = tt::test::readFileOrFail("/proc/self/task/" + std::to_string(tid) + "/status");
  const auto field = sys::statusField(status, "voluntary_ctxt_switches");
  return field ? std::stoull(std::string(*field)) : 0;
}

// With nothing tracked there is nothing to judge: the guard's thread sleeps instead of waking every
// 0.1 s in a daemon without clients, and ticks again once a process is tracked.
TEST_F(StormGuardTest, WithNothingTrackedTheGuardSleeps) {
  TT_REQUIRE_ROOT();
  source_ = openGuarded(dir_.string());
  ASSERT_TRUE(source_->status().available) << source_->status().detail;
  const auto tid = threadNamed("tt-fault-guard");
  ASSERT_TRUE(tid.has_value()) << "no thread named tt-fault-guard";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // its first tick, then asleep
  const uint64_t idleFrom = voluntarySwitches(*tid);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const uint64_t idleWaits = voluntarySwitches(*tid) - idleFrom;
  EXPECT_LE(idleWaits, 1U) << "the guard woke " << idleWaits << " times in 1 s with nothing tracked";
  test::PatternChild child(16);
  ASSERT_TRUE(source_->addProcess(child.pid()).ok());
  const uint64_t trackedFrom = voluntarySwitches(*tid);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_GE(voluntarySwitches(*tid) - trackedFrom, 5U) << "the guard does not tick while a process is tracked";
  ASSERT_TRUE(source_->removeProcess(child.pid()).ok());
}

// A fault count that cannot be read leaves nothing to judge by: the program runs, as with the guard
// off, until the count reads again and the guard judges afresh.
TEST_F(StormGuardTest, AnUnreadableFaultCountKeepsTheProgramAttached) {
  TT_REQUIRE_ROOT();
  test::PatternChild child(16);
  ASSERT_NO_FATAL_FAILURE(pausedByAStorm(child));
  FaultTraceSource& source = *source_;
  garbled_ = true;
  ASSERT_TRUE(waitFor([&] { return !source.faultProgramPaused(); })) << "still paused on an unreadable count";
  EXPECT_TRUE(source.trace()->faultProgramAttached());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(source.faultProgramPaused()) << "paused without a count";
  garbled_ = false;  // the storm goes on, readable again
  ASSERT_TRUE(waitFor([&] { return source.faultProgramPaused(); })) << "no pause in 3 s once readable";
  EXPECT_EQ(source.pauses(), 2U);
}

// Against the real /proc/vmstat: the watch thread counts the machine's faults (here this test's
// own, in a loop) into an estimate, with a budget out of reach (other tests run in parallel), and
// a tracked process is counted.
TEST(SourcesPrivileged, StormGuardRunsOnTheRealFaultCount) {
  TT_REQUIRE_ROOT();
  auto guarded = openGuarded("/proc");
  FaultTraceSource& source = *guarded;
  ASSERT_TRUE(source.status().available) << source.status().detail;
  EXPECT_NE(source.status().detail.find(kDefaultGuard), std::string::npos) << source.status().detail;
  SamplingLimits limits;
  limits.cpuBudgetPercent = 100;
  limits.sampleCostNs = 150;
  ASSERT_TRUE(source.setSamplingLimits(limits).ok());
  test::PatternChild child(16);
  ASSERT_TRUE(source.addProcess(child.pid()).ok());
  const auto touched = child.touch(1, 0);
  std::vector<AccessEvidence> evidence;
  double estimate = 0;
  for (int i = 0; i < 30 && estimate <= 0; ++i) {  // up to 3 s of 0.1 s windows with faults in them
    (void)sys::perf::faultBurstCpuNs(256);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_TRUE(tt::test::collectRecords(source, evidence).ok());
    estimate = source.counters().costPercent;
  }
  EXPECT_GT(estimate, 0.0) << "the watch thread never counted a fault";
  EXPECT_FALSE(source.faultProgramPaused());
  EXPECT_EQ(bufferPagesOf(evidence, child), touched);
}

// Where the fault trace counts every fault of tracked processes, software-fault sampling (a sample
// of the same faults) is not opened unless asked for; where the fault trace does not run, it is.
TEST(SourcesPrivileged, SoftwareFaultSamplingIsTheFallbackForTheFaultTrace) {
  TT_REQUIRE_ROOT();
  auto names = [](const SourceSet& set) {
    std::set<std::string> out;
    for (const auto& s : set.sources())
      if (s->status().available) out.insert(std::string(s->name()));
    return out;
  };
  auto mentions = [](const SourceSet& set, const std::string& text) {
    const auto lines = set.statusLines();
    return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(text) != std::string::npos; });
  };
  tensortier::v1::SourcesConfig c;
  c.mutable_pmu()->set_enabled(false);
  c.mutable_software_faults()->set_calibrate_sample_cost(false);
  {
    auto set = SourceSet::open(c, topology::Topology{});
    EXPECT_EQ(names(*set), std::set<std::string>{"fault-trace"});
    EXPECT_TRUE(mentions(*set, "software-faults: not opened: fault-trace counts the same faults"));
  }
  {
    auto both = c;
    both.mutable_software_faults()->set_with_fault_trace(true);
    auto set = SourceSet::open(both, topology::Topology{});
    EXPECT_EQ(names(*set), (std::set<std::string>{"fault-trace", "software-faults"}));
  }
  {
    auto noTrace = c;
    noTrace.mutable_fault_trace()->set_enabled(false);
    auto set = SourceSet::open(noTrace, topology::Topology{});
    EXPECT_EQ(names(*set), std::set<std::string>{"software-faults"});
    EXPECT_FALSE(mentions(*set, "software-faults: not opened"));
    // What the config left out says so, at start and in the CLI.
    EXPECT_TRUE(mentions(*set, "fault-trace: not opened: disabled (sources.fault_trace.enabled: false)"));
    EXPECT_TRUE(mentions(*set, "pmu: not opened: disabled (sources.pmu.enabled: false)"));
  }
}

// A daemon in a pid namespace of its own (a container without the host's pids; here a procfs
// fixture whose self/ns/pid is not the initial namespace's) would have its BPF programs filter on
// pids they never see: the fault trace is not opened, and sampling reads its ring. Each says why.
TEST(SourcesPrivileged, InAPidNamespaceOfItsOwnNoBpfFiltersOnTheDaemonsPids) {
  TT_REQUIRE_ROOT();
  const std::filesystem::path root = std::filesystem::temp_directory_path() / ("tt-pidns-" + std::to_string(::getpid()));
  std::filesystem::create_directories(root / "self/ns");
  std::filesystem::create_symlink("pid:[4026532417]", root / "self/ns/pid");
  tensortier::v1::SourcesConfig c;
  c.set_procfs_root(root.string());
  c.mutable_pmu()->set_enabled(false);
  c.mutable_software_faults()->set_calibrate_sample_cost(false);
  c.set_kernel_tiering_state_file((root / "kernel-tiering.state").string());
  {
    auto set = SourceSet::open(c, topology::Topology{});
    const auto lines = set->statusLines();
    auto mentions = [&](const std::string& text) {
      return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(text) != std::string::npos; });
    };
    EXPECT_TRUE(mentions("fault-trace: not opened: the daemon runs in a pid namespace of its own"));
    EXPECT_TRUE(mentions("sampling reads its ring"));
    EXPECT_TRUE(mentions("software-faults: ok:"));
    EXPECT_TRUE(mentions("user-space ring reader")) << "software-fault sampling aggregated in kernel";
    EXPECT_FALSE(mentions("fault-trace: ok"));
  }
  std::filesystem::remove_all(root);
}

std::unique_ptr<SamplingSource> softwareSource(Aggregation aggregation) {
  SamplingOptions o = softwareFaultOptions(1, aggregation);
  o.ringPages = 1024;  // 4 MiB per CPU: holds one round of samples between collects
  auto s = std::make_unique<SamplingSource>(o, sys::Fs("/sys"));
  s->open();
  return s;
}

TEST(SourcesPrivileged, SoftwareFaultSamplingThroughUserRing) {
  TT_REQUIRE_ROOT();
  auto source = softwareSource(Aggregation::UserRing);
  ASSERT_TRUE(source->status().available) << source->status().detail;
  ASSERT_EQ(source->aggregation(), Aggregation::UserRing);
  exercise(*source);
  EXPECT_EQ(source->counters().lost, 0U);
}

// Each path's events ask the kernel for the fields it uses: the ring path the configured ones (its
// records are attributed by TID), the in-kernel path only what its program reads (the address),
// since the kernel prepares every requested field before it runs the program.
TEST(SourcesPrivileged, EachPathOpensItsEventsWithTheFieldsItReads) {
  TT_REQUIRE_ROOT();
  const uint64_t configured = softwareFaultOptions(1, Aggregation::UserRing).events.at(0).sample_type;
  ASSERT_NE(configured & PERF_SAMPLE_TID, 0U);
  for (const Aggregation aggregation : {Aggregation::UserRing, Aggregation::InKernel}) {
    auto source = softwareSource(aggregation);
    ASSERT_TRUE(source->status().available) << source->status().detail;
    ASSERT_EQ(source->aggregation(), aggregation) << source->status().detail;
    ASSERT_FALSE(source->eventSampleTypes().empty());
    const uint64_t expected = aggregation == Aggregation::InKernel ? uint64_t{PERF_SAMPLE_ADDR} : configured;
    for (uint64_t t : source->eventSampleTypes()) EXPECT_EQ(t, expected) << source->status().detail;
  }
}

TEST(SourcesPrivileged, SoftwareFaultSamplingThroughInKernelAggregation) {
  TT_REQUIRE_ROOT();
  auto source = softwareSource(Aggregation::InKernel);
  ASSERT_TRUE(source->status().available) << source->status().detail;
  ASSERT_EQ(source->aggregation(), Aggregation::InKernel) << source->status().detail;
  exercise(*source);
  auto stats = source->agg()->stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_GT(stats->tracked, 0U);
  EXPECT_EQ(stats->mapFull, 0U);
}

// A sampling event in a group led by a counting event, as mem-loads-aux leads the PEBS load
// event on Sapphire Rapids / Alder Lake (no PMU here: a software event stands in for each). The
// leader is opened first on every CPU and must be enabled for the member to count; on both paths
// the member's samples arrive (the BPF program and the ring are the member's, not the leader's).
TEST(SourcesPrivileged, EventsLedByACountingGroupLeaderSampleOnBothPaths) {
  TT_REQUIRE_ROOT();
  for (const Aggregation aggregation : {Aggregation::UserRing, Aggregation::InKernel}) {
    SamplingOptions o = softwareFaultOptions(1, aggregation);
    o.ringPages = 1024;
    perf_event_attr lead{};
    lead.size = sizeof lead;
    lead.type = PERF_TYPE_SOFTWARE;
    lead.config = PERF_COUNT_SW_PAGE_FAULTS;  // counting only: sample_period 0
    lead.exclude_kernel = 1;
    lead.disabled = 1;
    o.groupLeaders = {lead};
    SamplingSource source(o, sys::Fs("/sys"));
    source.open();
    ASSERT_TRUE(source.status().available) << source.status().detail;
    ASSERT_EQ(source.aggregation(), aggregation) << source.status().detail;
    exercise(source);
  }
}

// Per-page counts: every fault of the child is sampled (period 1), so each page's evidence weight
// is its number of faults in the epoch; the in-kernel path's per-page counters stop at 255.
void expectPerPageWeights(SamplingSource& source, uint64_t cap) {
  test::PatternChild child(64);
  ASSERT_TRUE(source.addProcess(child.pid()).ok());
  std::vector<AccessEvidence> evidence;
  ASSERT_TRUE(tt::test::collectRecords(source, evidence).ok());
  evidence.clear();
  constexpr uint32_t kHot = 300, kWarm = 7;
  (void)child.refaultRange(0, 1, kHot);
  (void)child.refaultRange(8, 16, kWarm);
  ASSERT_TRUE(tt::test::collectRecords(source, evidence).ok());
  std::map<uint64_t, uint64_t> weight;
  for (const auto& e : evidence)
    if (e.tgid == child.pid() && e.page >= child.base() && e.page < child.base() + 64 * 4096) weight[e.page] += e.weight;
  EXPECT_EQ(weight[child.base()], std::min<uint64_t>(kHot, cap)) << source.name();
  for (uint64_t i = 8; i < 16; ++i) EXPECT_EQ(weight[child.base() + i * 4096], kWarm) << source.name() << " page " << i;
  for (uint64_t i : {1U, 7U, 16U, 63U}) EXPECT_EQ(weight.count(child.base() + i * 4096), 0U) << "untouched page " << i;
}

TEST(SourcesPrivileged, InKernelBlocksCountFaultsPerPageAndSaturate) {
  TT_REQUIRE_ROOT();
  auto source = softwareSource(Aggregation::InKernel);
  ASSERT_EQ(source->aggregation(), Aggregation::InKernel) << source->status().detail;
  auto before = source->agg()->stats();
  ASSERT_TRUE(before.ok());
  expectPerPageWeights(*source, sys::bpf::kChunkCountMax);
  auto after = source->agg()->stats();
  ASSERT_TRUE(after.ok());
  EXPECT_GE(after->saturated - before->saturated, 300U - sys::bpf::kChunkCountMax);
}

// Faults alternating between two chunks: every one moves the CPU's staging block to the other
// chunk, so the counts reach the hash through the in-kernel merge (and its saturating add), not
// only through the drain's staged half.
TEST(SourcesPrivileged, InKernelStagingMergesAlternatingChunksExactly) {
  TT_REQUIRE_ROOT();
  auto source = softwareSource(Aggregation::InKernel);
  ASSERT_EQ(source->aggregation(), Aggregation::InKernel) << source->status().detail;
  test::PatternChild child(2 * sys::bpf::kChunkPages);
  ASSERT_TRUE(source->addProcess(child.pid()).ok());
  std::vector<AccessEvidence> evidence;
  ASSERT_TRUE(tt::test::collectRecords(*source, evidence).ok());
  evidence.clear();
  auto before = source->agg()->stats();
  ASSERT_TRUE(before.ok());
  constexpr uint32_t kHot = 300, kWarm = 7;
  const uint64_t other = sys::bpf::kChunkPages;  // page index 2 MiB further: always another chunk
  for (uint32_t i = 0; i < kHot; ++i) {
    (void)child.refaultRange(0, 1, 1);
    (void)child.refaultRange(other, other + 1, 1);
    if (i < kWarm) {
      (void)child.refaultRange(8, 16, 1);
      (void)child.refaultRange(other + 8, other + 16, 1);
    }
  }
  ASSERT_TRUE(tt::test::collectRecords(*source, evidence).ok());
  auto after = source->agg()->stats();
  ASSERT_TRUE(after.ok());
  std::map<uint64_t, uint64_t> weight;
  for (const auto& e : evidence)
    if (e.tgid == child.pid()) weight[(e.page - child.base()) / 4096] += e.weight;
  EXPECT_EQ(weight[0], sys::bpf::kChunkCountMax);
  EXPECT_EQ(weight[other], sys::bpf::kChunkCountMax);
  for (uint64_t i = 8; i < 16; ++i) {
    EXPECT_EQ(weight[i], kWarm) << "page " << i;
    EXPECT_EQ(weight[other + i], kWarm) << "page " << other + i;
  }
  for (uint64_t i : {uint64_t{1}, uint64_t{7}, uint64_t{16}, other + 1, other + 16}) EXPECT_EQ(weight.count(i), 0U) << "untouched page " << i;
  EXPECT_GE(after->newChunks - before->newChunks, 2U) << "both chunks reach the hash through merges";
  EXPECT_EQ(after->saturated - before->saturated, 2 * (kHot - sys::bpf::kChunkCountMax));
  EXPECT_EQ(after->mapFull - before->mapFull, 0U);
}

// A count map too small for the epoch: each CPU keeps counting the chunk it has staged and drops
// events in other chunks once its staged chunk cannot be inserted. Every fault of the child is
// either in the evidence or counted as dropped, and what the map held is delivered.
TEST(SourcesPrivileged, InKernelFullMapDropsOnlyWhatItCannotStageAndCountsIt) {
  TT_REQUIRE_ROOT();
  SamplingOptions o = softwareFaultOptions(1, Aggregation::InKernel);
  o.mapEntries = 64;  // the configuration's lower bound
  SamplingSource source(o, sys::Fs("/sys"));
  source.open();
  ASSERT_EQ(source.aggregation(), Aggregation::InKernel) << source.status().detail;
  constexpr uint64_t kChunks = 96;  // one page in each of 96 chunks: more than the map holds
  test::PatternChild child(kChunks * sys::bpf::kChunkPages);
  ASSERT_TRUE(source.addProcess(child.pid()).ok());
  std::vector<AccessEvidence> evidence;
  ASSERT_TRUE(tt::test::collectRecords(source, evidence).ok());
  evidence.clear();
  auto before = source.agg()->stats();
  ASSERT_TRUE(before.ok());
  const uint64_t lostBefore = source.counters().lost;
  const auto touched = child.touch(sys::bpf::kChunkPages, 0);
  ASSERT_EQ(touched.size(), kChunks);
  ASSERT_TRUE(tt::test::collectRecords(source, evidence).ok());
  auto after = source.agg()->stats();
  ASSERT_TRUE(after.ok());
  // The drops are the source's lost samples (status, metrics), like a full ring's.
  EXPECT_EQ(source.counters().lost - lostBefore, after->mapFull - before->mapFull);
  uint64_t counted = 0;
  for (const auto& e : evidence)
    if (e.tgid == child.pid() && touched.count(e.page)) counted += e.weight;
  const uint64_t dropped = after->mapFull - before->mapFull;
  EXPECT_GT(dropped, 0U);
  EXPECT_GE(counted, 64U) << "the blocks the map held, plus the staged ones";
  EXPECT_LE(counted, kChunks);
  // Other faults of the child (its stack, the command pipe) can be dropped too: at least.
  EXPECT_GE(counted + dropped, kChunks);
  // The next epoch has room again.
  evidence.clear();
  const auto again = child.touch(sys::bpf::kChunkPages, 1);
  ASSERT_TRUE(tt::test::collectRecords(source, evidence).ok());
  uint64_t second = 0;
  for (const auto& e : evidence)
    if (e.tgid == child.pid() && again.count(e.page)) second += e.weight;
  EXPECT_GE(second, 64U);
}

// Each event's samples are counted as that event's kind, through the BPF attach cookie: a
// software fault event declared as sampling stores yields Store evidence on the in-kernel path.
TEST(SourcesPrivileged, InKernelSamplesCarryTheirEventsKind) {
  TT_REQUIRE_ROOT();
  SamplingOptions o = softwareFaultOptions(1, Aggregation::InKernel);
  o.eventKinds = {AccessKind::Store};
  SamplingSource source(o, sys::Fs("/sys"));
  source.open();
  ASSERT_EQ(source.aggregation(), Aggregation::InKernel) << source.status().detail;
  test::PatternChild child(32);
  ASSERT_TRUE(source.addProcess(child.pid()).ok());
  std::vector<AccessEvidence> evidence;
  ASSERT_TRUE(tt::test::collectRecords(source, evidence).ok());
  evidence.clear();
  const auto touched = child.touch(1, 0);
  ASSERT_TRUE(tt::test::collectRecords(source, evidence).ok());
  size_t stores = 0, others = 0;
  for (const auto& e : evidence) {
    if (e.tgid != child.pid() || !touched.count(e.page)) continue;
    (e.kind == AccessKind::Store ? stores : others) += 1;
  }
  EXPECT_EQ(stores, touched.size());
  EXPECT_EQ(others, 0U);
}

// The data_src reader of the in-kernel path on the host's kernel (TierReaderCheck.h): a software
// fault event declared as sampling stores keeps that kind, and gets no tier.
TEST(SourcesPrivileged, InKernelEventsRecordingDataSrcCountWithTheTierReader) {
  TT_REQUIRE_ROOT();
  test::checkTierReaderOnSoftwareFaults(AccessKind::Store);
}

TEST(SourcesPrivileged, UserRingCountsFaultsPerPageWithoutCap) {
  TT_REQUIRE_ROOT();
  auto source = softwareSource(Aggregation::UserRing);
  ASSERT_TRUE(source->status().available) << source->status().detail;
  expectPerPageWeights(*source, UINT64_MAX);
  EXPECT_EQ(source->counters().lost, 0U);
}

// Live tuning: SourceSet::applyConfig changes the running events' period (PERF_EVENT_IOC_PERIOD);
// the kernel then samples one fault in `period`.
// Sets a /proc/sys value for the test's lifetime and puts the old one back.
class SysctlOverride {
 public:
  SysctlOverride(std::string path, const std::string& value) : path_(std::move(path)) {
    std::ifstream in(path_);
    if (!(in >> old_)) return;
    std::ofstream out(path_);
    ok_ = static_cast<bool>(out << value << "\n");
  }
  ~SysctlOverride() {
    if (!old_.empty()) std::ofstream(path_) << old_ << "\n";
  }
  SysctlOverride(const SysctlOverride&) = delete;
  SysctlOverride& operator=(const SysctlOverride&) = delete;
  [[nodiscard]] bool ok() const { return ok_; }

 private:
  std::string path_, old_;
  bool ok_ = false;
};

// The tgid bitmaps cover every tgid the kernel can hand out, not the kernel.pid_max found at start
// (32768 on this host): an admin may raise pid_max while the daemon runs, and the bitmap cannot
// grow without a reload. The largest possible tgid can be tracked by both programs; one past it
// is refused.
TEST(SourcesPrivileged, TgidsAboveTheCurrentPidMaxCanBeTracked) {
  TT_REQUIRE_ROOT();
  const pid_t largest = static_cast<pid_t>(sys::bpf::kPidMaxLimit - 1);
  auto agg = sys::bpf::PerfSampleAgg::load(sys::bpf::kPidMaxLimit, 64);
  ASSERT_TRUE(agg.ok()) << agg.error().message();
  EXPECT_TRUE((*agg)->track(largest).ok());
  EXPECT_TRUE((*agg)->untrack(largest).ok());
  EXPECT_FALSE((*agg)->track(largest + 1).ok());
  sys::bpf::FaultTrace::Options o;  // pidMax 0: the default
  auto trace = sys::bpf::FaultTrace::start(o);
  ASSERT_TRUE(trace.ok()) << trace.error().message();
  auto tracked = (*trace)->track(largest);
  EXPECT_TRUE(tracked.ok()) << tracked.error().message();
  EXPECT_TRUE((*trace)->untrack(largest).ok());
  EXPECT_FALSE((*trace)->track(largest + 1).ok());
}

// Where neither data_src reader loads, events that record data_src get the cookie-kinded program:
// samples are still counted, as the event's kind, and data_src is not read (on 6.3+ a reader would
// have read "not available" from every one of them).
TEST(SourcesPrivileged, WithoutADataSrcReaderSamplesAreCountedWithoutTier) {
  TT_REQUIRE_ROOT();
  auto agg = sys::bpf::PerfSampleAgg::load(sys::bpf::kPidMaxLimit, 1024, sys::bpf::DataSrcReader::None);
  ASSERT_TRUE(agg.ok()) << agg.error().message();
  EXPECT_EQ((*agg)->dataSrcReader(), sys::bpf::DataSrcReader::None);
  auto cpus = sys::perf::onlineCpus(sys::Fs("/sys"));
  ASSERT_TRUE(cpus.ok());
  std::vector<std::unique_ptr<sys::perf::PerfEvent>> events;
  for (int cpu : *cpus) {
    perf_event_attr a = softwareFaultAttr(1);
    a.sample_type |= PERF_SAMPLE_DATA_SRC;
    auto ev = sys::perf::PerfEvent::open(a, -1, cpu, 0);
    ASSERT_TRUE(ev.ok()) << ev.error().message();
    ASSERT_TRUE((*agg)->attach((*ev)->fd(), TT_KIND_STORE, true).ok());
    ASSERT_TRUE((*ev)->enable().ok());
    events.push_back(std::move(*ev));
  }
  test::PatternChild child(64);
  ASSERT_TRUE((*agg)->track(child.pid()).ok());
  const auto touched = child.touch(1, 0);
  std::vector<sys::bpf::ChunkCounts> blocks;
  ASSERT_TRUE((*agg)->drain(blocks).ok());
  EvidenceBatch batch;
  (void)appendChunkBlocks(blocks, AccessKind::Fault, 1, batch.blocks);
  const auto evidence = batch.flattened();
  size_t stores = 0;
  for (const auto& e : evidence) {
    if (e.tgid != child.pid() || !touched.count(e.page)) continue;
    EXPECT_EQ(e.servedBy, ServedBy::Unknown);
    stores += e.kind == AccessKind::Store ? 1 : 0;
  }
  EXPECT_EQ(stores, touched.size());
  auto stats = (*agg)->stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_GE(stats->tracked, touched.size());
  EXPECT_EQ(stats->withTier, 0U);
  EXPECT_EQ(stats->dataSrcNa, 0U) << "data_src was read without a reader";
}

// The kernel throttles an event that interrupts more often than kernel.perf_event_max_sample_rate
// allows and writes a THROTTLE record to the event's ring. On the in-kernel path the BPF program
// consumes every sample, and each event keeps a one-page control ring for these records only: the
// period controller must see the throttling there too and raise the period. A cpu-clock event
// every 20 us (hrtimer driven, which the kernel throttles; software fault events at period 1 never
// are) with the rate limit lowered to 1000 samples/s for the test must be throttled at once.
TEST(SourcesPrivileged, InKernelPathSeesThrottlingThroughItsControlRing) {
  TT_REQUIRE_ROOT();
  SysctlOverride rate("/proc/sys/kernel/perf_event_max_sample_rate", "1000");
  ASSERT_TRUE(rate.ok()) << "cannot lower kernel.perf_event_max_sample_rate";
  constexpr uint64_t kPeriodNs = 20'000;
  perf_event_attr a{};
  a.size = sizeof a;
  a.type = PERF_TYPE_SOFTWARE;
  a.config = PERF_COUNT_SW_CPU_CLOCK;
  a.sample_period = kPeriodNs;
  a.sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_ADDR;
  a.disabled = 1;
  SamplingOptions o;
  o.name = "cpu-clock";
  o.events = {a};
  o.eventDescription = "cpu-clock every 20 us";
  o.aggregation = Aggregation::InKernel;
  o.minPeriod = kPeriodNs;
  o.maxPeriod = kPeriodNs * 1024;
  SamplingSource source(o, sys::Fs("/sys"));
  source.open();
  ASSERT_TRUE(source.status().available) << source.status().detail;
  ASSERT_EQ(source.aggregation(), Aggregation::InKernel) << source.status().detail;
  std::vector<AccessEvidence> evidence;
  ASSERT_TRUE(tt::test::collectRecords(source, evidence).ok());
  const uint64_t throttledBefore = source.counters().throttled;
  const uint64_t periodBefore = source.period();
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  volatile uint64_t spin = 0;
  while (std::chrono::steady_clock::now() < until) spin = spin + 1;
  ASSERT_TRUE(tt::test::collectRecords(source, evidence).ok());
  EXPECT_GT(source.counters().throttled, throttledBefore) << "no THROTTLE record reached the in-kernel path";
  EXPECT_GT(source.period(), periodBefore) << "a throttled epoch must raise the period";
}

TEST(SourcesPrivileged, LiveConfigChangesTheRunningSamplePeriod) {
  TT_REQUIRE_ROOT();
  auto owned = softwareSource(Aggregation::UserRing);
  ASSERT_TRUE(owned->status().available) << owned->status().detail;
  auto* source = owned.get();
  std::vector<std::unique_ptr<Source>> v;
  v.push_back(std::move(owned));
  tensortier::v1::SourcesConfig running;
  running.mutable_software_faults()->set_period(1);
  SourceSet set(std::move(v), running);

  test::PatternChild child(kPages);
  ASSERT_TRUE(set.addProcess(child.pid()).ok());
  std::vector<AccessEvidence> evidence;
  ASSERT_TRUE(tt::test::collectRecords(set, evidence).ok());
  const uint64_t before = source->counters().samples;
  const auto firstHalf = child.touch(2, 0);  // one first-touch fault per page
  ASSERT_TRUE(tt::test::collectRecords(set, evidence).ok());
  const uint64_t atPeriod1 = source->counters().samples - before;
  EXPECT_GE(static_cast<double>(atPeriod1), 0.95 * static_cast<double>(firstHalf.size()));

  constexpr uint64_t kPeriod = 8;
  auto next = running;
  next.mutable_software_faults()->set_period(kPeriod);
  auto changes = set.applyConfig(next);
  ASSERT_TRUE(changes.ok()) << changes.error().message();
  EXPECT_EQ(changes->live, std::vector<std::string>{"sources.software_faults.period"});
  EXPECT_EQ(source->period(), kPeriod);

  const uint64_t mid = source->counters().samples;
  const auto secondHalf = child.touch(2, 1);
  ASSERT_TRUE(tt::test::collectRecords(set, evidence).ok());
  const uint64_t atPeriod8 = source->counters().samples - mid;
  // The events are per CPU and system-wide: faults of other processes on the same CPU advance the
  // same counter, so the child gets at most one sample in kPeriod of its faults (fewer on a busy
  // host), never the one per fault it got at period 1; and sampling goes on.
  const double expected = static_cast<double>(secondHalf.size()) / kPeriod;
  EXPECT_GE(atPeriod8, 1U) << "no samples at period " << kPeriod;
  EXPECT_LE(static_cast<double>(atPeriod8), 2.0 * expected) << "samples at period " << kPeriod;
}

// Software faults in kernel, starting at period 1 and free to adapt up to 65536 under a 3% budget.
SamplingOptions adaptiveSoftwareOptions() {
  SamplingOptions o = softwareFaultOptions(1, Aggregation::InKernel);
  o.minPeriod = 1;
  o.maxPeriod = 65536;
  o.cpuBudgetPercent = 3.0;
  return o;
}

// The budget covers the kernel's work per sample: open() calibrates it with the daemon's own
// faults, derives the storm floor from it, and a storm over budget raises the period at the next
// collect.
TEST(SourcesPrivileged, CalibratedSamplingCostRaisesThePeriodOverBudget) {
  TT_REQUIRE_ROOT();
  SamplingOptions o = adaptiveSoftwareOptions();
  o.calibrateSampleCost = true;
  SamplingSource source(o, sys::Fs("/sys"));
  source.open();
  ASSERT_TRUE(source.status().available) << source.status().detail;
  ASSERT_TRUE(source.sampleCostCalibrated()) << source.status().detail;
  EXPECT_GT(source.sampleCostNs(), 0.0);
  EXPECT_GT(source.eventCostNs(), 0.0);
  EXPECT_GE(source.eventCountNs(), 0.0);
  EXPECT_NE(source.status().detail.find("calibrated"), std::string::npos) << source.status().detail;
  const uint64_t floor = stormFloorPeriod(source.sampleCostNs(), source.eventCountNs(), source.eventCostNs(), o.cpuBudgetPercent);
  EXPECT_EQ(source.lowestPeriod(), std::min<uint64_t>(floor, o.maxPeriod));
  EXPECT_GE(source.period(), source.lowestPeriod());

  // A tighter budget raises the floor, and the running period with it, at once.
  const uint64_t atThreePercent = source.period();
  SamplingLimits tight;
  tight.cpuBudgetPercent = 0.3;
  tight.minPeriod = 1;
  tight.maxPeriod = 65536;
  ASSERT_TRUE(source.setSamplingLimits(tight).ok());
  EXPECT_EQ(source.lowestPeriod(),
            std::min<uint64_t>(stormFloorPeriod(source.sampleCostNs(), source.eventCountNs(), source.eventCostNs(), 0.3), 65536));
  EXPECT_GE(source.period(), source.lowestPeriod());
  if (atThreePercent < 65536) {
    EXPECT_GT(source.period(), atThreePercent);
  }
}

// Without calibration (no storm floor) a first-touch storm at period 1 costs far more than the
// budget in samples x the configured cost: the overflows are counted from the events' counts and
// the next collect raises the period. The events are system-wide, so on a busy machine other
// processes' faults alone can cost more than the budget; an extra collect before the storm could
// then raise the period before the storm starts. So the storm runs in the source's first epoch,
// at the period it opened with, and the sample cost is the bound's maximum (1 ms), which puts
// kPages samples over 3% of any epoch shorter than two minutes.
TEST(SourcesPrivileged, StormOverBudgetRaisesThePeriodAtTheNextCollect) {
  TT_REQUIRE_ROOT();
  SamplingOptions o = adaptiveSoftwareOptions();
  o.sampleCostNs = 1'000'000;
  SamplingSource source(o, sys::Fs("/sys"));
  source.open();
  ASSERT_TRUE(source.status().available) << source.status().detail;
  ASSERT_EQ(source.period(), 1U);
  test::PatternChild child(kPages);
  ASSERT_TRUE(source.addProcess(child.pid()).ok());
  const auto touched = child.touch(1, 0);  // kPages first-touch faults, every one sampled
  std::vector<AccessEvidence> evidence;
  ASSERT_TRUE(tt::test::collectRecords(source, evidence).ok());
  size_t seen = 0;
  for (const auto& e : evidence) seen += e.tgid == child.pid() && touched.count(e.page) ? 1 : 0;
  EXPECT_GE(seen, touched.size() * 95 / 100) << "the storm was sampled at period 1";
  EXPECT_GT(source.counters().costPercent, o.cpuBudgetPercent);
  EXPECT_GT(source.period(), 1U);
}

// An event that cannot be opened makes the source unavailable, and what had opened before it (an
// earlier event on every CPU, with its ring mmap) is closed, not held for the daemon's lifetime.
TEST(SourcesPrivileged, AFailedOpenLeavesNoPerfEventOpen) {
  TT_REQUIRE_ROOT();
  auto openFds = [] {
    size_t n = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
    return n;
  };
  for (Aggregation aggregation : {Aggregation::UserRing, Aggregation::InKernel}) {
    SamplingOptions o = softwareFaultOptions(1, aggregation);
    perf_event_attr bad = o.events[0];
    bad.type = PERF_TYPE_SOFTWARE;
    bad.config = 0xdead;  // no such software event: EINVAL on the first CPU
    o.events.push_back(bad);
    o.eventKinds.resize(o.events.size(), o.defaultKind);
    const size_t before = openFds();
    {
      SamplingSource source(o, sys::Fs("/sys"));
      source.open();
      ASSERT_FALSE(source.status().available) << "an event that cannot exist opened";
      EXPECT_EQ(openFds(), before) << "fds left open by the failed open (" << source.status().detail << ")";
    }
  }
}

// A ring too small for an epoch's samples loses them: they were taken and paid for but reach
// nobody, so a collect that learns of them raises the period although the estimated cost is far
// under the budget (1 ns a sample, ten CPUs allowed: the cost alone would keep period 1; the
// daemon's drain is most of these short epochs' wall time). The
// kernel writes its PERF_RECORD_LOST when the ring has room again, after the drain: the second
// epoch's collect reads it.
TEST(SourcesPrivileged, SamplesLostToAFullRingRaiseThePeriodAtTheNextCollect) {
  TT_REQUIRE_ROOT();
  SamplingOptions o = softwareFaultOptions(1, Aggregation::UserRing);
  o.minPeriod = 1;
  o.maxPeriod = 65536;
  o.cpuBudgetPercent = 1000;
  o.sampleCostNs = 1;
  o.ringPages = 1;  // 4 KiB: about 128 fault records
  SamplingSource source(o, sys::Fs("/sys"));
  source.open();
  ASSERT_TRUE(source.status().available) << source.status().detail;
  ASSERT_EQ(source.period(), 1U);
  test::PatternChild child(4096);
  // On one CPU: the kernel writes a ring's LOST record at that ring's next sample, so both bursts
  // must land in the same per-CPU ring.
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(0, &one);
  ASSERT_EQ(::sched_setaffinity(child.pid(), sizeof one, &one), 0) << std::strerror(errno);
  ASSERT_TRUE(source.addProcess(child.pid()).ok());
  (void)child.writeRange(0, 2048);  // 2048 first-touch faults, every one sampled
  std::vector<AccessEvidence> evidence;
  ASSERT_TRUE(tt::test::collectRecords(source, evidence).ok());
  (void)child.writeRange(2048, 4096);
  ASSERT_TRUE(tt::test::collectRecords(source, evidence).ok());
  ASSERT_GT(source.counters().lost, 0U) << "the one-page ring did not overflow: " << source.counters().samples
                                        << " samples delivered";
  EXPECT_LT(source.counters().costPercent, o.cpuBudgetPercent / 4) << "the cost alone would raise the period";
  EXPECT_GT(source.period(), 1U) << source.counters().lost << " samples lost, period unchanged";
}

}  // namespace
}  // namespace tt::sources
