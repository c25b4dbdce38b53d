#include "migrate/Engine.h"

#include <algorithm>
#include <climits>
#include <map>
#include <set>

#include "core/Log.h"
#include "sys/ThreadName.h"
#include "migrate/Batching.h"

namespace tt::migrate {
namespace {

// A status entry the kernel has not written: move_pages stops storing statuses for the rest of a
// call once a batch leaves pages unmigrated (pinned ones), so those entries must be looked up.
constexpr int kUnset = INT_MIN;
constexpr uint64_t kPagesPerHuge = kHugePageSize / kBasePageSize;
constexpr size_t kMaxReportErrors = 16;
constexpr std::chrono::nanoseconds kSleepSlice = std::chrono::milliseconds(5);

uint64_t entryBytes(bool huge) { return huge ? kHugePageSize : kBasePageSize; }

// The process is gone: ESRCH once it is reaped, EINVAL while it is exiting or a zombie (the kernel's
// find_mm_struct() finds the task but no mm). The engine only sends nodes of the topology, so
// EINVAL has no other cause here.
bool processGone(int code) { return code == ESRCH || code == EINVAL; }

}  // namespace

const char* directionName(Direction direction) { return direction == Direction::Promote ? "promote" : "demote"; }

void Outcome::add(const Outcome& o) {
  moved += o.moved;
  movedHugeFolios += o.movedHugeFolios;
  alreadyThere += o.alreadyThere;
  busy += o.busy;
  notMapped += o.notMapped;
  noMemory += o.noMemory;
  permissionDenied += o.permissionDenied;
  failed += o.failed;
  skippedTargetFull += o.skippedTargetFull;
  cancelled += o.cancelled;
}

uint64_t Outcome::total() const {
  return moved + alreadyThere + busy + notMapped + noMemory + permissionDenied + failed + skippedTargetFull +
         cancelled;
}

void addBusyPages(std::vector<AddressRange>& ranges, std::span<void* const> pages, uint64_t pageBytes) {
  if (pages.empty()) return;
  for (void* p : pages) ranges.push_back({reinterpret_cast<uint64_t>(p), pageBytes});
  std::sort(ranges.begin(), ranges.end(), [](const AddressRange& a, const AddressRange& b) { return a.start < b.start; });
  size_t k = 0;
  for (size_t i = 1; i < ranges.size(); ++i) {
    AddressRange& last = ranges[k];
    if (ranges[i].start <= last.start + last.length) {
      last.length = std::max(last.length, ranges[i].start + ranges[i].length - last.start);
    } else {
      ranges[++k] = ranges[i];
    }
  }
  ranges.resize(k + 1);
  if (ranges.size() <= RunReport::kMaxBusyRanges) return;
  // Too many: join across the smallest gaps, so that what is held back takes in as few pages that
  // did move as it can. Gaps up to the one that leaves kMaxBusyRanges go (ties: from the left).
  std::vector<uint64_t> gaps;
  for (size_t i = 1; i < ranges.size(); ++i) gaps.push_back(ranges[i].start - (ranges[i - 1].start + ranges[i - 1].length));
  const size_t join = ranges.size() - RunReport::kMaxBusyRanges;
  std::vector<uint64_t> sorted = gaps;
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<ptrdiff_t>(join - 1), sorted.end());
  const uint64_t threshold = sorted[join - 1];
  size_t below = 0;  // gaps strictly under the threshold all go; of those equal to it, what is left
  for (uint64_t g : gaps) below += g < threshold ? 1 : 0;
  size_t equalToJoin = join - below;
  k = 0;
  for (size_t i = 1; i < ranges.size(); ++i) {
    const uint64_t g = gaps[i - 1];
    const bool joinIt = g < threshold || (g == threshold && equalToJoin > 0);
    if (g == threshold && joinIt) --equalToJoin;
    if (joinIt) {
      ranges[k].length = ranges[i].start + ranges[i].length - ranges[k].start;
    } else {
      ranges[++k] = ranges[i];
    }
  }
  ranges.resize(k + 1);
}

Outcome PlanReport::total() const {
  Outcome sum;
  for (const RunReport& r : runs) sum.add(r.outcome);
  return sum;
}

struct Engine::DirectionCounters {
  std::atomic<uint64_t> moved{0}, movedHugeFolios{0}, alreadyThere{0}, busy{0}, notMapped{0}, noMemory{0},
      permissionDenied{0}, failed{0}, skippedTargetFull{0}, cancelled{0};
  std::atomic<uint64_t> moveCalls{0}, batches{0}, busyRetries{0};
  std::atomic<uint64_t> busyNs{0}, busyBytes{0};
};

// One plan being executed: its runs, report, and what stops parts of it.
struct Engine::PlanState {
  uint64_t generation = 0;
  MigrationConfig config;  // snapshot taken when the plan starts
  std::vector<MoveRun> runs;
  std::atomic<bool> superseded{false};
  // THP ranges per process, probed once per plan over the span of all its runs: smaps walks every
  // VMA of the process, too costly to repeat for each run. Coordinator thread only.
  std::map<pid_t, Result<std::vector<sys::HugeRange>>> hugeByProcess;

  std::mutex mutex;  // guards everything below
  std::set<pid_t> gone;
  std::set<int> fullNodes;
  std::map<int, uint64_t> inflightBytes;
  PlanReport report;

