#include <gtest/gtest.h>

#include "Workload.h"
#include "migrate/Engine.h"
#include "support/TestSupport.h"
#include "sys/Fs.h"
#include "sys/Pagemap.h"
#include "sys/ProcMaps.h"
#include "topology/Topology.h"

namespace {

constexpr uint64_t kMiB = 1ULL << 20;
constexpr uint64_t kPage = 4096;

// Real THPs of another process, found through pagemap + kpageflags (PFNs need root), agree exactly
// with what smaps counts for the VMA.
TEST(MigratePrivileged, HugePageProbeAgreesWithSmapsOnARealProcess) {
  TT_REQUIRE_ROOT();
  const uint64_t bytes = 32 * kMiB;
  tt::e2e::Workload w({0, bytes, 0, -1});
  ASSERT_TRUE(w.started()) << w.error();
  auto vmas = tt::sys::readSmaps(tt::sys::Fs("/proc"), w.pid());
  ASSERT_TRUE(vmas) << vmas.error().message();
  uint64_t smapsHuge = 0;
  for (const auto& v : *vmas)
    if (v.start <= w.hugeAddr() && w.hugeAddr() < v.end) smapsHuge = v.anonHugeBytes;
  ASSERT_GT(smapsHuge, 0u) << "the kernel gave the MADV_HUGEPAGE buffer no THP (transparent_hugepage=never?)";
  tt::sys::ProcHugePageProbe probe(tt::sys::Fs("/proc"));
  auto ranges = probe.hugeRanges(w.pid(), w.hugeAddr(), bytes);
  ASSERT_TRUE(ranges) << ranges.error().message();
  uint64_t found = 0;
  for (const auto& r : *ranges) {
    EXPECT_EQ(r.start % (2 * kMiB), 0u);
    EXPECT_GE(r.start, w.hugeAddr());
    EXPECT_LE(r.start + r.length, w.hugeAddr() + bytes);
    found += r.length;
  }
  // smaps counts the whole VMA (the buffer plus alignment slack that was never touched).
  EXPECT_EQ(found, smapsHuge);
}

tt::topology::Topology hostTopology() {
  tensortier::v1::TopologyConfig config;
  auto topo = tt::topology::discover(tt::sys::Fs("/sys"), config);
  EXPECT_TRUE(topo) << topo.error().message();
  return topo ? *topo : tt::topology::Topology{};
}

tt::migrate::MigrationConfig unlimited() {
  tt::migrate::MigrationConfig c;
  c.set_promote_mbps(0);
  c.set_demote_mbps(0);
  c.set_fast_node_min_free_mib(0);
  c.set_fast_node_min_free_percent(0);
  return c;
}

// On the one-node host every page is already where a plan to node 0 sends it: the query-first
// path must count them all as already there and make no moving call.
TEST(MigratePrivileged, PagesAlreadyOnTheTargetAreCountedAsSuch) {
  TT_REQUIRE_ROOT();
  const uint64_t bytes = 16 * kMiB;
  tt::e2e::Workload w({bytes, bytes, 0, -1});
  ASSERT_TRUE(w.started()) << w.error();
  tt::sys::LinuxPageMover mover;
  tt::migrate::SysfsFreeMemoryReader freeMemory(tt::sys::Fs("/sys"));
  tt::migrate::Engine engine(hostTopology(), mover, freeMemory, unlimited());
  const auto report = engine.execute({1, {{w.pid(), w.baseAddr(), bytes, 0, 0, 0}, {w.pid(), w.hugeAddr(), bytes, 0, 0, 0}}});
  EXPECT_EQ(report.total().alreadyThere, 2 * bytes / kPage);
  EXPECT_EQ(engine.counters().of(tt::migrate::Direction::Promote).moveCalls, 0u);
  EXPECT_TRUE(report.errors.empty()) << report.errors[0];
}

// A process that has exited and been reaped: ESRCH from the kernel, counted as cancelled.
TEST(MigratePrivileged, ReapedProcessIsCancelledNotFailed) {
  TT_REQUIRE_ROOT();
  const uint64_t bytes = 4 * kMiB;
  tt::e2e::Workload w({bytes, 0, 0, -1});
  ASSERT_TRUE(w.started()) << w.error();
  const pid_t pid = w.pid();
  const uint64_t addr = w.baseAddr();
  w.kill();
  tt::sys::LinuxPageMover mover;
  tt::migrate::SysfsFreeMemoryReader freeMemory(tt::sys::Fs("/sys"));
  tt::migrate::Engine engine(hostTopology(), mover, freeMemory, unlimited());
  const auto report = engine.execute({1, {{pid, addr, bytes, 0, 0, 0}}});
  EXPECT_EQ(report.total().cancelled, bytes / kPage);
  EXPECT_EQ(report.total().failed, 0u);
  EXPECT_EQ(engine.counters().processesGone, 1u);
}

}  // namespace
