// E2E in the NUMA VM (node 0 DRAM, node 1 emulated PMEM as a lower tier): the in-process mover
// end to end. A client process using the C++ client library maps 32 MiB with an MPOL_BIND policy
// to node 1, faults in and fills only the first half, and registers it. `tensortierctl migrate
// --region ID --node 0` then queues a manual move. For a client that accepts mbind (the library's
// default) the daemon sends an MbindRequest and the library's worker carries out
// mbind(MPOL_BIND | MPOL_MF_MOVE): the faulted pages move to node 0 AND the range's policy becomes
// MPOL_BIND {0}, so the half the client touches only afterwards is also allocated on node 0.
// For a client that turned acceptsMbind off, the engine moves the faulted pages with move_pages:
// they reach node 0, but the client's policy is untouched, so pages faulted in later still go to
// node 1. Data must survive both moves.
#include <gtest/gtest.h>
#include <linux/mempolicy.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "DaemonHarness.h"
#include "support/TestSupport.h"
#include "sys/MemPolicy.h"
#include "sys/PageMover.h"
#include "tensortier/client.hpp"

namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kRegionBytes = 32ULL << 20;
constexpr uint64_t kTouchedBytes = kRegionBytes / 2;  // faulted in before the migration; the rest after
constexpr int kChildTimeoutSec = 120;

struct Ready {
  uint64_t address = 0;
  uint64_t regionId = 0;  // as the client library's queryPlacement reports it
  int ok = 0;             // 1, or the step that failed
};

struct Outcome {
  int touchedMode = -1, untouchedMode = -1;  // get_mempolicy(MPOL_F_ADDR) of each half
  unsigned long touchedMask = 0, untouchedMask = 0;
  int patternBefore = 0;  // the first half still held its pattern after the move
  int patternAfter = 0;   // and both halves after the second was written
  uint64_t mbindDone = 0, mbindFailed = 0;
  int ok = 0;
};

uint64_t patternAt(uint64_t offset) { return offset * 0x9E3779B97F4A7C15ULL + 0x5A5A; }

void fill(char* base, uint64_t from, uint64_t to) {
  for (uint64_t off = from; off < to; off += sizeof(uint64_t)) *reinterpret_cast<uint64_t*>(base + off) = patternAt(off);
}

bool intact(const char* base, uint64_t from, uint64_t to) {
  for (uint64_t off = from; off < to; off += sizeof(uint64_t))
    if (*reinterpret_cast<const uint64_t*>(base + off) != patternAt(off)) return false;
  return true;
}

void policyAt(void* addr, int& mode, unsigned long& mask) {
  unsigned long m[16] = {};
  int md = -1;
  // maxnode in bits; the whole array, enough for any node id the kernel can have here.
  if (::syscall(SYS_get_mempolicy, &md, m, sizeof m * 8, addr, MPOL_F_ADDR) != 0) {
    mode = -2;
    return;
  }
  mode = md;
  mask = m[0];
}

