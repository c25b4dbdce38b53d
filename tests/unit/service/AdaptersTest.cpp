#include "service/Adapters.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include <filesystem>
#include <fstream>
#include <string>

#include "fakes/migrate/FakeMigrationDeps.h"
#include "fakes/migrate/FakePageMover.h"
#include "fakes/policy/FakePlacement.h"
#include "fakes/sources/FakeSource.h"
#include "sources/SourceSet.h"
#include "sys/ProcStat.h"

namespace {

using tt::service::SourceReport;

SourceReport report(const char* name, bool active) {
  SourceReport r;
  r.name = name;
  r.active = active;
  return r;
}

TEST(AccessesPerPagePass, CacheLineUnitsOnlyWhenPmuSamplingIsActive) {
  // PMU samples stand for cache-line accesses: a pass over a 4 KiB page is 64 of them.
  const std::vector<SourceReport> withPmu{report("pmu", true), report("soft-dirty", true)};
  EXPECT_EQ(tt::service::accessesPerPagePass(withPmu), 64.0);
  // Configured but not opened (no PMU on the machine): the evidence is page-granular.
  const std::vector<SourceReport> pmuOff{report("pmu", false), report("fault-trace", true)};
  EXPECT_EQ(tt::service::accessesPerPagePass(pmuOff), 1.0);
  EXPECT_EQ(tt::service::accessesPerPagePass({}), 1.0);
}

// A source set of one fake fault trace (`fake`) tracking `tgids`.
std::unique_ptr<tt::sources::SourceSet> faultTraceTracking(std::initializer_list<pid_t> tgids,
                                                           tt::fakes::FakeSource*& fake) {
  auto trace = std::make_unique<tt::fakes::FakeSource>("fault-trace", true);
  fake = trace.get();
  std::vector<std::unique_ptr<tt::sources::Source>> v;
  v.push_back(std::move(trace));
  auto set = std::make_unique<tt::sources::SourceSet>(std::move(v));
  for (pid_t tgid : tgids) EXPECT_TRUE(set->addProcess(tgid).ok());
  return set;
}

// With kernel tiering left on, the kernel's own moves of tracked pages are counted per reason, and
// the sources' buffers of them are emptied every epoch (they were never taken before: a leak).
TEST(SourceSetEvidence, CountsTheKernelsMovesOnceAndEmptiesTheSourcesBuffers) {
  tt::fakes::FakeSource* fake = nullptr;
  tt::service::SourceSetEvidence evidence(faultTraceTracking({7, 8}, fake));
  using Why = tt::sources::KernelMove::Why;
  fake->moves = {{7, 0, 5, Why::Promotion}, {7, 0, 2, Why::Demotion}, {8, 0, 1, Why::Syscall}, {7, 0, 4, Why::Other}};
  tt::EvidenceBatch out;
  ASSERT_TRUE(evidence.collect(out).ok());
  EXPECT_TRUE(fake->moves.empty()) << "taken every epoch";
  ASSERT_TRUE(evidence.collect(out).ok());  // nothing new: nothing counted twice
  const auto reports = evidence.status();
  ASSERT_EQ(reports.size(), 1U);
  EXPECT_EQ(reports[0].kernelMoves.promoted, 5U);
  EXPECT_EQ(reports[0].kernelMoves.demoted, 2U);
  EXPECT_EQ(reports[0].kernelMoves.syscall, 1U);
  EXPECT_EQ(reports[0].kernelMoves.other, 4U);
}

// The kernel's own moves with addresses reach the policy as ranges (adjacent pages merged), so its
// residency answers for them are refreshed; moves for a move_pages(2) call and batches without
// addresses do not.
TEST(SourceSetEvidence, PassesTheRangesTheKernelMovedByItself) {
  tt::fakes::FakeSource* fake = nullptr;
  tt::service::SourceSetEvidence evidence(faultTraceTracking({7}, fake));
  using Why = tt::sources::KernelMove::Why;
  constexpr uint64_t kPage = tt::kBasePageSize;
  const uint64_t base = 0x7f0000000000;
  fake->moves = {{7, base, 1, Why::Promotion},
                 {7, base + kPage, 2, Why::Promotion},    // adjacent: one range of 3 pages
                 {7, base + 16 * kPage, 1, Why::Demotion},
                 {7, base + 32 * kPage, 1, Why::Syscall},  // the daemon's own kind of move
                 {7, 0, 9, Why::Other}};                   // a batch without addresses
  tt::EvidenceBatch out;
  ASSERT_TRUE(evidence.collect(out).ok());
  ASSERT_EQ(out.movedByKernel.size(), 2U);
  EXPECT_EQ(out.movedByKernel[0].tgid, 7);
  EXPECT_EQ(out.movedByKernel[0].start, base);
  EXPECT_EQ(out.movedByKernel[0].length, 3 * kPage);
  EXPECT_EQ(out.movedByKernel[1].start, base + 16 * kPage);
  EXPECT_EQ(out.movedByKernel[1].length, kPage);
  EXPECT_TRUE(out.empty()) << "kernel moves are not access evidence";
  out.clear();
  EXPECT_TRUE(out.movedByKernel.empty());
}

// The SourceSet's start lines and each source's system-wide migration totals reach the loop.
TEST(SourceSetEvidence, PassesStartNotesAndSystemWideMigrations) {
  auto trace = std::make_unique<tt::fakes::FakeSource>("fault-trace", true);
  tt::sources::SystemMigrations m;
  m.demotion = {512, 3};
  trace->migrations = m;
  std::vector<std::unique_ptr<tt::sources::Source>> v;
  v.push_back(std::move(trace));
  v.push_back(std::make_unique<tt::fakes::FakeSource>("soft-dirty", true));
  tt::service::SourceSetEvidence evidence(std::make_unique<tt::sources::SourceSet>(
      std::move(v), tensortier::v1::SourcesConfig(), std::vector<std::string>{"topology: one tier only"}));
  EXPECT_EQ(evidence.notes(), std::vector<std::string>{"topology: one tier only"});
  const auto reports = evidence.status();
  ASSERT_EQ(reports.size(), 2U);
  ASSERT_TRUE(reports[0].systemMigrations.has_value());
  EXPECT_EQ(reports[0].systemMigrations->demotion.succeeded, 512U);
  EXPECT_EQ(reports[0].systemMigrations->demotion.failed, 3U);
  EXPECT_FALSE(reports[1].systemMigrations.has_value());
}

// Totals count every move they are given, by reason, in pages (a huge page's move counts its
// base pages); which view of a move to count is the source's choice (kernelMoveOf).
TEST(KernelMoveTotals, CountsPagesByReason) {
  using tt::sources::KernelMove;
  const std::vector<KernelMove> moves{{7, 0x1000, 1, KernelMove::Why::Promotion},
                                      {7, 0, 2, KernelMove::Why::Promotion},
                                      {7, 0x3000, 512, KernelMove::Why::Demotion},
                                      {8, 0, 3, KernelMove::Why::Syscall}};
  tt::sources::KernelMoveTotals totals;
  totals.add(moves);
  EXPECT_EQ(totals.promoted, 3U);
  EXPECT_EQ(totals.demoted, 512U);
  EXPECT_EQ(totals.syscall, 3U);
  EXPECT_EQ(totals.other, 0U);
}

}  // namespace

