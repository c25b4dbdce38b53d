// Adapters from the epoch loop's stage interfaces (Stages.h) to the real roles:
//   SourceSetEvidence    -> sources::SourceSet
//   HeatPlannerPolicy    -> heat::HeatModel + policy::Planner (placement from move_pages queries)
//   EngineExecutor       -> migrate::Engine
//   SocketInProcessMover -> ipc::Server (migrate::InProcessMover over MbindRequest/MbindResult)
//   PageMoverResidency   -> sys::PageMover (per-process fast-tier bytes)
//   RecorderSink         -> trace::Recorder (tensortierctl record)
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <span>
#include <tuple>

#include "heat/HeatModel.h"
#include "ipc/Placement.h"
#include "ipc/Server.h"
#include "migrate/Engine.h"
#include "migrate/InProcessMover.h"
#include "policy/Planner.h"
#include "registry/Registry.h"
#include "service/EpochLoop.h"
#include "service/Stages.h"
#include "sources/SourceSet.h"
#include "topology/Topology.h"
#include "trace/Recorder.h"

namespace tt::service {

class SourceSetEvidence final : public EvidenceSource {
 public:
  explicit SourceSetEvidence(std::unique_ptr<sources::SourceSet> set) : set_(std::move(set)) {}
  Result<void> addProcess(pid_t tgid) override { return set_->addProcess(tgid); }
  Result<void> removeProcess(pid_t tgid) override { return set_->removeProcess(tgid); }
  void setRanges(pid_t tgid, const std::vector<std::pair<uint64_t, uint64_t>>& ranges) override {
    set_->setRanges(tgid, ranges);
  }
  // Also takes the kernel's own page moves the sources saw and adds them to the totals status()
  // reports, so the sources' buffers of them are emptied every epoch.
  Result<void> collect(EvidenceBatch& out) override;
  std::vector<SourceReport> status() const override;
  std::vector<std::string> notes() const override { return set_->extraLines(); }
  Result<void> applyConfig(const tensortier::v1::SourcesConfig& config) override;
  void shutdown() override { set_->shutdown(); }

 private:
  std::unique_ptr<sources::SourceSet> set_;
  std::vector<sources::KernelMove> moves_;  // reused buffer
  sources::KernelMoveTotals kernelMoves_;
};

// Where pages are, for the planner: move_pages(2) status queries, fast/slow by the topology.
//
// Answers are kept per block between plans: asking for every registered page every epoch costs
// 140-200 ns a page (36-53 ms per GiB on the development VM). A block is asked again while a plan
// of the daemon's own may still be moving it (the kDirtyPlans plans after one that moved it), when
// it is new, and otherwise once every `refresh` plans, at a phase set by its address so that the
// refreshes spread over the plans; `refresh` is the smallest that keeps them within the query
// budget (policy.residency_query_pages_per_epoch). Pages the kernel moves by itself (NUMA
// balancing, reclaim demotion) are asked again at the next plan when the fault trace saw the move
// (markMoved); those it did not see, and pages a process allocates or frees, within `refresh`
// plans; the engine's free-memory guard covers the capacity meanwhile. Blocks the planner did not ask for in
// a plan (their region or process is gone) are forgotten.
class MovePagesPlacement final : public policy::PlacementQuery {
 public:
  static constexpr uint64_t kDirtyPlans = 3;  // a plan's moves take up to 1.5 plan intervals

  MovePagesPlacement(sys::PageMover& mover, const topology::Topology& topology);
  // Pages a plan may re-query to refresh blocks it already knows (new and moved ones come on top).
  void setQueryBudget(uint64_t pagesPerPlan) { budgetPages_ = std::max<uint64_t>(1, pagesPerPlan); }
  // Around each Planner::plan: the plan's moves mark their blocks to be asked again.
  void beginPlan();
  void endPlan(const MigrationPlan& plan);
  // Marks the known blocks overlapping [start, start + length) of `tgid` to be asked again in
  // each of the next `plans` plans: kDirtyPlans for a move the engine may still be making, 1 for
  // one the kernel has made (its own migrations, seen by the fault trace).
  void markMoved(pid_t tgid, uint64_t start, uint64_t length, uint64_t plans);
  // After beginPlan: the moves of a plan the engine is still running stay marked (kDirtyPlans
  // from now on), however many plans it takes. A busy engine runs a plan for several epochs; once
  // the marks of endPlan ran out, a block read mid-move was kept as it was then, in its old tier,
  // until its refresh turn: the planner did not count a promoted block against the budget and
  // filled its bytes again.
  void stillMoving(std::span<const MoveRequest> moves) {
    for (const MoveRequest& m : moves) markMoved(m.tgid, m.start, m.length, kDirtyPlans);
  }
  // markMoved(..., 1) for a range the kernel moved, while the blocks so marked for the next plan
  // stay within the query budget (a kernel promoting pages all over a process would otherwise
  // have the next plan ask for all of them); false once a block did not fit. The others are seen
  // at their refresh turn.
  bool markMovedByKernel(pid_t tgid, uint64_t start, uint64_t length);
  policy::Residency residency(pid_t tgid, uint64_t start, uint64_t length) const override;
  // Pages asked of the kernel in the last plan, and the plans between two refreshes of a block.
  [[nodiscard]] uint64_t pagesQueried() const { return queriedPages_; }
  [[nodiscard]] uint64_t refreshPlans() const { return refresh_; }

