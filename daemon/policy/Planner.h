// The planner: chooses the fast-tier-resident set and emits the MigrationPlan that gets there.
//
// Each heat unit is cut into blocks of at most `chunk_pages` pages. A block's value of being fast
// is (the accesses per page the heat model expects over its horizon + `amortization_steps` x its
// accesses per page per step) x the block's weight within the unit (UnitHeat::blockWeights: its
// page heat per page over the unit's; 1 without per-page evidence) x the slow node's extra cost per
// access x the block's present pages.
// Tenure: a move must pay for itself within `amortization_steps`, which keeps a short-lived burst
// from churning the fast tier, but a block used steadily for minutes would then never displace one
// idle for minutes when its accesses over those few steps are worth less than the two moves of the
// swap. A pattern is expected to last about as long as it has lasted (UnitHeat::steadySteps), so a
// block also gets the value of the steps its unit has been steady beyond `amortization_steps` (up
// to `max_amortization_steps`), at the level the unit held over them, capped at the cost of two
// moves. The cap is what a swap needs, and it keeps the tenure from ranking steady blocks against
// each other: two blocks steady long enough get the same tenure, and phase-to-phase swaps between
// them are decided by their short-term and per-step values as before.
// Promoting costs each slow page one move plus `min_benefit_ns_per_page`, and keeping a fast block
// saves the move of demoting it. Resident blocks get `hysteresis_margin` extra short-term (horizon)
// value, the part that fluctuates from plan to plan; against the long-run part, swaps are held back
// by what they cost: both moves (copy time or traffic floor), which a swap must win back, so with
// migration_cost_weight and move_floor_page_passes both 0 only the margin is left. The selection
// (Selection.h) maximises the sum of net values under the global fast budget and per-process
// quotas.
//
// What a page move costs: the larger of two things it consumes. Its copy time (page size over the
// measured rate of its direction: promotions and demotions are timed and rate-limited apart, and
// on Optane a demotion's writes are the slower) x `migration_cost_weight`, the share of the copy the application
// waits for; and the memory traffic of the copy, which competes with the application's own accesses
// even when the copy runs beside it: the copy reads every line of the page on one tier and writes it
// on the other. That traffic is valued in the currency of the value side, as
// `move_floor_page_passes` passes over the page at the slow node's penalty per access (the default 2:
// the read and the write, one pass each), with PlanContext::accessesPerPagePass saying how many
// accesses one pass makes in the unit the hotness evidence counts. Without the floor a faster
// engine makes moves look nearly free while each still streams the page through both tiers; with
// the default floor no engine speed makes moving a page cheaper than reading it from the slow tier
// once, so a block whose expected accesses (horizon plus amortization) come to one or two passes over
// its pages is not worth promoting, and a block with reuse still is.
//
// From the selection to moves: promotions go in order of need (soonest predicted use, then value
// density); demotions free exactly the room those promotions and the quotas need, lowest value
// first. A plan copies no more than the engine moves in one planning interval (x
// plan_bandwidth_factor), the promotions at the promotion rate and the demotions they need at the
// demotion rate together (at equal rates a swap into a full fast tier promotes half an interval's
// worth); promotions past that wait for the next plan. What is left of the interval frees
// headroom, up to an interval's worth of promotions' room, from blocks the selection dropped
// (what stays idle until a later phase leaves early, so
// the next phase's promotions need not wait). Adjacent
// blocks going the same way are merged into maximal contiguous runs (DeepTM), each one MoveRequest.
// The demotions that free room for this plan's promotions carry the highest priority, so the
// engine frees room first; the headroom demotions the lowest, after the promotions, so the pages
// the next phase needs do not wait behind pages nobody needs gone yet.
//
// Target nodes: a process's fast node is the fast node nearest its home node (the node it runs
// on; the first fast node when unknown), its slow node the slow node nearest its home node. The
// slow-access penalty is that slow node's own when PlanContext::slowPenaltyByNode lists it: pages
// whose demotion target is a slower device are worth more in the fast tier. It is the demotion
// target's figure for all of the process's pages, also for slow pages that something else (first
// touch, the kernel's tiering) put on another slow node: Residency does not say which slow node
// holds them.
//
// Several fast nodes (a two-socket machine): the selection's budget is global, but each fast node
// holds only its own share: its capacity x (1 - reserve), or its part of a caller-given capacity or
// budget in proportion to the nodes' sizes, never more than the global budget. A block's slow
// pages go to the fast node nearest the process's home with room for all of them, next to what
// stays there and what this plan already sends there; when no node has, the block is split by
// address over the nodes, nearest first, each piece charged the most slow bytes its range can
// hold; a block that fits nowhere even so is deferred (over-filling a node would only make the
// engine refuse pages). Demotions then free, on each fast node, what its promotions need. The
// plan's moves are between tiers (MoveRequest::betweenTiers): a page already on any fast node
// stays where it is, so the planner never moves pages between two fast nodes.
//
// Pinned ranges (PlanContext::pins, from `tensortierctl migrate`): a block overlapping one is left
// where it is: it is neither promoted nor demoted, and its fast pages are taken off the global
// budget and its process's quota before the selection, so the others are planned around them.
//
// Stuck pages (PlanContext::stuck: pages the engine left busy, pinned by the kernel) are left out
// of their block, as if they were not its pages: the fast ones are charged to the budgets like
// pinned pages (they stay in DRAM whatever the plan says), held slow ones are not planned, and
// the block's moves the way that failed skip them (demotions the fast ones, promotions the slow
// ones), so the engine does not retry them every plan; a move the other way may cover them, which
// settles a hold whose pages are not where it says (a range joined across moved pages, a page
// moved by hand or by the kernel since). Fast pages due a
// retry stay charged in that plan too (no promotion is sized into room that may not free), and are
// demoted again unless the selection keeps their block fast; slow ones due a retry are planned
// like any other pages. A block is charged at most its fast (or slow) pages.
//
// Threading: not thread-safe; the daemon's epoch loop owns it.
#pragma once