namespace {

// A /proc/PID/stat line as the kernel writes it, with `comm` and the processor field (39) given.
std::string statLine(pid_t pid, const std::string& comm, int processor) {
  std::string line = std::to_string(pid) + " (" + comm + ") S";
  for (int field = 4; field <= 52; ++field) line += " " + std::to_string(field == 39 ? processor : field);
  return line + "\n";
}

TEST(ProcStat, ProcessorIsCountedFromTheLastParenthesisOfTheCommand) {
  auto cpu = tt::sys::parseStatProcessor(statLine(77, "py (torch) 3", 5));
  ASSERT_TRUE(cpu.ok()) << cpu.error().message();
  EXPECT_EQ(*cpu, 5);
  EXPECT_FALSE(tt::sys::parseStatProcessor("77 (python3 S 1 2 3").ok());
  EXPECT_FALSE(tt::sys::parseStatProcessor("77 (python3) S 1 2 3").ok());  // too few fields
}

TEST(ProcStat, AllowedCpusComeFromTheCpusAllowedListLine) {
  auto cpus = tt::sys::parseStatusAllowedCpus("Name:\ttrainer\nCpus_allowed:\tf\nCpus_allowed_list:\t0-1,3\nMems_allowed:\t1\n");
  ASSERT_TRUE(cpus.ok()) << cpus.error().message();
  EXPECT_EQ(*cpus, (std::vector<int>{0, 1, 3}));
  EXPECT_FALSE(tt::sys::parseStatusAllowedCpus("Name:\ttrainer\nCpus_allowed:\tf\n").ok());
  EXPECT_FALSE(tt::sys::parseStatusAllowedCpus("Cpus_allowed_list:\t0-x\n").ok());
  // The key is the whole name before the colon: "Cpus_allowed" is not "Cpus_allowed_list".
  EXPECT_EQ(tt::sys::statusField("Cpus_allowed:\tf\nCpus_allowed_list:\t2\n", "Cpus_allowed"), "f");
  auto caps = tt::sys::parseStatusEffectiveCaps("Name:\tt\nCapInh:\t0\nCapEff:\t000000c000880003\n");
  ASSERT_TRUE(caps.ok()) << caps.error().message();
  EXPECT_EQ(*caps, 0xc000880003ULL);
  EXPECT_FALSE(tt::sys::parseStatusEffectiveCaps("CapEff:\tzz\n").ok());
  EXPECT_FALSE(tt::sys::parseStatusEffectiveCaps("CapInh:\t0\n").ok());
}

// The home node: the socket a process is bound to, wherever its main thread last ran; unbound,
// where that thread last ran; neither readable, unknown.
TEST(HomeNode, TheSocketTheProcessIsBoundToElseWhereItsMainThreadRan) {
  constexpr pid_t kPid = 78;
  const auto procfs = std::filesystem::path(::testing::TempDir()) / "tt-procfs-home-node-bound";
  std::filesystem::remove_all(procfs);
  const auto dir = procfs / std::to_string(kPid);
  std::filesystem::create_directories(dir);
  const auto topology = tt::fakes::twoSocketTopology(64ULL << 20);  // CPU 0 on node 0, CPU 1 on node 1
  const tt::sys::Fs fs(procfs.string());
  EXPECT_EQ(tt::service::homeNodeOf(fs, kPid, topology), std::nullopt);
  std::ofstream(dir / "stat") << statLine(kPid, "trainer", 0);
  EXPECT_EQ(tt::service::homeNodeOf(fs, kPid, topology), std::optional<int>(0)) << "no status: the last CPU";
  std::ofstream(dir / "status") << "Name:\ttrainer\nCpus_allowed_list:\t1\n";
  EXPECT_EQ(tt::service::homeNodeOf(fs, kPid, topology), std::optional<int>(1)) << "bound to socket 1";
  std::ofstream(dir / "status") << "Name:\ttrainer\nCpus_allowed_list:\t0-1\n";
  EXPECT_EQ(tt::service::homeNodeOf(fs, kPid, topology), std::optional<int>(0)) << "unbound: the last CPU";
  std::filesystem::remove_all(procfs);
}

// Region 1 of `pid`.
tt::RegionInfo regionOf(pid_t pid, uint64_t start, uint64_t length) {
  tt::RegionInfo region;
  region.id = 1;
  region.tgid = pid;
  region.start = start;
  region.length = length;
  return region;
}

// `weight` accesses on each page of [start, start + length).
tt::EvidenceBatch evenEvidence(pid_t pid, uint64_t start, uint64_t length, uint32_t weight) {
  tt::EvidenceBatch evidence;
  for (uint64_t a = start; a < start + length; a += tt::kBasePageSize)
    evidence.records.push_back({pid, a, weight, tt::AccessKind::Load, tt::ServedBy::Unknown, 0});
  return evidence;
}

// The daemon's policy over one region of `pid` (64 pages, mapped on `node`) with evidence of
// `weight` accesses on each page: its first plan (blocks of 16 pages), and the slow-access
// penalty it planned with.
tt::MigrationPlan planOneRegion(const tt::topology::Topology& topology, const tt::sys::Fs& procfs, pid_t pid, int node,
                                uint32_t weight, double* penaltyNs = nullptr) {
  constexpr uint64_t kBase = 0x7f0000000000;
  constexpr uint64_t kLength = 64 * tt::kBasePageSize;
  constexpr uint64_t kSecond = 1'000'000'000;
  tt::fakes::FakePageMover mover;
  mover.map(pid, kBase, kLength, node);
  tensortier::v1::PolicyConfig config;
  config.set_chunk_pages(16);
  tt::service::HeatPlannerPolicy policy(config, topology, mover, procfs);
  EXPECT_TRUE(policy.addRegion(regionOf(pid, kBase, kLength)).ok());
  policy.observe(evenEvidence(pid, kBase, kLength, weight), 0, kSecond);
  tt::MigrationPlan plan = policy.plan(kSecond, kSecond, {1e9, 1e9}, {}, {}, {});
  if (penaltyNs != nullptr) *penaltyNs = policy.view().slowPenaltyNs;
  return plan;
}

// The penalty the planner charges a slow access: the config's when it sets one, else the
// firmware's read latencies (HMAT), else the key's default; the daemon plans with it and shows it.
TEST(HeatPlannerPolicy, ChargesASlowAccessWhatTheFirmwareSaysUnlessConfigured) {
  auto topology = tt::fakes::twoNodeTopology();
  tensortier::v1::PolicyConfig config;
  auto none = tt::service::slowAccessPenaltyOf(config, topology);
  EXPECT_EQ(none.ns, 200.0);
  EXPECT_NE(none.source.find("default"), std::string::npos) << none.source;
  topology.nodes[0].access = tt::topology::AccessPerformance{80, 80, 20480, 20480};
  topology.nodes[1].access = tt::topology::AccessPerformance{100080, 100080, 6144, 2048};
  auto hmat = tt::service::slowAccessPenaltyOf(config, topology);
  EXPECT_EQ(hmat.ns, 100000.0);
  EXPECT_NE(hmat.source.find("node 1 100080 ns"), std::string::npos) << hmat.source;
  auto bogus = topology;  // a firmware table off by a factor of 1000
  bogus.nodes[1].access->readLatencyNs = 305000;
  auto held = tt::service::slowAccessPenaltyOf(config, bogus);
  EXPECT_EQ(held.ns, 100000.0) << "held to the config key's maximum";
  EXPECT_NE(held.source.find("304920 ns held"), std::string::npos) << held.source;
  ASSERT_EQ(held.byNode.size(), 1U);
  EXPECT_EQ(held.byNode[0].ns, 100000.0) << "each node's figure held too";
  ASSERT_EQ(hmat.byNode.size(), 1U);
  EXPECT_EQ(hmat.byNode[0].node, 1);
  EXPECT_EQ(hmat.byNode[0].ns, 100000.0);
  EXPECT_EQ(hmat.source.find("each slow node"), std::string::npos) << "one slow node: " << hmat.source;

  // Two slow nodes that differ (CXL at 250 ns beside Optane at 305): the status shows their mean,
  // and the planner gets each node's own.
  auto mixed = tt::fakes::twoSocketTopology();
  for (auto& n : mixed.nodes) n.access = tt::topology::AccessPerformance{80, 80, 20480, 20480};
  mixed.nodes[2].access->readLatencyNs = 250;
  mixed.nodes[3].access->readLatencyNs = 305;
  auto perNode = tt::service::slowAccessPenaltyOf(config, mixed);
  EXPECT_EQ(perNode.ns, 197.0);  // (250 + 305) / 2 - 80, rounded down
  ASSERT_EQ(perNode.byNode.size(), 2U);
  EXPECT_EQ(perNode.byNode[0].node, 2);
  EXPECT_EQ(perNode.byNode[0].ns, 170.0);
  EXPECT_EQ(perNode.byNode[1].node, 3);
  EXPECT_EQ(perNode.byNode[1].ns, 225.0);
  EXPECT_NE(perNode.source.find("each slow node charged its own"), std::string::npos) << perNode.source;

  config.set_slow_access_penalty_ns(300);
  EXPECT_EQ(tt::service::slowAccessPenaltyOf(config, topology).ns, 300.0) << "the config wins";
  EXPECT_TRUE(tt::service::slowAccessPenaltyOf(config, mixed).byNode.empty()) << "for every node";

  // The same lukewarm region, one access a page: not worth a copy at 200 ns an access, worth it at
  // the firmware's 100 us.
  auto moves = [](const tt::topology::Topology& t) {
    double penalty = 0;
    const auto plan = planOneRegion(t, tt::sys::Fs("/nonexistent-procfs"), 79, 1, 1, &penalty);
    EXPECT_EQ(penalty, t.node(1)->access ? 100000.0 : 200.0);
    return plan.moves.size();
  };
  EXPECT_EQ(moves(tt::fakes::twoNodeTopology()), 0U);
  EXPECT_GT(moves(topology), 0U);
}

// Two sockets whose slow nodes differ (node 2 170 ns over DRAM, node 3 50 us): the same lukewarm
// region, one access a page, is worth a copy only for the process whose demotion target is the
// slow one. Charged the tier's mean (25 us) both would move.
TEST(HeatPlannerPolicy, ChargesAProcessItsSlowNodesOwnFirmwarePenalty) {
  constexpr pid_t kPid = 78;
  const auto procfs = std::filesystem::path(::testing::TempDir()) / "tt-procfs-node-penalty";
  std::filesystem::create_directories(procfs / std::to_string(kPid));
  auto topology = tt::fakes::twoSocketTopology(64ULL << 20);
  for (auto& n : topology.nodes) n.access = tt::topology::AccessPerformance{80, 80, 20480, 20480};
  topology.nodes[2].access->readLatencyNs = 250;
  topology.nodes[3].access->readLatencyNs = 50080;
  for (int cpu : {0, 1}) {
    std::ofstream(procfs / std::to_string(kPid) / "stat") << statLine(kPid, "trainer", cpu);
    const int slowNode = cpu == 0 ? 2 : 3;  // the socket's own slow node
    const tt::MigrationPlan plan = planOneRegion(topology, tt::sys::Fs(procfs.string()), kPid, slowNode, 1);
    EXPECT_EQ(plan.moves.empty(), cpu == 0) << "cpu " << cpu;
  }
  std::filesystem::remove_all(procfs);
}

// A process on socket 1 (its stat says CPU 1) has its hot pages on socket 1's slow node: the
// daemon's policy sends them to socket 1's DRAM, and, for a process on CPU 0, to socket 0's.
TEST(HeatPlannerPolicy, PromotesToTheFastNodeOfTheCpuTheProcessRunsOn) {
  constexpr pid_t kPid = 77;
  const auto procfs = std::filesystem::path(::testing::TempDir()) / "tt-procfs-home-node";
  std::filesystem::create_directories(procfs / std::to_string(kPid));
  const auto topology = tt::fakes::twoSocketTopology(64ULL << 20);
  for (int cpu : {1, 0}) {
    std::ofstream(procfs / std::to_string(kPid) / "stat") << statLine(kPid, "trainer", cpu);
    const tt::MigrationPlan plan = planOneRegion(topology, tt::sys::Fs(procfs.string()), kPid, 3, 1000);  // socket 1's slow node
    ASSERT_FALSE(plan.moves.empty()) << "cpu " << cpu;
    for (const auto& m : plan.moves) EXPECT_EQ(m.targetNode, cpu) << "cpu " << cpu;
  }
  std::filesystem::remove_all(procfs);
}

// A pinned range is left alone by the planner but counts against its budgets, so its blocks are
// asked where they are like any other: at their refresh turn, within the query budget. Asked in
// every plan, a pinned 256 MiB region read 65536 pages each epoch on top of the budget.
TEST(HeatPlannerPolicy, AsksWhereAPinnedRangeIsAtItsRefreshTurnNotInEveryPlan) {
  constexpr pid_t kPid = 81;
  constexpr uint64_t kBase = 0x7f0000000000, kLength = 64 * tt::kBasePageSize, kSecond = 1'000'000'000;
  tt::fakes::FakePageMover mover;
  mover.map(kPid, kBase, kLength, 0);  // where the user pinned it
  const auto topology = tt::fakes::twoNodeTopology();
  tensortier::v1::PolicyConfig config;
  config.set_chunk_pages(16);
  config.set_residency_query_pages_per_epoch(16);  // 64 pages known: each block once in 4 plans
  tt::service::HeatPlannerPolicy policy(config, topology, mover, tt::sys::Fs("/nonexistent-procfs"));
  ASSERT_TRUE(policy.addRegion(regionOf(kPid, kBase, kLength)).ok());
  const std::vector<tt::service::ManualPin> pins = {{kPid, 1, kBase, kLength, 0, 0}};
  policy.observe(evenEvidence(kPid, kBase, kLength, 10), 0, kSecond);
  EXPECT_TRUE(policy.plan(kSecond, kSecond, {1e9, 1e9}, pins, {}, {}).moves.empty());
  const size_t first = mover.queryCalls();
  ASSERT_EQ(first, 4U) << "each of the 4 pinned blocks asked once, as new";
  for (uint64_t p = 2; p <= 9; ++p) EXPECT_TRUE(policy.plan(p * kSecond, kSecond, {1e9, 1e9}, pins, {}, {}).moves.empty());
  EXPECT_EQ(mover.queryCalls() - first, 8U) << "in 8 plans each block twice, not in every plan";
  // Pinned anew (moved by hand to another node; the epoch loop hands the manual move to the next
  // plan): asked again at that plan, not at its turn.
  const std::vector<tt::service::ManualPin> moved = {{kPid, 1, kBase, kLength, 1, 0}};
  const std::vector<tt::MoveRequest> manual = {{kPid, kBase, kLength, 1, tt::service::EpochLoop::kManualPriority, 1}};
  const size_t before = mover.queryCalls();
  EXPECT_TRUE(policy.plan(10 * kSecond, kSecond, {1e9, 1e9}, moved, manual, {}).moves.empty());
  EXPECT_EQ(mover.queryCalls() - before, 4U) << "each block of the range moved by hand asked again";
}

// A live config change reaches the heat model: its half-life applies from the next plan, over the
// heat it had learned (with the key waiting for a restart, a page would decay by 1000 ms's
// half-life: to 0.71 of its heat in 500 ms instead of 0.25). Page heat, which has no kind prior
// blended in.
TEST(HeatPlannerPolicy, AppliesHeatModelKeysLiveOverTheLearnedHeat) {
  constexpr pid_t kPid = 80;
  constexpr uint64_t kBase = 0x7f0000000000, kLength = 64 * tt::kBasePageSize, kSecond = 1'000'000'000;
  tt::fakes::FakePageMover mover;
  mover.map(kPid, kBase, kLength, 0);
  const auto topology = tt::fakes::twoNodeTopology();
  tensortier::v1::PolicyConfig config;
  config.set_heat_half_life_ms(1000);
  tt::service::HeatPlannerPolicy policy(config, topology, mover, tt::sys::Fs("/nonexistent-procfs"));
  ASSERT_TRUE(policy.addRegion(regionOf(kPid, kBase, kLength)).ok());
  policy.observe(evenEvidence(kPid, kBase, kLength, 10), kSecond - 1, kSecond);
  (void)policy.plan(kSecond, kSecond, {1e9, 1e9}, {}, {}, {});
  auto hottest = [&](uint64_t nowNs) {
    const auto pages = policy.hottestPages(1, kPid, nowNs);
    return pages.empty() ? 0.0 : pages[0].heat;
  };
  EXPECT_NEAR(hottest(kSecond), 10.0, 1e-3);
  config.set_heat_half_life_ms(250);
  ASSERT_TRUE(policy.applyConfig(config).ok());
  (void)policy.plan(kSecond + kSecond / 2, kSecond, {1e9, 1e9}, {}, {}, {});
  EXPECT_NEAR(hottest(kSecond + kSecond / 2), 2.5, 1e-3);
}

}  // namespace

