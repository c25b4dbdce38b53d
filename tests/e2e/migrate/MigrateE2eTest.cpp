// Inside the VM: the migration engine moving a separate, live process's pages by pid with the real
// kernel. Node 0 = fast (CPUs + DRAM), node 1 = slow (CPU-less NVDIMM onlined by kmem).
//
// Size knobs (environment, passed by ttvm --env): TT_MIGRATE_E2E_MIB (per page size, default 256)
// and TT_MIGRATE_E2E_ROUNDS (0 -> 1 -> 0 round trips, default 20). CI runs the defaults, the full
// test; smaller values give a quick local run (see CMakeLists.txt).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/io_uring.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "Workload.h"
#include "migrate/Engine.h"
#include "sys/Fs.h"
#include "sys/Pagemap.h"
#include "sys/PageMover.h"
#include "topology/Topology.h"

namespace {

using tt::e2e::Workload;
using tt::e2e::WorkloadSpec;
using tt::migrate::Direction;
using tt::migrate::Engine;
using tt::migrate::MigrationConfig;
using tt::migrate::PlanReport;

constexpr uint64_t kPage = 4096;
constexpr uint64_t kHuge = 2ULL << 20;
constexpr uint64_t kMiB = 1ULL << 20;

uint64_t envOr(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

tt::topology::Topology discoverOrFail() {
  tensortier::v1::TopologyConfig config;
  auto topo = tt::topology::discover(tt::sys::Fs("/sys"), config);
  EXPECT_TRUE(topo) << topo.error().message();
  if (!topo) return {};
  EXPECT_TRUE(topo->isTiered()) << "the VM should have a fast node 0 and a slow node 1";
  return *topo;
}

MigrationConfig fastConfig() {
  MigrationConfig c;
  c.set_workers(2);
  c.set_promote_mbps(0);
  c.set_demote_mbps(0);
  c.set_fast_node_min_free_mib(64);
  c.set_fast_node_min_free_percent(0);
  c.set_busy_retries(5);
  return c;
}

// Pages of [start, start + length) of `pid` not on `node` (entries: 4 KiB pages).
uint64_t pagesNotOn(pid_t pid, uint64_t start, uint64_t length, int node) {
  tt::sys::LinuxPageMover mover;
  std::vector<void*> pages(length / kPage);
  for (size_t i = 0; i < pages.size(); ++i) pages[i] = reinterpret_cast<void*>(start + i * kPage);
  std::vector<int> status(pages.size(), -1000);
  auto q = mover.queryPages(pid, pages, status);
  EXPECT_TRUE(q) << q.error().message();
  uint64_t wrong = 0;
  for (int s : status) wrong += s != node;
  return wrong;
}

uint64_t vmstat(const std::string& key) {
  std::ifstream in("/proc/vmstat");
  std::string k;
  uint64_t v = 0;
  while (in >> k >> v)
    if (k == key) return v;
  return 0;
}

std::string describe(const PlanReport& r) {
  const auto t = r.total();
  std::ostringstream o;
  o << "moved " << t.moved << " (huge folios " << t.movedHugeFolios << "), already " << t.alreadyThere << ", busy "
    << t.busy << ", not mapped " << t.notMapped << ", no memory " << t.noMemory << ", denied " << t.permissionDenied
    << ", failed " << t.failed << ", skipped(full) " << t.skippedTargetFull << ", cancelled " << t.cancelled;
  for (const auto& e : r.errors) o << "\n  error: " << e;
  return o.str();
}

// (a) Round trips of 4 KiB pages and THPs while two writer threads keep writing: every byte is
// verified afterwards and every page is on the intended node after every move.
TEST(MigrateE2e, RoundTripsKeepEveryByteAndPlacementUnderConcurrentWrites) {
  const uint64_t bytes = envOr("TT_MIGRATE_E2E_MIB", 256) * kMiB;
  const uint64_t rounds = envOr("TT_MIGRATE_E2E_ROUNDS", 20);
  const auto topo = discoverOrFail();
  Workload w({bytes, bytes, 2, 0});
  ASSERT_TRUE(w.started()) << w.error();
  tt::sys::ProcHugePageProbe probe(tt::sys::Fs("/proc"));
  auto hugeBefore = probe.hugeRanges(w.pid(), w.hugeAddr(), bytes);
  ASSERT_TRUE(hugeBefore) << hugeBefore.error().message();
  uint64_t hugeBytesBefore = 0;
  for (const auto& r : *hugeBefore) hugeBytesBefore += r.length;
  // The kernel may not find a free 2 MiB block for every fault; most must be huge for the test to
  // mean anything.
  ASSERT_GE(hugeBytesBefore, bytes * 9 / 10) << "only " << hugeBytesBefore / kMiB << " MiB of the THP buffer is THP-backed";

  tt::sys::LinuxPageMover mover;
  tt::migrate::SysfsFreeMemoryReader freeMemory(tt::sys::Fs("/sys"));
  Engine engine(topo, mover, freeMemory, fastConfig());
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t generation = 0;
  for (uint64_t round = 0; round < rounds; ++round) {
    for (int target : {1, 0}) {
      const PlanReport report = engine.execute(
          {++generation, {{w.pid(), w.baseAddr(), bytes, target, 0, 0}, {w.pid(), w.hugeAddr(), bytes, target, 0, 0}}});
      EXPECT_EQ(report.total().failed + report.total().permissionDenied + report.total().cancelled, 0u) << describe(report);
      EXPECT_EQ(pagesNotOn(w.pid(), w.baseAddr(), bytes, target), 0u)
          << "4 KiB buffer, round " << round << " to node " << target << ": " << describe(report);
      EXPECT_EQ(pagesNotOn(w.pid(), w.hugeAddr(), bytes, target), 0u)
          << "THP buffer, round " << round << " to node " << target << ": " << describe(report);
      if (HasFailure()) break;
    }
    if (HasFailure()) break;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto hugeAfter = probe.hugeRanges(w.pid(), w.hugeAddr(), bytes);
  ASSERT_TRUE(hugeAfter) << hugeAfter.error().message();
  uint64_t hugeBytesAfter = 0;
  for (const auto& r : *hugeAfter) hugeBytesAfter += r.length;
  const auto c = engine.counters();
  std::cout << "round trips: " << rounds << " x 2 x " << 2 * bytes / kMiB << " MiB in " << seconds
            << " s; huge pages before " << hugeBytesBefore / kMiB << " MiB, after " << hugeBytesAfter / kMiB
            << " MiB; moved huge folios "
            << c.of(Direction::Promote).hugePagesMoved + c.of(Direction::Demote).hugePagesMoved << ", base pages "
            << c.of(Direction::Promote).basePagesMoved + c.of(Direction::Demote).basePagesMoved << ", busy "
            << c.of(Direction::Promote).pages.busy + c.of(Direction::Demote).pages.busy << ", retries "
            << c.of(Direction::Promote).busyRetries + c.of(Direction::Demote).busyRetries << std::endl;
  EXPECT_GT(c.of(Direction::Demote).hugePagesMoved, 0u) << "no THP was moved as one entry";
  const auto verdict = w.stopAndVerify();
  ASSERT_TRUE(verdict.ok) << "the workload did not answer";
  EXPECT_EQ(verdict.wrongWords, 0u) << "first wrong word index " << verdict.firstWrongIndex;
  EXPECT_GT(verdict.passes, 0u) << "the writers never completed a pass: they were not really writing during the moves";
}

// (b) The target process exits in the middle of a plan: the engine stops its moves cleanly.
TEST(MigrateE2e, TargetExitingMidPlanStopsCleanly) {
  const auto topo = discoverOrFail();
  const uint64_t bytes = 128 * kMiB;
  Workload w({bytes, 0, 1, 0});
  ASSERT_TRUE(w.started()) << w.error();
  tt::sys::LinuxPageMover mover;
  tt::migrate::SysfsFreeMemoryReader freeMemory(tt::sys::Fs("/sys"));
  auto config = fastConfig();
  config.set_demote_mbps(16);  // 128 MiB take ~8 s: the kill lands mid-plan
  config.set_batch_pages(512);
  Engine engine(topo, mover, freeMemory, config);
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::seconds(2));
    w.kill();
  });
  const auto t0 = std::chrono::steady_clock::now();
  const PlanReport report = engine.execute({1, {{w.pid(), w.baseAddr(), bytes, 1, 0, 0}}});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  killer.join();
  const auto t = report.total();
  std::cout << "exit mid-plan: " << describe(report) << "; plan took " << seconds << " s" << std::endl;
  EXPECT_EQ(t.total(), bytes / kPage) << "every page accounted for";
  EXPECT_GT(t.moved, 0u) << "the kill came before any move";
  EXPECT_GT(t.cancelled, 0u) << "the plan finished before the kill: nothing was stopped";
  EXPECT_EQ(t.failed + t.permissionDenied, 0u) << describe(report);
  EXPECT_EQ(engine.counters().processesGone, 1u);
}