bool readAll(int fd, void* buf, size_t n) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// The client process. Reports Ready, waits for the parent's go after the migration, then checks
// its own policy and data, touches the second half, and reports an Outcome.
[[noreturn]] void runClient(const std::string& socket, bool acceptsMbind, int toParent, int fromParent) {
  Ready ready;
  auto fail = [&](int step) {
    ready.ok = step;
    (void)!::write(toParent, &ready, sizeof ready);
    std::_Exit(step);
  };
  void* p = ::mmap(nullptr, kRegionBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) fail(2);
  ::madvise(p, kRegionBytes, MADV_NOHUGEPAGE);  // base pages: every page is counted on its own
  // The client's own placement: the whole range bound to the slow node, the first half faulted in.
  if (!tt::sys::bindToNode(p, kRegionBytes, 1, tt::sys::BindMove::FutureOnly).ok()) fail(3);
  auto* base = static_cast<char*>(p);
  fill(base, 0, kTouchedBytes);

  tensortier::ClientOptions options;
  options.socketPath = socket;
  options.clientName = acceptsMbind ? "mbind-e2e accepts" : "mbind-e2e refuses";
  options.acceptsMbind = acceptsMbind;
  options.callTimeout = std::chrono::seconds(20);  // TCG guest: slow
  auto client = tensortier::Client::create(options);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(kChildTimeoutSec);
  while (!client->connected() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (!client->connected()) fail(4);
  auto handle = client->registerRegion(p, kRegionBytes, "mbind-e2e", tensortier::RegionKind::Weight);
  if (!handle.ok()) fail(5);
  const tensortier::RegionHandle h = *handle;
  auto placed = client->queryPlacement(std::span(&h, 1));
  if (!placed.ok() || placed->size() != 1) fail(6);
  ready.address = reinterpret_cast<uint64_t>(p);
  ready.regionId = (*placed)[0].regionId;
  ready.ok = 1;
  (void)!::write(toParent, &ready, sizeof ready);

  char go = 0;
  if (!readAll(fromParent, &go, 1)) std::_Exit(7);
  Outcome o;
  // The library counts the mbind once the syscall returned; the pages (which the parent saw
  // arrive) moved inside that call, so this is at most a short wait; bounded for when no
  // MbindRequest ever came (the move went through move_pages).
  const auto counted = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (acceptsMbind && client->stats().mbindDone + client->stats().mbindFailed == 0 &&
         std::chrono::steady_clock::now() < counted)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto s = client->stats();
  o.mbindDone = s.mbindDone;
  o.mbindFailed = s.mbindFailed;
  policyAt(base, o.touchedMode, o.touchedMask);
  policyAt(base + kRegionBytes - kPage, o.untouchedMode, o.untouchedMask);
  o.patternBefore = intact(base, 0, kTouchedBytes) ? 1 : 0;
  fill(base, kTouchedBytes, kRegionBytes);  // first touch of the second half, after the migration
  o.patternAfter = intact(base, 0, kRegionBytes) ? 1 : 0;
  o.ok = 1;
  (void)!::write(toParent, &o, sizeof o);
  (void)!readAll(fromParent, &go, 1);  // stay alive (and mapped) until the parent has looked
  std::_Exit(0);
}

struct Where {
  uint64_t node0 = 0, node1 = 0, absent = 0, other = 0;
};

Where placement(tt::sys::PageMover& mover, pid_t pid, uint64_t start, uint64_t from, uint64_t to) {
  std::vector<void*> pages;
  for (uint64_t off = from; off < to; off += kPage) pages.push_back(reinterpret_cast<void*>(start + off));
  std::vector<int> status(pages.size(), 0);
  Where w;
  if (!mover.queryPages(pid, pages, status).ok()) {
    w.other = to - from;
    return w;
  }
  for (int st : status) (st == 0 ? w.node0 : st == 1 ? w.node1 : st == -ENOENT ? w.absent : w.other) += kPage;
  return w;
}

std::string describe(const Where& w) {
  return "node0 " + std::to_string(w.node0 / kPage) + " node1 " + std::to_string(w.node1 / kPage) + " absent " +
         std::to_string(w.absent / kPage) + " other " + std::to_string(w.other / kPage) + " pages";
}

std::string ctl(const tt::test::DaemonHarness& d, const std::string& args, int* exitCode = nullptr) {
  const auto r = tt::test::runCommand(std::string(TT_TENSORTIERCTL) + " --socket " + d.socket() + " --json " + args);
  if (exitCode) *exitCode = r.exitCode;
  return r.out;
}

// The array `key` of a JSON document, or an empty one when the output is not such a document.
nlohmann::json listOf(const std::string& text, const char* key) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains(key) || !j[key].is_array()) return nlohmann::json::array();
  return j[key];
}

std::string logTail(const tt::test::DaemonHarness& d) {
  const std::string log = d.log();
  return "--- daemon log (tail) ---\n" + log.substr(log.size() > 12000 ? log.size() - 12000 : 0);
}