  bool cancelled(pid_t tgid) {
    if (superseded.load(std::memory_order_relaxed)) return true;
    std::lock_guard lock(mutex);
    return gone.count(tgid) != 0;
  }
  bool isFull(int node) {
    std::lock_guard lock(mutex);
    return fullNodes.count(node) != 0;
  }
  void addErrorLocked(std::string message) {
    if (report.errors.size() < kMaxReportErrors &&
        std::find(report.errors.begin(), report.errors.end(), message) == report.errors.end())
      report.errors.push_back(std::move(message));
  }
  void addError(std::string message) {
    std::lock_guard lock(mutex);
    addErrorLocked(std::move(message));
  }
  // Returns true when this call marked it (first time).
  bool markGone(pid_t tgid, const std::string& why) {
    std::lock_guard lock(mutex);
    if (!gone.insert(tgid).second) return false;
    if (!why.empty()) addErrorLocked(why);
    return true;
  }
  void markFull(int node, const std::string& why) {
    std::lock_guard lock(mutex);
    fullNodes.insert(node);
    addErrorLocked(why);
  }
};

// Preallocated arrays for one move_pages call (no allocation per call).
struct Engine::Batch {
  std::vector<void*> pages;
  std::vector<int> nodes;
  std::vector<int> status;
  size_t count = 0;
  size_t capacity = 0;
  pid_t tgid = 0;
  int node = 0;
  bool huge = false;
  Direction direction = Direction::Promote;
  size_t runIndex = 0;
  PlanState* plan = nullptr;
  uint64_t bytes() const { return count * entryBytes(huge); }
};

Engine::Engine(const topology::Topology& topology, sys::PageMover& mover, FreeMemoryReader& freeMemory,
               const MigrationConfig& config, EngineHooks hooks)
    : topology_(topology),
      mover_(mover),
      freeMemory_(freeMemory),
      ownClock_(hooks.clock ? nullptr : std::make_unique<SteadyClock>()),
      ownProbe_(hooks.hugePages ? nullptr : std::make_unique<sys::ProcHugePageProbe>(sys::Fs(config.procfs_root()))),
      clock_(hooks.clock ? *hooks.clock : *ownClock_),
      hugePages_(hooks.hugePages ? hooks.hugePages : ownProbe_.get()),
      inProcess_(hooks.inProcess),
      workers_(std::max<uint32_t>(1, config.workers())),
      batchPages_(std::max<uint32_t>(512, config.batch_pages())),
      config_(config),
      dirCounters_(std::make_unique<DirectionCounters[]>(2)) {
  for (auto& bucket : buckets_) bucket = std::make_unique<TokenBucket>(clock_);
  configureBuckets();
  // Two batches per worker: one in the kernel, one being filled by the coordinator.
  for (uint32_t i = 0; i < 2 * workers_; ++i) {
    auto batch = std::make_unique<Batch>();
    batch->pages.resize(batchPages_);
    batch->nodes.resize(batchPages_);
    batch->status.resize(batchPages_);
    freeBatches_.push_back(batch.get());
    batchStore_.push_back(std::move(batch));
  }
  for (uint32_t i = 0; i < workers_; ++i)
    workerThreads_.emplace_back([this] {
      sys::nameThisThread("tt-mover");
      workerLoop();
    });
  coordinator_ = std::thread([this] {
    sys::nameThisThread("tt-migrate");
    coordinatorLoop();
  });
}

Engine::~Engine() { shutdown(); }

void Engine::configureBuckets() {
  const uint64_t batchBytes = uint64_t{batchPages_} * kBasePageSize;
  const uint32_t mbps[2] = {config_.promote_mbps(), config_.demote_mbps()};
  for (size_t d = 0; d < 2; ++d) {
    const uint64_t rate = uint64_t{mbps[d]} * 1000000ULL;
    // The burst covers at least one whole batch, so a batch never waits for more than its own cost.
    const uint64_t burst = std::max<uint64_t>(rate * config_.rate_burst_ms() / 1000, batchBytes);
    buckets_[d]->configure(rate, burst);
  }
}

Result<void> Engine::applyConfig(const MigrationConfig& config) {
  if (config.batch_pages() % 512 != 0) return logicError("migration.batch_pages: must be a multiple of 512");
  std::lock_guard lock(configMutex_);
  if (config.workers() != workers_ || config.batch_pages() != batchPages_) {
    TT_LOG(Warn) << "migration: workers and batch_pages changes take effect at the next daemon start (running with "
                 << workers_ << " workers, " << batchPages_ << "-page batches)";
  }
  config_ = config;
  configureBuckets();
  return {};
}

size_t Engine::nodesInTierOf(int node) const {
  const topology::NumaNode* n = topology_.node(node);
  return n == nullptr ? 0 : topology_.nodesInTier(n->tier).size();
}

bool Engine::sameTier(int a, int b) const {
  const topology::NumaNode* na = topology_.node(a);
  const topology::NumaNode* nb = topology_.node(b);
  return na != nullptr && nb != nullptr && na->tier == nb->tier;
}

std::optional<Direction> Engine::directionOf(int node) const {
  const topology::NumaNode* n = topology_.node(node);
  if (n == nullptr) return std::nullopt;
  return n->tier == topology::Tier::Fast ? Direction::Promote : Direction::Demote;
}

uint64_t Engine::watermarkBytes(const topology::NodeMemory& memory) const {
  std::lock_guard lock(configMutex_);
  const uint64_t fixed = uint64_t{config_.fast_node_min_free_mib()} << 20;
  const auto relative =
      static_cast<uint64_t>(static_cast<double>(memory.totalBytes) * config_.fast_node_min_free_percent() / 100.0);
  return std::max(fixed, relative);
}