namespace {

// Sixteen blocks of 16 pages of one process, all on the slow node, and a plan that asks where
// each is.
class MovePagesPlacement : public ::testing::Test {
 protected:
  static constexpr pid_t kPid = 42;
  static constexpr uint64_t kBase = 0x7f0000000000;
  static constexpr uint64_t kBlock = 16 * tt::kBasePageSize;
  void SetUp() override { mover.map(kPid, kBase, 16 * kBlock, 1); }
  // One plan: asks for every block but `skip`, the moves of `stillMoving` in flight, then ends
  // with `moves`; returns the answers in block order.
  std::vector<tt::policy::Residency> plan(const tt::MigrationPlan& moves = {}, int skip = -1,
                                          std::span<const tt::MoveRequest> stillMoving = {}) {
    placement.beginPlan();
    placement.stillMoving(stillMoving);
    std::vector<tt::policy::Residency> out;
    for (int b = 0; b < 16; ++b)
      if (b != skip) out.push_back(placement.residency(kPid, kBase + static_cast<uint64_t>(b) * kBlock, kBlock));
    placement.endPlan(moves);
    return out;
  }
  tt::fakes::FakePageMover mover;
  const tt::topology::Topology topology = tt::fakes::twoNodeTopology();
  tt::service::MovePagesPlacement placement{mover, topology};
};

// Asking the kernel where every registered page is, every epoch, costs 140-200 ns a page: the
// daemon keeps each block's answer between plans. A block is asked again right after a plan moved
// it, and otherwise once in `refresh` plans (here 256 known pages over a 64-page budget: every 4th
// plan), so a page the kernel moved by itself shows within 4 plans; a block no plan asks for is
// forgotten.
TEST_F(MovePagesPlacement, KeepsAnswersBetweenPlansAndAsksAgainForWhatMovedOrIsDue) {
  placement.setQueryBudget(64);
  auto first = plan();
  EXPECT_EQ(placement.pagesQueried(), 256U) << "new blocks are asked";
  EXPECT_EQ(first[3].slowPages, 16U);
  EXPECT_EQ(placement.refreshPlans(), 4U);

  // Behind the daemon's back, the kernel moves block 5 to DRAM.
  mover.map(kPid, kBase + 5 * kBlock, kBlock, 0);
  uint64_t asked = 0;
  int seenIn = -1;
  for (int p = 0; p < 4; ++p) {
    auto r = plan();
    asked += placement.pagesQueried();
    EXPECT_LE(placement.pagesQueried(), 128U) << "plan " << p;
    if (seenIn < 0 && r[5].fastPages == 16) seenIn = p;
  }
  EXPECT_EQ(asked, 256U) << "every block refreshed exactly once in 4 plans";
  EXPECT_GE(seenIn, 0) << "the kernel's move was never seen";

  // The daemon's own plan moves block 7: asked again in the next plan, whatever its refresh turn.
  tt::MigrationPlan moves;
  moves.moves.push_back(tt::MoveRequest{kPid, kBase + 7 * kBlock, kBlock, 0, 0, 0});
  (void)plan(moves);
  mover.map(kPid, kBase + 7 * kBlock, kBlock, 0);  // the engine copies it
  EXPECT_EQ(plan()[7].fastPages, 16U);

  // The kernel moves a page of block 9 and one of block 11, and the fault trace saw both. With a
  // budget of 16 pages a plan (a block's refresh turn comes once in 16 plans) only block 9 fits:
  // it is asked at the next plan, block 11 keeps its cached answer until its turn.
  placement.setQueryBudget(16);
  for (uint64_t p = 0; p < tt::service::MovePagesPlacement::kDirtyPlans; ++p) (void)plan();  // block 7 settled
  ASSERT_EQ(placement.refreshPlans(), 16U);
  const uint64_t movedPage9 = kBase + 9 * kBlock + 4 * tt::kBasePageSize;
  const uint64_t movedPage11 = kBase + 11 * kBlock;
  mover.map(kPid, movedPage9, tt::kBasePageSize, 0);
  mover.map(kPid, movedPage11, tt::kBasePageSize, 0);
  EXPECT_TRUE(placement.markMovedByKernel(kPid, movedPage9, tt::kBasePageSize));
  EXPECT_FALSE(placement.markMovedByKernel(kPid, movedPage11, tt::kBasePageSize)) << "over the budget";
  auto next = plan();
  EXPECT_EQ(next[9].fastPages, 1U) << "a move the kernel made waited for the block's refresh turn";
  EXPECT_EQ(next[11].fastPages, 0U) << "a block over the budget was asked anyway";
  // Marked for one plan, not for good: block 9 answers from the cache again.
  mover.map(kPid, kBase + 9 * kBlock, kBlock, 0);
  EXPECT_EQ(plan()[9].fastPages, 1U);
  placement.setQueryBudget(64);
  (void)plan();

  // A plan that does not ask for block 0 (its region went away) drops it: asked anew later.
  (void)plan({}, 0);
  const uint64_t before = mover.queryCalls();
  placement.beginPlan();
  (void)placement.residency(kPid, kBase, kBlock);
  EXPECT_EQ(mover.queryCalls(), before + 1);
  EXPECT_EQ(placement.pagesQueried(), 16U);
}

// A busy engine runs a plan for several epochs. The plan's blocks stay marked as long as the loop
// says the engine still runs it, and kDirtyPlans plans beyond: a block read mid-move, in its old
// tier, is not kept after its copy lands (here in the sixth plan, with a refresh turn once in 16
// plans). Without the marks the planner would not count the promoted block against the budget and
// would fill its bytes again.
TEST_F(MovePagesPlacement, KeepsAskingForAPlansBlocksWhileTheEngineStillRunsIt) {
  placement.setQueryBudget(16);  // 256 pages known: a refresh turn once in 16 plans
  std::vector<tt::MoveRequest> inFlight;
  (void)plan();
  ASSERT_EQ(placement.refreshPlans(), 16U);
  tt::MigrationPlan promote;
  promote.moves.push_back(tt::MoveRequest{kPid, kBase + 7 * kBlock, kBlock, 0, 0, 0});
  (void)plan(promote);  // submitted: the engine runs it from here on
  inFlight = promote.moves;
  for (int p = 0; p < 5; ++p) EXPECT_EQ(plan({}, -1, inFlight)[7].slowPages, 16U) << "plan " << p << ": not copied yet";
  mover.map(kPid, kBase + 7 * kBlock, kBlock, 0);  // the copy lands, the engine is done
  for (int p = 0; p < 8; ++p) EXPECT_EQ(plan()[7].fastPages, 16U) << "plan " << p << " after the copy landed";
}

}  // namespace