void migrateOneClient(bool acceptsMbind) {
  TT_REQUIRE_ROOT();
  ASSERT_TRUE(std::getenv("TT_VM")) << "run inside the NUMA VM: tests/e2e/vm/ttvm run -- <this test>";
  tt::test::DaemonHarness daemon;
  // A fast-tier budget of one page: the policy has no room to promote the region on its own, so a
  // move to node 0 can only come from the manual migration (which pins it there).
  daemon.writeConfig(
      "log { level: DEBUG }\n"
      "service { epoch_ms: 500 socket_group: \"\" }\n"
      "sources { kernel_tiering: DISABLE }\n"
      "policy { fast_budget_bytes: 4096 }\n"
      "migration { in_process_mover: true }\n");
  ASSERT_TRUE(daemon.start(std::chrono::seconds(120))) << daemon.log();

  int up[2], down[2];
  ASSERT_EQ(::pipe(up), 0);
  ASSERT_EQ(::pipe(down), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(up[0]);
    ::close(down[1]);
    runClient(daemon.socket(), acceptsMbind, up[1], down[0]);
  }
  ::close(up[1]);
  ::close(down[0]);
  struct Reap {
    pid_t pid;
    int fd;
    ~Reap() {
      ::close(fd);
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  } reap{child, down[1]};

  Ready ready;
  ASSERT_TRUE(readAll(up[0], &ready, sizeof ready)) << "the client died before registering" << logTail(daemon);
  ASSERT_EQ(ready.ok, 1) << "the client failed at step " << ready.ok << " (4: no connection, 5: register, 6: query)"
                         << logTail(daemon);

  // The region id as the daemon lists it.
  uint64_t regionId = 0;
  const std::string regions = ctl(daemon, "regions");
  for (const auto& r : listOf(regions, "regions"))
    if (r.value("pid", 0) == child && r.value("address", uint64_t{0}) == ready.address) regionId = r.value("region_id", uint64_t{0});
  ASSERT_NE(regionId, 0u) << "the region is not in `tensortierctl --json regions`:\n" << regions;
  EXPECT_EQ(regionId, ready.regionId) << "the daemon's and the client library's region ids differ";
  const std::string processes = ctl(daemon, "processes");
  bool listedAccepts = !acceptsMbind;
  for (const auto& p : listOf(processes, "processes"))
    if (p.value("pid", 0) == child) listedAccepts = p.value("accepts_mbind", false);
  EXPECT_EQ(listedAccepts, acceptsMbind) << "accepts_mbind as the daemon saw the client's Hello:\n" << processes;

  tt::sys::LinuxPageMover mover;
  const Where before = placement(mover, child, ready.address, 0, kRegionBytes);
  ASSERT_EQ(before.node1, kTouchedBytes) << "the first half did not start on node 1: " << describe(before);
  ASSERT_EQ(before.absent, kRegionBytes - kTouchedBytes) << "the second half is not unfaulted: " << describe(before);

  int code = -1;
  const auto began = std::chrono::steady_clock::now();
  const std::string migrated = ctl(daemon, "migrate --region " + std::to_string(regionId) + " --node 0", &code);
  ASSERT_EQ(code, 0) << migrated;
  const auto reply = nlohmann::json::parse(migrated, nullptr, false);
  ASSERT_TRUE(reply.is_object()) << migrated;
  EXPECT_EQ(reply.value("requested_bytes", uint64_t{0}), kRegionBytes) << migrated;

  Where moved;
  const auto deadline = began + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    moved = placement(mover, child, ready.address, 0, kTouchedBytes);
    if (moved.node0 == kTouchedBytes) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  ASSERT_EQ(moved.node0, kTouchedBytes) << "the faulted half did not reach node 0 within 120 s: " << describe(moved)
                                        << "\n" << ctl(daemon, "regions") << logTail(daemon);
  std::printf("%s client: %llu MiB on node 0 %.2f s after `tensortierctl migrate`\n", acceptsMbind ? "mbind" : "move_pages",
              static_cast<unsigned long long>(kTouchedBytes >> 20), seconds);

  const char go = 1;
  ASSERT_EQ(::write(down[1], &go, 1), 1);
  Outcome o;
  ASSERT_TRUE(readAll(up[0], &o, sizeof o)) << "the client died after the migration" << logTail(daemon);
  ASSERT_EQ(o.ok, 1);
  const Where after = placement(mover, child, ready.address, 0, kRegionBytes);
  const Where secondHalf = placement(mover, child, ready.address, kTouchedBytes, kRegionBytes);

  EXPECT_EQ(o.patternBefore, 1) << "the moved half lost its data";
  EXPECT_EQ(o.patternAfter, 1) << "the region's data is not intact after the second half was written";
  EXPECT_EQ(o.mbindFailed, 0u);
  EXPECT_EQ(o.touchedMode, MPOL_BIND);
  EXPECT_EQ(o.untouchedMode, MPOL_BIND);
  if (acceptsMbind) {
    // Moved by the client's own mbind: the library counted it and the policy is now bind to node 0
    // over the whole region, including the half that had no pages yet.
    EXPECT_EQ(o.mbindDone, 1u) << logTail(daemon);
    EXPECT_EQ(o.touchedMask, 1ul) << "policy of the faulted half: nodemask 0x" << std::hex << o.touchedMask;
    EXPECT_EQ(o.untouchedMask, 1ul) << "policy of the unfaulted half: nodemask 0x" << std::hex << o.untouchedMask;
    EXPECT_EQ(after.node0, kRegionBytes) << "pages faulted in after the mbind did not land on node 0: " << describe(after);
  } else {
    // Moved from outside with move_pages: the client's policy (bind to node 1) is untouched, so
    // pages it faults in later still go to node 1.
    EXPECT_EQ(o.mbindDone, 0u);
    EXPECT_EQ(o.touchedMask, 2ul) << "policy of the faulted half: nodemask 0x" << std::hex << o.touchedMask;
    EXPECT_EQ(o.untouchedMask, 2ul) << "policy of the unfaulted half: nodemask 0x" << std::hex << o.untouchedMask;
    EXPECT_EQ(placement(mover, child, ready.address, 0, kTouchedBytes).node0, kTouchedBytes);
    EXPECT_EQ(secondHalf.node1, kRegionBytes - kTouchedBytes) << describe(secondHalf);
  }

  daemon.signal(SIGTERM);
  const auto exitCode = daemon.wait(std::chrono::seconds(60));
  ASSERT_TRUE(exitCode.has_value()) << "tensortierd did not exit after SIGTERM";
  EXPECT_EQ(*exitCode, 0);
}

TEST(MbindE2e, ClientThatAcceptsMbindIsMovedByItsOwnMbindAndLaterPagesFollow) { migrateOneClient(true); }

TEST(MbindE2e, ClientThatRefusesMbindIsMovedByMovePagesAndKeepsItsPolicy) { migrateOneClient(false); }

}  // namespace
