// eBPF fault and migration tracing as a source (bpf/fault_trace.bpf.c via sys::bpf::FaultTrace).
//
// Not-present faults come as per-page counts per epoch (counted in kernel: they arrive in storms
// when a process populates memory) and become evidence blocks, the rest are ring-buffer events
// and become records: a page can have Hint evidence from each (a protection hint fault on a
// present page is rare); consumers add weights of equal keys.
//
// Fault kinds: on x86 a NUMA hinting PTE (PROT_NONE) is not present to the MMU, so the kernel's
// tracepoint shows a hint fault exactly like a first touch. The source tells them apart by
// remembering which pages of a process already faulted (one bit per page, in 2 MiB chunks:
// 64 bytes per 2 MiB touched, 0.003% of tracked memory): a not-present fault on a page seen before
// is Hint (a NUMA hinting fault, or a re-fault after reclaim or zap), else Fault (first touch).
// Write faults on present pages (COW, soft-dirty, uffd-wp) are Store. Kernel migrations of tracked
// processes become KernelMoves; per-reason totals of all kernel migrations are kept too.
#pragma once

#include <bitset>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "sources/FaultStormGuard.h"
#include "sources/Source.h"
#include "sys/Fs.h"
#include "sys/bpf/FaultTrace.h"

namespace tt::sources {

// tgid -> 2 MiB chunk -> bit per 4 KiB page that faulted before.
using FaultedPages = std::unordered_map<pid_t, std::unordered_map<uint64_t, std::bitset<512>>>;

// Turns drained fault counts into evidence blocks appended to `out` (blocks, not records: a
// first-touch storm is every page of its chunks). Not-present faults (blocks of the default kind):
// the first fault ever seen of a page is its first touch (a Fault block, count 1), every other one
// a Hint (a Hint block: NUMA hinting faults, or re-faults after reclaim or zap); `faulted`
// remembers pages across epochs. Write-protect faults (blocks of kind TT_KIND_STORE: copy-on-write,
// soft-dirty's write protection) become Store blocks as they are. Appends a block only when it
// has a page. Returns the faults counted.
uint64_t appendFaultBlocks(const std::vector<sys::bpf::ChunkCounts>& blocks, FaultedPages& faulted,
                                std::vector<EvidenceBlock>& out);

// The kernel move a trace event reports, in one view only: the kernel reports a migration per page
// (remove_migration_pte and remove_migration_pmd, where its BTF has them: `pageEvents`) and per batch (mm_migrate_pages, the
// batch's succeeded pages), and the two describe the same pages. Per page where there are page
// events, per batch where there are not; nullopt for other events and for the other view.
[[nodiscard]] std::optional<KernelMove> kernelMoveOf(const tt_event& e, bool pageEvents);

// Drops the per-page moves that repeat, for the same process and reason, pages another move in
// `moves` already covers (batches are left alone). The kernel restores the mapping of a page more
// than once in one migration when it splits a huge page on the way: the split remaps every base
// page where it is (a remove_migration_pte event without a move), then each moves. Measured in
// the VM (6.12, a promoted huge page mapped by PTEs): two events per promoted page. A page really
// promoted twice between two collects is counted once; a split and its move that fall on both
// sides of a collect are counted twice. Where the fault trace charges the page's owner
// (FaultTrace::pageOwnerAttribution), the split's remaps are told apart in the kernel and never
// reported; this still drops a page really moved twice between two collects.
void dropRepeatedMoves(std::vector<KernelMove>& moves);

// dropRepeatedMoves, then per-page moves of one process and reason that touch or overlap merged
// into one range (KernelMove::pages then counts the range's pages).
void mergeKernelMoves(std::vector<KernelMove>& moves);

// Appends `move` to `moves` while they hold fewer than `cap`. At the cap, the first time (`merged`
// false; the caller clears it when it takes the moves) the moves are merged into ranges
// (mergeKernelMoves): reclaim demoting a buffer reports it page by page, not in address order,
// 256 MiB in one epoch in the VM. After that a per-page move that continues the last range
// extends it. Returns false when the move was dropped.
bool appendKernelMove(std::vector<KernelMove>& moves, const KernelMove& move, size_t cap, bool& merged);

class FaultTraceSource final : public Source {
 public:
  // The storm guard's settings (FaultStormGuard.h; sources.fault_trace.pause_over_budget).
  struct Guard {
    bool pauseOverBudget = true;
    double cpuBudgetPercent = 2.0;
    double faultCostNs = 150;  // charged per fault on the machine
  };
  // `procfs` is where the guard reads the machine's fault count (vmstat).
  FaultTraceSource(sys::bpf::FaultTrace::Options options, Guard guard, sys::Fs procfs)
      : options_(options), procfs_(std::move(procfs)), guard_(guard) {}
  ~FaultTraceSource() override;
  FaultTraceSource(const FaultTraceSource&) = delete;
  FaultTraceSource& operator=(const FaultTraceSource&) = delete;
  // Starts the tracer and, with pause_over_budget, the storm guard's watch thread: it reads the
  // machine's fault count every FaultStormGuard::kMinEpochSeconds (not every epoch: a storm is
  // then paused within ~0.1-0.2 s rather than within an epoch).
  void open();

