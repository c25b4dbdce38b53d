// The migration engine: executes the policy's MigrationPlans, moving pages of training processes
// between NUMA nodes as fast as the kernel allows without risking data or an OOM.
//
// Per plan: requests are merged into maximal contiguous runs (Batching.h) and taken highest
// priority first. A run of a registered region whose client accepts mbind goes to the
// InProcessMover, after a query: a region already on the node is left alone, and only the pages
// the bind moves pay the rate limit and the capacity guard and count as moved. Every other run
// is moved from outside with move_pages(2) on the process: transparent huge pages are found
// (sys::HugePageProbe) and moved as one entry per 2 MiB folio, pages already on the target are
// left out (a cheap query first), and what remains is cut into batches of `batch_pages` (a
// multiple of the kernel's own 512-page migration batch) that a small pool of worker threads
// hands to the kernel, which copies in the caller's context.
// Before each batch: the direction's token bucket (MB/s) is paid, and for a fast target node its
// free memory is read and must stay above the watermark after the batch (never push DRAM into
// reclaim). Every page's outcome is counted (MigrationCounters, PlanReport).
//
// Threads: one coordinator thread (runs submitted plans), `workers` worker threads (move_pages
// calls, busy-page retries). counters() and the control calls are safe from any thread.
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/Result.h"
#include "core/Types.h"
#include "migrate/Clock.h"
#include "migrate/FreeMemory.h"
#include "migrate/InProcessMover.h"
#include "migrate/RateLimiter.h"
#include "sys/PageMover.h"
#include "sys/Pagemap.h"
#include "tensortier/v1/migrate_config.pb.h"
#include "topology/Topology.h"

namespace tt::migrate {

using MigrationConfig = tensortier::v1::MigrationConfig;

// Promotion: to a fast node. Demotion: to a slow node.
enum class Direction : uint8_t { Promote = 0, Demote = 1 };
[[nodiscard]] const char* directionName(Direction direction);

// What happened to pages, in 4 KiB page units (a 2 MiB huge page counts 512).
struct Outcome {
  uint64_t moved = 0;             // now on the target node (by move_pages or mbind)
  uint64_t movedHugeFolios = 0;   // of `moved`: 2 MiB THPs moved as one entry (count of folios)
  uint64_t alreadyThere = 0;      // on the target before the engine touched them
  uint64_t busy = 0;              // EBUSY / pinned / left unmigrated after every retry
  uint64_t notMapped = 0;         // EFAULT / ENOENT: no page there (never touched, unmapped)
  uint64_t noMemory = 0;          // ENOMEM from the kernel: the target node is full
  uint64_t permissionDenied = 0;  // EACCES / EPERM
  uint64_t failed = 0;            // any other errno
  uint64_t skippedTargetFull = 0; // not tried: capacity guard, or the node ran out earlier in the plan
  uint64_t cancelled = 0;         // not tried: plan superseded, process exited or cancelled

