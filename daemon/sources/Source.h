// A hotness source: one kernel signal turned into page-level evidence for tracked processes.
//
// Every source has the same life: constructed with its config, open() once (reports, never
// throws, why it cannot run), then addProcess/removeProcess at run time (BPF map updates, not
// reloads) and collect() once per epoch, which appends the evidence gathered since the previous
// call, aggregated per (tgid, page, kind). All calls come from one thread (the daemon's epoch
// loop); sources start no threads of their own. Evidence is records (one per tgid, page, kind) or,
// where the kernel already counted per chunk, blocks (EvidenceBlock): the batch holds both.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/Result.h"
#include "core/Types.h"

namespace tt::sources {

struct SourceStatus {
  bool available = false;
  std::string detail;  // one line: what it runs on ("4 CPUs, in-kernel aggregation") or why not
};

struct SourceCounters {
  uint64_t evidence = 0;     // pages with evidence produced (records, and block pages with a count)
  uint64_t samples = 0;      // raw samples / events seen for tracked processes
  uint64_t lost = 0;         // records the kernel dropped (ring full)
  // PERF_RECORD_THROTTLE seen; a lost record on an in-kernel event's control ring (throttle
  // records) counts once
  uint64_t throttled = 0;
  uint64_t period = 0;       // current sample period (sampling sources)
  double costPercent = 0;    // last epoch's estimated sampling cost (kernel + daemon), percent of one CPU
  double sampleCostNs = 0;   // kernel-side cost per sample the estimate uses
  // Sources that detach themselves over the CPU budget (the fault trace's storm guard): whether
  // they are detached now, and how often they were.
  bool paused = false;
  uint64_t pauses = 0;
};

// Sample-period limits a sampling source adapts within, changed at run time (SourceSet::applyConfig).
struct SamplingLimits {
  double cpuBudgetPercent = 2.0;
  uint64_t minPeriod = 1;
  uint64_t maxPeriod = 1;
  // Configured kernel-side cost of one sample (ns): used unless the source calibrated its own.
  double sampleCostNs = 1000;
};

// A page move made by the kernel itself (NUMA-balancing promotion, demotion) to a tracked process:
// one restored mapping of a migrated page (page != 0, from remove_migration_pte or, for a huge
// page mapped by one PMD, remove_migration_pmd; pages = the base pages it maps; or a range of
// such pages, when a source merged its moves in a storm: fault-trace's mergeKernelMoves) or a finished batch
// (page == 0, pages = the batch's succeeded count). A source reports each move in one of the two views, never both.
struct KernelMove {
  pid_t tgid = 0;
  uint64_t page = 0;  // 0 for a batch without addresses
  uint64_t pages = 1;
  enum class Why : uint8_t { Promotion, Demotion, Syscall, Other } why = Why::Other;
};

// Pages the kernel itself moved for tracked processes, by reason: with kernel tiering left on
// ("cooperate"), its promotions and demotions are moves the daemon observes rather than makes.
struct KernelMoveTotals {
  uint64_t promoted = 0, demoted = 0, syscall = 0, other = 0;  // pages
  void add(const std::vector<KernelMove>& moves);
};

// Pages the kernel migrated on the whole machine since the source opened (the daemon's start), by
// reason: every process's, and the ones no tracked task is charged for (kswapd's demotions,
// compaction, moves in another task's context).
struct SystemMigrations {
  struct Pages {
    uint64_t succeeded = 0, failed = 0;
  };
  Pages promotion, demotion, syscall, other;  // NUMA balancing, reclaim demotion, move_pages/migrate_pages/mbind, the rest
  // Page-table entries of tracked processes' pages that the kernel mapped back to the page they
  // had: a migration that failed and was undone, a huge page split in place. Not moves, so in none
  // of the counts above nor in KernelMoveTotals. Known only where the source tells the owner of a
  // restored entry (FaultTrace::pageOwnerAttribution); nullopt elsewhere.
  std::optional<uint64_t> trackedUndone;
};

class Source {
 public:
  virtual ~Source() = default;
  [[nodiscard]] virtual std::string_view name() const = 0;
  [[nodiscard]] virtual const SourceStatus& status() const = 0;
  [[nodiscard]] virtual Result<void> addProcess(pid_t tgid) = 0;
  [[nodiscard]] virtual Result<void> removeProcess(pid_t tgid) = 0;
  [[nodiscard]] virtual Result<void> collect(EvidenceBatch& out) = 0;
  [[nodiscard]] virtual SourceCounters counters() const { return {}; }
  // Live tuning of a sampling source: new budget and period bounds; the current period is clamped
  // into them at once (PERF_EVENT_IOC_PERIOD). Sources that do not sample ignore it.
  [[nodiscard]] virtual Result<void> setSamplingLimits(const SamplingLimits& /*limits*/) { return {}; }
  // Kernel page moves seen since the last call (only sources that trace migrations have any), each
  // in one view (KernelMove).
  virtual void takeKernelMoves(std::vector<KernelMove>& /*out*/) {}
  // System-wide kernel migration totals as of the last collect() (sources that trace migrations
  // system-wide; nullopt from the others).
  [[nodiscard]] virtual std::optional<SystemMigrations> systemMigrations() const { return std::nullopt; }
  // The registered regions of a tracked process, [start, end) sorted and merged (empty: none).
  // Sources that scan address ranges every epoch (soft-dirty) scan these instead of every
  // anonymous mapping; the others ignore them.
  virtual void setRanges(pid_t /*tgid*/, const std::vector<std::pair<uint64_t, uint64_t>>& /*ranges*/) {}
};

// The processes a source (or the set of them) tracks, and whose evidence a collect keeps. The kernel
// hands over what it counted since the last drain keyed by bare tgid, so the drain after a process
// was untracked still holds its last counts, and a pid reused and tracked again before that drain
// would inherit them. A collect keeps no evidence of untracked pids, nor, that once, of a pid
// tracked again since it was untracked: its new process loses at most an epoch of evidence.
class TrackedProcesses {
 public:
  void track(pid_t tgid);
  void untrack(pid_t tgid);
  [[nodiscard]] bool tracked(pid_t tgid) const { return tracked_.contains(tgid); }
  // Whether the coming collect keeps evidence of `tgid`.
  [[nodiscard]] bool keeps(pid_t tgid) const { return tracked(tgid) && !reused_.contains(tgid); }
  // Drops the records and blocks keeps() refuses, from the given offsets on (what one collect
  // appended); returns how many were dropped.
  size_t filter(EvidenceBatch& batch, size_t recordsFrom = 0, size_t blocksFrom = 0) const;
  // Called after each collect: what untracked pids had counted has been drained.
  void collected();
  [[nodiscard]] const std::set<pid_t>& all() const { return tracked_; }
  [[nodiscard]] size_t size() const { return tracked_.size(); }
  void clear();

 private:
  std::set<pid_t> tracked_;
  std::set<pid_t> untracked_;  // since the last collect
  std::set<pid_t> reused_;     // tracked again since they were untracked, before a collect
};

// Aggregates evidence per (tgid, page, kind) before it leaves a source: the heat role wants one
// record per page and epoch, not one per sample.
class EvidenceAggregator {
 public:
  void add(pid_t tgid, uint64_t address, AccessKind kind, uint32_t weight, ServedBy servedBy = ServedBy::Unknown,
           uint16_t latencyCycles = 0);
  // Appends (sorted by tgid, page, kind) and clears. Returns the number appended.
  size_t flush(std::vector<AccessEvidence>& out);
  [[nodiscard]] size_t size() const { return entries_.size(); }

 private:
  struct Key {
    pid_t tgid;
    AccessKind kind;
    uint64_t page;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const noexcept {
      return std::hash<uint64_t>()(k.page ^ (uint64_t(uint32_t(k.tgid)) << 40) ^ (uint64_t(k.kind) << 60));
    }
  };
  std::unordered_map<Key, AccessEvidence, KeyHash> entries_;
};

}  // namespace tt::sources
