#include "sources/FaultTraceSource.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <sstream>
#include <system_error>
#include <tuple>
#include <vector>

#include "core/Buffers.h"
#include "core/Log.h"
#include "sys/ThreadName.h"
#include "sys/VmStat.h"

namespace tt::sources {

namespace {
KernelMove::Why why(uint16_t cls) {
  switch (cls) {
    case TT_MIG_PROMOTE: return KernelMove::Why::Promotion;
    case TT_MIG_DEMOTE: return KernelMove::Why::Demotion;
    case TT_MIG_SYSCALL: return KernelMove::Why::Syscall;
    default: return KernelMove::Why::Other;
  }
}
}  // namespace

std::optional<KernelMove> kernelMoveOf(const tt_event& e, bool pageEvents) {
  const auto tgid = static_cast<pid_t>(e.tgid);
  if (e.kind == TT_EV_MIGRATE_PAGE && pageEvents)
    return KernelMove{tgid, e.addr & ~(kBasePageSize - 1), uint64_t{1} << e.detail, why(e.mig_class)};
  if (e.kind == TT_EV_MIGRATE_BATCH && !pageEvents) return KernelMove{tgid, 0, e.detail, why(e.mig_class)};
  return std::nullopt;
}

void mergeKernelMoves(std::vector<KernelMove>& moves) {
  dropRepeatedMoves(moves);  // sorted by process, reason and address; repeats gone
  std::vector<KernelMove> merged;
  merged.reserve(moves.size());
  for (const KernelMove& m : moves) {
    if (!merged.empty()) {
      KernelMove& last = merged.back();
      const uint64_t lastEnd = last.page + last.pages * kBasePageSize;
      if (m.page != 0 && last.page != 0 && last.tgid == m.tgid && last.why == m.why && m.page <= lastEnd) {
        const uint64_t end = std::max(lastEnd, m.page + m.pages * kBasePageSize);
        last.pages = (end - last.page) / kBasePageSize;
        continue;
      }
    }
    merged.push_back(m);
  }
  moves = std::move(merged);
}

bool appendKernelMove(std::vector<KernelMove>& moves, const KernelMove& move, size_t cap, bool& merged) {
  if (moves.size() < cap) {
    moves.push_back(move);
    return true;
  }
  if (!merged) {  // once until the moves are taken: a storm of scattered pages does not merge
    merged = true;
    mergeKernelMoves(moves);
    if (moves.size() < cap) {
      moves.push_back(move);
      return true;
    }
  }
  if (moves.empty() || move.page == 0) return false;
  KernelMove& last = moves.back();
  if (last.page == 0 || last.tgid != move.tgid || last.why != move.why ||
      last.page + last.pages * kBasePageSize != move.page)
    return false;
  last.pages += move.pages;
  return true;
}

SystemMigrations toSystemMigrations(const sys::bpf::MigrationTotals& totals, bool undoneCounted) {
  SystemMigrations m;
  if (undoneCounted) m.trackedUndone = totals.undone;
  auto pages = [&](int cls) { return SystemMigrations::Pages{totals.succeeded[cls], totals.failed[cls]}; };
  m.promotion = pages(TT_MIG_PROMOTE);
  m.demotion = pages(TT_MIG_DEMOTE);
  m.syscall = pages(TT_MIG_SYSCALL);
  m.other = pages(TT_MIG_OTHER);
  return m;
}

uint64_t appendFaultBlocks(const std::vector<sys::bpf::ChunkCounts>& blocks, FaultedPages& faulted,
                           std::vector<EvidenceBlock>& out) {
  static_assert(sys::bpf::kChunkPages == kBlockPages);
  uint64_t events = 0;
  for (const auto& block : blocks) {
    const auto tgid = static_cast<pid_t>(block.tgid);
    if (block.kind == TT_KIND_STORE) {
      EvidenceBlock store;
      store.tgid = tgid;
      store.base = block.base;
      store.kind = AccessKind::Store;
      store.counts = block.counts;
      for (uint8_t c : block.counts) events += c;
      if (store.pages() > 0) out.push_back(store);
      continue;
    }
    auto& bits = faulted[tgid][block.base >> 21];
    EvidenceBlock fault, hint;
    fault.tgid = hint.tgid = tgid;
    fault.base = hint.base = block.base;
    fault.kind = AccessKind::Fault;
    hint.kind = AccessKind::Hint;
    bool anyFault = false, anyHint = false;
    for (uint32_t i = 0; i < kBlockPages; ++i) {
      uint8_t count = block.counts[i];
      if (count == 0) continue;
      events += count;
      if (!bits.test(i)) {
        fault.counts[i] = 1;
        anyFault = true;
        bits.set(i);
        --count;
      }
      hint.counts[i] = count;
      anyHint |= count > 0;
    }
    if (anyFault) out.push_back(fault);
    if (anyHint) out.push_back(hint);
  }
  return events;
}

FaultTraceSource::~FaultTraceSource() {
  if (watch_.joinable()) {
    {
      std::lock_guard lock(guardMutex_);
      stopWatch_ = true;
    }
    watchCv_.notify_all();
    watch_.join();
  }
}

void FaultTraceSource::open() {
  auto t = sys::bpf::FaultTrace::start(options_);
  if (!t) {
    status_ = {false, "eBPF exceptions/page_fault_user + migrate/*: " + t.error().message()};
    return;
  }
  trace_ = std::move(*t);
  baseDetail_ = std::string("eBPF exceptions/page_fault_user") +
                (options_.reportFirstTouch ? " (first touches" : " (no first touches") +
                (options_.reportWriteProtect ? ", write-protect faults as stores" : ", write-protect faults left to soft-dirty") +
                " counted per page in kernel" +
                "; attached while a process is tracked)" + " + migrate/mm_migrate_pages" +
                (trace_->pageMigrationEvents() ? " + migrate/remove_migration_pte"
                                               : " (no remove_migration_pte on this kernel: batch counts only)") +
                (trace_->hugePageMigrationEvents() ? " + thp/remove_migration_pmd" : "") +
                (trace_->pageOwnerAttribution() ? " (charged to the page's owner: fentry remove_migration_pte)"
                                                : (trace_->pageMigrationEvents() ? " (charged to the migrating task)" : "")) +
                ", ring " + std::to_string(options_.ringBytes / 1024) + " KiB";
  if (!guard_.pauseOverBudget) {
    baseDetail_ += "; never paused (pause_over_budget: false)";
  } else if (auto faults = sys::readVmstat(procfs_, "pgfault"); !faults) {
    baseDetail_ += "; never paused: the storm guard cannot count faults: " + faults.error().message();
  } else {
    try {
      watch_ = std::thread([this] {
        sys::nameThisThread("tt-fault-guard");
        watch();
      });
      guardRuns_ = true;
    } catch (const std::system_error& e) {  // no thread: the daemon runs without the guard
      baseDetail_ += std::string("; never paused: no thread for the storm guard: ") + e.what();
    }
  }
  describe();
}

void FaultTraceSource::describe() {
  std::lock_guard lock(guardMutex_);
  std::string detail = baseDetail_;
  if (guardRuns_) {
    char guard[128];
    std::snprintf(guard, sizeof guard, "; paused while faults would cost over %g%% of a CPU (%.0f ns per fault)",
                  guard_.cpuBudgetPercent, guard_.faultCostNs);
    detail += guard;
    if (appliedPaused_) {
      char now[96];
      std::snprintf(now, sizeof now, "; PAUSED: faults would cost %.2f%% of a CPU", stormGuard_.costPercent());
      detail += now;
    }
    // What the program costs, not what it would: nothing while detached.
    counters_.costPercent = appliedPaused_ ? 0 : stormGuard_.costPercent();
    counters_.sampleCostNs = guard_.faultCostNs;
    counters_.paused = appliedPaused_;
    counters_.pauses = stormGuard_.pauses();
  }
  status_ = {true, detail};
}

bool FaultTraceSource::faultProgramPaused() const {
  std::lock_guard lock(guardMutex_);
  return appliedPaused_;
}

uint64_t FaultTraceSource::pauses() const {
  std::lock_guard lock(guardMutex_);
  return stormGuard_.pauses();
}

void FaultTraceSource::watch() {
  const auto interval = std::chrono::duration<double>(FaultStormGuard::kMinEpochSeconds);
  bool applied = false;  // the tracer's pause state: only this thread changes it
  bool applyFailing = false;
  for (;;) {
    bool wanted = false;
    bool idle = false;
    std::string change;
    {
      std::unique_lock lock(guardMutex_);
      if (watchCv_.wait_for(lock, interval, [this] { return stopWatch_; })) return;
      wanted = guardTickLocked(change);
      idle = !trace_->tracksAny();
    }
    if (idle && wanted == applied) {
      // Nothing tracked: the program is detached and there is nothing to judge. Sleep until a
      // process is tracked (addProcess wakes this) rather than wake ten times a second in a
      // daemon without clients.
      std::unique_lock lock(guardMutex_);
      watchCv_.wait(lock, [this] { return stopWatch_ || trace_->tracksAny(); });
      if (stopWatch_) return;
      continue;
    }
    // Attaching takes a while (a static key's text patch): not under the lock collect() takes.
    if (wanted == applied) continue;
    if (auto r = trace_->setFaultProgramPaused(wanted); !r) {
      if (!applyFailing) {
        TT_LOG(Warn) << "fault-trace: storm guard (retried every 0.1 s): " << r.error().message();
      }
      applyFailing = true;
      continue;
    }
    applyFailing = false;
    applied = wanted;
    {
      std::lock_guard lock(guardMutex_);
      appliedPaused_ = applied;
    }
    TT_LOG(Info) << "fault-trace: " << (change.empty() ? std::string("storm guard") : change) << ": page-fault program "
                 << (applied ? "paused" : "resumed");
  }
}

bool FaultTraceSource::guardTickLocked(std::string& change) {
  if (!trace_->tracksAny()) {
    // The program is detached anyway: nothing to pause, no pause/resume to log each time the
    // machine gets busy, and no vmstat to read. Judging starts afresh with a tracked process.
    baselineStale_ = true;
    stormGuard_.reset();
    return false;
  }
  const auto now = std::chrono::steady_clock::now();
  auto faults = sys::readVmstat(procfs_, "pgfault");
  if (!faults) {
    // Without a count there is nothing to judge: the program runs, as when the guard is off.
    if (!countFailing_) {
      TT_LOG(Warn) << "fault-trace: storm guard cannot count faults, program kept attached: " << faults.error().message();
    }
    countFailing_ = true;
    baselineStale_ = true;
    stormGuard_.reset();
    return false;
  }
  if (countFailing_) {
    TT_LOG(Info) << "fault-trace: storm guard counts faults again";
    countFailing_ = false;
  }
  if (baselineStale_) {  // the faults since the last read (if any) are not one window's
    baselineStale_ = false;
    lastFaults_ = *faults;
    lastRead_ = now;
    return stormGuard_.paused();
  }
  const double seconds = std::chrono::duration<double>(now - lastRead_).count();
  if (seconds < FaultStormGuard::kMinEpochSeconds) return stormGuard_.paused();  // counted into the next one
  const uint64_t delta = *faults >= lastFaults_ ? *faults - lastFaults_ : 0;
  lastFaults_ = *faults;
  lastRead_ = now;
  const bool wasPaused = stormGuard_.paused();
  const bool paused = stormGuard_.update(delta, seconds, guard_.faultCostNs, guard_.cpuBudgetPercent);
  if (paused != wasPaused) {
    std::ostringstream why;
    why << delta << " faults in " << seconds << " s would cost " << stormGuard_.costPercent() << "% of a CPU (budget "
        << guard_.cpuBudgetPercent << "%)";
    change = why.str();
  }
  return paused;
}

Result<void> FaultTraceSource::setSamplingLimits(const SamplingLimits& limits) {
  {
    std::lock_guard lock(guardMutex_);
    guard_.cpuBudgetPercent = limits.cpuBudgetPercent;
    guard_.faultCostNs = limits.sampleCostNs;
  }
  if (trace_) describe();
  return {};
}

Result<void> FaultTraceSource::addProcess(pid_t tgid) {
  if (!trace_) return {};
  tracked_.track(tgid);
  auto tracked = trace_->track(tgid);
  {
    // Taken so that the storm guard cannot miss the wake-up between its check and its wait.
    std::lock_guard lock(guardMutex_);
  }
  watchCv_.notify_all();  // the storm guard sleeps while nothing is tracked
  return tracked;
}

Result<void> FaultTraceSource::removeProcess(pid_t tgid) {
  seen_.erase(tgid);
  tracked_.untrack(tgid);
  if (!trace_) return {};
  return trace_->untrack(tgid);
}

Result<void> FaultTraceSource::collect(EvidenceBatch& out) {
  if (!trace_) return {};
  describe();  // the storm guard's state as of now (its thread pauses and resumes in between)
  // First touches (and, on x86, NUMA hinting faults: both not present) arrive as per-page counts.
  blocks_.clear();
  auto drained = trace_->drainFaultCounts(blocks_);
  // Blocks drained before an error are gone from the kernel: turn them into evidence anyway and
  // report the error after the rest of the epoch's work.
  std::optional<Error> drainError;
  if (!drained) drainError = drained.error();
  const size_t blocksBefore = out.blocks.size();
  std::erase_if(blocks_, [&](const sys::bpf::ChunkCounts& b) { return !tracked_.keeps(static_cast<pid_t>(b.tgid)); });
  const uint64_t events = appendFaultBlocks(blocks_, seen_, out.blocks);
  releaseIfOversized(blocks_, 1024);  // a storm's blocks (up to maxChunks of 528 bytes) are not kept
  const bool pageEvents = trace_->pageMigrationEvents();
  auto n = trace_->poll([&](const tt_event& e) {
    const auto tgid = static_cast<pid_t>(e.tgid);
    if (!tracked_.keeps(tgid)) return;
    switch (e.kind) {
      case TT_EV_FAULT_HINT: pending_.add(tgid, e.addr, AccessKind::Hint, 1); break;
      default:
        if (auto move = kernelMoveOf(e, pageEvents)) (void)appendKernelMove(moves_, *move, kMaxPendingMoves, movesMerged_);
        break;
    }
  });
  tracked_.collected();
  if (!n) return n.error();
  counters_.samples += events + *n;
  for (size_t b = blocksBefore; b < out.blocks.size(); ++b) counters_.evidence += out.blocks[b].pages();
  counters_.evidence += pending_.flush(out.records);
  if (auto totals = trace_->migrationTotals()) {
    counters_.lost = totals->dropped + totals->firstTouchChunksFull;
    systemMigrations_ = toSystemMigrations(*totals, trace_->pageOwnerAttribution());
  }
  if (drainError) return *drainError;
  return {};
}

void dropRepeatedMoves(std::vector<KernelMove>& moves) {
  auto key = [](const KernelMove& m) { return std::tuple(m.tgid, m.why); };
  // Per (process, reason) by address, the widest first: a move is repeated when an earlier one
  // reaches its end.
  std::stable_sort(moves.begin(), moves.end(), [&](const KernelMove& a, const KernelMove& b) {
    if (key(a) != key(b)) return key(a) < key(b);
    if (a.page != b.page) return a.page < b.page;
    return a.pages > b.pages;
  });
  std::vector<KernelMove> kept;
  kept.reserve(moves.size());
  uint64_t coveredEnd = 0;
  for (const KernelMove& m : moves) {
    if (m.page == 0) {  // a batch: no addresses to compare
      kept.push_back(m);
      continue;
    }
    const uint64_t end = m.page + m.pages * kBasePageSize;
    const bool sameGroup = !kept.empty() && kept.back().page != 0 && key(kept.back()) == key(m);
    if (sameGroup && end <= coveredEnd) continue;
    coveredEnd = sameGroup ? std::max(coveredEnd, end) : end;
    kept.push_back(m);
  }
  moves = std::move(kept);
}

void FaultTraceSource::takeKernelMoves(std::vector<KernelMove>& out) {
  dropRepeatedMoves(moves_);
  out.insert(out.end(), moves_.begin(), moves_.end());
  moves_.clear();
  movesMerged_ = false;
}

Result<sys::bpf::MigrationTotals> FaultTraceSource::migrationTotals() const {
  if (!trace_) return logicError("fault-trace source is not running");
  return trace_->migrationTotals();
}

}  // namespace tt::sources