bool Engine::idle() const {
  std::lock_guard lock(planMutex_);
  // coordinatorBusy_ covers the plan's set-up, before running_ is set.
  return running_ == nullptr && !queued_ && !coordinatorBusy_;
}

Result<void> Engine::submit(MigrationPlan plan) {
  std::lock_guard lock(planMutex_);
  if (stopping_) return logicError("migration engine is shut down");
  if (haveGeneration_ && plan.generation <= lastGeneration_) {
    plansRejected_.fetch_add(1, std::memory_order_relaxed);
    return logicError("migration plan generation " + std::to_string(plan.generation) +
                      " is not newer than the last submitted (" + std::to_string(lastGeneration_) + ")");
  }
  haveGeneration_ = true;
  lastGeneration_ = plan.generation;
  if (queued_) plansSuperseded_.fetch_add(1, std::memory_order_relaxed);  // never started
  queued_ = std::move(plan);
  if (running_ != nullptr) running_->superseded.store(true);
  planCv_.notify_all();
  return {};
}

PlanReport Engine::execute(const MigrationPlan& plan) {
  std::lock_guard exec(executeMutex_);
  PlanReport report = runPlan(plan);
  std::lock_guard lock(planMutex_);
  keepReport(report);
  return report;
}

void Engine::cancelProcess(pid_t tgid) {
  std::lock_guard lock(planMutex_);
  if (queued_)
    std::erase_if(queued_->moves, [tgid](const MoveRequest& m) { return m.tgid == tgid; });
  bool gone = running_ != nullptr && running_->markGone(tgid, "");
  // The coordinator's plan may be taken from the queue and not be running_ yet (execute() runs
  // another, or it is being set up): it starts with the process gone.
  if (coordinatorBusy_) {
    cancelledBeforeRunning_.emplace_back(tgid, haveGeneration_ ? lastGeneration_ : 0);
    gone = true;
  }
  if (gone) processesGone_.fetch_add(1, std::memory_order_relaxed);
}

CountersSnapshot Engine::counters() const {
  CountersSnapshot s;
  for (size_t d = 0; d < 2; ++d) {
    const DirectionCounters& c = dirCounters_[d];
    DirectionCountersSnapshot& o = s.direction[d];
    o.pages.moved = c.moved.load();
    o.pages.movedHugeFolios = c.movedHugeFolios.load();
    o.pages.alreadyThere = c.alreadyThere.load();
    o.pages.busy = c.busy.load();
    o.pages.notMapped = c.notMapped.load();
    o.pages.noMemory = c.noMemory.load();
    o.pages.permissionDenied = c.permissionDenied.load();
    o.pages.failed = c.failed.load();
    o.pages.skippedTargetFull = c.skippedTargetFull.load();
    o.pages.cancelled = c.cancelled.load();
    o.bytesMoved = o.pages.moved * kBasePageSize;
    o.hugePagesMoved = o.pages.movedHugeFolios;
    o.basePagesMoved = o.pages.moved - o.pages.movedHugeFolios * kPagesPerHuge;
    o.moveCalls = c.moveCalls.load();
    o.batches = c.batches.load();
    o.busyRetries = c.busyRetries.load();
    o.busyNs = c.busyNs.load();
    o.busyBytes = c.busyBytes.load();
  }
  s.plansExecuted = plansExecuted_.load();
  s.plansSuperseded = plansSuperseded_.load();
  s.plansRejected = plansRejected_.load();
  s.processesGone = processesGone_.load();
  s.mbindRequests = mbindRequests_.load();
  s.mbindFailures = mbindFailures_.load();
  s.guardTrips = guardTrips_.load();
  return s;
}

std::optional<PlanReport> Engine::lastReport() const {
  std::lock_guard lock(planMutex_);
  if (reports_.empty()) return std::nullopt;
  return reports_.back();
}

std::optional<PlanReport> Engine::reportOf(uint64_t generation) const {
  std::lock_guard lock(planMutex_);
  for (const PlanReport& r : reports_)
    if (r.generation == generation) return r;
  return std::nullopt;
}

void Engine::keepReport(PlanReport report) {
  reports_.push_back(std::move(report));
  if (reports_.size() > kKeptReports) reports_.pop_front();
}

void Engine::setReportCallback(std::function<void(const PlanReport&)> callback) {
  std::lock_guard lock(planMutex_);
  reportCallback_ = std::move(callback);
}

void Engine::setIdleCallback(std::function<void()> callback) {
  std::lock_guard lock(idleCallbackMutex_);
  idleCallback_ = std::move(callback);
}

void Engine::waitIdle() {
  std::unique_lock lock(planMutex_);
  planCv_.wait(lock, [this] { return stopping_ || (!queued_ && !coordinatorBusy_); });
}

void Engine::shutdown() {
  std::call_once(shutdownOnce_, [this] {
    {
      std::lock_guard lock(planMutex_);
      stopping_ = true;
      queued_.reset();
      if (running_ != nullptr) running_->superseded.store(true);
      planCv_.notify_all();
    }
    if (coordinator_.joinable()) coordinator_.join();
    {
      std::lock_guard exec(executeMutex_);  // an execute() on another thread finishes first
      std::lock_guard lock(batchMutex_);
      workersStop_ = true;
      batchCv_.notify_all();
    }
    for (auto& t : workerThreads_)
      if (t.joinable()) t.join();
  });
}

