// The three stages of the epoch loop, each behind a narrow interface, so the loop and its tests
// work with fakes (tests/fakes/service) and the daemon with adapters to the real roles
// (service/Adapters.h: sources::SourceSet, heat::HeatModel + policy::Planner, migrate::Engine).
//
// Every call comes from the epoch thread, except PlanExecutor::counters() and submit(), which the
// admin handler (event-loop thread) also uses: implementations make those two thread-safe. The
// admin handler also calls PlacementPolicy::hottestPages, but under the epoch loop's run lock
// (EpochLoop::hottestPages), so never during an epoch: it needs no locking of its own.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/Result.h"
#include "core/Types.h"
#include "registry/Registry.h"
#include "sources/Source.h"
#include "tensortier/v1/config.pb.h"

namespace tt::service {

struct SourceReport {
  std::string name;
  bool active = false;
  std::string detail;  // what it runs with, or why it is off
  uint64_t samples = 0;
  double cpuPercent = 0;  // estimated sampling cost in the last epoch (kernel + daemon), percent of one CPU
  uint64_t lost = 0;       // records or counts the kernel dropped (full ring or count map)
  // PERF_RECORD_THROTTLE seen; a lost record on an in-kernel event's control ring (throttle
  // records) counts once
  uint64_t throttled = 0;
  bool paused = false;     // detached over the CPU budget (the fault trace's storm guard)
  uint64_t pauses = 0;     // times it was
  // Pages the kernel itself moved for tracked processes (the fault-trace source), by reason.
  sources::KernelMoveTotals kernelMoves;
  // Pages the kernel migrated on the whole machine since the source opened (fault-trace), by
  // reason: kswapd's demotions are only seen here (no tracked task is charged for them).
  std::optional<sources::SystemMigrations> systemMigrations;
};

// Sources of access evidence for registered processes.
class EvidenceSource {
 public:
  virtual ~EvidenceSource() = default;
  // ESRCH: the process exited before it could be tracked (its removal is the registry's next event).
  [[nodiscard]] virtual Result<void> addProcess(pid_t tgid) = 0;
  [[nodiscard]] virtual Result<void> removeProcess(pid_t tgid) = 0;
  // The registered regions of a tracked process, [start, end) sorted and merged, after each change.
  virtual void setRanges(pid_t tgid, const std::vector<std::pair<uint64_t, uint64_t>>& ranges) = 0;
  // Appends the evidence gathered since the previous call.
  [[nodiscard]] virtual Result<void> collect(EvidenceBatch& out) = 0;
  [[nodiscard]] virtual std::vector<SourceReport> status() const = 0;
  // What the sources logged at start besides each source's own line: kernel tiering, topology,
  // sources not opened and why. Fixed after start.
  [[nodiscard]] virtual std::vector<std::string> notes() const { return {}; }
  // Live tuning of the knobs the sources can change while running (sources::SourceSet says which);
  // the others are left as they run until a restart. An error says which source failed.
  [[nodiscard]] virtual Result<void> applyConfig(const tensortier::v1::SourcesConfig& config) = 0;
  virtual void shutdown() = 0;
};

// A range moved by hand (tensortierctl migrate): the policy leaves its placement alone until
// expiresNs (CLOCK_MONOTONIC; 0 = until unpinned). The epoch loop owns the pins.
struct ManualPin {
  pid_t tgid = 0;
  uint64_t regionId = 0;
  uint64_t start = 0;
  uint64_t length = 0;
  int node = -1;  // where the user moved it
  uint64_t expiresNs = 0;
};

// The heat model's learned state, for the CLI: DeepTM's feature weights as they adapt, and each
// process's training-step clock.
struct FeatureWeight {
  std::string name;  // "frequency", "recency", "size", "reuse"
  double weight = 0;
};
struct ProcessClockView {
  pid_t tgid = 0;
  uint64_t periodNs = 0;     // 0 = not known yet
  std::string source;        // where the period comes from: "marks", "samples", "hint", "none"
  double confidence = 0;
  std::string phase;         // the current phase from the client's marks ("" = none)
};

// One 4 KiB page's decayed heat (tensortierctl top --pages).
struct PageHeatView {
  pid_t tgid = 0;
  uint64_t page = 0;
  double heat = 0;
};

// A fast node's share of the budget and the managed bytes on it, at the last plan.
struct FastNodeView {
  int node = -1;
  uint64_t budgetBytes = 0;
  uint64_t managedBytes = 0;
};

struct PolicyView {
  uint64_t fastBudgetBytes = 0;  // 0 = unknown
  uint64_t fastUsedBytes = 0;    // managed bytes on fast nodes at the last plan
  std::vector<FastNodeView> fastNodes;
  std::vector<FeatureWeight> featureWeights;  // empty: no heat model
  std::vector<ProcessClockView> clocks;
  double slowPenaltyNs = 0;       // the extra cost of a slow access the planner charges; 0 = none
  std::string slowPenaltySource;  // where that figure comes from
};

// Heat model + planner: evidence and marks in, a MigrationPlan out.
class PlacementPolicy {
 public:
  virtual ~PlacementPolicy() = default;
  [[nodiscard]] virtual Result<void> addRegion(const RegionInfo& region) = 0;
  virtual void removeRegion(uint64_t regionId) = 0;
  virtual void removeProcess(pid_t tgid) = 0;
  // Evidence the sources gathered over (sinceNs, nowNs] (one epoch).
  virtual void observe(const EvidenceBatch& evidence, uint64_t sinceNs, uint64_t nowNs) = 0;
  virtual void onMark(const IterationMark& mark) = 0;
  // Closes the epoch at `nowNs` and returns the moves to make now (generation is set by the loop),
  // sized to what the engine can move at `rates` (each direction's) before the next plan,
  // `intervalNs` later. No move may touch a pinned range; its fast bytes count against the budgets.
  // `stillMoving`: the moves of the plan the engine is still running (empty once it is idle), whose
  // ranges may change tier until it is done. `stuck`: pages the engine could not move in the
  // policy's earlier plans (StuckRange says how the plan treats them).
  [[nodiscard]] virtual MigrationPlan plan(uint64_t nowNs, uint64_t intervalNs, const MigrationRates& rates,
                                           std::span<const ManualPin> pins, std::span<const MoveRequest> stillMoving,
                                           std::span<const StuckRange> stuck) = 0;
  // Heat per registered region as of the last plan.
  [[nodiscard]] virtual std::vector<registry::RegionHeat> regionHeat() const = 0;
  [[nodiscard]] virtual PolicyView view() const = 0;
  // The `limit` hottest pages by per-page heat decayed to `nowNs`, hottest first; of process
  // `tgid` only unless 0. Empty for a policy without per-page heat.
  [[nodiscard]] virtual std::vector<PageHeatView> hottestPages(size_t limit, pid_t tgid, uint64_t nowNs) const = 0;
  [[nodiscard]] virtual Result<void> applyConfig(const tensortier::v1::PolicyConfig& config) = 0;
};

// One direction's moves: the busy time of the engine's move calls and the bytes they moved
// (cumulative), and the direction's configured rate limit (0 = none): the loop turns them into the
// rate the policy plans that direction's copies with.
struct MoveTiming {
  uint64_t busyNs = 0;
  uint64_t busyBytes = 0;
  double rateLimitBytesPerSec = 0;
};

struct ExecutorCounters {
  // A plan is running or queued: the pages it is moving are neither here nor there yet.
  bool planInFlight = false;
  MoveTiming promoteTiming;
  MoveTiming demoteTiming;
  uint64_t promotedPages = 0;  // 4 KiB units
  uint64_t demotedPages = 0;
  uint64_t promotedBytes = 0;
  uint64_t demotedBytes = 0;
  std::map<std::string, uint64_t> failedPages;  // by reason: "busy", "no_memory", ...
  uint64_t plans = 0;
};

// A run of a plan the engine finished, and whether it settled: unsettled when it left pages
// off its target for reasons a later try may not meet (busy pages, the target full, no memory,
// cancelled, failed; not a refused permission, which no retry gets past).
struct FinishedRun {
  pid_t tgid = 0;
  uint64_t start = 0;
  uint64_t length = 0;
  int targetNode = -1;
  bool settled = true;
  uint64_t generation = 0;  // of the plan
  bool demotion = false;    // to a slow node
  // Every page of it was tried (none cancelled, skipped for a full target, refused or failed):
  // what it did not leave busy is where it asked for.
  bool tried = true;
  // Where the pages it left busy after every retry are (sorted, merged, bounded: see
  // migrate::RunReport::busy).
  std::vector<AddressRange> busy;
};

// The migration engine.
class PlanExecutor {
 public:
  virtual ~PlanExecutor() = default;
  [[nodiscard]] virtual Result<void> submit(MigrationPlan plan) = 0;
  virtual void cancelProcess(pid_t tgid) = 0;
  [[nodiscard]] virtual ExecutorCounters counters() const = 0;
  // `callback` runs (on the executor's thread) each time a plan has finished and none is queued,
  // after counters().planInFlight became false (another plan may have started since). One
  // callback at a time, its owner's (the epoch loop's): a second call replaces the first. Once
  // this returns, the previous callback is not running and never runs again. An empty function
  // removes it; the callback must not call this.
  virtual void setIdleCallback(std::function<void()> callback) = 0;
  // The runs of plan `generation` once it has finished, while the executor still holds its report
  // (a few plans back); nullopt before or after.
  [[nodiscard]] virtual std::optional<std::vector<FinishedRun>> runsOf(uint64_t /*generation*/) const {
    return std::nullopt;
  }
  [[nodiscard]] virtual Result<void> applyConfig(const tensortier::v1::MigrationConfig& config) = 0;
  // SIGTERM: let the in-flight batch finish for up to `graceMs`, cancel the rest, join threads.
  virtual void shutdown(uint32_t graceMs) = 0;
};

// Observes what the loop feeds the policy (tensortierctl record: trace::Recorder behind
// service/Adapters.h). Called on the epoch thread, in event order: regions and marks as they are
// drained, then the epoch's evidence, then endEpoch.
class TraceSink {
 public:
  virtual ~TraceSink() = default;
  virtual void onRegion(const RegionInfo& region) = 0;
  virtual void onMark(const IterationMark& mark) = 0;
  virtual void onProcessExit(pid_t tgid, uint64_t nowNs) = 0;
  // The evidence gathered over the epoch [sinceNs, nowNs).
  virtual void onEvidence(const EvidenceBatch& evidence, uint64_t sinceNs, uint64_t nowNs) = 0;
  virtual void endEpoch(uint64_t nowNs) = 0;
};

}  // namespace tt::service
