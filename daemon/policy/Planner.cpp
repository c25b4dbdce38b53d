#include "policy/Planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace tt::policy {
namespace {

struct Candidate {
  size_t block;
  uint64_t bytes;  // bytes this move carries (the pages not yet on the target tier)
  double density;  // net value per byte
};

// The fast pages of `b` on `node` (Residency::fastByNode; without it, all on the block's own fast node).
uint64_t fastPagesOn(const PlanBlock& b, int node) {
  if (b.residency.fastByNode.empty()) return node == b.fastNode ? b.residency.fastPages : 0;
  for (const NodePages& n : b.residency.fastByNode)
    if (n.node == node) return n.pages;
  return 0;
}

// A plan's priority bands, highest first, each 1000 wide (ranked within by need or value): the
// demotions that free room for the plan's promotions, the promotions, then the demotions nothing in
// this plan waits for (headroom, retries of stuck pages). The engine moves higher bands first.
constexpr int kRoomDemotionBand = 1000;
constexpr int kPromotionBand = 0;
constexpr int kLateDemotionBand = -1000;
constexpr bool afterThePromotions(int priority) { return priority < kPromotionBand; }

template <class F>
void forEachFastNode(const PlanBlock& b, F&& f) {
  if (b.residency.fastByNode.empty()) {
    if (b.residency.fastPages > 0) f(b.fastNode, b.residency.fastPages);
    return;
  }
  for (const NodePages& n : b.residency.fastByNode)
    if (n.pages > 0) f(n.node, n.pages);
}

// PlanContext::stuck by (process, address), for look-ups per block and per move.
class StuckIndex {
 public:
  explicit StuckIndex(const std::vector<StuckRange>& stuck) : ranges_(stuck) {
    std::sort(ranges_.begin(), ranges_.end(), [](const StuckRange& a, const StuckRange& b) {
      return a.tgid != b.tgid ? a.tgid < b.tgid : a.start < b.start;
    });
  }
  // Pages of [start, start + length) of `tgid` in ranges for which `match` holds.
  template <class Match>
  [[nodiscard]] uint64_t pages(pid_t tgid, uint64_t start, uint64_t length, Match&& match) const {
    uint64_t bytes = 0;
    const uint64_t end = start + length;
    for (auto it = first(tgid, start); it != ranges_.end() && it->tgid == tgid && it->start < end; ++it)
      if (match(*it)) bytes += std::min(end, it->start + it->length) - std::max(start, it->start);
    return bytes / kBasePageSize;
  }
  // Calls f(start, length) for each part of [start, start + length) of `tgid` in a range for
  // which `match` holds, in address order.
  template <class Match, class F>
  void forEachInside(pid_t tgid, uint64_t start, uint64_t length, Match&& match, F&& f) const {
    const uint64_t end = start + length;
    for (auto it = first(tgid, start); it != ranges_.end() && it->tgid == tgid && it->start < end; ++it)
      if (match(*it)) {
        const uint64_t s = std::max(start, it->start);
        f(s, std::min(end, it->start + it->length) - s);
      }
  }
  // The same for each part outside every range for which `match` holds.
  template <class Match, class F>
  void forEachOutside(pid_t tgid, uint64_t start, uint64_t length, Match&& match, F&& f) const {
    const uint64_t end = start + length;
    uint64_t at = start;
    for (auto it = first(tgid, start); it != ranges_.end() && it->tgid == tgid && it->start < end; ++it) {
      if (!match(*it)) continue;
      if (it->start > at) f(at, it->start - at);
      at = std::max(at, it->start + it->length);
    }
    if (at < end) f(at, end - at);
  }
  [[nodiscard]] bool empty() const { return ranges_.empty(); }

 private:
  [[nodiscard]] std::vector<StuckRange>::const_iterator first(pid_t tgid, uint64_t start) const {
    return std::partition_point(ranges_.begin(), ranges_.end(), [&](const StuckRange& r) {
      return r.tgid < tgid || (r.tgid == tgid && r.start + r.length <= start);
    });
  }
  std::vector<StuckRange> ranges_;
};

}  // namespace

Planner::Planner(const tensortier::v1::PolicyConfig& config) : config_(config) {}

