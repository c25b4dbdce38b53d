// A page table for planner tests: which tier every page of every process is on, a two- or
// four-node topology to plan against, and a way to apply a MigrationPlan as the engine would.
#pragma once

#include <algorithm>
#include <map>
#include <set>
#include <vector>
#include <utility>

#include "core/Types.h"
#include "policy/Planner.h"
#include "topology/Topology.h"

namespace tt::fakes {

class FakePlacement : public policy::PlacementQuery {
 public:
  // Pages [start, start + length) of `tgid` exist, on `node`.
  void map(pid_t tgid, uint64_t start, uint64_t length, int node) {
    for (uint64_t a = start; a < start + length; a += kBasePageSize) pages_[{tgid, a}] = node;
  }
  [[nodiscard]] int nodeOf(pid_t tgid, uint64_t page) const {
    auto it = pages_.find({tgid, page});
    return it == pages_.end() ? -1 : it->second;
  }
  [[nodiscard]] policy::Residency residency(pid_t tgid, uint64_t start, uint64_t length) const override {
    policy::Residency r;
    for (auto it = pages_.lower_bound({tgid, start}); it != pages_.end() && it->first.first == tgid &&
                                                      it->first.second < start + length;
         ++it) {
      if (!isFast(it->second)) {
        ++r.slowPages;
        continue;
      }
      ++r.fastPages;
      auto n = std::find_if(r.fastByNode.begin(), r.fastByNode.end(),
                            [&](const policy::NodePages& e) { return e.node == it->second; });
      if (n == r.fastByNode.end()) r.fastByNode.push_back({it->second, 1});
      else ++n->pages;
    }
    return r;
  }
  // Moves every present page of every request to its target node (what the engine does), except
  // pinned ones (the kernel's busy pages), which stay.
  void apply(const MigrationPlan& plan) {
    for (const MoveRequest& m : plan.moves)
      for (auto it = pages_.lower_bound({m.tgid, m.start});
           it != pages_.end() && it->first.first == m.tgid && it->first.second < m.start + m.length; ++it)
        if (!pinned_.count(it->first)) it->second = m.targetNode;
  }
  // The page cannot be moved (true) or can again (false).
  void pin(pid_t tgid, uint64_t page, bool pinned = true) {
    if (pinned) pinned_.insert({tgid, page});
    else pinned_.erase({tgid, page});
  }
  [[nodiscard]] uint64_t fastBytes(pid_t tgid = 0) const {
    uint64_t n = 0;
    for (const auto& [key, node] : pages_)
      if ((tgid == 0 || key.first == tgid) && isFast(node)) n += kBasePageSize;
    return n;
  }
  // Bytes of every process on `node`.
  [[nodiscard]] uint64_t bytesOn(int node) const {
    uint64_t n = 0;
    for (const auto& [key, where] : pages_)
      if (where == node) n += kBasePageSize;
    return n;
  }
  void setFastNodes(std::vector<int> nodes) { fastNodes_ = std::move(nodes); }

 private:
  [[nodiscard]] bool isFast(int node) const {
    return std::find(fastNodes_.begin(), fastNodes_.end(), node) != fastNodes_.end();
  }
  std::map<std::pair<pid_t, uint64_t>, int> pages_;
  std::set<std::pair<pid_t, uint64_t>> pinned_;
  std::vector<int> fastNodes_{0};
};

// Node 0: DRAM with CPUs; node 1: CPU-less slow memory.
inline topology::Topology twoNodeTopology(uint64_t fastBytes = 1ULL << 30, uint64_t slowBytes = 4ULL << 30) {
  topology::Topology t;
  topology::NumaNode dram;
  dram.id = 0;
  dram.cpus = {0, 1};
  dram.memory = {fastBytes, fastBytes};
  dram.distances = {10, 20};
  dram.tier = topology::Tier::Fast;
  topology::NumaNode slow;
  slow.id = 1;
  slow.memory = {slowBytes, slowBytes};
  slow.distances = {20, 10};
  slow.tier = topology::Tier::Slow;
  t.nodes = {dram, slow};
  return t;
}

// Two sockets (nodes 0, 1: DRAM) each with its own slow node (2 near 0, 3 near 1).
inline topology::Topology twoSocketTopology(uint64_t fastBytes = 1ULL << 30) {
  topology::Topology t;
  const int dist[4][4] = {{10, 21, 17, 28}, {21, 10, 28, 17}, {17, 28, 10, 28}, {28, 17, 28, 10}};
  for (int i = 0; i < 4; ++i) {
    topology::NumaNode n;
    n.id = i;
    if (i < 2) n.cpus = {i};
    n.memory = {fastBytes, fastBytes};
    n.distances.assign(dist[i], dist[i] + 4);
    n.tier = i < 2 ? topology::Tier::Fast : topology::Tier::Slow;
    t.nodes.push_back(n);
  }
  return t;
}

}  // namespace tt::fakes