void Engine::coordinatorLoop() {
  for (;;) {
    MigrationPlan plan;
    {
      std::unique_lock lock(planMutex_);
      planCv_.wait(lock, [this] { return stopping_ || queued_.has_value(); });
      if (stopping_) return;
      plan = std::move(*queued_);
      queued_.reset();
      coordinatorBusy_ = true;
    }
    PlanReport report;
    {
      std::lock_guard exec(executeMutex_);
      report = runPlan(plan);
    }
    std::function<void(const PlanReport&)> callback;
    {
      std::lock_guard lock(planMutex_);
      callback = reportCallback_;
    }
    if (callback) callback(report);
    bool idleNow = false;
    {
      std::lock_guard lock(planMutex_);
      keepReport(std::move(report));
      coordinatorBusy_ = false;
      idleNow = !queued_ && !stopping_;
      planCv_.notify_all();
    }
    if (idleNow) {
      std::lock_guard lock(idleCallbackMutex_);
      if (idleCallback_) idleCallback_();
    }
  }
}

PlanReport Engine::runPlan(const MigrationPlan& plan) {
  PlanState state;
  state.generation = plan.generation;
  {
    std::lock_guard lock(configMutex_);
    state.config = config_;
  }
  state.runs = coalesce(plan.moves);
  state.report.generation = plan.generation;
  state.report.runs.resize(state.runs.size());
  for (size_t i = 0; i < state.runs.size(); ++i) {
    const MoveRun& r = state.runs[i];
    RunReport& rr = state.report.runs[i];
    rr.tgid = r.tgid;
    rr.start = r.start;
    rr.length = r.length;
    rr.targetNode = r.targetNode;
    rr.direction = directionOf(r.targetNode).value_or(Direction::Promote);
  }
  {
    std::lock_guard lock(planMutex_);
    running_ = &state;
    // A plan submitted while this one was being set up supersedes it at once.
    if (queued_ && queued_->generation > plan.generation) state.superseded.store(true);
    for (const auto& [tgid, generation] : cancelledBeforeRunning_)
      if (plan.generation <= generation) (void)state.markGone(tgid, "");  // counted by cancelProcess
    std::erase_if(cancelledBeforeRunning_, [&](const auto& c) { return c.second <= plan.generation; });
  }
  for (size_t i = 0; i < state.runs.size(); ++i) runOne(state, i);
  {
    std::unique_lock lock(batchMutex_);
    batchCv_.wait(lock, [this] { return batchesInFlight_ == 0; });
  }
  {
    std::lock_guard lock(planMutex_);
    running_ = nullptr;
  }
  plansExecuted_.fetch_add(1, std::memory_order_relaxed);
  state.report.superseded = state.superseded.load();
  if (state.report.superseded) plansSuperseded_.fetch_add(1, std::memory_order_relaxed);
  const Outcome total = state.report.total();
  TT_LOG(Debug) << "migration plan " << plan.generation << ": " << state.runs.size() << " runs, moved " << total.moved
                << " pages, already there " << total.alreadyThere << ", busy " << total.busy << ", not mapped "
                << total.notMapped << ", no memory " << total.noMemory << ", skipped (target full) "
                << total.skippedTargetFull << ", cancelled " << total.cancelled
                << (state.report.superseded ? " (superseded)" : "");
  for (const std::string& e : state.report.errors) {
    TT_LOG(Warn) << "migration plan " << plan.generation << ": " << e;
  }
  return std::move(state.report);
}

void Engine::account(PlanState& plan, size_t runIndex, Direction direction, const Outcome& o) {
  DirectionCounters& c = dirCounters_[static_cast<size_t>(direction)];
  c.moved += o.moved;
  c.movedHugeFolios += o.movedHugeFolios;
  c.alreadyThere += o.alreadyThere;
  c.busy += o.busy;
  c.notMapped += o.notMapped;
  c.noMemory += o.noMemory;
  c.permissionDenied += o.permissionDenied;
  c.failed += o.failed;
  c.skippedTargetFull += o.skippedTargetFull;
  c.cancelled += o.cancelled;
  std::lock_guard lock(plan.mutex);
  plan.report.runs[runIndex].outcome.add(o);
}

std::optional<std::string> Engine::promotionRefused(PlanState& plan, int node, uint64_t bytes) {
  auto inflightTo = [&] {
    std::lock_guard lock(plan.mutex);
    return plan.inflightBytes[node];
  };
  auto mem = freeMemory_.read(node);
  if (mem && mem->freeBytes < inflightTo() + bytes + watermarkBytes(*mem)) {
    // Short of room while batches of the plan are still queued or running, in either direction:
    // the demotions that make room for this promotion (the planner orders them first) free the
    // node's memory only when they land, and a promotion the kernel has already moved is counted
    // twice until its worker returns (in free memory and in flight). Refusing now would mark the
    // node full for the rest of the plan: let them land and read again. One drain per check,
    // only near the point where the node fills; a node full without them is refused after it.
    bool drained = false;
    {
      std::unique_lock lock(batchMutex_);
      if (batchesInFlight_ > 0) {
        batchCv_.wait(lock, [this] { return batchesInFlight_ == 0; });
        drained = true;
      }
    }
    if (drained) mem = freeMemory_.read(node);
  }
  if (!mem) {
    guardTrips_.fetch_add(1, std::memory_order_relaxed);
    return "capacity guard cannot read free memory, promotion stopped: " + mem.error().message();
  }
  const uint64_t mark = watermarkBytes(*mem);  // of the new reading (a relative watermark follows total)
  if (mem->freeBytes >= inflightTo() + bytes + mark) return std::nullopt;
  guardTrips_.fetch_add(1, std::memory_order_relaxed);
  return "capacity guard: node " + std::to_string(node) + " has " + std::to_string(mem->freeBytes >> 20) +
         " MiB free, watermark " + std::to_string(mark >> 20) + " MiB: promotion to it stopped for this plan";
}