 private:
  struct Block {
    policy::Residency residency;
    uint64_t movedUntil = 0;  // asked again in every plan up to this one
    uint64_t askedIn = 0;     // the last plan that asked for it
    bool known = false;
  };
  mutable ipc::PlacementReader reader_;
  const topology::Topology& topology_;
  mutable std::map<std::tuple<pid_t, uint64_t, uint64_t>, Block> blocks_;  // (tgid, start, length)
  template <typename F>
  void forEachOverlapping(pid_t tgid, uint64_t start, uint64_t length, F&& f);

  mutable uint64_t queriedPages_ = 0;
  uint64_t kernelMarkedPages_ = 0;  // by markMovedByKernel since the last beginPlan
  uint64_t plan_ = 0;
  uint64_t refresh_ = 1;
  uint64_t budgetPages_ = 262144;
};

// Accesses that one pass over a 4 KiB page makes, in the unit of the evidence the active sources
// deliver (policy::PlanContext::accessesPerPagePass): 64 when PMU sampling is active, as each of its
// samples stands for period cache-line accesses and those dominate the heat; 1 otherwise, as the
// other sources count a page once per touch, fault or scan.
[[nodiscard]] double accessesPerPagePass(std::span<const SourceReport> sources);

// A process's home node for the planner. The node all the CPUs it may run on belong to, when they
// are on one (bound to a socket: numactl --cpunodebind, taskset, a cpuset cgroup), which holds
// however its threads move within the socket; otherwise the node of the CPU its main thread last
// ran on, where it is now. nullopt when neither can be read (the process is exiting) or mapped.
[[nodiscard]] std::optional<int> homeNodeOf(const sys::Fs& procfs, pid_t tgid, const topology::Topology& topology);

// The extra cost of a slow-tier access the planner charges, and where it comes from.
struct SlowAccessPenalty {
  double ns = 0;  // the slow tier's (the mean over its nodes with firmware figures)
  std::string source;
  // Each slow node's own, from the firmware (empty otherwise): the planner charges a process its
  // slow node's, so a CXL node and an Optane node in one machine are weighed by what each costs.
  std::vector<policy::NodePenalty> byNode;
};
// policy.slow_access_penalty_ns when the config sets it (for every node); else the firmware's
// figures, the slow nodes' extra read latency by ACPI HMAT / CXL CDAT (Topology::slowReadPenaltyNs),
// each held to the key's bounds; else the key's default (200 ns). Per-node figures are used only
// where the tier's mean is (a slow tier no slower than DRAM on average gets the default).
[[nodiscard]] SlowAccessPenalty slowAccessPenaltyOf(const tensortier::v1::PolicyConfig& config,
                                                    const topology::Topology& topology);

class HeatPlannerPolicy final : public PlacementPolicy {
 public:
  // `procfs`: where each process's home node is read from (homeNodeOf: its allowed CPUs, else the
  // CPU its main thread last ran on).
  HeatPlannerPolicy(const tensortier::v1::PolicyConfig& config, const topology::Topology& topology,
                    sys::PageMover& mover, sys::Fs procfs);
  Result<void> addRegion(const RegionInfo& region) override { return heat_.addRegion(region); }
  void removeRegion(uint64_t regionId) override { heat_.removeRegion(regionId); }
  void removeProcess(pid_t tgid) override { heat_.removeProcess(tgid); }
  // Also has the next plan ask again where the kernel moved pages by itself (movedByKernel).
  void observe(const EvidenceBatch& evidence, uint64_t sinceNs, uint64_t nowNs) override;
  void onMark(const IterationMark& mark) override { heat_.onMark(mark); }
  MigrationPlan plan(uint64_t nowNs, uint64_t intervalNs, const MigrationRates& rates,
                     std::span<const ManualPin> pins, std::span<const MoveRequest> stillMoving,
                     std::span<const StuckRange> stuck) override;
  std::vector<registry::RegionHeat> regionHeat() const override;
  PolicyView view() const override;
  std::vector<PageHeatView> hottestPages(size_t limit, pid_t tgid, uint64_t nowNs) const override;
  Result<void> applyConfig(const tensortier::v1::PolicyConfig& config) override;
  // The unit of the evidence observe() receives (accessesPerPagePass above); 1 until set.
  void setAccessesPerPagePass(double accesses) { accessesPerPagePass_ = accesses; }

