#include "topology/Topology.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/Parse.h"

namespace tt::topology {
namespace {

const std::string kNodeDir = "devices/system/node";
const std::string kTierDir = "devices/virtual/memory_tiering";

std::string nodePath(int node, const char* file) {
  return kNodeDir + "/node" + std::to_string(node) + "/" + file;
}

// memory_tierN -> N, the kernel's abstract-distance chunk: lower means faster.
std::optional<int> tierNumber(const std::string& name) {
  constexpr std::string_view prefix = "memory_tier";
  if (name.rfind(prefix, 0) != 0) return std::nullopt;
  auto n = parseUint(std::string_view(name).substr(prefix.size()));
  if (!n) return std::nullopt;
  return static_cast<int>(*n);
}

// node id -> kernel tier number; empty when the kernel has no memory tiers.
Result<std::map<int, int>> readKernelTiers(const sys::Fs& sysfs) {
  std::map<int, int> tierOf;
  if (!sysfs.exists(kTierDir)) return tierOf;
  auto entries = sysfs.listDir(kTierDir);
  if (!entries) return entries.error();
  for (const auto& name : *entries) {
    auto tier = tierNumber(name);
    if (!tier) continue;
    auto nodelist = sysfs.readLine(kTierDir + "/" + name + "/nodelist");
    if (!nodelist) return withContext(nodelist.error(), "memory tier " + name);
    auto nodes = parseIdList(*nodelist);
    if (!nodes) return withContext(nodes.error(), kTierDir + "/" + name + "/nodelist");
    for (int n : *nodes) tierOf[n] = *tier;
  }
  return tierOf;
}

// The firmware's access figures of a node (access1: CPU initiators; else access0), or nullopt
// when the kernel exports none. A file that is missing or unreadable leaves its figure 0: the
// figures are advice, never a reason to refuse a topology.
std::optional<AccessPerformance> readAccessPerformance(const sys::Fs& sysfs, int node) {
  for (const char* access : {"access1", "access0"}) {
    const std::string dir = kNodeDir + "/node" + std::to_string(node) + "/" + access + "/initiators";
    if (!sysfs.exists(dir)) continue;
    auto value = [&](const char* file) -> uint64_t {
      auto text = sysfs.readLine(dir + "/" + file);
      if (!text) return 0;
      auto v = parseUint(*text);
      return v ? *v : 0;
    };
    AccessPerformance p;
    p.readLatencyNs = value("read_latency");
    p.writeLatencyNs = value("write_latency");
    p.readBandwidthMBps = value("read_bandwidth");
    p.writeBandwidthMBps = value("write_bandwidth");
    if (p.readLatencyNs == 0 && p.writeLatencyNs == 0 && p.readBandwidthMBps == 0 && p.writeBandwidthMBps == 0)
      continue;
    return p;
  }
  return std::nullopt;
}

}  // namespace

Result<NodeMemory> readNodeMemory(const sys::Fs& sysfs, int node) {
  auto text = sysfs.readFile(nodePath(node, "meminfo"));
  if (!text) return text.error();
  // Lines look like "Node 0 MemTotal:       16310848 kB".
  NodeMemory mem;
  bool haveTotal = false, haveFree = false;
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string word, nodeId, key, unit;
    uint64_t kb = 0;
    if (!(fields >> word >> nodeId >> key >> kb)) continue;
    if (key == "MemTotal:") mem.totalBytes = kb * 1024, haveTotal = true;
    else if (key == "MemFree:") mem.freeBytes = kb * 1024, haveFree = true;
  }
  if (!haveTotal || !haveFree)
    return logicError(sysfs.resolve(nodePath(node, "meminfo")) + ": no MemTotal/MemFree");
  return mem;
}

