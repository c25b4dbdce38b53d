// The epoch loop: every `epoch_ms`, on its own thread,
//   registry changes -> sources (add/remove process) and policy (regions, marks)
//   sources.collect -> policy.observe -> policy.plan -> executor.submit
//   heat -> registry (for QueryPlacement), counters -> metrics, keep-alive -> systemd watchdog;
//   registry changes and evidence also -> trace sink (recordings of live runs).
// Missing stages (null) are skipped; the daemon still serves registrations and queries.
//
// runOnce() is one epoch on the caller's thread: unit tests drive the loop with fakes through it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <tuple>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "metrics/Metrics.h"
#include "registry/Registry.h"
#include "service/Stages.h"
#include "service/StuckMoves.h"

namespace tt::service {

// Fast-tier bytes of a range (sampled every `stride` pages), for per-process gauges.
class ResidencyProbe {
 public:
  virtual ~ResidencyProbe() = default;
  [[nodiscard]] virtual Result<uint64_t> fastBytes(pid_t tgid, uint64_t start, uint64_t length, uint64_t stride) = 0;
};

struct EpochStats {
  uint64_t epochs = 0;
  double lastEpochMs = 0;
  uint64_t plansSubmitted = 0;
  uint64_t plansDeferred = 0;  // not submitted: the engine was still running the previous one
  uint64_t earlyEpochs = 0;    // run when the engine finished a plan that had held one back
  uint64_t lastPlanMoves = 0;
  double promoteBytesPerSec = 0;  // over the last epoch
  double demoteBytesPerSec = 0;
  // What the policy plans each direction's copies with once that direction has been timed: the
  // engine's measured busy-time throughput that way, capped by the direction's rate limit. 0 =
  // not timed yet: the policy plans it as the other direction when that one has been, else with
  // initial_migration_bandwidth (or the direction's rate limit when that is lower).
  MigrationRates migrationRates;
  // Pages the policy's moves left busy, held where they are (StuckMoves), as of the last epoch.
  StuckMoves::Totals stuck;
  PolicyView policy;
  std::vector<SourceReport> sources;  // as of the last epoch (sources are epoch-thread only)
  std::vector<std::string> sourceNotes;  // EvidenceSource::notes(), from the start
};

struct EpochStages {
  EvidenceSource* source = nullptr;
  PlacementPolicy* policy = nullptr;
  PlanExecutor* executor = nullptr;
  ResidencyProbe* residency = nullptr;
  TraceSink* trace = nullptr;
};

class EpochLoop {
 public:
  // An epoch's moves in one direction count towards that direction's measured rate from this many
  // bytes on (smaller ones are dominated by per-call overhead).
  static constexpr uint64_t kMinBandwidthSampleBytes = 4ULL << 20;
  // Pages sampled per epoch, over all processes, for the per-process fast-tier gauges.
  static constexpr uint64_t kResidencyPagesPerEpoch = 65536;

  EpochLoop(registry::Registry& registry, EpochStages stages, metrics::Registry& metrics);
  ~EpochLoop();
  EpochLoop(const EpochLoop&) = delete;
  EpochLoop& operator=(const EpochLoop&) = delete;

  void setPeriod(std::chrono::milliseconds period);
  // Called on the loop thread after every epoch and at least every `interval` while it waits
  // (systemd watchdog keep-alives: a loop stuck in an epoch stops sending them). Set before start().
  void setKeepAlive(std::function<void()> keepAlive, std::chrono::milliseconds interval) {
    keepAlive_ = std::move(keepAlive);
    keepAliveInterval_ = interval;
  }
  // Runs `task` on the loop thread before the next epoch (live config of epoch-thread stages).
  void runBeforeNextEpoch(std::function<void()> task);

  void start();
  // Finishes the epoch in progress (if any) and joins the thread. Idempotent.
  void stop();

  // One epoch at `nowNs` (CLOCK_MONOTONIC).
  void runOnce(uint64_t nowNs);

  // A plan made outside the epoch (tensortierctl migrate): numbered in the same sequence, so the
  // executor sees increasing generations. Thread-safe.
  [[nodiscard]] Result<void> submitManual(MigrationPlan plan);
  // The same, and every move's range is pinned at its target node until nowNs + pinNs (0 = until
  // unpinned): the policy is told to leave it alone. A new pin of an overlapping range replaces
  // the old one. The policy's plans do not repeat a settled move (they go to an idle engine only,
  // which has finished it); one the engine left unsettled (PlanExecutor::runsOf) is put at
  // the head of the next plan until it settles; a manual plan that supersedes one still running
  // carries that one's pinned moves (pages already on the node are skipped by the engine).
  [[nodiscard]] Result<void> submitManual(MigrationPlan plan, uint64_t nowNs, uint64_t pinNs);
  // Finished plans the pins read at an epoch, the newest first; more finished since the last epoch
  // (manual moves in a burst) are not read, and a pin the plans read do not mention is then retried
  // once. The executor must keep at least this many.
  static constexpr uint64_t kPinPlansRead = 8;
  // Drops the pins of a region (regionId != 0) or of every region of `tgid`; returns how many.
  size_t unpin(pid_t tgid, uint64_t regionId);
  [[nodiscard]] std::vector<ManualPin> pins() const;
  // Priority of manual moves: above every planned move (demotions use 1000..1999).
  static constexpr int kManualPriority = 2000;