// A real engine on fakes (a two-node topology, free memory to spare) behind the adapter.
class EngineExecutorTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kBase = 0x10000000, kPage = tt::kBasePageSize;
  EngineExecutorTest() : free(mover) {
    free.setNode(0, 64ULL << 30, 0);
    free.setNode(1, 64ULL << 30, 0);
    config.set_workers(1);
  }
  ~EngineExecutorTest() override {
    if (engine) engine->shutdown();
  }
  // The engine and its executor, with `config` as the test has set it.
  void start() {
    engine = std::make_unique<tt::migrate::Engine>(topology, mover, free, config,
                                                   tt::migrate::EngineHooks{&clock, &probe, nullptr});
    executor = std::make_unique<tt::service::EngineExecutor>(*engine, config);
  }

  tt::fakes::FakePageMover mover;
  tt::fakes::FakeFreeMemory free;
  tt::fakes::FakeClock clock;
  tt::fakes::FakeHugePageProbe probe;
  const tt::topology::Topology topology = tt::fakes::twoNodeTopology();
  tensortier::v1::MigrationConfig config;
  std::unique_ptr<tt::migrate::Engine> engine;
  std::unique_ptr<tt::service::EngineExecutor> executor;
};

// The loop times each direction apart (EpochLoop::updateRates): the executor hands over what each
// moved and its own rate limit, as configured and as reloaded.
TEST_F(EngineExecutorTest, CountsEachDirectionsMovesAndRateLimitApart) {
  mover.map(100, kBase, 8 * kPage, 1);
  mover.map(100, kBase + 64 * kPage, 4 * kPage, 0);
  mover.onMove([this](size_t) { clock.advance(std::chrono::milliseconds(5)); });  // each call takes 5 ms
  config.set_promote_mbps(3000);
  config.set_demote_mbps(1000);
  start();
  (void)engine->execute({1, {{100, kBase, 8 * kPage, 0, 0, 0}, {100, kBase + 64 * kPage, 4 * kPage, 1, 0, 0}}});
  ASSERT_EQ(mover.calls().size(), 2u) << "one move_pages call each way";
  auto c = executor->counters();
  EXPECT_EQ(c.promoteTiming.busyBytes, 8 * kPage);
  EXPECT_EQ(c.demoteTiming.busyBytes, 4 * kPage);
  EXPECT_EQ(c.promoteTiming.busyNs, 5'000'000u);
  EXPECT_EQ(c.demoteTiming.busyNs, 5'000'000u);
  EXPECT_DOUBLE_EQ(c.promoteTiming.rateLimitBytesPerSec, 3000e6);
  EXPECT_DOUBLE_EQ(c.demoteTiming.rateLimitBytesPerSec, 1000e6);
  config.set_demote_mbps(500);
  ASSERT_TRUE(executor->applyConfig(config).ok());
  c = executor->counters();
  EXPECT_DOUBLE_EQ(c.promoteTiming.rateLimitBytesPerSec, 3000e6);
  EXPECT_DOUBLE_EQ(c.demoteTiming.rateLimitBytesPerSec, 500e6);
}

