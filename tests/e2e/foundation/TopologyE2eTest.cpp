// Inside the VM: the kernel's own memory tiers must rank the kmem-onlined NVDIMM node as slow.
#include <gtest/gtest.h>

#include "config/Config.h"
#include "topology/Topology.h"

namespace {

TEST(TopologyInVm, NvdimmNodeIsTheSlowTierByTheKernelsMemoryTiers) {
  auto config = tt::config::parseConfig("", "defaults");
  ASSERT_TRUE(config);
  auto topo = tt::topology::discover(tt::sys::Fs("/sys"), config->topology());
  ASSERT_TRUE(topo) << topo.error().message();
  std::printf("%s", tt::topology::formatTable(*topo).c_str());
  const auto* dram = topo->node(0);
  const auto* pmem = topo->node(1);
  ASSERT_NE(dram, nullptr);
  ASSERT_NE(pmem, nullptr) << "node 1 (the NVDIMM) is not online with memory";
  EXPECT_EQ(dram->tier, tt::topology::Tier::Fast);
  EXPECT_FALSE(dram->cpus.empty());
  EXPECT_EQ(pmem->tier, tt::topology::Tier::Slow);
  EXPECT_EQ(pmem->tierSource, tt::topology::TierSource::KernelMemoryTier)
      << "node 1 must be slow because the kernel ranks it lower, not only because it has no CPUs";
  ASSERT_TRUE(dram->kernelTier && pmem->kernelTier);
  EXPECT_GT(*pmem->kernelTier, *dram->kernelTier);
  EXPECT_TRUE(pmem->cpus.empty());
  EXPECT_GT(pmem->memory.totalBytes, 512ULL << 20);
}

}  // namespace