Result<Topology> discover(const sys::Fs& sysfs, const tensortier::v1::TopologyConfig& config) {
  auto online = sysfs.readLine(kNodeDir + "/online");
  if (!online) return withContext(online.error(), "NUMA topology");
  auto ids = parseIdList(*online);
  if (!ids) return withContext(ids.error(), sysfs.resolve(kNodeDir + "/online"));
  auto kernelTiers = readKernelTiers(sysfs);
  if (!kernelTiers) return kernelTiers.error();

  Topology topo;
  for (int id : *ids) {
    NumaNode node;
    node.id = id;
    auto cpus = sysfs.readLine(nodePath(id, "cpulist"));
    if (!cpus) return cpus.error();
    auto cpuList = parseIdList(*cpus);
    if (!cpuList) return withContext(cpuList.error(), sysfs.resolve(nodePath(id, "cpulist")));
    node.cpus = std::move(*cpuList);
    auto mem = readNodeMemory(sysfs, id);
    if (!mem) return mem.error();
    node.memory = *mem;
    auto dist = sysfs.readLine(nodePath(id, "distance"));
    if (!dist) return dist.error();
    auto distances = parseIntList(*dist);
    if (!distances) return withContext(distances.error(), sysfs.resolve(nodePath(id, "distance")));
    node.distances = std::move(*distances);
    if (auto it = kernelTiers->find(id); it != kernelTiers->end()) node.kernelTier = it->second;
    node.access = readAccessPerformance(sysfs, id);
    // A memory-less node (CPUs only) cannot hold pages: it takes no part in placement.
    if (node.memory.totalBytes == 0) continue;
    topo.nodes.push_back(std::move(node));
  }
  if (topo.nodes.empty()) return logicError("NUMA topology: no online node has memory");

  // The kernel's tiers rank nodes apart only if the nodes we keep span more than one tier.
  std::optional<int> topTier;
  bool kernelRanks = false;
  for (const auto& n : topo.nodes) {
    if (!n.kernelTier) continue;
    if (topTier && *n.kernelTier != *topTier) kernelRanks = true;
    topTier = topTier ? std::min(*topTier, *n.kernelTier) : *n.kernelTier;
  }
  for (auto& n : topo.nodes) {
    if (kernelRanks && n.kernelTier && *n.kernelTier != *topTier) {
      n.tier = Tier::Slow;
      n.tierSource = TierSource::KernelMemoryTier;
    } else if (n.cpus.empty()) {
      n.tier = Tier::Slow;
      n.tierSource = TierSource::CpuLessDefault;
    } else {
      n.tier = Tier::Fast;
      n.tierSource = kernelRanks && n.kernelTier ? TierSource::KernelMemoryTier : TierSource::CpuDefault;
    }
  }
  for (const auto& o : config.node_override()) {
    auto it = std::find_if(topo.nodes.begin(), topo.nodes.end(),
                           [&](const NumaNode& n) { return n.id == static_cast<int>(o.node()); });
    if (it == topo.nodes.end())
      return logicError("topology.node_override: node " + std::to_string(o.node()) + " is not an online node with memory");
    it->tier = o.tier() == tensortier::v1::SLOW ? Tier::Slow : Tier::Fast;
    it->tierSource = TierSource::Config;
  }
  return topo;
}

namespace {

// The lowest read latency of the fast nodes that have one.
std::optional<uint64_t> fastestRead(const std::vector<NumaNode>& nodes) {
  std::optional<uint64_t> fastest;
  for (const auto& n : nodes)
    if (n.tier == Tier::Fast && n.access && n.access->readLatencyNs != 0)
      fastest = std::min(fastest.value_or(UINT64_MAX), n.access->readLatencyNs);
  return fastest;
}

}  // namespace

std::optional<uint64_t> Topology::slowReadPenaltyNs() const {
  const std::optional<uint64_t> fastest = fastestRead(nodes);
  uint64_t slowSum = 0, slowCount = 0;
  for (const auto& n : nodes) {
    if (n.tier == Tier::Fast || !n.access || n.access->readLatencyNs == 0) continue;
    slowSum += n.access->readLatencyNs;
    ++slowCount;
  }
  if (!fastest || slowCount == 0) return std::nullopt;
  const uint64_t slow = slowSum / slowCount;
  if (slow <= *fastest) return std::nullopt;
  return slow - *fastest;
}

std::optional<uint64_t> Topology::slowReadPenaltyNs(int slowNode) const {
  const NumaNode* n = node(slowNode);
  const std::optional<uint64_t> fastest = fastestRead(nodes);
  if (n == nullptr || n->tier == Tier::Fast || !n->access || n->access->readLatencyNs == 0 || !fastest) return std::nullopt;
  if (n->access->readLatencyNs <= *fastest) return std::nullopt;
  return n->access->readLatencyNs - *fastest;
}

const NumaNode* Topology::node(int id) const {
  for (const auto& n : nodes)
    if (n.id == id) return &n;
  return nullptr;
}

std::vector<int> Topology::nodesInTier(Tier tier) const {
  std::vector<int> out;
  for (const auto& n : nodes)
    if (n.tier == tier) out.push_back(n.id);
  return out;
}