  // The policy's initial_migration_bandwidth (bytes/s), the key's default until set: until the
  // engine's rates are measured, a direction's rate limit below it is what the policy plans with.
  // Set it at start and on every policy reload. Thread-safe.
  void setInitialMigrationBandwidth(double bytesPerSec) { initialBandwidth_.store(bytesPerSec); }

  [[nodiscard]] EpochStats stats() const;
  // The policy's `limit` hottest pages at `nowNs`, of `tgid` only unless 0 (tensortierctl top
  // --pages); empty without a policy. Per-page heat is too big to copy out every epoch for a
  // request that rarely comes, so this reads the policy itself under the run lock: it waits for an
  // epoch in progress and holds the next one back for the scan (O(tracked pages)). Thread-safe.
  [[nodiscard]] std::vector<PageHeatView> hottestPages(size_t limit, pid_t tgid, uint64_t nowNs);
  [[nodiscard]] std::map<pid_t, uint64_t> fastBytesByProcess() const;

  [[nodiscard]] static uint64_t monotonicNowNs();

 private:
  void threadMain();
  void applyEvents(uint64_t nowNs);
  // Reads the runs of the policy's last plan once it has finished, for stuck_ (run lock).
  void readStuckPages();
  void updateResidency();
  void exportCounters(double epochSeconds, const ExecutorCounters& counters);
  [[nodiscard]] MigrationRates updateRates(const ExecutorCounters& counters);
  // Submits a manual plan (under the run lock) that pins `pinning`, with the unfinished pinned
  // moves of the plan it supersedes.
  [[nodiscard]] Result<void> submitManualLocked(MigrationPlan plan, const std::vector<ManualPin>& pinning);

  registry::Registry& registry_;
  EpochStages stages_;
  metrics::Registry& metrics_;
  std::function<void()> keepAlive_;
  std::chrono::milliseconds keepAliveInterval_{0};
  std::mutex tasksMutex_;
  std::vector<std::function<void()>> tasks_;

  std::mutex waitMutex_;
  std::condition_variable waitCv_;
  bool stopRequested_ = false;
  // An epoch held its plan back while the engine ran: when the engine goes idle, the loop runs the
  // next epoch at once instead of at the end of its period (replanWhenIdle_ -> wakeEarly_).
  bool replanWhenIdle_ = false;
  bool wakeEarly_ = false;
  void onExecutorIdle();
  std::atomic<int64_t> periodMs_{1000};
  std::atomic<double> initialBandwidth_;  // bytes/s
  std::thread thread_;

  std::mutex runMutex_;  // one epoch (or manual submit) at a time
  uint64_t generation_ = 0;
  // The moves of the last plan submitted, while the engine runs it (the policy keeps re-reading
  // their residency until it is done).
  std::vector<MoveRequest> inFlightMoves_;
  // Manual moves submitted since the last plan, for the policy's next one.
  std::vector<MoveRequest> manualMovesUnseen_;
  // The pins of the manual plans the engine may not have finished (until it is seen idle); under
  // the run lock, like the two above.
  std::vector<ManualPin> unfinishedPins_;
  // Pinned moves the engine left unsettled: epochs until the next retry, doubling (run lock).
  using PinKey = std::tuple<pid_t, uint64_t, uint64_t, int>;  // tgid, start, length, node
  struct PinRetry {
    uint32_t wait = 0;        // the epochs waited before the last retry
    uint32_t epochsLeft = 0;  // until the next
  };
  static constexpr uint32_t kMaxPinRetryEpochs = 64;
  std::map<PinKey, PinRetry> pinRetries_;
  // The newest plan whose runs the pins have been told of; each finished plan is read once, the
  // last kPinPlansRead at most (the executor keeps a few reports).
  uint64_t pinsReadGeneration_ = 0;
  // Busy pages of the policy's own plans (run lock): the generation of the last plan the policy
  // made that the engine took, and of the last finished plan whose runs were read.
  StuckMoves stuck_;
  uint64_t lastPolicyGeneration_ = 0;
  uint64_t stuckReadGeneration_ = 0;
  uint64_t stuckNotHeldExported_ = 0;  // stuck_.totals().notHeld as last exported

  mutable std::mutex pinsMutex_;
  std::vector<ManualPin> pins_;

  mutable std::mutex statsMutex_;
  EpochStats stats_;
  std::map<pid_t, uint64_t> fastBytes_;

  // Epoch-thread state.
  EvidenceBatch evidence_;
  std::unordered_map<pid_t, std::map<uint64_t, RegionInfo>> regions_;  // mirror, by start
  ExecutorCounters lastCounters_;
  // Bytes/s per direction, smoothed; 0 = not measured yet.
  double measuredPromote_ = 0;
  double measuredDemote_ = 0;
  // Each source's running totals at the last epoch, per metric series (name and labels).
  std::map<std::string, uint64_t> lastTotals_;
  uint64_t lastNowNs_ = 0;

  metrics::Counter& epochs_;
  metrics::Histogram& epochDuration_;
  metrics::Counter& promotedPages_;
  metrics::Counter& demotedPages_;
  metrics::Counter& promotedBytes_;
  metrics::Counter& demotedBytes_;
  metrics::Counter& planMoves_;
  metrics::Counter& plansDeferred_;
  metrics::Counter& earlyEpochs_;
};

}  // namespace tt::service
