// Owner of bpf/fault_trace.bpf.c: user page faults (exceptions/page_fault_user) and kernel page
// migrations (migrate/*) of tracked tgids: first-touch faults counted per page in kernel (chunk
// blocks, drained per epoch), the other faults and the migrations through one BPF ring buffer;
// plus per-reason migration totals for every process (kernel demotion runs in kswapd, outside any
// tracked tgid).
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/Result.h"
#include "sys/bpf/ChunkCounts.h"
#include "tt_events.h"

struct bpf_link;
struct fault_trace;
struct ring_buffer;

namespace tt::sys::bpf {

struct MigrationTotals {
  // Indexed by tt_migrate_class.
  std::array<uint64_t, TT_MIG_NR_CLASSES> succeeded{};
  std::array<uint64_t, TT_MIG_NR_CLASSES> failed{};
  uint64_t dropped = 0;  // events lost to a full ring buffer
  uint64_t firstTouchChunksFull = 0;  // first touches and write-protect faults not counted: the chunk map was full
  uint64_t firstTouchSaturated = 0;   // ... not counted: the page's counter was at 255
  // Page table entries of tracked processes' pages mapped back to the page they had (a failed
  // migration undone, a huge page split in place), not reported as moves (pageOwnerAttribution()).
  uint64_t undone = 0;
};

class FaultTrace {
 public:
  struct Options {
    uint32_t ringBytes = 1U << 20;
    uint32_t pidMax = 0;  // the tgid bitmap covers tgids below it; 0 = kPidMaxLimit (TgidBitmap.h)
    bool reportFirstTouch = true;
    // Count write-protect faults (as stores). Off leaves them to soft-dirty, which write-protects
    // every page each epoch and reports the same writes (the daemon keeps it on: SourceSet).
    bool reportWriteProtect = true;
    uint32_t maxChunks = 16384;  // first-touch count blocks (2 MiB chunks) per epoch
  };
  // Opens, configures (rodata), loads and attaches. migrate/remove_migration_pte is attached only
  // where the running kernel's BTF has it; pageMigrationEvents() says whether it is. With it,
  // thp/remove_migration_pmd (a huge page mapped by one PMD) where the BTF has that;
  // hugePageMigrationEvents() says whether it is.
  [[nodiscard]] static Result<std::unique_ptr<FaultTrace>> start(const Options& options);
  ~FaultTrace();
  FaultTrace(const FaultTrace&) = delete;
  FaultTrace& operator=(const FaultTrace&) = delete;

  // The page-fault program runs on every user fault of every process while it is attached (the
  // kernel's call into it alone is ~2.5% of a first-touch fault here), so it is attached only
  // while at least one process is tracked and it is not paused: the first track() attaches it,
  // the last untrack() detaches it. The migrate/* programs stay attached (they run only when
  // pages migrate).
  [[nodiscard]] Result<void> track(pid_t tgid);
  [[nodiscard]] Result<void> untrack(pid_t tgid);
  // Detaches the page-fault program while paused (tracking is kept: the tgid filter still holds
  // every tracked process, and resuming attaches the program again if any is tracked).
  // track(), untrack(), setFaultProgramPaused() and faultProgramAttached() may be called from
  // different threads (the storm guard pauses from its own); the rest from one thread.
  [[nodiscard]] Result<void> setFaultProgramPaused(bool paused);
  [[nodiscard]] bool faultProgramAttached() const;
  [[nodiscard]] bool tracksAny() const;

  // Reads and empties the per-page fault counts: not-present faults (first touches, NUMA hinting
  // faults; kind 0) and write-protect faults (kind TT_KIND_STORE), one block per 2 MiB chunk and
  // kind since the last drain. Appends to `out`; returns the number of blocks appended.
  [[nodiscard]] Result<size_t> drainFaultCounts(std::vector<ChunkCounts>& out);

  // Consumes every queued event without blocking (ring_buffer__consume). Returns the count.
  using EventFn = std::function<void(const tt_event&)>;
  [[nodiscard]] Result<size_t> poll(const EventFn& fn);
  // Waits up to timeoutMs for events, then consumes them.
  [[nodiscard]] Result<size_t> pollWait(const EventFn& fn, int timeoutMs);

  [[nodiscard]] Result<MigrationTotals> migrationTotals() const;
  // Total run time (ns) and runs of the page-fault program, every process's faults included
  // (the run time needs bpf_enable_stats, else 0).
  [[nodiscard]] Result<std::pair<uint64_t, uint64_t>> faultProgramRunTime() const;
  [[nodiscard]] bool pageMigrationEvents() const { return pageMigrationEvents_; }
  [[nodiscard]] bool hugePageMigrationEvents() const { return hugePageMigrationEvents_; }
  // Whether per-page moves are charged to the process that owns the page (fentry/fexit on
  // remove_migration_pte, the function the tracepoints fire in: where the BTF has it), so that
  // kswapd's demotions and moves in other tasks are attributed too, and failed moves and in-place
  // huge-page splits are told apart and left out. Otherwise they are charged to the task the
  // tracepoint fires in. move_pages/migrate_pages moves stay charged to the task that made them
  // (another process's, the daemon's own engine's, are not the tracked process's to report).
  [[nodiscard]] bool pageOwnerAttribution() const { return pageOwnerAttribution_; }

 private:
  FaultTrace() = default;
  // What the running kernel's BTF has of what the object may use.
  struct KernelTypes {
    bool migrationPte = false;            // tracepoint migrate/remove_migration_pte (6.0+)
    bool migrationPmd = false;            // tracepoint thp/remove_migration_pmd (5.16+)
    bool removeMigrationPteFunc = false;  // the function, for fentry/fexit
  };
  [[nodiscard]] static KernelTypes kernelTypes();
  // start() with or without the fentry/fexit programs on remove_migration_pte; `loadFailed` says
  // whether the BPF object failed to load (not an error before or after it).
  [[nodiscard]] static Result<std::unique_ptr<FaultTrace>> open(const Options& options, const KernelTypes& types,
                                                                bool restoreProbes, bool& loadFailed);
  static int onEvent(void* ctx, void* data, size_t size);
  fault_trace* skel_ = nullptr;
  ring_buffer* ring_ = nullptr;
  const EventFn* current_ = nullptr;
  bool pageMigrationEvents_ = false;
  bool hugePageMigrationEvents_ = false;
  bool pageOwnerAttribution_ = false;
  std::array<bpf_link*, 2> restoreLinks_{};  // fentry, fexit remove_migration_pte (destroyed in that order)
  uint32_t pidMax_ = 0;
  ChunkCountMap firstTouches_{"fault_trace chunks"};
  [[nodiscard]] Result<void> updateFaultLink();  // with linkMutex_ held
  mutable std::mutex linkMutex_;  // guards faultLink_, paused_, tracked_
  bpf_link* faultLink_ = nullptr;  // the page-fault program's, while anything is tracked and not paused
  bool paused_ = false;
  std::set<pid_t> tracked_;
};

}  // namespace tt::sys::bpf