  void add(const Outcome& other);
  [[nodiscard]] uint64_t total() const;
};

struct DirectionCountersSnapshot {
  Outcome pages;              // cumulative, 4 KiB units
  uint64_t bytesMoved = 0;
  uint64_t basePagesMoved = 0;   // 4 KiB entries moved
  uint64_t hugePagesMoved = 0;   // 2 MiB THP entries moved
  uint64_t moveCalls = 0;        // move_pages calls that moved (queries not counted)
  uint64_t batches = 0;
  uint64_t busyRetries = 0;      // retry rounds after EBUSY / unmigrated pages
  // Time move_pages batches that moved something spent in the kernel (calls and queries, not
  // backoff or rate-limit waits), summed over workers, and the bytes they moved: bytes / time is
  // what one worker moves per second when it is busy.
  uint64_t busyNs = 0;
  uint64_t busyBytes = 0;
};

struct CountersSnapshot {
  std::array<DirectionCountersSnapshot, 2> direction;  // [Direction::Promote], [Direction::Demote]
  uint64_t plansExecuted = 0;
  uint64_t plansSuperseded = 0;   // stopped because a newer plan arrived
  uint64_t plansRejected = 0;     // submitted with a generation not newer than the last one
  uint64_t processesGone = 0;     // ESRCH or cancelProcess during a plan
  uint64_t mbindRequests = 0;
  uint64_t mbindFailures = 0;     // requestBind errors (the run then went through move_pages)
  uint64_t guardTrips = 0;        // capacity guard stopped promotion to a node
  [[nodiscard]] const DirectionCountersSnapshot& of(Direction d) const { return direction[static_cast<size_t>(d)]; }
};

// One merged run of a plan and what became of it.
struct RunReport {
  pid_t tgid = 0;
  uint64_t start = 0;
  uint64_t length = 0;
  int targetNode = 0;
  Direction direction = Direction::Promote;
  bool viaMbind = false;                     // carried out by the in-process mover
  std::vector<sys::HugeRange> hugeRanges;    // THP-backed parts, moved one entry per 2 MiB
  Outcome outcome;
  // Where outcome.busy's pages are, sorted and merged; at most kMaxBusyRanges, the closest ones
  // joined beyond that (a joined range may then take in pages that did move).
  std::vector<AddressRange> busy;
  static constexpr size_t kMaxBusyRanges = 64;
};

// Adds `pages` (each `pageBytes` long, in any order) to `ranges`, keeping them sorted, merged and
// at most RunReport::kMaxBusyRanges.
void addBusyPages(std::vector<AddressRange>& ranges, std::span<void* const> pages, uint64_t pageBytes);

struct PlanReport {
  uint64_t generation = 0;
  bool superseded = false;
  std::vector<RunReport> runs;
  std::vector<std::string> errors;  // distinct failures worth a log line (permissions, ESRCH, ...)
  [[nodiscard]] Outcome total() const;
};

// What the engine needs besides the kernel page mover; null members get the Linux defaults
// (SteadyClock, a ProcHugePageProbe on config.procfs_root(), no in-process mover).
struct EngineHooks {
  Clock* clock = nullptr;
  sys::HugePageProbe* hugePages = nullptr;
  InProcessMover* inProcess = nullptr;
};

class Engine {
 public:
  // Starts the coordinator and `config.workers()` worker threads. `mover` and `freeMemory` (and
  // the hooks) must outlive the engine. The config must be valid (config::validateConfig).
  Engine(const topology::Topology& topology, sys::PageMover& mover, FreeMemoryReader& freeMemory,
         const MigrationConfig& config, EngineHooks hooks = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Whether no plan is running or queued (any thread): the service plans again only then.
  [[nodiscard]] bool idle() const;
  // Queues `plan` for the coordinator and returns at once. A plan whose generation is not newer
  // than the last one submitted is rejected; a newer plan supersedes the in-flight one (its
  // current batches finish, nothing more of it starts) and any queued one.
  [[nodiscard]] Result<void> submit(MigrationPlan plan);

  // Runs `plan` on the calling thread (with the worker pool) and returns its report. For tools,
  // benchmarks and tests; the daemon uses submit(). Waits for an in-flight submitted plan.
  PlanReport execute(const MigrationPlan& plan);

  // Stops every move of `tgid` in the in-flight and the queued plan (the process exited), and in a
  // plan taken from the queue but not running yet (the coordinator waits for execute(), or sets
  // the plan up): a pid reused meanwhile must not have the old process's moves applied to it.
  void cancelProcess(pid_t tgid);

  // Live tuning: rate limits, burst, watermark, retries, query/huge/mbind switches. `workers` and
  // `batch_pages` keep their start-up values (a change is reported in the log).
  [[nodiscard]] Result<void> applyConfig(const MigrationConfig& config);

  [[nodiscard]] CountersSnapshot counters() const;
  // The report of the last finished plan (submitted or executed).
  [[nodiscard]] std::optional<PlanReport> lastReport() const;
  // The report of plan `generation` while it is one of the last kKeptReports finished: a reader
  // that waits for one plan's report (the policy's) still finds it after other plans (manual
  // moves) have finished behind it.
  [[nodiscard]] std::optional<PlanReport> reportOf(uint64_t generation) const;
  static constexpr size_t kKeptReports = 8;  // at least the epoch loop's kPinPlansRead
  // Called on the coordinator thread after every plan (the service logs and exports it).
  void setReportCallback(std::function<void(const PlanReport&)> callback);
  // Called on the coordinator thread each time a submitted plan has finished and no other is
  // queued, after idle() became true (a submit or execute() on another thread may have made it
  // false again by the time the callback runs; execute()'s own plans call nothing): a caller that
  // held a plan back while the engine ran waits for this instead of its next period. One callback
  // at a time; once this returns, the previous one is not running and never runs again, so its
  // owner may go away. The callback must not call setIdleCallback (it runs under that lock).
  void setIdleCallback(std::function<void()> callback);

  // Blocks until no plan is queued or running.
  void waitIdle();

  // Cancels the in-flight plan (batches inside the kernel finish: move_pages cannot be
  // interrupted) and joins every thread. Idempotent; the destructor calls it.
  void shutdown();

 private:
  struct PlanState;
  struct Batch;
  struct DirectionCounters;

  void coordinatorLoop();
  void workerLoop();
  PlanReport runPlan(const MigrationPlan& plan);
  void runOne(PlanState& plan, size_t runIndex);
  // Carries the run out with the client's mbind when it can (false: move it with move_pages).
  bool tryInProcess(PlanState& plan, size_t runIndex);
  void moveSegments(PlanState& plan, size_t runIndex);
  void dispatch(PlanState& plan, Batch* batch);
  Batch* acquireBatch();
  void releaseBatch(Batch* batch);
  void executeBatch(Batch& batch);
  void account(PlanState& plan, size_t runIndex, Direction direction, const Outcome& outcome);
  bool sleepUnlessCancelled(PlanState& plan, pid_t tgid, std::chrono::nanoseconds duration);
  [[nodiscard]] std::optional<Direction> directionOf(int node) const;
  [[nodiscard]] uint64_t watermarkBytes(const topology::NodeMemory& memory) const;
  [[nodiscard]] size_t nodesInTierOf(int node) const;  // nodes in `node`'s tier; 0 = unknown node
  [[nodiscard]] bool sameTier(int a, int b) const;
  // The capacity guard for promoting `bytes` to `node`: empty when they fit above the watermark,
  // else why not. Counts the plan's batches still in flight to the node. Before refusing, while
  // any batch of the plan is queued or running (either direction), it lets them land and reads
  // again: demotions queued ahead free the room a promotion needs only when they land, and a
  // batch the kernel has already moved is counted twice until its worker returns (in free memory
  // and in flight).
  [[nodiscard]] std::optional<std::string> promotionRefused(PlanState& plan, int node, uint64_t bytes);
  // Whether a promotion of `pages` pages (`bytes`) of `tgid` to `node` must not go ahead, with why
  // in `o`: the capacity guard refused it (the node is marked full), or, since the guard may have
  // waited for batches in flight, the plan was superseded, the process went away or the node was
  // found full (ENOMEM) meanwhile. The one check before every promotion, mbind or move_pages.
  [[nodiscard]] bool promotionSkipped(PlanState& plan, pid_t tgid, int node, uint64_t bytes, uint64_t pages, Outcome& o);
  void configureBuckets();

  const topology::Topology topology_;
  sys::PageMover& mover_;
  FreeMemoryReader& freeMemory_;
  std::unique_ptr<Clock> ownClock_;
  std::unique_ptr<sys::HugePageProbe> ownProbe_;
  Clock& clock_;
  sys::HugePageProbe* hugePages_;
  InProcessMover* inProcess_;
  const uint32_t workers_;
  const uint32_t batchPages_;

  mutable std::mutex configMutex_;
  MigrationConfig config_;
  std::array<std::unique_ptr<TokenBucket>, 2> buckets_;

  // Counters: atomics so metrics read them without locks.
  std::unique_ptr<DirectionCounters[]> dirCounters_;
  std::atomic<uint64_t> plansExecuted_{0}, plansSuperseded_{0}, plansRejected_{0}, processesGone_{0},
      mbindRequests_{0}, mbindFailures_{0}, guardTrips_{0};

  // Plans: queued (at most one: a newer supersedes it) and running.
  mutable std::mutex planMutex_;
  std::condition_variable planCv_;
  std::optional<MigrationPlan> queued_;
  uint64_t lastGeneration_ = 0;
  bool haveGeneration_ = false;
  PlanState* running_ = nullptr;
  // Processes cancelled while the coordinator had a plan (taken from the queue, maybe not running_
  // yet), each with the newest generation submitted by then: a plan up to that generation starts
  // with them gone. Pruned as plans start (at most the cancels between two plans).
  std::vector<std::pair<pid_t, uint64_t>> cancelledBeforeRunning_;
  bool coordinatorBusy_ = false;
  bool stopping_ = false;
  std::deque<PlanReport> reports_;  // the last kKeptReports finished, oldest first
  void keepReport(PlanReport report);
  std::function<void(const PlanReport&)> reportCallback_;
  // Held while the idle callback runs, so that replacing it waits for a call in progress.
  std::mutex idleCallbackMutex_;
  std::function<void()> idleCallback_;
  std::mutex executeMutex_;  // one plan at a time, submitted or executed

  // Batches: preallocated page/node/status arrays, moved between the free list and the work queue.
  std::mutex batchMutex_;
  std::condition_variable batchCv_;
  std::vector<std::unique_ptr<Batch>> batchStore_;
  std::vector<Batch*> freeBatches_;
  std::deque<Batch*> readyBatches_;
  size_t batchesInFlight_ = 0;
  bool workersStop_ = false;

  std::thread coordinator_;
  std::vector<std::thread> workerThreads_;
  std::once_flag shutdownOnce_;
};

}  // namespace tt::migrate