#include <cstdint>
#include <vector>

#include "core/Types.h"
#include "heat/HeatModel.h"
#include "policy/Selection.h"
#include "tensortier/v1/policy_config.pb.h"
#include "topology/Topology.h"

namespace tt::policy {

struct NodePages {
  int node = -1;
  uint64_t pages = 0;
};

struct Residency {
  uint64_t fastPages = 0;  // present pages on fast-tier nodes
  uint64_t slowPages = 0;  // present pages on slow-tier nodes
  // fastPages by node, when the query knows them (the daemon's move_pages status does). A query of
  // a single fast node may leave it empty: the fast pages then count on the block's own fast node.
  std::vector<NodePages> fastByNode;
};

// Where the pages of a range are now. The daemon answers from move_pages(2) status queries (or its
// own record of what it moved); the simulator from its page table; tests from a fake.
class PlacementQuery {
 public:
  virtual ~PlacementQuery() = default;
  [[nodiscard]] virtual Residency residency(pid_t tgid, uint64_t start, uint64_t length) const = 0;
};

struct ProcessPlacement {
  pid_t tgid = 0;
  int homeNode = -1;        // node the process runs on; -1 = unknown
  uint64_t quotaBytes = 0;  // 0 = the config's per_process_quota_bytes
};

// A range whose placement the user fixed by hand.
struct PinnedRange {
  pid_t tgid = 0;
  uint64_t start = 0;
  uint64_t length = 0;
};

// A slow node's own extra cost per access (its firmware read latency over the fast tier's).
struct NodePenalty {
  int node = -1;
  double ns = 0;
};

struct PlanContext {
  std::vector<ProcessPlacement> processes;  // optional per-process details
  uint64_t fastCapacityBytes = 0;           // 0 = total memory of the topology's fast nodes
  // The usable fast bytes when the caller knows them exactly (the simulator's tier capacity is
  // already what the process may use); replaces capacity x (1 - reserve). 0 = derive.
  uint64_t fastBudgetBytes = 0;
  // What the engine copies per second each way, measured. A direction not known (0) copies as
  // fast as the other; neither known: the config's initial_migration_bandwidth.
  MigrationRates migration;
  double slowPenaltyNs = 0;                 // extra cost of a slow access, ns; 0 = the config's
  // Per slow node, where they differ (a CXL node beside an Optane node): a process whose slow node
  // is listed is charged that node's penalty, for its accesses and its moves' traffic alike.
  std::vector<NodePenalty> slowPenaltyByNode;
  uint64_t intervalNs = 0;                  // time until the next plan; 0 = the config's plan_interval_ms
  // Accesses, in the unit the hotness evidence counts, that one pass over a 4 KiB page makes: 64
  // when each access stands for a cache line (PMU samples weighted by their period), 1 when the
  // evidence is page-granular (soft-dirty, DAMON, fault tracer). 0 = 1. Scales the move floor.
  double accessesPerPagePass = 0;
  std::vector<PinnedRange> pins;            // left where they are (see above)
  // Pages the engine could not move in earlier plans (service::StuckMoves; never overlapping
  // within a process): see "Stuck pages" in the header.
  std::vector<StuckRange> stuck;
};

struct PlanBlock {
  pid_t tgid = 0;
  uint64_t start = 0;
  uint64_t length = 0;
  uint64_t regionId = 0;
  Residency residency;
  uint64_t nextUseInNs = UINT64_MAX;
  int fastNode = -1;
  int slowNode = -1;
};

// Stuck fast pages due a retry (PlanContext::stuck) in one block: demoted unless the selection
// keeps the block fast.
struct RetryDemotion {
  size_t block = SIZE_MAX;  // index in PlanningInstance::blocks; SIZE_MAX: only stuck pages left in it
  pid_t tgid = 0;
  uint64_t start = 0;
  uint64_t length = 0;
  int slowNode = -1;
  uint64_t regionId = 0;
};

struct NodeBytes {
  int node = -1;
  uint64_t bytes = 0;
};

// One planning problem: the blocks and the selection problem over them (item i = block i).
struct PlanningInstance {
  std::vector<PlanBlock> blocks;
  SelectionProblem problem;  // budget and quotas net of the pinned fast bytes
  uint64_t fastUsedBytes = 0;        // of the blocks above (pinned ones excluded)
  uint64_t budgetBytes = 0;          // the global budget before the pinned bytes are taken off
  uint64_t pinnedFastBytes = 0;      // pinned blocks' pages on fast nodes, and stuck fast pages
  uint64_t pinnedBytes = 0;          // pinned blocks' present pages
  std::vector<NodeBytes> nodeBudgets;     // each fast node's share (see the header), node order
  std::vector<NodeBytes> pinnedFastByNode;  // pinned blocks' fast pages per fast node
  std::vector<RetryDemotion> retries;
};

// A fast node's share of the budget and its use, as the last plan saw them.
struct NodeUse {
  int node = -1;
  uint64_t budgetBytes = 0;
  uint64_t usedBytes = 0;     // managed bytes on the node before the plan (pinned included)
  uint64_t promoteBytes = 0;  // this plan sends there
};

struct PlanStats {
  uint64_t budgetBytes = 0;
  uint64_t fastUsedBytes = 0;      // managed bytes on fast nodes before the plan (pinned included)
  uint64_t pinnedFastBytes = 0;    // of which pinned, or stuck (PlanContext::stuck)
  uint64_t pinnedBytes = 0;        // present bytes of pinned blocks (any tier)
  uint64_t selectedBytes = 0;      // bytes the selection wants fast
  uint64_t promoteBytes = 0;       // in this plan
  uint64_t demoteBytes = 0;
  uint64_t headroomDemoteBytes = 0;  // of which headroom for later plans (moved after the promotions)
  uint64_t deferredPromoteBytes = 0;  // wanted but over this interval's bandwidth, or no fast node had room
  std::vector<NodeUse> nodes;         // per fast node
  size_t blocks = 0;
  size_t runs = 0;
  double objective = 0;
  bool tiered = true;              // false: the topology has no fast+slow pair, nothing to plan
};

class Planner {
 public:
  explicit Planner(const tensortier::v1::PolicyConfig& config);

  [[nodiscard]] PlanningInstance buildInstance(const heat::HeatSnapshot& heat, const PlacementQuery& placement,
                                               const topology::Topology& topology, const PlanContext& context) const;
  [[nodiscard]] MigrationPlan plan(const heat::HeatSnapshot& heat, const PlacementQuery& placement,
                                   const topology::Topology& topology, const PlanContext& context);
  [[nodiscard]] const PlanStats& lastStats() const { return stats_; }
  // A reloaded config (SIGHUP) takes effect at the next plan; generations keep increasing.
  void applyConfig(const tensortier::v1::PolicyConfig& config) { config_ = config; }
  // Global fast budget for a fast-tier capacity, after the reserve and the configured cap.
  [[nodiscard]] uint64_t budgetFor(uint64_t fastCapacityBytes) const;

 private:
  // The context's rates, each one not known replaced by initial_migration_bandwidth.
  [[nodiscard]] MigrationRates ratesOf(const PlanContext& context) const;

  tensortier::v1::PolicyConfig config_;
  uint64_t generation_ = 0;
  PlanStats stats_;
};

}  // namespace tt::policy