// What the epoch loop retries of a pinned manual move: the runs of a finished plan (by its
// generation, while the engine keeps its report) that left pages off their target for a reason a
// later try may not meet (here busy pages) are unsettled; those refused for want of permission,
// which no retry gets past, and those that moved are settled.
TEST_F(EngineExecutorTest, ReportsAPlansRunsUnsettledButNotForPermissionRefusals) {
  mover.map(100, kBase, 8 * kPage, 1);
  mover.setBusy(100, kBase, 1000);  // busy through every retry
  mover.map(200, kBase, 8 * kPage, 1);
  mover.failCallsWith(200, EPERM);
  mover.map(300, kBase, 8 * kPage, 1);
  config.set_busy_backoff_ms(1);
  start();
  EXPECT_FALSE(executor->runsOf(1).has_value()) << "no plan finished yet";
  (void)engine->execute({1, {{100, kBase, 8 * kPage, 0, 0, 0}, {200, kBase, 8 * kPage, 0, 0, 0}, {300, kBase, 8 * kPage, 0, 0, 0}}});
  const auto runs = executor->runsOf(1);
  ASSERT_TRUE(runs.has_value());
  ASSERT_EQ(runs->size(), 3U);
  for (const auto& r : *runs) {
    EXPECT_EQ(r.generation, 1U);
    EXPECT_EQ(r.start, kBase);
    EXPECT_EQ(r.length, 8 * kPage);
    EXPECT_EQ(r.targetNode, 0);
    EXPECT_EQ(r.settled, r.tgid != 100) << "pid " << r.tgid;
  }
  // Plan 1's runs are still found by its generation after later plans finished, until
  // kKeptReports newer ones have; an unknown generation has none.
  EXPECT_FALSE(executor->runsOf(2).has_value()) << "plan 2 has not run";
  for (uint64_t g = 2; g <= tt::migrate::Engine::kKeptReports; ++g) {
    (void)engine->execute({g, {{300, kBase, kPage, 1, 0, 0}}});
    const auto first = executor->runsOf(1);
    ASSERT_TRUE(first.has_value()) << "plan 1's report is gone after plan " << g;
    EXPECT_EQ(first->size(), 3U);
    const auto latest = executor->runsOf(g);
    ASSERT_TRUE(latest.has_value());
    ASSERT_EQ(latest->size(), 1U);
    EXPECT_EQ((*latest)[0].generation, g);
  }
  (void)engine->execute({tt::migrate::Engine::kKeptReports + 1, {{300, kBase, kPage, 0, 0, 0}}});
  EXPECT_FALSE(executor->runsOf(1).has_value()) << "more than kKeptReports reports kept";
  EXPECT_TRUE(executor->runsOf(2).has_value());
}
