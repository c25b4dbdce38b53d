#include "topology/Topology.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "config/Config.h"
#include "support/TestSupport.h"

namespace {

using tt::topology::Tier;
using tt::topology::TierSource;

tt::Result<tt::topology::Topology> discoverFixture(const std::string& name, const std::string& configText = "") {
  auto config = tt::config::parseConfig(configText, "test");
  EXPECT_TRUE(config);
  return tt::topology::discover(tt::sys::Fs(tt::test::fixture("topology/" + name + "/sys")), config->topology());
}

TEST(Topology, TwoSocketDramPlusPmemUsesKernelTiers) {
  auto topo = discoverFixture("dram_pmem_2socket");
  ASSERT_TRUE(topo) << topo.error().message();
  ASSERT_EQ(topo->nodes.size(), 4u);
  EXPECT_EQ(topo->nodesInTier(Tier::Fast), (std::vector<int>{0, 1}));
  EXPECT_EQ(topo->nodesInTier(Tier::Slow), (std::vector<int>{2, 3}));
  const auto* pmem = topo->node(3);
  ASSERT_NE(pmem, nullptr);
  EXPECT_EQ(pmem->tierSource, TierSource::KernelMemoryTier);
  EXPECT_EQ(pmem->kernelTier, 22);
  EXPECT_TRUE(pmem->cpus.empty());
  EXPECT_EQ(pmem->memory.totalBytes, 805306368ULL * 1024);
  EXPECT_EQ(pmem->memory.freeBytes, 790626304ULL * 1024);
  EXPECT_EQ(topo->node(1)->cpus.size(), 48u);
  EXPECT_EQ(topo->distance(0, 3), 28);
  // Each socket demotes to its own PMEM node, and a PMEM page promotes to its own socket.
  EXPECT_EQ(topo->nearestInTier(0, Tier::Slow), 2);
  EXPECT_EQ(topo->nearestInTier(1, Tier::Slow), 3);
  EXPECT_EQ(topo->nearestInTier(3, Tier::Fast), 1);
  EXPECT_TRUE(topo->isTiered());
}

TEST(Topology, CxlNodeInDefaultKernelTierIsSlowBecauseCpuLess) {
  auto topo = discoverFixture("dram_cxl");
  ASSERT_TRUE(topo) << topo.error().message();
  EXPECT_EQ(topo->node(0)->tier, Tier::Fast);
  EXPECT_EQ(topo->node(1)->tier, Tier::Slow);
  EXPECT_EQ(topo->node(1)->tierSource, TierSource::CpuLessDefault);
  EXPECT_EQ(topo->node(1)->kernelTier, 4);
}

// ACPI HMAT figures as the kernel exports them: CPU initiators (access1) before any initiator
// (access0); the slow tier's extra read latency is what the planner can charge a slow access.
TEST(Topology, ReadsTheFirmwaresAccessFiguresAndTheSlowTiersExtraLatency) {
  auto topo = discoverFixture("dram_cxl_hmat");
  ASSERT_TRUE(topo) << topo.error().message();
  ASSERT_TRUE(topo->node(0)->access.has_value());
  EXPECT_EQ(topo->node(0)->access->readLatencyNs, 85U) << "access1 (CPU initiators) first";
  EXPECT_EQ(topo->node(0)->access->writeBandwidthMBps, 30720U);
  ASSERT_TRUE(topo->node(1)->access.has_value());
  EXPECT_EQ(topo->node(1)->access->readLatencyNs, 250U);
  EXPECT_EQ(topo->node(1)->access->writeLatencyNs, 260U);
  EXPECT_EQ(topo->slowReadPenaltyNs(), std::optional<uint64_t>(165));
  EXPECT_EQ(topo->slowReadPenaltyNs(1), std::optional<uint64_t>(165)) << "the slow node's own";
  EXPECT_EQ(topo->slowReadPenaltyNs(0), std::nullopt) << "a fast node has none";
  EXPECT_EQ(topo->slowReadPenaltyNs(7), std::nullopt) << "no such node";
  const auto json = nlohmann::json::parse(tt::topology::formatJson(*topo));
  EXPECT_EQ(json["nodes"][1]["access"]["read_latency_ns"], 250);

  auto none = discoverFixture("dram_cxl");  // no HMAT
  ASSERT_TRUE(none) << none.error().message();
  EXPECT_FALSE(none->node(1)->access.has_value());
  EXPECT_EQ(none->slowReadPenaltyNs(), std::nullopt);
  // Overridden so that both nodes are fast: no slow tier, no penalty.
  auto flat = discoverFixture("dram_cxl_hmat", "topology { node_override { node: 1 tier: FAST } }");
  ASSERT_TRUE(flat) << flat.error().message();
  EXPECT_EQ(flat->slowReadPenaltyNs(), std::nullopt);
}

TEST(Topology, ConfigOverrideWins) {
  auto topo = discoverFixture("dram_cxl", "topology { node_override { node: 1 tier: FAST } }");
  ASSERT_TRUE(topo) << topo.error().message();
  EXPECT_EQ(topo->node(1)->tier, Tier::Fast);
  EXPECT_EQ(topo->node(1)->tierSource, TierSource::Config);
  EXPECT_FALSE(topo->isTiered());
}

TEST(Topology, OverrideOfUnknownNodeIsAnError) {
  auto topo = discoverFixture("dram_cxl", "topology { node_override { node: 9 tier: SLOW } }");
  ASSERT_FALSE(topo);
  EXPECT_NE(topo.error().message().find("node 9"), std::string::npos);
}

TEST(Topology, SingleNodeIsNotTiered) {
  auto topo = discoverFixture("single_node");
  ASSERT_TRUE(topo) << topo.error().message();
  ASSERT_EQ(topo->nodes.size(), 1u);
  EXPECT_EQ(topo->node(0)->tierSource, TierSource::CpuDefault);
  EXPECT_FALSE(topo->isTiered());
}

TEST(Topology, OldKernelWithoutTiersAndMemorylessNode) {
  auto topo = discoverFixture("no_tiers_memoryless");
  ASSERT_TRUE(topo) << topo.error().message();
  // Node 1 has CPUs but no memory: it cannot hold pages and takes no part in placement.
  EXPECT_EQ(topo->node(1), nullptr);
  EXPECT_EQ(topo->nodesInTier(Tier::Fast), (std::vector<int>{0}));
  EXPECT_EQ(topo->nodesInTier(Tier::Slow), (std::vector<int>{2}));
  EXPECT_FALSE(topo->node(2)->kernelTier.has_value());
  EXPECT_EQ(topo->distance(0, 2), 30);
}

TEST(Topology, MissingSysfsIsAClearError) {
  auto config = tt::config::parseConfig("", "test");
  ASSERT_TRUE(config);
  auto topo = tt::topology::discover(tt::sys::Fs("/nonexistent"), config->topology());
  ASSERT_FALSE(topo);
  EXPECT_EQ(topo.error().code, ENOENT);
  EXPECT_NE(topo.error().message().find("NUMA topology"), std::string::npos);
}

TEST(Topology, JsonAndTableReports) {
  auto topo = discoverFixture("dram_pmem_2socket");
  ASSERT_TRUE(topo);
  auto json = nlohmann::json::parse(tt::topology::formatJson(*topo));
  ASSERT_EQ(json["nodes"].size(), 4u);
  EXPECT_EQ(json["nodes"][2]["tier"], "slow");
  EXPECT_EQ(json["nodes"][2]["kernel_tier"], 22);
  EXPECT_EQ(json["nodes"][0]["cpus"].size(), 48u);
  const std::string table = tt::topology::formatTable(*topo);
  EXPECT_NE(table.find("kernel memory tier"), std::string::npos) << table;
}

}  // namespace