// (c) The fast node is nearly full: the capacity guard stops promotion above the watermark, the
// outcome says so, and the kernel never OOM-kills anything.
TEST(MigrateE2e, NearlyFullFastNodeHoldsTheWatermarkWithoutOom) {
  const auto topo = discoverOrFail();
  const uint64_t oomBefore = vmstat("oom_kill");
  const uint64_t bytes = 256 * kMiB;
  Workload w({bytes, 0, 0, 1});  // lives on the slow node
  ASSERT_TRUE(w.started()) << w.error();
  ASSERT_EQ(pagesNotOn(w.pid(), w.baseAddr(), bytes, 1), 0u);
  auto mem = tt::topology::readNodeMemory(tt::sys::Fs("/sys"), 0);
  ASSERT_TRUE(mem) << mem.error().message();
  // A filler process takes node 0 down to watermark + 48 MiB free.
  const uint64_t watermark = 128 * kMiB;
  ASSERT_GT(mem->freeBytes, watermark + 48 * kMiB + 64 * kMiB) << "node 0 has too little free memory to start";
  const uint64_t fill = mem->freeBytes - watermark - 48 * kMiB;
  Workload filler({fill, 0, 0, 0});
  ASSERT_TRUE(filler.started()) << filler.error();
  tt::sys::LinuxPageMover mover;
  tt::migrate::SysfsFreeMemoryReader freeMemory(tt::sys::Fs("/sys"));
  auto config = fastConfig();
  config.set_fast_node_min_free_mib(watermark / kMiB);
  config.set_batch_pages(2048);  // 8 MiB batches
  Engine engine(topo, mover, freeMemory, config);
  const PlanReport report = engine.execute({1, {{w.pid(), w.baseAddr(), bytes, 0, 0, 0}}});
  auto after = tt::topology::readNodeMemory(tt::sys::Fs("/sys"), 0);
  ASSERT_TRUE(after) << after.error().message();
  const auto t = report.total();
  std::cout << "nearly full: filler " << fill / kMiB << " MiB; " << describe(report) << "; node 0 free after "
            << after->freeBytes / kMiB << " MiB (watermark " << watermark / kMiB << " MiB)" << std::endl;
  EXPECT_GT(t.moved, 0u) << "the 48 MiB above the watermark should have been used";
  EXPECT_GT(t.skippedTargetFull, 0u) << "the guard never stopped the promotion";
  EXPECT_EQ(t.total(), bytes / kPage);
  EXPECT_GE(engine.counters().guardTrips, 1u);
  // Other allocations in the guest move free memory by a few MiB; the guard itself never planned
  // below the watermark.
  EXPECT_GE(after->freeBytes + 16 * kMiB, watermark) << "node 0 was pushed below the watermark";
  EXPECT_EQ(vmstat("oom_kill"), oomBefore) << "the kernel OOM-killed a process";
}

