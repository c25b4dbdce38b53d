#include "service/Adapters.h"

#include "sys/ProcStat.h"

#include <future>
#include <thread>

#include "core/Log.h"

namespace tt::service {

namespace {
bool isFast(const topology::Topology& topology, int node) {
  const auto* n = topology.node(node);
  return n && n->tier == topology::Tier::Fast;
}
}  // namespace

Result<void> SourceSetEvidence::collect(EvidenceBatch& out) {
  auto collected = set_->collect(out);
  moves_.clear();
  set_->takeKernelMoves(moves_);
  kernelMoves_.add(moves_);
  // The ranges for the planner's residency answers. Moves the kernel made for a move_pages(2) or
  // mbind(2) call are left out: the daemon's own plans mark theirs, and at one event per folio
  // they would be most of the list. Runs of adjacent pages become one range.
  for (const sources::KernelMove& m : moves_) {
    if (m.page == 0 || m.why == sources::KernelMove::Why::Syscall) continue;
    const uint64_t length = m.pages * kBasePageSize;
    auto& moved = out.movedByKernel;
    if (!moved.empty() && moved.back().tgid == m.tgid && moved.back().start + moved.back().length == m.page)
      moved.back().length += length;
    else
      moved.push_back({m.tgid, m.page, length});
  }
  return collected;
}

std::vector<SourceReport> SourceSetEvidence::status() const {
  std::vector<SourceReport> out;
  for (const auto& s : set_->sources()) {
    const auto c = s->counters();
    SourceReport& r = out.emplace_back();
    r.name = std::string(s->name());
    r.active = s->status().available;
    r.detail = s->status().detail;
    r.samples = c.samples;
    r.cpuPercent = c.costPercent;
    r.lost = c.lost;
    r.throttled = c.throttled;
    r.paused = c.paused;
    r.pauses = c.pauses;
    r.systemMigrations = s->systemMigrations();
    if (r.name == "fault-trace") r.kernelMoves = kernelMoves_;
  }
  return out;
}

Result<void> SourceSetEvidence::applyConfig(const tensortier::v1::SourcesConfig& config) {
  auto changes = set_->applyConfig(config);
  if (!changes) return changes.error();
  for (const auto& key : changes->live) TT_LOG(Info) << "sources: " << key << " applied live";
  return {};
}

std::optional<int> homeNodeOf(const sys::Fs& procfs, pid_t tgid, const topology::Topology& topology) {
  if (auto allowed = sys::readAllowedCpus(procfs, tgid); allowed && !allowed->empty()) {
    std::optional<int> only;
    bool oneNode = true;
    for (int cpu : *allowed) {
      const auto node = topology.nodeOfCpu(cpu);
      if (!node || (only && *only != *node)) {
        oneNode = false;
        break;
      }
      only = node;
    }
    if (oneNode && only) return only;
  }
  auto cpu = sys::readLastCpu(procfs, tgid);
  if (!cpu) return std::nullopt;
  return topology.nodeOfCpu(*cpu);
}

double accessesPerPagePass(std::span<const SourceReport> sources) {
  constexpr double kCacheLineBytes = 64;
  for (const SourceReport& s : sources)
    if (s.name == "pmu" && s.active) return static_cast<double>(kBasePageSize) / kCacheLineBytes;
  return 1;
}

MovePagesPlacement::MovePagesPlacement(sys::PageMover& mover, const topology::Topology& topology)
    : reader_(mover), topology_(topology) {}

void MovePagesPlacement::beginPlan() {
  ++plan_;
  queriedPages_ = 0;
  kernelMarkedPages_ = 0;
}

template <typename F>
void MovePagesPlacement::forEachOverlapping(pid_t tgid, uint64_t start, uint64_t length, F&& f) {
  auto it = blocks_.lower_bound({tgid, start, 0});
  if (it != blocks_.begin()) {
    auto prev = std::prev(it);  // a block starting before the range may reach into it
    if (std::get<0>(prev->first) == tgid && std::get<1>(prev->first) + std::get<2>(prev->first) > start) it = prev;
  }
  for (; it != blocks_.end() && std::get<0>(it->first) == tgid && std::get<1>(it->first) < start + length; ++it)
    if (!f(std::get<2>(it->first), it->second)) return;
}

void MovePagesPlacement::markMoved(pid_t tgid, uint64_t start, uint64_t length, uint64_t plans) {
  forEachOverlapping(tgid, start, length, [&](uint64_t, Block& b) {
    b.movedUntil = std::max(b.movedUntil, plan_ + plans);
    return true;
  });
}

bool MovePagesPlacement::markMovedByKernel(pid_t tgid, uint64_t start, uint64_t length) {
  bool within = true;
  forEachOverlapping(tgid, start, length, [&](uint64_t blockLength, Block& b) {
    if (b.movedUntil > plan_) return true;  // asked at the next plan anyway
    const uint64_t pages = blockLength / kBasePageSize;
    if (kernelMarkedPages_ + pages > budgetPages_) return within = false;
    kernelMarkedPages_ += pages;
    b.movedUntil = plan_ + 1;
    return true;
  });
  return within;
}

void MovePagesPlacement::endPlan(const MigrationPlan& plan) {
  // The moves' blocks: asked again until the engine is surely done with them.
  for (const MoveRequest& m : plan.moves) markMoved(m.tgid, m.start, m.length, kDirtyPlans);
  std::erase_if(blocks_, [this](const auto& b) { return b.second.askedIn != plan_; });
  uint64_t pages = 0;
  for (const auto& [key, b] : blocks_) pages += std::get<2>(key) / kBasePageSize;
  refresh_ = std::max<uint64_t>(1, (pages + budgetPages_ - 1) / budgetPages_);
}

policy::Residency MovePagesPlacement::residency(pid_t tgid, uint64_t start, uint64_t length) const {
  Block& b = blocks_[{tgid, start, length}];
  b.askedIn = plan_;
  // Each block's refresh falls in a plan set by its address (its page number through splitmix64's
  // finalizer: blocks are evenly spaced, which a plain multiplicative hash maps to one residue of
  // a power of two), so the refreshes spread evenly over the `refresh_` plans.
  uint64_t phase = start / kBasePageSize;
  phase = (phase ^ (phase >> 30)) * 0xbf58476d1ce4e5b9ULL;
  phase = (phase ^ (phase >> 27)) * 0x94d049bb133111ebULL;
  phase ^= phase >> 31;
  if (b.known && plan_ > b.movedUntil && (plan_ + phase) % refresh_ != 0) return b.residency;
  b = Block{{}, b.movedUntil, plan_, false};
  queriedPages_ += length / kBasePageSize;
  policy::Residency& out = b.residency;
  auto placement = reader_.read(tgid, start, length);
  if (!placement) return out;  // the process is gone: nothing present (asked again next plan)
  b.known = true;
  for (const auto& [node, bytes] : placement->bytesPerNode) {
    if (!isFast(topology_, node)) {
      out.slowPages += bytes / kBasePageSize;
      continue;
    }
    out.fastPages += bytes / kBasePageSize;
    out.fastByNode.push_back({node, bytes / kBasePageSize});
  }
  return out;
}

HeatPlannerPolicy::HeatPlannerPolicy(const tensortier::v1::PolicyConfig& config, const topology::Topology& topology,
                                     sys::PageMover& mover, sys::Fs procfs)
    : topology_(topology),
      procfs_(std::move(procfs)),
      placement_(mover, topology),
      heat_(config),
      planner_(std::make_unique<policy::Planner>(config)),
      config_(config),
      penalty_(slowAccessPenaltyOf(config, topology)) {
  TT_LOG(Info) << "policy: a slow-tier access costs " << penalty_.ns << " ns more than a fast one (" << penalty_.source
               << ")";
}

SlowAccessPenalty slowAccessPenaltyOf(const tensortier::v1::PolicyConfig& config, const topology::Topology& topology) {
  if (config.has_slow_access_penalty_ns()) return {config.slow_access_penalty_ns(), "policy.slow_access_penalty_ns", {}};
  if (auto ns = topology.slowReadPenaltyNs()) {
    std::string nodes;
    for (const auto& n : topology.nodes) {
      if (!n.access || n.access->readLatencyNs == 0) continue;
      nodes += (nodes.empty() ? "" : ", ") + std::string("node ") + std::to_string(n.id) + " " +
               std::to_string(n.access->readLatencyNs) + " ns";
    }
    // Firmware tables are often wrong: held to the bounds the config key has.
    constexpr uint64_t kMaxNs = 100000;
    std::vector<policy::NodePenalty> byNode;
    for (int slow : topology.nodesInTier(topology::Tier::Slow))
      if (auto own = topology.slowReadPenaltyNs(slow))
        byNode.push_back({slow, static_cast<double>(std::min<uint64_t>(*own, kMaxNs))});
    // The figure shown is the tier's mean; with slow nodes that differ, each is charged its own.
    if (std::any_of(byNode.begin(), byNode.end(), [&](const policy::NodePenalty& n) { return n.ns != byNode.front().ns; }))
      nodes += "; the mean shown, each slow node charged its own";
    if (*ns > kMaxNs)
      return {static_cast<double>(kMaxNs),
              "the firmware's read latencies (HMAT), " + std::to_string(*ns) + " ns held to the key's maximum: " + nodes,
              std::move(byNode)};
    return {static_cast<double>(*ns), "the firmware's read latencies (HMAT): " + nodes, std::move(byNode)};
  }
  return {config.slow_access_penalty_ns(), "default: the firmware gives no read latencies (HMAT)", {}};
}

void HeatPlannerPolicy::observe(const EvidenceBatch& evidence, uint64_t sinceNs, uint64_t nowNs) {
  heat_.ingest(evidence, sinceNs, nowNs, 1.0);
  for (const auto& m : evidence.movedByKernel)
    if (!placement_.markMovedByKernel(m.tgid, m.start, m.length)) break;  // the rest at their refresh turn
}

MigrationPlan HeatPlannerPolicy::plan(uint64_t nowNs, uint64_t intervalNs, const MigrationRates& rates,
                                     std::span<const ManualPin> pins, std::span<const MoveRequest> stillMoving,
                                     std::span<const StuckRange> stuck) {
  heat_.setMigrationRates(rates);
  heat_.setPlanInterval(intervalNs);
  heat_.advanceEpoch(nowNs);
  policy::PlanContext context;
  context.migration = rates;
  context.intervalNs = intervalNs;
  context.accessesPerPagePass = accessesPerPagePass_;
  context.slowPenaltyNs = penalty_.ns;
  context.slowPenaltyByNode = penalty_.byNode;
  for (const auto& p : pins) context.pins.push_back({p.tgid, p.start, p.length});
  context.stuck.assign(stuck.begin(), stuck.end());
  placement_.setQueryBudget(config_.residency_query_pages_per_epoch());
  // Each process's home node (homeNodeOf): its promotions go to the fast node nearest it first.
  // Unknown (the process is exiting): the planner takes the first fast node.
  const heat::HeatSnapshot& heat = heat_.snapshot();
  for (const auto& p : heat.processes)
    if (auto node = homeNodeOf(procfs_, p.tgid, topology_)) context.processes.push_back({p.tgid, *node, 0});
  placement_.beginPlan();
  placement_.stillMoving(stillMoving);
  MigrationPlan plan = planner_->plan(heat, placement_, topology_, context);
  // Pinned ranges are not marked here every plan: once their manual move is done they stay put,
  // and are asked at their refresh turn like any block (within the query budget). The move itself
  // comes in `stillMoving` (the epoch loop hands manual moves, and pinned moves it retries, to the
  // next plan, and on while the engine runs them), whose ranges are asked again.
  placement_.endPlan(plan);
  if (log::enabled(log::Level::Debug)) {
    std::string lookAhead;
    for (const auto& p : heat.processes)
      lookAhead += " " + std::to_string(p.tgid) + ":" +
                   (p.horizonNs > 0 ? std::to_string(p.horizonNs / 1'000'000) + " ms" : std::string("no schedule"));
    // What the plan decided, so that a move that did not happen can be told from one not wanted.
    const policy::PlanStats& s = planner_->lastStats();
    constexpr uint64_t kKiB = 1024;
    TT_LOG(Debug) << "policy: residency of " << placement_.pagesQueried() << " pages asked for this plan; each block "
                  << "refreshed every " << placement_.refreshPlans() << " plans; look-ahead by process"
                  << (lookAhead.empty() ? std::string(" (none)") : lookAhead) << "; KiB selected "
                  << s.selectedBytes / kKiB << " of budget " << s.budgetBytes / kKiB << ", fast now "
                  << s.fastUsedBytes / kKiB << ", promote " << s.promoteBytes / kKiB << ", demote " << s.demoteBytes / kKiB
                  << " (headroom after the promotions " << s.headroomDemoteBytes / kKiB << ")"
                  << ", promotions deferred " << s.deferredPromoteBytes / kKiB;
  }
  return plan;
}

std::vector<registry::RegionHeat> HeatPlannerPolicy::regionHeat() const {
  std::vector<registry::RegionHeat> out;
  for (const auto& u : heat_.snapshot().units)
    if (u.regionId != 0) out.push_back({u.regionId, u.heat, u.steadySteps});
  return out;
}

PolicyView HeatPlannerPolicy::view() const {
  const auto& s = planner_->lastStats();
  PolicyView v;
  v.fastBudgetBytes = s.budgetBytes;
  v.fastUsedBytes = s.fastUsedBytes;
  for (const auto& n : s.nodes) v.fastNodes.push_back({n.node, n.budgetBytes, n.usedBytes});
  const auto& heat = heat_.snapshot();
  for (size_t f = 0; f < heat::kFeatureCount; ++f) v.featureWeights.push_back({heat::featureName(f), heat_.weights()[f]});
  for (const auto& p : heat.processes)
    v.clocks.push_back({p.tgid, p.clock.periodNs, heat::periodSourceName(p.clock.source), p.clock.confidence, p.phase});
  v.slowPenaltyNs = penalty_.ns;
  v.slowPenaltySource = penalty_.source;
  return v;
}

std::vector<PageHeatView> HeatPlannerPolicy::hottestPages(size_t limit, pid_t tgid, uint64_t nowNs) const {
  std::vector<PageHeatView> out;
  for (const auto& p : heat_.hottestPages(limit, nowNs, tgid)) out.push_back({p.tgid, p.page, p.heat});
  return out;
}

Result<void> HeatPlannerPolicy::applyConfig(const tensortier::v1::PolicyConfig& config) {
  // The planner is stateless between plans (the loop numbers generations): replace it. The heat
  // model's learned state is worth more than a fresh start: it takes the new parameters over it.
  planner_ = std::make_unique<policy::Planner>(config);
  const std::vector<std::string> heatKeys = heat::heatModelKeysChanged(config_, config);
  heat_.reconfigure(config);
  config_ = config;
  const SlowAccessPenalty penalty = slowAccessPenaltyOf(config, topology_);
  if (penalty.ns != penalty_.ns || penalty.source != penalty_.source) {
    TT_LOG(Info) << "policy: a slow-tier access now costs " << penalty.ns << " ns more than a fast one (" << penalty.source
                 << ")";
  }
  penalty_ = penalty;
  // What each key does was logged with the reload or tune that changed it; this says it is done.
  if (!heatKeys.empty()) {
    std::string keys;
    for (const auto& k : heatKeys) keys += (keys.empty() ? "policy." : ", policy.") + k;
    TT_LOG(Info) << "heat model: applied " << keys;
  }
  return {};
}

namespace {

std::vector<FinishedRun> finishedRunsOf(const migrate::PlanReport& report) {
  std::vector<FinishedRun> out;
  for (const auto& r : report.runs) {
    const migrate::Outcome& o = r.outcome;
    // Not permission denied: no later try gets past that.
    out.push_back({r.tgid, r.start, r.length, r.targetNode,
                   o.busy + o.skippedTargetFull + o.noMemory + o.cancelled + o.failed == 0, report.generation,
                   r.direction == migrate::Direction::Demote,
                   o.skippedTargetFull + o.noMemory + o.cancelled + o.failed + o.permissionDenied == 0, r.busy});
  }
  return out;
}

}  // namespace

static_assert(migrate::Engine::kKeptReports >= EpochLoop::kPinPlansRead,
              "the engine must keep the reports of every plan the pins read");

std::optional<std::vector<FinishedRun>> EngineExecutor::runsOf(uint64_t generation) const {
  const auto report = engine_.reportOf(generation);
  if (!report) return std::nullopt;
  return finishedRunsOf(*report);
}

ExecutorCounters EngineExecutor::counters() const {
  const auto c = engine_.counters();
  ExecutorCounters out;
  const auto& p = c.of(migrate::Direction::Promote);
  const auto& d = c.of(migrate::Direction::Demote);
  out.promotedPages = p.pages.moved;
  out.demotedPages = d.pages.moved;
  out.promotedBytes = p.bytesMoved;
  out.demotedBytes = d.bytesMoved;
  for (const auto* dir : {&p, &d}) {
    out.failedPages["busy"] += dir->pages.busy;
    out.failedPages["not_mapped"] += dir->pages.notMapped;
    out.failedPages["no_memory"] += dir->pages.noMemory;
    out.failedPages["permission_denied"] += dir->pages.permissionDenied;
    out.failedPages["other"] += dir->pages.failed;
    out.failedPages["target_full"] += dir->pages.skippedTargetFull;
    out.failedPages["cancelled"] += dir->pages.cancelled;
  }
  out.plans = c.plansExecuted;
  out.planInFlight = !engine_.idle();
  // Busy time is summed over the workers, which move in parallel: per worker it approximates the
  // wall time the engine was moving, so bytes / time is the engine's rate, not one worker's. Each
  // direction apart: their copies differ in speed on a real slow tier, and their limits may differ.
  const uint32_t workers = std::max<uint32_t>(1, workers_);
  out.promoteTiming = {p.busyNs / workers, p.busyBytes, static_cast<double>(promoteMbps_.load()) * 1e6};  // MB/s
  out.demoteTiming = {d.busyNs / workers, d.busyBytes, static_cast<double>(demoteMbps_.load()) * 1e6};
  return out;
}

void EngineExecutor::shutdown(uint32_t graceMs) {
  // Give the in-flight plan the grace period, then cancel what is left: a batch inside the
  // kernel always finishes (move_pages cannot be interrupted), so no page is half-moved.
  auto idle = std::make_shared<std::promise<void>>();
  auto done = idle->get_future();
  std::thread waiter([this, idle] {
    engine_.waitIdle();
    idle->set_value();
  });
  if (done.wait_for(std::chrono::milliseconds(graceMs)) != std::future_status::ready) {
    TT_LOG(Info) << "shutdown: cancelling the in-flight migration plan";
  }
  engine_.shutdown();
  waiter.join();
}

Result<void> SocketInProcessMover::requestBind(pid_t tgid, uint64_t regionId, uint64_t start, uint64_t length,
                                               int node) {
  if (cancelled_.load()) return systemError(ECANCELED, "mbind request to pid " + std::to_string(tgid));
  auto result = std::make_shared<std::promise<int>>();
  auto future = result->get_future();
  server_.requestMbind({tgid, regionId, start, length, node}, [result](int errnoValue) { result->set_value(errnoValue); });
  // The server's own timer answers ETIMEDOUT after the timeout; the extra second covers a loop
  // that has stopped and will never run the request. Waiting in slices notices cancelAll().
  const auto deadline = std::chrono::steady_clock::now() + timeout_ + std::chrono::seconds(1);
  while (future.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
    if (cancelled_.load()) return systemError(ECANCELED, "mbind request to pid " + std::to_string(tgid));
    if (std::chrono::steady_clock::now() > deadline)
      return systemError(ETIMEDOUT, "mbind request to pid " + std::to_string(tgid));
  }
  const int e = future.get();
  if (e != 0) return systemError(e, "mbind of region " + std::to_string(regionId) + " in pid " + std::to_string(tgid));
  return {};
}

Result<uint64_t> PageMoverResidency::fastBytes(pid_t tgid, uint64_t start, uint64_t length, uint64_t stride) {
  auto placement = reader_.read(tgid, start, length, stride);
  if (!placement) return placement.error();
  uint64_t fast = 0;
  for (const auto& [node, bytes] : placement->bytesPerNode)
    if (isFast(topology_, node)) fast += bytes;
  return fast;
}

}  // namespace tt::service