bool Engine::promotionSkipped(PlanState& plan, pid_t tgid, int node, uint64_t bytes, uint64_t pages, Outcome& o) {
  if (auto refused = promotionRefused(plan, node, bytes)) {
    plan.markFull(node, *refused);
    o.skippedTargetFull = pages;
    return true;
  }
  if (plan.cancelled(tgid)) {
    o.cancelled = pages;
    return true;
  }
  if (plan.isFull(node)) {
    o.skippedTargetFull = pages;
    return true;
  }
  return false;
}

bool Engine::sleepUnlessCancelled(PlanState& plan, pid_t tgid, std::chrono::nanoseconds duration) {
  const auto until = clock_.now() + duration;
  for (;;) {
    if (plan.cancelled(tgid)) return false;
    const auto now = clock_.now();
    if (now >= until) return true;
    clock_.sleepFor(std::min(until - now, kSleepSlice));
  }
}

void Engine::runOne(PlanState& plan, size_t runIndex) {
  const MoveRun& run = plan.runs[runIndex];
  const uint64_t pages = run.length / kBasePageSize;
  const auto direction = directionOf(run.targetNode);
  Outcome o;
  if (!direction) {
    o.failed = pages;
    plan.addError("node " + std::to_string(run.targetNode) + " is not an online memory node");
    account(plan, runIndex, Direction::Promote, o);
    return;
  }
  if (plan.cancelled(run.tgid)) {
    o.cancelled = pages;
  } else if (plan.isFull(run.targetNode)) {
    o.skippedTargetFull = pages;
  } else if (!tryInProcess(plan, runIndex)) {
    moveSegments(plan, runIndex);
    return;
  } else {
    return;
  }
  account(plan, runIndex, *direction, o);
}

bool Engine::tryInProcess(PlanState& plan, size_t runIndex) {
  const MoveRun& run = plan.runs[runIndex];
  if (!plan.config.in_process_mover() || inProcess_ == nullptr || run.regionId == 0 || !inProcess_->acceptsMbind(run.tgid))
    return false;
  // mbind moves every page not on the node: with several nodes in the target's tier it would pull
  // pages between them, which a move between tiers must not.
  if (run.betweenTiers && nodesInTierOf(run.targetNode) > 1) return false;
  const Direction direction = *directionOf(run.targetNode);
  const uint64_t pages = run.length / kBasePageSize;
  // Where the pages are, before and after the bind, with a batch's arrays as scratch.
  Batch* scratch = acquireBatch();
  auto query = [&](uint64_t first, size_t n) {
    for (size_t i = 0; i < n; ++i)
      scratch->pages[i] = reinterpret_cast<void*>(run.start + (first + i) * kBasePageSize);
    return mover_.queryPages(run.tgid, std::span(scratch->pages.data(), n), std::span(scratch->status.data(), n));
  };
  // First where they are: the rate limit and the capacity guard are for the pages the bind brings
  // to the node, and only those count as moved after it. A region already there (a manual move
  // done before, a promotion the kernel made) costs this query and no bind.
  enum : uint8_t { kElsewhere, kThere, kUnmapped };
  std::vector<uint8_t> before(pages, kElsewhere);
  Outcome o;  // of the pages the bind leaves as they are: alreadyThere, notMapped
  for (uint64_t done = 0; done < pages;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(batchPages_, pages - done));
    auto q = query(done, n);
    if (!q && processGone(q.error().code)) {
      releaseBatch(scratch);
      if (plan.markGone(run.tgid, "pid " + std::to_string(run.tgid) + " exited during the plan"))
        processesGone_.fetch_add(1, std::memory_order_relaxed);
      o = Outcome{};
      o.cancelled = pages;
      account(plan, runIndex, direction, o);
      return true;
    }
    if (!q) {
      // Not knowing where they are: every page is charged, as the bind may move any of them.
      plan.addError(q.error().message() + " (bound without the query)");
      std::fill(before.begin(), before.end(), kElsewhere);
      o = Outcome{};
      break;
    }
    for (size_t i = 0; i < n; ++i) {
      const int s = scratch->status[i];
      if (s == run.targetNode) {
        before[done + i] = kThere;
        ++o.alreadyThere;
      } else if (s == -ENOENT || s == -EFAULT) {
        before[done + i] = kUnmapped;
        ++o.notMapped;
      }
    }
    done += n;
  }
  const uint64_t toMove = pages - o.alreadyThere - o.notMapped;
  // Pages not touched yet still need the bind: it also steers their first touch to the node.
  if (toMove == 0 && o.notMapped == 0) {
    releaseBatch(scratch);
    account(plan, runIndex, direction, o);
    return true;
  }
  // The same rate limit as move_pages batches, for the pages to copy; the guard, where there are
  // any, also counts the pages not touched yet, which the bind (MPOL_BIND) places on the node at
  // their first touch.
  const uint64_t bytes = toMove * kBasePageSize;
  const auto wait = buckets_[static_cast<size_t>(direction)]->reserve(bytes);
  if (wait.count() > 0 && !sleepUnlessCancelled(plan, run.tgid, wait)) {
    releaseBatch(scratch);
    o.cancelled += toMove;
    account(plan, runIndex, direction, o);
    return true;
  }
  // Only with pages to copy: a bind that places none now (pages not touched yet land on the node
  // at their first touch, as allocations do) does not stop the plan's promotions to the node.
  Outcome skipped;
  if (direction == Direction::Promote && toMove > 0 &&
      promotionSkipped(plan, run.tgid, run.targetNode, bytes + o.notMapped * kBasePageSize, toMove, skipped)) {
    releaseBatch(scratch);
    o.add(skipped);
    account(plan, runIndex, direction, o);
    return true;
  }
  mbindRequests_.fetch_add(1, std::memory_order_relaxed);
  auto bound = inProcess_->requestBind(run.tgid, run.regionId, run.start, run.length, run.targetNode);
  if (!bound) {
    releaseBatch(scratch);
    buckets_[static_cast<size_t>(direction)]->refund(bytes);
    mbindFailures_.fetch_add(1, std::memory_order_relaxed);
    plan.addError("in-process mbind of region " + std::to_string(run.regionId) + " (pid " + std::to_string(run.tgid) +
                  ") failed, moved with move_pages instead: " + bound.error().message());
    return false;
  }
  {
    std::lock_guard lock(plan.mutex);
    plan.report.runs[runIndex].viaMbind = true;
  }
  // Then where the pages it was to move are now.
  for (uint64_t done = 0; done < pages;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(batchPages_, pages - done));
    auto q = query(done, n);
    if (!q) {
      // Bound, but where they are cannot be told: counted busy, and named as such.
      std::vector<void*> unknown;
      for (uint64_t i = done; i < pages; ++i)
        if (before[i] == kElsewhere) unknown.push_back(reinterpret_cast<void*>(run.start + i * kBasePageSize));
      o.busy += unknown.size();
      {
        std::lock_guard lock(plan.mutex);
        addBusyPages(plan.report.runs[runIndex].busy, unknown, kBasePageSize);
      }
      plan.addError(q.error().message());
      break;
    }
    std::vector<void*> busy;
    for (size_t i = 0; i < n; ++i) {
      if (before[done + i] != kElsewhere) continue;
      const int s = scratch->status[i];
      if (s == run.targetNode) {
        ++o.moved;
      } else if (s == -ENOENT || s == -EFAULT) {
        ++o.notMapped;
      } else {
        ++o.busy;  // mbind's MPOL_MF_MOVE leaves pages it cannot isolate where they are
        busy.push_back(reinterpret_cast<void*>(run.start + (done + i) * kBasePageSize));
      }
    }
    if (!busy.empty()) {
      std::lock_guard lock(plan.mutex);
      addBusyPages(plan.report.runs[runIndex].busy, busy, kBasePageSize);
    }
    done += n;
  }
  releaseBatch(scratch);
  account(plan, runIndex, direction, o);
  return true;
}