MigrationRates Planner::ratesOf(const PlanContext& context) const {
  // The initial bandwidth is bounded above 0 by the config; 1 GB/s if a caller's is not.
  const auto initial = static_cast<double>(config_.initial_migration_bandwidth());
  return context.migration.filledIn(initial > 0 ? initial : 1e9);
}

uint64_t Planner::budgetFor(uint64_t fastCapacityBytes) const {
  uint64_t budget = UINT64_MAX;
  if (fastCapacityBytes > 0)
    budget = static_cast<uint64_t>(static_cast<double>(fastCapacityBytes) * (1.0 - config_.fast_reserve_fraction()));
  if (config_.fast_budget_bytes() > 0) budget = std::min(budget, config_.fast_budget_bytes());
  return budget == UINT64_MAX ? 0 : budget;
}

PlanningInstance Planner::buildInstance(const heat::HeatSnapshot& heat, const PlacementQuery& placement,
                                        const topology::Topology& topology, const PlanContext& context) const {
  PlanningInstance inst;
  uint64_t capacity = context.fastCapacityBytes;
  if (capacity == 0)
    for (int node : topology.nodesInTier(topology::Tier::Fast))
      if (const auto* n = topology.node(node)) capacity += n->memory.totalBytes;
  inst.budgetBytes = context.fastBudgetBytes > 0 ? context.fastBudgetBytes : budgetFor(capacity);
  inst.problem.budgetBytes = inst.budgetBytes;
  {
    // Each fast node's share of the usable bytes, in proportion to its size (see the header).
    const std::vector<int> fast = topology.nodesInTier(topology::Tier::Fast);
    uint64_t topologyBytes = 0;
    for (int node : fast)
      if (const auto* n = topology.node(node)) topologyBytes += n->memory.totalBytes;
    const double usable = context.fastBudgetBytes > 0
                              ? static_cast<double>(context.fastBudgetBytes)
                              : static_cast<double>(capacity) * (1.0 - config_.fast_reserve_fraction());
    for (int node : fast) {
      const auto* n = topology.node(node);
      const uint64_t nodeBytes = n != nullptr ? n->memory.totalBytes : 0;
      const double share = topologyBytes > 0 ? static_cast<double>(nodeBytes) / static_cast<double>(topologyBytes)
                                             : 1.0 / static_cast<double>(fast.size());
      const uint64_t bytes = fast.size() == 1 ? inst.budgetBytes
                                              : std::min(inst.budgetBytes, static_cast<uint64_t>(usable * share));
      inst.nodeBudgets.push_back({node, bytes});
      inst.pinnedFastByNode.push_back({node, 0});
    }
  }
  const StuckIndex stuck(context.stuck);
  auto pinned = [&context](pid_t tgid, uint64_t start, uint64_t length) {
    for (const PinnedRange& p : context.pins)
      if (p.tgid == tgid && p.start < start + length && start < p.start + p.length) return true;
    return false;
  };
  std::vector<uint64_t> groupPinnedFast;

  const MigrationRates rates = ratesOf(context);
  const double defaultPenaltyNs = context.slowPenaltyNs > 0 ? context.slowPenaltyNs : config_.slow_access_penalty_ns();
  const double promoteCopyNsPerPage = static_cast<double>(kBasePageSize) / (rates.promoteBytesPerSec / 1e9);
  const double demoteCopyNsPerPage = static_cast<double>(kBasePageSize) / (rates.demoteBytesPerSec / 1e9);
  const double accessesPerPass = context.accessesPerPagePass > 0 ? context.accessesPerPagePass : 1.0;
  // What a slow access and a page move cost for a process whose slow node is `slowNode`: that
  // node's own penalty when the context has one (PlanContext::slowPenaltyByNode), else the default.
  struct Costs {
    double penaltyNs = 0;
    double promoteNsPerPage = 0;
    double demoteNsPerPage = 0;
    double tenureCapPerPage = 0;
  };
  auto costsFor = [&](int slowNode) {
    Costs c;
    c.penaltyNs = defaultPenaltyNs;
    for (const NodePenalty& n : context.slowPenaltyByNode)
      if (n.node == slowNode && n.ns > 0) c.penaltyNs = n.ns;
    // A move costs the larger of the copy time the application waits for and the traffic the
    // copy puts on the tiers (see the header): a faster engine shortens the first, never the second.
    const double trafficNsPerPage = config_.move_floor_page_passes() * accessesPerPass * c.penaltyNs;
    c.promoteNsPerPage = std::max(promoteCopyNsPerPage * config_.migration_cost_weight(), trafficNsPerPage);
    c.demoteNsPerPage = std::max(demoteCopyNsPerPage * config_.migration_cost_weight(), trafficNsPerPage);
    // Never more than a swap costs: a promotion and the demotion that makes room for it.
    c.tenureCapPerPage = c.promoteNsPerPage + c.demoteNsPerPage;
    return c;
  };
  const double margin = config_.hysteresis_margin();
  const double amortization = config_.amortization_steps();
  const double maxAmortization = std::max(amortization, config_.max_amortization_steps());
  const double minBenefit = config_.min_benefit_ns_per_page();
  const uint64_t blockBytes = uint64_t{std::max<uint32_t>(1, config_.chunk_pages())} * kBasePageSize;

  const std::vector<int> fastNodes = topology.nodesInTier(topology::Tier::Fast);
  std::map<pid_t, uint32_t> groupOf;
  struct Nodes {
    int fast = -1;
    int slow = -1;
    Costs costs;
  };
  std::map<pid_t, Nodes> nodesOf;
  auto groupFor = [&](pid_t tgid) {
    auto [it, inserted] = groupOf.emplace(tgid, static_cast<uint32_t>(groupOf.size()));
    if (inserted) {
      uint64_t quota = config_.per_process_quota_bytes();
      int home = -1;
      for (const auto& p : context.processes)
        if (p.tgid == tgid) {
          if (p.quotaBytes > 0) quota = p.quotaBytes;
          home = p.homeNode;
        }
      if (home < 0 || topology.node(home) == nullptr) home = fastNodes.empty() ? -1 : fastNodes.front();
      Nodes n;
      if (home >= 0) {
        n.fast = topology.nearestInTier(home, topology::Tier::Fast).value_or(-1);
        n.slow = topology.nearestInTier(home, topology::Tier::Slow).value_or(-1);
      }
      n.costs = costsFor(n.slow);
      nodesOf[tgid] = n;
      inst.problem.groupQuotaBytes.push_back(quota);
    }
    return it->second;
  };

  for (const heat::UnitHeat& unit : heat.units) {
    const uint32_t group = groupFor(unit.tgid);
    const Nodes nodes = nodesOf[unit.tgid];
    const double penaltyNs = nodes.costs.penaltyNs;
    const double promoteNsPerPage = nodes.costs.promoteNsPerPage;
    const double demoteNsPerPage = nodes.costs.demoteNsPerPage;
    const double unitSoonPerPage = unit.expectedAccessesPerPage * penaltyNs;
    const double unitLongRunPerPage = amortization * unit.accessesPerPagePerStep * penaltyNs;
    // Tenure (see the header): the steps the unit has been steady beyond amortization_steps, at
    // the level it held over them, capped at what a swap costs.
    const double extraSteps = std::clamp(unit.steadySteps, amortization, maxAmortization) - amortization;
    const double unitTenurePerPage = extraSteps * unit.steadyAccessesPerPagePerStep * penaltyNs;
    // The heat model's blocks are the planner's when both use the same chunk_pages (a reload
    // changes both before the next plan). Otherwise every block is worth the unit's average.
    const bool weighted = unit.blockWeightBytes == blockBytes &&
                          unit.blockWeights.size() == (unit.length + blockBytes - 1) / blockBytes;
    for (uint64_t off = 0; off < unit.length; off += blockBytes) {
      const double weight = weighted ? static_cast<double>(unit.blockWeights[off / blockBytes]) : 1.0;
      const double soonPerPage = unitSoonPerPage * weight;
      const double longRunPerPage = unitLongRunPerPage * weight;
      const double tenurePerPage = std::min(unitTenurePerPage * weight, nodes.costs.tenureCapPerPage);
      PlanBlock b;
      b.tgid = unit.tgid;
      b.start = unit.start + off;
      b.length = std::min(blockBytes, unit.length - off);
      b.regionId = unit.regionId;
      b.residency = placement.residency(unit.tgid, b.start, b.length);
      b.nextUseInNs = unit.nextUseInNs;
      b.fastNode = nodes.fast;
      b.slowNode = nodes.slow;
      uint64_t present = b.residency.fastPages + b.residency.slowPages;
      if (present == 0) continue;
      if (pinned(b.tgid, b.start, b.length)) {
        inst.pinnedFastBytes += b.residency.fastPages * kBasePageSize;
        inst.pinnedBytes += present * kBasePageSize;
        forEachFastNode(b, [&](int node, uint64_t pages) {
          for (NodeBytes& n : inst.pinnedFastByNode)
            if (n.node == node) n.bytes += pages * kBasePageSize;
        });
        if (groupPinnedFast.size() <= group) groupPinnedFast.resize(group + 1, 0);
        groupPinnedFast[group] += b.residency.fastPages * kBasePageSize;
        continue;
      }
      std::vector<AddressRange> retries;
      if (!stuck.empty()) {
        // Stuck pages leave the block (see the header): the fast ones, held or due a retry, are
        // charged like pinned ones, taken from the nodes in the order the residency lists them;
        // held slow ones are not planned.
        const uint64_t heldFast = std::min(
            b.residency.fastPages, stuck.pages(b.tgid, b.start, b.length, [](const StuckRange& r) { return r.onFast; }));
        const uint64_t heldSlow =
            std::min(b.residency.slowPages, stuck.pages(b.tgid, b.start, b.length,
                                                        [](const StuckRange& r) { return !r.onFast && !r.retry; }));
        stuck.forEachInside(
            b.tgid, b.start, b.length, [](const StuckRange& r) { return r.onFast && r.retry; },
            [&](uint64_t start, uint64_t length) { retries.push_back({start, length}); });
        if (heldFast > 0) {
          uint64_t left = heldFast;
          auto charge = [&](int node, uint64_t pages) {
            for (NodeBytes& n : inst.pinnedFastByNode)
              if (n.node == node) n.bytes += pages * kBasePageSize;
          };
          if (b.residency.fastByNode.empty()) {
            charge(b.fastNode, heldFast);
          } else {
            for (NodePages& n : b.residency.fastByNode) {
              const uint64_t take = std::min(left, n.pages);
              n.pages -= take;
              left -= take;
              charge(n.node, take);
            }
          }
          b.residency.fastPages -= heldFast;
          inst.pinnedFastBytes += heldFast * kBasePageSize;
          if (groupPinnedFast.size() <= group) groupPinnedFast.resize(group + 1, 0);
          groupPinnedFast[group] += heldFast * kBasePageSize;
        }
        b.residency.slowPages -= heldSlow;
        present = b.residency.fastPages + b.residency.slowPages;
      }
      // A retry's demotion goes out unless the block stays fast (decided with the selection).
      const size_t index = present == 0 ? SIZE_MAX : inst.blocks.size();
      for (const AddressRange& r : retries)
        if (b.slowNode >= 0) inst.retries.push_back({index, b.tgid, r.start, r.length, b.slowNode, b.regionId});
      if (present == 0) continue;
      const auto fast = static_cast<double>(b.residency.fastPages);
      const auto slow = static_cast<double>(b.residency.slowPages);
      const double fastShare = fast / static_cast<double>(present);
      SelectionItem item;
      item.sizeBytes = present * kBasePageSize;
      item.group = group;
      // The margin applies to the short-term value: that is what fluctuates from plan to plan.
      item.value = (soonPerPage * (1.0 + margin * fastShare) + longRunPerPage + tenurePerPage) * static_cast<double>(present) -
                   slow * (promoteNsPerPage + minBenefit) + fast * demoteNsPerPage;
      inst.fastUsedBytes += b.residency.fastPages * kBasePageSize;
      inst.blocks.push_back(b);
      inst.problem.items.push_back(item);
    }
  }
  // Pinned fast pages occupy the budget and their process's quota: the rest is planned around them.
  inst.problem.budgetBytes -= std::min(inst.problem.budgetBytes, inst.pinnedFastBytes);
  for (size_t g = 0; g < groupPinnedFast.size(); ++g) {
    uint64_t& quota = inst.problem.groupQuotaBytes[g];
    if (quota == 0 || groupPinnedFast[g] == 0) continue;  // 0 = no quota
    // A quota the pins use up entirely stays 1 byte (no block fits), as 0 would mean no quota.
    quota = quota > groupPinnedFast[g] ? quota - groupPinnedFast[g] : 1;
  }
  return inst;
}