 private:
  const topology::Topology& topology_;
  sys::Fs procfs_;
  MovePagesPlacement placement_;
  heat::HeatModel heat_;
  std::unique_ptr<policy::Planner> planner_;
  tensortier::v1::PolicyConfig config_;
  SlowAccessPenalty penalty_;
  double accessesPerPagePass_ = 1;
};

class EngineExecutor final : public PlanExecutor {
 public:
  EngineExecutor(migrate::Engine& engine, const tensortier::v1::MigrationConfig& config)
      : engine_(engine),
        promoteMbps_(config.promote_mbps()),
        demoteMbps_(config.demote_mbps()),
        workers_(config.workers()) {}
  Result<void> submit(MigrationPlan plan) override { return engine_.submit(std::move(plan)); }
  void cancelProcess(pid_t tgid) override { engine_.cancelProcess(tgid); }
  ExecutorCounters counters() const override;
  void setIdleCallback(std::function<void()> callback) override { engine_.setIdleCallback(std::move(callback)); }
  std::optional<std::vector<FinishedRun>> runsOf(uint64_t generation) const override;
  Result<void> applyConfig(const tensortier::v1::MigrationConfig& config) override {
    auto r = engine_.applyConfig(config);
    if (r) {  // workers take effect at restart only
      promoteMbps_ = config.promote_mbps();
      demoteMbps_ = config.demote_mbps();
    }
    return r;
  }
  void shutdown(uint32_t graceMs) override;

 private:
  migrate::Engine& engine_;
  std::atomic<uint32_t> promoteMbps_;
  std::atomic<uint32_t> demoteMbps_;
  const uint32_t workers_;  // as the engine was started
};

class SocketInProcessMover final : public migrate::InProcessMover {
 public:
  SocketInProcessMover(ipc::Server& server, const registry::Registry& registry, std::chrono::milliseconds timeout)
      : server_(server), registry_(registry), timeout_(timeout) {}
  bool acceptsMbind(pid_t tgid) const override { return registry_.acceptsMbind(tgid); }
  Result<void> requestBind(pid_t tgid, uint64_t regionId, uint64_t start, uint64_t length, int node) override;
  // Shutdown: waiting and future requests fail with ECANCELED at once.
  void cancelAll() { cancelled_.store(true); }

 private:
  std::atomic<bool> cancelled_{false};
  ipc::Server& server_;
  const registry::Registry& registry_;
  std::chrono::milliseconds timeout_;
};

class PageMoverResidency final : public ResidencyProbe {
 public:
  PageMoverResidency(sys::PageMover& mover, const topology::Topology& topology)
      : reader_(mover), topology_(topology) {}
  Result<uint64_t> fastBytes(pid_t tgid, uint64_t start, uint64_t length, uint64_t stride) override;

 private:
  ipc::PlacementReader reader_;
  const topology::Topology& topology_;
};

class RecorderSink final : public TraceSink {
 public:
  explicit RecorderSink(trace::Recorder& recorder) : recorder_(recorder) {}
  void onRegion(const RegionInfo& region) override { recorder_.onRegion(region); }
  void onMark(const IterationMark& mark) override { recorder_.onMark(mark); }
  void onProcessExit(pid_t tgid, uint64_t nowNs) override { recorder_.onProcessExit(tgid, nowNs); }
  void onEvidence(const EvidenceBatch& evidence, uint64_t sinceNs, uint64_t nowNs) override {
    recorder_.onEvidence(evidence, sinceNs, nowNs);
  }
  void endEpoch(uint64_t nowNs) override { recorder_.endEpoch(nowNs); }

 private:
  trace::Recorder& recorder_;
};

}  // namespace tt::service