void Engine::moveSegments(PlanState& plan, size_t runIndex) {
  const MoveRun& run = plan.runs[runIndex];
  const Direction direction = *directionOf(run.targetNode);
  const uint64_t runEnd = run.start + run.length;
  Outcome o;
  std::vector<sys::HugeRange> huge;
  if (plan.config.detect_huge_pages() && hugePages_ != nullptr) {
    auto cached = plan.hugeByProcess.find(run.tgid);
    if (cached == plan.hugeByProcess.end()) {
      uint64_t lo = UINT64_MAX, hi = 0;
      for (const MoveRun& r : plan.runs) {
        if (r.tgid != run.tgid) continue;
        lo = std::min(lo, r.start);
        hi = std::max(hi, r.start + r.length);
      }
      cached = plan.hugeByProcess.emplace(run.tgid, hugePages_->hugeRanges(run.tgid, lo, hi - lo)).first;
    }
    const auto& found = cached->second;
    if (found) {
      for (const sys::HugeRange& h : *found) {
        // Only whole 2 MiB blocks inside this run: a THP partly outside it goes as 4 KiB entries
        // (the kernel then moves the folio whole; it is never split for it).
        const uint64_t lo = (std::max(h.start, run.start) + kHugePageSize - 1) & ~(kHugePageSize - 1);
        const uint64_t hi = std::min(h.start + h.length, runEnd) & ~(kHugePageSize - 1);
        if (lo < hi) huge.push_back({lo, hi - lo});
      }
    } else if (found.error().code == ENOENT || processGone(found.error().code)) {
      if (plan.markGone(run.tgid, "pid " + std::to_string(run.tgid) + " exited: " + found.error().message()))
        processesGone_.fetch_add(1, std::memory_order_relaxed);
      o.cancelled = run.length / kBasePageSize;
      account(plan, runIndex, direction, o);
      return;
    } else {
      // Not knowing where huge pages are is safe: 4 KiB entries still move them, only slower.
      plan.addError("huge-page detection for pid " + std::to_string(run.tgid) + ": " + found.error().message());
    }
  }
  {
    std::lock_guard lock(plan.mutex);
    plan.report.runs[runIndex].hugeRanges = huge;
  }
  // A move between tiers leaves pages already in the target's tier where they are; with several
  // nodes in that tier only the query can tell, so it is made whatever query_before_move says.
  const bool severalInTier = run.betweenTiers && nodesInTierOf(run.targetNode) > 1;
  const bool query = plan.config.query_before_move() || severalInTier;
  for (const Segment& seg : splitHuge(run.start, run.length, huge)) {
    const uint64_t entry = entryBytes(seg.huge);
    const uint64_t unit = entry / kBasePageSize;
    const uint64_t entries = seg.length / entry;
    const size_t capacity = seg.huge ? std::max<size_t>(1, batchPages_ / kPagesPerHuge) : batchPages_;
    Batch* cur = nullptr;
    uint64_t i = 0;
    while (i < entries) {
      const uint64_t pos = seg.start + i * entry;
      if (plan.cancelled(run.tgid) || plan.isFull(run.targetNode)) {
        (plan.cancelled(run.tgid) ? o.cancelled : o.skippedTargetFull) += (runEnd - pos) / kBasePageSize;
        if (cur != nullptr) dispatch(plan, cur);  // dispatch counts its pages as cancelled/skipped
        account(plan, runIndex, direction, o);
        return;
      }
      if (cur == nullptr) {
        cur = acquireBatch();
        cur->count = 0;
        cur->capacity = capacity;
        cur->tgid = run.tgid;
        cur->node = run.targetNode;
        cur->huge = seg.huge;
        cur->direction = direction;
        cur->runIndex = runIndex;
        cur->plan = &plan;
      }
      const size_t take = static_cast<size_t>(std::min<uint64_t>(cur->capacity - cur->count, entries - i));
      void** tail = cur->pages.data() + cur->count;
      for (size_t j = 0; j < take; ++j) tail[j] = reinterpret_cast<void*>(pos + j * entry);
      size_t kept = take;
      if (query) {
        int* status = cur->status.data() + cur->count;
        auto q = mover_.queryPages(run.tgid, std::span(tail, take), std::span(status, take));
        if (!q && processGone(q.error().code)) {
          if (plan.markGone(run.tgid, "pid " + std::to_string(run.tgid) + " exited during the plan"))
            processesGone_.fetch_add(1, std::memory_order_relaxed);
          continue;  // the check above counts the rest as cancelled
        }
        if (q) {
          kept = 0;
          for (size_t j = 0; j < take; ++j) {
            const int s = status[j];
            if (s == run.targetNode || (severalInTier && s >= 0 && sameTier(s, run.targetNode))) o.alreadyThere += unit;
            else if (s == -ENOENT || s == -EFAULT) o.notMapped += unit;
            else tail[kept++] = tail[j];
          }
        } else {
          plan.addError(q.error().message() + " (moving without the query)");
        }
      }
      cur->count += kept;
      i += take;
      if (cur->count == cur->capacity) {
        dispatch(plan, cur);
        cur = nullptr;
      }
    }
    if (cur != nullptr) {
      if (cur->count > 0) dispatch(plan, cur);
      else releaseBatch(cur);
    }
  }
  account(plan, runIndex, direction, o);
}

