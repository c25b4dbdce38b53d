// NUMA topology as tensortier sees it: which nodes are fast (DRAM) and which are slow (persistent
// memory in KMEM mode, CXL), with their CPUs, memory and distances.
//
// Tier rules, in order: a config override for the node; else the kernel's memory tiers
// (/sys/devices/virtual/memory_tiering, 6.1+) when they rank nodes apart: nodes outside the
// top-ranked tier are slow; else a CPU-less node is slow (the kernel leaves nodes it knows nothing
// about in the default DRAM tier, so CPU-less is the better signal for PMEM/CXL nodes).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/Result.h"
#include "sys/Fs.h"
#include "tensortier/v1/config.pb.h"

namespace tt::topology {

enum class Tier { Fast, Slow };

enum class TierSource { KernelMemoryTier, CpuLessDefault, CpuDefault, Config };

struct NodeMemory {
  uint64_t totalBytes = 0;
  uint64_t freeBytes = 0;
};

// What the firmware says an access to a node's memory costs from its nearest CPUs: ACPI HMAT (or
// CXL CDAT) figures as the kernel exports them in nodeN/access1/initiators (CPU initiators, 5.12+)
// or, without that, access0 (any initiator). 0 = not given.
struct AccessPerformance {
  uint64_t readLatencyNs = 0;
  uint64_t writeLatencyNs = 0;
  uint64_t readBandwidthMBps = 0;
  uint64_t writeBandwidthMBps = 0;
};

struct NumaNode {
  int id = 0;
  std::vector<int> cpus;
  NodeMemory memory;
  std::vector<int> distances;      // distances[i]: to the i-th online node, as the kernel lists them
  std::optional<int> kernelTier;   // memory_tierN of the kernel, if it has tiers
  std::optional<AccessPerformance> access;  // nullopt: the firmware gives no figures
  Tier tier = Tier::Fast;
  TierSource tierSource = TierSource::CpuDefault;
};

struct Topology {
  std::vector<NumaNode> nodes;  // online nodes with memory, ascending id

  [[nodiscard]] const NumaNode* node(int id) const;
  [[nodiscard]] std::vector<int> nodesInTier(Tier tier) const;
  // Distance between two online nodes, or nullopt if either is unknown.
  [[nodiscard]] std::optional<int> distance(int from, int to) const;
  // The node of `tier` nearest to `from` (lowest distance, then lowest id).
  [[nodiscard]] std::optional<int> nearestInTier(int from, Tier tier) const;
  // The nodes of `tier`, nearest to `from` first (distance, then id); all of them, in id order,
  // when `from` is unknown.
  [[nodiscard]] std::vector<int> byDistanceInTier(int from, Tier tier) const;
  // The node whose CPU list holds `cpu`, or nullopt.
  [[nodiscard]] std::optional<int> nodeOfCpu(int cpu) const;
  [[nodiscard]] bool isTiered() const { return !nodesInTier(Tier::Fast).empty() && !nodesInTier(Tier::Slow).empty(); }
  // How much longer a read from the slow tier takes than one from the fast tier, by the firmware's
  // figures: the mean read latency of the slow nodes that have one minus the lowest of the fast
  // nodes'. nullopt unless both tiers have figures and the slow one is slower.
  [[nodiscard]] std::optional<uint64_t> slowReadPenaltyNs() const;
  // The same for one slow node: its read latency minus the lowest of the fast nodes'. nullopt
  // unless it and a fast node have figures and it is the slower.
  [[nodiscard]] std::optional<uint64_t> slowReadPenaltyNs(int slowNode) const;
};

// Discovers the topology from sysfs (`sysfs` rooted at /sys, or a fixture tree in tests).
[[nodiscard]] Result<Topology> discover(const sys::Fs& sysfs, const tensortier::v1::TopologyConfig& config);

// Current total/free memory of one node (node/nodeN/meminfo): the capacity guard reads it often.
[[nodiscard]] Result<NodeMemory> readNodeMemory(const sys::Fs& sysfs, int node);

[[nodiscard]] const char* tierName(Tier tier);
[[nodiscard]] const char* tierSourceName(TierSource source);

// A human-readable table and a JSON document of the topology (tools and the daemon's log).
[[nodiscard]] std::string formatTable(const Topology& topology);
[[nodiscard]] std::string formatJson(const Topology& topology);

}  // namespace tt::topology