  std::string_view name() const override { return "fault-trace"; }
  const SourceStatus& status() const override { return status_; }
  Result<void> addProcess(pid_t tgid) override;
  Result<void> removeProcess(pid_t tgid) override;
  Result<void> collect(EvidenceBatch& out) override;
  SourceCounters counters() const override { return counters_; }
  // Takes the budget and the configured per-fault cost (sampleCostNs); the periods do not apply.
  Result<void> setSamplingLimits(const SamplingLimits& limits) override;
  // Whether the storm guard has the page-fault program paused (detached), and how often the guard
  // decided to.
  [[nodiscard]] bool faultProgramPaused() const;
  [[nodiscard]] uint64_t pauses() const;
  void takeKernelMoves(std::vector<KernelMove>& out) override;
  [[nodiscard]] Result<sys::bpf::MigrationTotals> migrationTotals() const;
  // migrationTotals() as read by the last collect(), by reason.
  std::optional<SystemMigrations> systemMigrations() const override { return systemMigrations_; }
  // The running tracer (null when not open); benchmarks read its program's run time.
  [[nodiscard]] const sys::bpf::FaultTrace* trace() const { return trace_.get(); }

 private:
  void watch();
  // One check of the storm guard: reads the machine's fault count and returns whether the program
  // should be paused; `change` says why when that changed.
  bool guardTickLocked(std::string& change);
  // status_ and counters_ from the guard's state (the epoch's thread: status() hands out a reference).
  void describe();

  sys::bpf::FaultTrace::Options options_;
  sys::Fs procfs_;
  std::unique_ptr<sys::bpf::FaultTrace> trace_;
  SourceStatus status_;
  std::string baseDetail_;  // status_.detail without the guard's current state
  bool guardRuns_ = false;

  // The storm guard, shared with its watch thread.
  mutable std::mutex guardMutex_;
  Guard guard_;
  FaultStormGuard stormGuard_;
  bool appliedPaused_ = false;  // what the tracer has: the guard's wish once attach/detach worked
  bool countFailing_ = false;   // vmstat unreadable at the last check
  bool baselineStale_ = true;   // the next good read starts a window instead of closing one
  uint64_t lastFaults_ = 0;
  std::chrono::steady_clock::time_point lastRead_{};
  bool stopWatch_ = false;
  std::condition_variable watchCv_;
  std::thread watch_;
  SourceCounters counters_;
  EvidenceAggregator pending_;
  // Kernel page moves until the next takeKernelMoves(); capped, in case nobody takes them, so a
  // kernel promoting a tracked process's pages all day cannot grow it without bound
  // (appendKernelMove).
  static constexpr size_t kMaxPendingMoves = 1 << 16;
  std::vector<KernelMove> moves_;
  bool movesMerged_ = false;  // moves_ were merged into ranges at the cap since the last take
  std::vector<sys::bpf::ChunkCounts> blocks_;  // reused drain buffer
  FaultedPages seen_;
  // Whose drained counts and events are kept: a process untracked since the last collect (or its
  // pid reused) must not get its `seen_` pages back from its last counts.
  TrackedProcesses tracked_;
  std::optional<SystemMigrations> systemMigrations_;
};

// The BPF program's per-class totals as SystemMigrations.
// undoneCounted: the trace tells undone entries apart (FaultTrace::pageOwnerAttribution), so
// trackedUndone is known.
[[nodiscard]] SystemMigrations toSystemMigrations(const sys::bpf::MigrationTotals& totals, bool undoneCounted);

}  // namespace tt::sources