std::optional<int> Topology::distance(int from, int to) const {
  const NumaNode* a = node(from);
  if (!a || !node(to)) return std::nullopt;
  // distances[] is indexed by position among all online nodes, memory-less ones included; node
  // ids are dense on every machine we know, so position == id when the row is long enough.
  if (to < 0 || static_cast<size_t>(to) >= a->distances.size()) return std::nullopt;
  return a->distances[static_cast<size_t>(to)];
}

std::optional<int> Topology::nearestInTier(int from, Tier tier) const {
  std::optional<int> best;
  int bestDistance = 0;
  for (const auto& n : nodes) {
    if (n.tier != tier) continue;
    const int d = distance(from, n.id).value_or(1 << 20);
    if (!best || d < bestDistance) best = n.id, bestDistance = d;
  }
  return best;
}

std::vector<int> Topology::byDistanceInTier(int from, Tier tier) const {
  std::vector<std::pair<int, int>> ranked;  // (distance, id)
  for (const auto& n : nodes)
    if (n.tier == tier) ranked.emplace_back(distance(from, n.id).value_or(1 << 20), n.id);
  std::sort(ranked.begin(), ranked.end());
  std::vector<int> out;
  out.reserve(ranked.size());
  for (const auto& [d, id] : ranked) out.push_back(id);
  return out;
}

std::optional<int> Topology::nodeOfCpu(int cpu) const {
  for (const auto& n : nodes)
    if (std::find(n.cpus.begin(), n.cpus.end(), cpu) != n.cpus.end()) return n.id;
  return std::nullopt;
}

const char* tierName(Tier tier) { return tier == Tier::Fast ? "fast" : "slow"; }

const char* tierSourceName(TierSource s) {
  switch (s) {
    case TierSource::KernelMemoryTier: return "kernel memory tier";
    case TierSource::CpuLessDefault: return "cpu-less default";
    case TierSource::CpuDefault: return "has cpus";
    case TierSource::Config: return "config override";
  }
  return "?";
}

namespace {
std::string joinInts(const std::vector<int>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + std::to_string(v[i]);
  return out;
}
}  // namespace

std::string formatTable(const Topology& t) {
  std::ostringstream out;
  char line[256];
  std::snprintf(line, sizeof line, "%-5s %-5s %-20s %-10s %10s %10s  %-12s %s\n", "NODE", "TIER", "SOURCE",
                "KTIER", "TOTAL_MiB", "FREE_MiB", "CPUS", "DISTANCES");
  out << line;
  for (const auto& n : t.nodes) {
    const std::string ktier = n.kernelTier ? "tier" + std::to_string(*n.kernelTier) : "-";
    const std::string cpus = n.cpus.empty() ? "-" : joinInts(n.cpus, ",");
    std::snprintf(line, sizeof line, "%-5d %-5s %-20s %-10s %10llu %10llu  %-12s %s\n", n.id, tierName(n.tier),
                  tierSourceName(n.tierSource), ktier.c_str(),
                  static_cast<unsigned long long>(n.memory.totalBytes >> 20),
                  static_cast<unsigned long long>(n.memory.freeBytes >> 20), cpus.c_str(),
                  joinInts(n.distances, " ").c_str());
    out << line;
  }
  return out.str();
}

std::string formatJson(const Topology& t) {
  nlohmann::json nodes = nlohmann::json::array();
  for (const auto& n : t.nodes) {
    nodes.push_back({{"id", n.id},
                     {"tier", tierName(n.tier)},
                     {"tier_source", tierSourceName(n.tierSource)},
                     {"kernel_tier", n.kernelTier ? nlohmann::json(*n.kernelTier) : nlohmann::json(nullptr)},
                     {"total_bytes", n.memory.totalBytes},
                     {"free_bytes", n.memory.freeBytes},
                     {"cpus", n.cpus},
                     {"distances", n.distances},
                     {"access", n.access ? nlohmann::json{{"read_latency_ns", n.access->readLatencyNs},
                                                          {"write_latency_ns", n.access->writeLatencyNs},
                                                          {"read_bandwidth_mbps", n.access->readBandwidthMBps},
                                                          {"write_bandwidth_mbps", n.access->writeBandwidthMBps}}
                                         : nlohmann::json(nullptr)}});
  }
  return nlohmann::json{{"nodes", nodes}}.dump();
}

}  // namespace tt::topology