MigrationPlan Planner::plan(const heat::HeatSnapshot& heat, const PlacementQuery& placement,
                            const topology::Topology& topology, const PlanContext& context) {
  MigrationPlan plan;
  plan.generation = ++generation_;
  stats_ = PlanStats{};
  if (!topology.isTiered()) {
    stats_.tiered = false;
    return plan;
  }
  const PlanningInstance inst = buildInstance(heat, placement, topology, context);
  const Selection sel = selectHeuristic(inst.problem);
  stats_.budgetBytes = inst.budgetBytes;
  stats_.fastUsedBytes = inst.fastUsedBytes + inst.pinnedFastBytes;
  stats_.pinnedFastBytes = inst.pinnedFastBytes;
  stats_.pinnedBytes = inst.pinnedBytes;
  stats_.blocks = inst.blocks.size();
  stats_.objective = sel.objective;

  const MigrationRates rates = ratesOf(context);
  const double intervalSec = context.intervalNs > 0 ? static_cast<double>(context.intervalNs) / 1e9
                                                    : config_.plan_interval_ms() / 1e3;
  // The copying one plan may ask for: what the engine promotes in one interval, with a demoted byte
  // counted as the promoted bytes its copy takes the time of (one at equal rates, and then in
  // exact integers).
  const auto intervalBytes =
      static_cast<uint64_t>(rates.promoteBytesPerSec * intervalSec * config_.plan_bandwidth_factor());
  // Rounded up, so that no plan passes the interval by a fraction of a byte; saturated, so that an
  // extreme ratio of rates cannot wrap.
  const double demoteWeight = rates.promoteBytesPerSec / rates.demoteBytesPerSec;
  const auto asPromoted = [demoteWeight](uint64_t demoteBytes) -> uint64_t {
    if (demoteWeight == 1.0) return demoteBytes;
    const double bytes = std::ceil(static_cast<double>(demoteBytes) * demoteWeight);
    return bytes < 0x1p63 ? static_cast<uint64_t>(bytes) : uint64_t{1} << 63;
  };

  // Each fast node: its share, what it holds, what stays there (chosen blocks' and pinned fast
  // pages), and what this plan sends there and frees there.
  struct NodeState {
    int node = -1;
    uint64_t budget = 0;
    uint64_t used = 0;
    uint64_t keep = 0;
    uint64_t assigned = 0;
    uint64_t freed = 0;
  };
  std::vector<NodeState> nodes;
  for (size_t k = 0; k < inst.nodeBudgets.size(); ++k) {
    const uint64_t pinnedFast = inst.pinnedFastByNode[k].bytes;
    nodes.push_back({inst.nodeBudgets[k].node, inst.nodeBudgets[k].bytes, pinnedFast, pinnedFast, 0, 0});
  }
  auto stateOf = [&nodes](int node) -> NodeState* {
    for (NodeState& n : nodes)
      if (n.node == node) return &n;
    return nullptr;
  };

  std::vector<Candidate> promote, demote;
  const size_t groups = inst.problem.groupQuotaBytes.size();
  std::vector<uint64_t> groupUsed(groups, 0);
  for (size_t i = 0; i < inst.blocks.size(); ++i) {
    const PlanBlock& b = inst.blocks[i];
    const SelectionItem& item = inst.problem.items[i];
    groupUsed[item.group] += b.residency.fastPages * kBasePageSize;
    forEachFastNode(b, [&](int node, uint64_t pages) {
      if (NodeState* n = stateOf(node)) {
        n->used += pages * kBasePageSize;
        if (sel.chosen[i]) n->keep += pages * kBasePageSize;
      }
    });
    const double density = item.value / static_cast<double>(std::max<uint64_t>(1, item.sizeBytes));
    if (sel.chosen[i]) {
      stats_.selectedBytes += item.sizeBytes;
      if (b.residency.slowPages > 0 && b.fastNode >= 0) promote.push_back({i, b.residency.slowPages * kBasePageSize, density});
    } else if (b.residency.fastPages > 0 && b.slowNode >= 0) {
      demote.push_back({i, b.residency.fastPages * kBasePageSize, density});
    }
  }
  // Soonest needed first; among equals, the most valuable per byte.
  std::sort(promote.begin(), promote.end(), [&](const Candidate& a, const Candidate& b) {
    const uint64_t na = inst.blocks[a.block].nextUseInNs, nb = inst.blocks[b.block].nextUseInNs;
    if (na != nb) return na < nb;
    return a.density > b.density;
  });
  std::sort(demote.begin(), demote.end(), [](const Candidate& a, const Candidate& b) { return a.density < b.density; });

  // Promotions, each placed on the fast nodes nearest its own that have room for it.
  struct Placed {
    size_t block;
    int node;
    uint64_t start;
    uint64_t length;
  };
  std::vector<Placed> promoteNow;
  std::map<int, std::vector<int>> fastOrder;  // a block's fast node -> the fast nodes, nearest first
  std::vector<uint64_t> groupPromote(groups, 0);
  // A plan copies what it promotes and the room those promotions need freed, and one interval's
  // worth is what the engine moves before the next plan, each direction at its own rate: with the
  // fast tier full and equal rates, a swap's promotions get half of it; with demotions at a third
  // of the promotion rate (Optane's writes against its reads), a quarter. (Capping the promotions
  // alone let a swap plan copy twice the interval, and with the headroom three times: the engine
  // was still busy when the next plan came, which it then dropped, and the look-ahead's lead
  // times assumed copies that had not run.)
  // The room to free is the largest shortfall the demotions below make up: the global budget's,
  // the fast nodes' summed, or the quotas' summed; running sums, since a promotion changes only
  // its own process's quota and the nodes it lands on. A node's is what its loop below can free:
  // the selection does not know the nodes' shares, so what it keeps on a node (and pinned pages)
  // may stay over the node's share, and no plan frees or copies that excess (it gets no
  // promotions either).
  const uint64_t budget = inst.problem.budgetBytes;
  const auto shortOf = [](uint64_t want, uint64_t have) { return want > have ? want - have : 0; };
  const auto nodeShort = [&](const NodeState& n) { return shortOf(n.used + n.assigned, std::max(n.budget, n.keep)); };
  uint64_t nodesShort = 0, quotasShort = 0;
  for (const NodeState& n : nodes) nodesShort += nodeShort(n);
  for (size_t g = 0; g < groups; ++g)
    if (inst.problem.groupQuotaBytes[g] != 0) quotasShort += shortOf(groupUsed[g], inst.problem.groupQuotaBytes[g]);
  const auto roomToFree = [&] {
    return std::max({shortOf(inst.fastUsedBytes + stats_.promoteBytes, budget), nodesShort, quotasShort});
  };
  for (const Candidate& c : promote) {
    const PlanBlock& b = inst.blocks[c.block];
    auto [order, fresh] = fastOrder.try_emplace(b.fastNode);
    if (fresh) order->second = topology.byDistanceInTier(b.fastNode, topology::Tier::Fast);
    auto roomOf = [](const NodeState& n) {
      const uint64_t room = n.budget > n.keep + n.assigned ? n.budget - n.keep - n.assigned : 0;
      return room - room % kBasePageSize;
    };
    // Only the block's slow pages move (its moves are between tiers: pages on any fast node stay).
    // Whole to the nearest node with room for all of them: charged exactly. Otherwise split by
    // address over the nodes, nearest first, each piece charged the most slow bytes its range
    // can hold (where in the block the slow pages lie is not known), so no node gets more than
    // its share; a block that fits nowhere even so is deferred (over-filling a node would only
    // make the engine refuse pages).
    struct Piece {
      NodeState* node;
      uint64_t offset, length, charge;
    };
    std::vector<Piece> pieces;
    for (int node : order->second)
      if (NodeState* n = stateOf(node); n != nullptr && roomOf(*n) >= c.bytes) {
        pieces.push_back({n, 0, b.length, c.bytes});
        break;
      }
    uint64_t placed = pieces.empty() ? 0 : b.length;
    for (auto it = order->second.begin(); placed < b.length && it != order->second.end(); ++it) {
      NodeState* n = stateOf(*it);
      const uint64_t room = n != nullptr ? roomOf(*n) : 0;
      if (room == 0) continue;
      const uint64_t worst = std::min(b.length - placed, c.bytes);  // slow bytes the rest can hold
      const uint64_t length = room >= worst ? b.length - placed : room;
      pieces.push_back({n, placed, length, std::min(length, worst)});
      placed += length;
    }
    if (placed < b.length) {
      stats_.deferredPromoteBytes += c.bytes;
      continue;
    }
    // Charged for a try: what it promotes and the room it needs freed, undone when the plan's
    // copying would pass the interval (the first promotion always goes, so a block larger than an
    // interval still moves).
    const size_t group = inst.problem.items[c.block].group;
    const uint64_t quota = inst.problem.groupQuotaBytes[group];
    const auto recharge = [&](auto&& change) {
      if (quota != 0) quotasShort -= shortOf(groupUsed[group] + groupPromote[group], quota);
      for (const Piece& p : pieces) nodesShort -= nodeShort(*p.node);
      change();
      if (quota != 0) quotasShort += shortOf(groupUsed[group] + groupPromote[group], quota);
      for (const Piece& p : pieces) nodesShort += nodeShort(*p.node);
    };
    const bool first = stats_.promoteBytes == 0;
    recharge([&] {
      stats_.promoteBytes += c.bytes;
      groupPromote[group] += c.bytes;
      for (const Piece& p : pieces) p.node->assigned += p.charge;
    });
    if (!first && stats_.promoteBytes + asPromoted(roomToFree()) > intervalBytes) {
      recharge([&] {
        stats_.promoteBytes -= c.bytes;
        groupPromote[group] -= c.bytes;
        for (const Piece& p : pieces) p.node->assigned -= p.charge;
      });
      stats_.deferredPromoteBytes += c.bytes;
      continue;
    }
    for (const Piece& p : pieces) promoteNow.push_back({c.block, p.node->node, b.start + p.offset, p.length});
  }

  // Demotions: first what each quota needs, then what the global budget needs, then headroom.
  std::vector<uint8_t> demoted(demote.size(), 0);
  std::vector<Candidate> demoteNow;
  std::vector<uint64_t> groupFreed(groups, 0);
  uint64_t freed = 0;
  auto take = [&](size_t k) {
    demoted[k] = 1;
    freed += demote[k].bytes;
    groupFreed[inst.problem.items[demote[k].block].group] += demote[k].bytes;
    forEachFastNode(inst.blocks[demote[k].block], [&](int node, uint64_t pages) {
      if (NodeState* n = stateOf(node)) n->freed += pages * kBasePageSize;
    });
    demoteNow.push_back(demote[k]);
  };
  for (size_t g = 0; g < groups; ++g) {
    const uint64_t quota = inst.problem.groupQuotaBytes[g];
    if (quota == 0) continue;
    for (size_t k = 0; k < demote.size() && groupUsed[g] + groupPromote[g] > quota + groupFreed[g]; ++k)
      if (!demoted[k] && inst.problem.items[demote[k].block].group == g) take(k);
  }
  const uint64_t need = inst.fastUsedBytes + stats_.promoteBytes;
  for (size_t k = 0; k < demote.size() && need > budget + freed; ++k)
    if (!demoted[k]) take(k);
  // Each fast node frees what the promotions sent there need.
  for (NodeState& n : nodes)
    for (size_t k = 0; k < demote.size() && n.used + n.assigned > n.budget + n.freed; ++k)
      if (!demoted[k] && fastPagesOn(inst.blocks[demote[k].block], n.node) > 0) take(k);
  // What this plan's promotions and the quotas need is freed; the rest is headroom for the next
  // plans, which this plan's promotions must not wait for (see the priorities below): up to one
  // interval's worth of promotions' room, in what is left of the interval's copying (demotions at
  // their rate), lowest value first until the next one does not fit.
  const size_t neededDemotions = demoteNow.size();
  const uint64_t headroom = std::min(intervalBytes, budget);
  const uint64_t spare = shortOf(intervalBytes, stats_.promoteBytes + asPromoted(freed));
  uint64_t headroomTaken = 0;
  for (size_t k = 0; k < demote.size() && need + headroom > budget + freed; ++k) {
    if (demoted[k]) continue;
    if (asPromoted(headroomTaken + demote[k].bytes) > spare) break;
    headroomTaken += demote[k].bytes;
    take(k);
  }
  stats_.demoteBytes = freed;
  for (size_t r = neededDemotions; r < demoteNow.size(); ++r) stats_.headroomDemoteBytes += demoteNow[r].bytes;
  for (const NodeState& n : nodes) stats_.nodes.push_back({n.node, n.budget, n.used, n.assigned});

  // Moves, merged into maximal contiguous runs per (process, target node).
  struct Move {
    pid_t tgid;
    int node;
    uint64_t start;
    uint64_t length;
    int priority;
    uint64_t regionId;
    bool demotion;
  };
  std::vector<Move> moves;
  const auto rankPriority = [](size_t rank, size_t count, int base) {
    const size_t span = 999;
    return base + static_cast<int>(span - (count > 1 ? rank * span / (count - 1) : 0));
  };
  // Headroom ahead of the promotions (see the bands) made a phase swap copy up to twice the
  // promotions' bytes out before the first page of the next phase came in.
  for (size_t r = 0; r < demoteNow.size(); ++r) {
    const PlanBlock& b = inst.blocks[demoteNow[r].block];
    const bool needed = r < neededDemotions;
    const int priority = needed ? rankPriority(r, neededDemotions, kRoomDemotionBand)
                                : rankPriority(r - neededDemotions, demoteNow.size() - neededDemotions, kLateDemotionBand);
    moves.push_back({b.tgid, b.slowNode, b.start, b.length, priority, b.regionId, true});
  }
  for (size_t r = 0; r < promoteNow.size(); ++r) {
    const Placed& p = promoteNow[r];
    const PlanBlock& b = inst.blocks[p.block];
    moves.push_back({b.tgid, p.node, p.start, p.length, rankPriority(r, promoteNow.size(), kPromotionBand), b.regionId, false});
  }
  const uint64_t maxRun = std::max<uint64_t>(kBasePageSize, config_.max_run_bytes() - config_.max_run_bytes() % kBasePageSize);
  // No move the way that failed touches stuck pages (see the header): a demotion skips fast ones,
  // a promotion held slow ones. A move the other way may cover them (pages already on its tier
  // are left alone by the engine, and a run that covers a range whose pages have moved meanwhile
  // settles its hold). A retry's demotion goes out where the selection did not keep its block
  // fast (the lowest priority, after the promotions: it frees no room this plan counts on).
  if (!context.stuck.empty()) {
    const StuckIndex stuck(context.stuck);
    std::vector<Move> outside;
    for (const Move& m : moves)
      stuck.forEachOutside(
          m.tgid, m.start, m.length,
          [&m](const StuckRange& r) { return m.demotion ? r.onFast : !r.onFast && !r.retry; },
          [&](uint64_t start, uint64_t length) {
            outside.push_back({m.tgid, m.node, start, length, m.priority, m.regionId, m.demotion});
          });
    for (const RetryDemotion& r : inst.retries)
      if (r.block == SIZE_MAX || !sel.chosen[r.block])
        outside.push_back({r.tgid, r.slowNode, r.start, r.length, kLateDemotionBand, r.regionId, true});
    moves = std::move(outside);
  }
  // By (process, target node, address), so that adjacent runs meet below.
  std::sort(moves.begin(), moves.end(), [](const Move& a, const Move& b) {
    if (a.tgid != b.tgid) return a.tgid < b.tgid;
    if (a.node != b.node) return a.node < b.node;
    return a.start < b.start;
  });
  for (const Move& m : moves) {
    if (!plan.moves.empty()) {
      MoveRequest& last = plan.moves.back();
      // Not across a region boundary: a run that names its region can be moved by the client's
      // own mbind (the engine's in-process path), which binds one region's range; tensors are often
      // allocated back to back, and a merged run named no region and always went by move_pages.
      // Nor between a demotion that frees room and one after the promotions: an idle tensor's
      // blocks lie side by side, and the merged run would take the higher priority.
      if (last.tgid == m.tgid && last.targetNode == m.node && last.regionId == m.regionId &&
          afterThePromotions(last.priority) == afterThePromotions(m.priority) && last.start + last.length == m.start &&
          last.length + m.length <= maxRun) {
        last.length += m.length;
        last.priority = std::max(last.priority, m.priority);
        continue;
      }
    }
    // A single block longer than the run limit (chunk_pages above it) is split.
    for (uint64_t off = 0; off < m.length; off += maxRun)
      plan.moves.push_back(
          MoveRequest{m.tgid, m.start + off, std::min(maxRun, m.length - off), m.node, m.priority, m.regionId, true});
  }
  std::stable_sort(plan.moves.begin(), plan.moves.end(),
                   [](const MoveRequest& a, const MoveRequest& b) { return a.priority > b.priority; });
  stats_.runs = plan.moves.size();
  return plan;
}

}  // namespace tt::policy