void Engine::dispatch(PlanState& plan, Batch* batch) {
  const uint64_t bytes = batch->bytes();
  const uint64_t pages = bytes / kBasePageSize;
  Outcome o;
  auto finishUnsent = [&] {
    account(plan, batch->runIndex, batch->direction, o);
    releaseBatch(batch);
  };
  if (batch->count == 0) return releaseBatch(batch);
  if (plan.cancelled(batch->tgid)) {
    o.cancelled = pages;
    return finishUnsent();
  }
  if (plan.isFull(batch->node)) {
    o.skippedTargetFull = pages;
    return finishUnsent();
  }
  const auto wait = buckets_[static_cast<size_t>(batch->direction)]->reserve(bytes);
  if (wait.count() > 0 && !sleepUnlessCancelled(plan, batch->tgid, wait)) {
    o.cancelled = pages;
    return finishUnsent();
  }
  // Capacity guard, read after the rate wait so it sees the node as the batch will find it.
  if (batch->direction == Direction::Promote && promotionSkipped(plan, batch->tgid, batch->node, bytes, pages, o))
    return finishUnsent();
  {
    std::lock_guard lock(plan.mutex);
    plan.inflightBytes[batch->node] += bytes;
  }
  dirCounters_[static_cast<size_t>(batch->direction)].batches.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lock(batchMutex_);
  readyBatches_.push_back(batch);
  ++batchesInFlight_;
  batchCv_.notify_all();
}

Engine::Batch* Engine::acquireBatch() {
  std::unique_lock lock(batchMutex_);
  batchCv_.wait(lock, [this] { return !freeBatches_.empty(); });
  Batch* b = freeBatches_.back();
  freeBatches_.pop_back();
  return b;
}

void Engine::releaseBatch(Batch* batch) {
  std::lock_guard lock(batchMutex_);
  freeBatches_.push_back(batch);
  batchCv_.notify_all();
}

void Engine::workerLoop() {
  for (;;) {
    Batch* batch = nullptr;
    {
      std::unique_lock lock(batchMutex_);
      batchCv_.wait(lock, [this] { return workersStop_ || !readyBatches_.empty(); });
      if (readyBatches_.empty()) return;  // stopping, nothing left
      batch = readyBatches_.front();
      readyBatches_.pop_front();
    }
    const uint64_t bytes = batch->bytes();
    executeBatch(*batch);
    {
      std::lock_guard lock(batch->plan->mutex);
      batch->plan->inflightBytes[batch->node] -= bytes;
    }
    std::lock_guard lock(batchMutex_);
    freeBatches_.push_back(batch);
    --batchesInFlight_;
    batchCv_.notify_all();
  }
}