// A child whose pages are held in the ways a workload can hold them: mlock, an io_uring
// registered buffer (a long-term GUP pin, FOLL_LONGTERM) and pages spliced into a pipe
// (vmsplice: page references held by the pipe).
class PinningChild {
 public:
  static constexpr uint64_t kPages = 1024, kMlocked = 256, kUring = 256, kSpliced = 16;
  // Layout: [0,256) mlocked, [256,512) io_uring buffer, [512,528) vmspliced, rest plain.
  PinningChild() {
    int up[2];
    if (pipe(up) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      close(up[0]);
      char* mem = static_cast<char*>(mmap(nullptr, kPages * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
      madvise(mem, kPages * kPage, MADV_NOHUGEPAGE);
      std::memset(mem, 0x3c, kPages * kPage);
      uint64_t report[4] = {reinterpret_cast<uint64_t>(mem), 0, 0, 0};
      report[1] = mlock(mem, kMlocked * kPage) == 0 ? 0 : errno;
      io_uring_params params{};
      const int ring = static_cast<int>(syscall(__NR_io_uring_setup, 4, &params));
      iovec iov{mem + kMlocked * kPage, kUring * kPage};
      report[2] = ring < 0 ? errno : (syscall(__NR_io_uring_register, ring, IORING_REGISTER_BUFFERS, &iov, 1) == 0 ? 0 : errno);
      int p[2];
      report[3] = pipe(p) == 0 ? 0 : errno;
      if (report[3] == 0) {
        fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
        iovec spl{mem + (kMlocked + kUring) * kPage, kSpliced * kPage};
        if (vmsplice(p[1], &spl, 1, 0) != static_cast<ssize_t>(kSpliced * kPage)) report[3] = errno ? errno : EIO;
      }
      if (write(up[1], report, sizeof report) != sizeof report) _exit(1);
      for (;;) pause();
    }
    close(up[1]);
    if (read(up[0], report_, sizeof report_) != sizeof report_) report_[0] = 0;
    close(up[0]);
  }
  ~PinningChild() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  uint64_t addr() const { return report_[0]; }
  int mlockErrno() const { return static_cast<int>(report_[1]); }
  int uringErrno() const { return static_cast<int>(report_[2]); }
  int spliceErrno() const { return static_cast<int>(report_[3]); }

 private:
  pid_t pid_ = -1;
  uint64_t report_[4] = {0, 0, 0, 0};
};

uint64_t countOn(pid_t pid, uint64_t start, uint64_t pages, int node) {
  return pages - pagesNotOn(pid, start, pages * kPage, node);
}

// (d) What really keeps pages from moving: measured, then asserted.
TEST(MigrateE2e, PinnedPagesAreReportedBusyAndStayPut) {
  const auto topo = discoverOrFail();
  PinningChild child;
  ASSERT_GT(child.pid(), 0);
  ASSERT_NE(child.addr(), 0u) << "the pinning child did not start";
  ASSERT_EQ(child.mlockErrno(), 0) << "mlock: " << std::strerror(child.mlockErrno());
  ASSERT_EQ(child.uringErrno(), 0) << "io_uring buffer registration: " << std::strerror(child.uringErrno());
  ASSERT_EQ(child.spliceErrno(), 0) << "vmsplice: " << std::strerror(child.spliceErrno());
  const uint64_t a = child.addr();
  ASSERT_EQ(countOn(child.pid(), a, PinningChild::kPages, 0), PinningChild::kPages);
  tt::sys::LinuxPageMover mover;
  tt::migrate::SysfsFreeMemoryReader freeMemory(tt::sys::Fs("/sys"));
  auto config = fastConfig();
  config.set_busy_retries(2);
  Engine engine(topo, mover, freeMemory, config);
  const PlanReport report = engine.execute({1, {{child.pid(), a, PinningChild::kPages * kPage, 1, 0, 0}}});
  const uint64_t mlockedMoved = countOn(child.pid(), a, PinningChild::kMlocked, 1);
  const uint64_t uringMoved = countOn(child.pid(), a + PinningChild::kMlocked * kPage, PinningChild::kUring, 1);
  const uint64_t splicedMoved =
      countOn(child.pid(), a + (PinningChild::kMlocked + PinningChild::kUring) * kPage, PinningChild::kSpliced, 1);
  const uint64_t plainStart = PinningChild::kMlocked + PinningChild::kUring + PinningChild::kSpliced;
  const uint64_t plainMoved = countOn(child.pid(), a + plainStart * kPage, PinningChild::kPages - plainStart, 1);
  std::cout << "pinning: " << describe(report) << "\n  moved to node 1: mlocked " << mlockedMoved << "/"
            << PinningChild::kMlocked << ", io_uring-registered " << uringMoved << "/" << PinningChild::kUring
            << ", vmspliced " << splicedMoved << "/" << PinningChild::kSpliced << ", plain " << plainMoved << "/"
            << PinningChild::kPages - plainStart << std::endl;
  // mlock does not pin against migration: move_pages moves mlocked pages.
  EXPECT_EQ(mlockedMoved, PinningChild::kMlocked);
  // A long-term GUP pin (io_uring fixed buffer) makes the page unmovable.
  EXPECT_EQ(uringMoved, 0u);
  // Page references held by a pipe (vmsplice) make the page's refcount unexpected: not moved either.
  EXPECT_EQ(splicedMoved, 0u);
  EXPECT_EQ(plainMoved, PinningChild::kPages - plainStart);
  // Everything that did not move is reported busy, nothing as a failure.
  const auto t = report.total();
  EXPECT_EQ(t.busy, PinningChild::kUring + PinningChild::kSpliced);
  EXPECT_EQ(t.moved, mlockedMoved + uringMoved + splicedMoved + plainMoved);
  EXPECT_EQ(t.failed + t.permissionDenied + t.notMapped, 0u);
}

}  // namespace