void Engine::executeBatch(Batch& b) {
  PlanState& plan = *b.plan;
  DirectionCounters& counters = dirCounters_[static_cast<size_t>(b.direction)];
  const uint64_t unit = b.huge ? kPagesPerHuge : 1;
  const bool moveAll = plan.config.move_shared_pages();
  const uint32_t retries = plan.config.busy_retries();
  const auto backoff = std::chrono::milliseconds(plan.config.busy_backoff_ms());
  const std::string who = "pid " + std::to_string(b.tgid);
  Outcome o;
  size_t n = b.count;
  std::fill_n(b.nodes.begin(), n, b.node);
  // Busy time: the batch's move_pages and query calls, not its busy-page backoff sleeps.
  const auto began = clock_.now();
  std::chrono::nanoseconds backedOff{0};
  for (uint32_t attempt = 0; n > 0;) {
    if (plan.cancelled(b.tgid)) {
      o.cancelled += n * unit;
      break;
    }
    std::fill_n(b.status.begin(), n, kUnset);
    auto rc = mover_.movePages(b.tgid, std::span<void* const>(b.pages.data(), n), std::span<const int>(b.nodes.data(), n),
                               std::span(b.status.data(), n), moveAll);
    counters.moveCalls.fetch_add(1, std::memory_order_relaxed);
    if (!rc) {
      const int e = rc.error().code;
      if (processGone(e)) {
        if (plan.markGone(b.tgid, who + " exited during the plan; its moves stopped"))
          processesGone_.fetch_add(1, std::memory_order_relaxed);
        o.cancelled += n * unit;
      } else if (e == EPERM || e == EACCES) {
        o.permissionDenied += n * unit;
        std::string message = rc.error().message();
        if (message.find("CAP_") == std::string::npos)
          message += moveAll ? " (MPOL_MF_MOVE_ALL needs CAP_SYS_NICE)"
                             : " (moving another process's pages needs ptrace access to it: same user, or CAP_SYS_PTRACE)";
        plan.addError(std::move(message));
      } else if (e == ENOMEM) {
        o.noMemory += n * unit;
        plan.markFull(b.node, "node " + std::to_string(b.node) + " is out of memory (ENOMEM): moves to it stopped for this plan");
      } else {
        o.failed += n * unit;
        plan.addError(rc.error().message());
      }
      break;
    }
    // Pages not settled by the call (unwritten, busy) go to the front for a look-up.
    size_t k = 0;
    for (size_t i = 0; i < n; ++i) {
      const int s = b.status[i];
      if (s == b.node) {
        o.moved += unit;
        o.movedHugeFolios += b.huge ? 1 : 0;
      } else if (s == kUnset || s >= 0 || s == -EBUSY || s == -EAGAIN) {
        b.pages[k++] = b.pages[i];
      } else if (s == -EFAULT || s == -ENOENT) {
        o.notMapped += unit;
      } else if (s == -ENOMEM) {
        o.noMemory += unit;
        plan.markFull(b.node, "node " + std::to_string(b.node) + " is out of memory (ENOMEM): moves to it stopped for this plan");
      } else if (s == -EACCES || s == -EPERM) {
        o.permissionDenied += unit;
        plan.addError(who + ": pages shared with other processes (EACCES) need migration.move_shared_pages "
                            "(MPOL_MF_MOVE_ALL), which needs CAP_SYS_NICE");
      } else {
        o.failed += unit;
        plan.addError(who + ": move_pages page status " + std::to_string(s));
      }
    }
    if (k == 0) break;
    auto q = mover_.queryPages(b.tgid, std::span<void* const>(b.pages.data(), k), std::span(b.status.data(), k));
    if (!q) {
      if (processGone(q.error().code)) {
        if (plan.markGone(b.tgid, who + " exited during the plan; its moves stopped"))
          processesGone_.fetch_add(1, std::memory_order_relaxed);
        o.cancelled += k * unit;
      } else {
        o.failed += k * unit;
        plan.addError(q.error().message());
      }
      break;
    }
    n = 0;
    for (size_t i = 0; i < k; ++i) {
      const int s = b.status[i];
      if (s == b.node) {
        o.moved += unit;
        o.movedHugeFolios += b.huge ? 1 : 0;
      } else if (s == -EFAULT || s == -ENOENT) {
        o.notMapped += unit;
      } else {
        b.pages[n++] = b.pages[i];
      }
    }
    if (n == 0) break;
    if (attempt >= retries) {
      o.busy += n * unit;
      std::lock_guard lock(plan.mutex);
      addBusyPages(plan.report.runs[b.runIndex].busy, std::span<void* const>(b.pages.data(), n), entryBytes(b.huge));
      break;
    }
    counters.busyRetries.fetch_add(1, std::memory_order_relaxed);
    const auto sleepStart = clock_.now();
    const bool slept = sleepUnlessCancelled(plan, b.tgid, backoff * (1LL << attempt));
    backedOff += clock_.now() - sleepStart;
    if (!slept) {
      o.cancelled += n * unit;
      break;
    }
    ++attempt;
  }
  if (o.moved > 0) {
    const auto busy = clock_.now() - began - backedOff;
    counters.busyNs.fetch_add(static_cast<uint64_t>(std::max<int64_t>(0, busy.count())), std::memory_order_relaxed);
    counters.busyBytes.fetch_add(o.moved * kBasePageSize, std::memory_order_relaxed);
  }
  account(plan, b.runIndex, b.direction, o);
}

}  // namespace tt::migrate
