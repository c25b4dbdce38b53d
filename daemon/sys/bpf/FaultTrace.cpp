#include "sys/bpf/FaultTrace.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/Log.h"
#include "fault_trace.skel.h"
#include "sys/bpf/LibbpfLog.h"
#include "sys/bpf/RunStats.h"
#include "sys/bpf/TgidBitmap.h"
#include "sys/perf/PerfEvent.h"

namespace tt::sys::bpf {

FaultTrace::KernelTypes FaultTrace::kernelTypes() {
  // One parse of the kernel's BTF (a few MB) for every question start() asks of it.
  KernelTypes t;
  btf* vmlinux = btf__load_vmlinux_btf();
  if (vmlinux == nullptr) return t;
  auto has = [vmlinux](const char* name, uint32_t kind) { return btf__find_by_name_kind(vmlinux, name, kind) >= 0; };
  t.migrationPte = has("trace_event_raw_migration_pte", BTF_KIND_STRUCT);
  t.migrationPmd = has("trace_event_raw_migration_pmd", BTF_KIND_STRUCT);
  t.removeMigrationPteFunc = has("remove_migration_pte", BTF_KIND_FUNC);
  btf__free(vmlinux);
  return t;
}

Result<std::unique_ptr<FaultTrace>> FaultTrace::start(const Options& options) {
  // The function those tracepoints fire in, for whose page it restores and whether it undoes a
  // move: fentry/fexit where the BTF names it. A kernel may still refuse tracing programs (this
  // build host's does, EPERM at load), and a program that fails to load fails the whole object:
  // then everything is loaded again without them.
  const KernelTypes types = kernelTypes();
  const bool restoreProbes = types.migrationPte && types.removeMigrationPteFunc;
  bool loadFailed = false;
  Result<std::unique_ptr<FaultTrace>> trace = logicError("not opened");
  {
    // libbpf's account of a refused fentry load (five warnings, one suggesting `ulimit -l`) is
    // the fallback's detail, not a fault: held, and logged at debug when the fallback comes.
    LibbpfLogHold hold;
    trace = open(options, types, restoreProbes, loadFailed);
    if (trace || !restoreProbes || !loadFailed) return trace;  // the hold logs what it took as it came
    hold.emitAt(log::Level::Debug);
  }
  TT_LOG(Warn) << "fault_trace: without fentry/fexit remove_migration_pte (" << trace.error().message()
               << "; libbpf's messages at debug level): kernel moves are charged to the task they run in";
  return open(options, types, false, loadFailed);
}

Result<std::unique_ptr<FaultTrace>> FaultTrace::open(const Options& options, const KernelTypes& types, bool restoreProbes,
                                                     bool& loadFailed) {
  routeLibbpfLogs();
  std::unique_ptr<FaultTrace> self(new FaultTrace());
  self->skel_ = fault_trace__open();
  if (self->skel_ == nullptr) return errnoError("open BPF object fault_trace");
  fault_trace* skel = self->skel_;
  skel->rodata->report_first_touch = options.reportFirstTouch;
  skel->rodata->report_write_protect = options.reportWriteProtect;
  uint32_t ring = 4096;
  while (ring < options.ringBytes) ring <<= 1;
  const uint32_t pidMax = options.pidMax == 0 ? kPidMaxLimit : options.pidMax;
  self->pidMax_ = pidMax;
  if (bpf_map__set_max_entries(skel->maps.events, ring) != 0 ||
      bpf_map__set_max_entries(skel->maps.tracked_bits, tgidBitmapWords(pidMax)) != 0 ||
      bpf_map__set_max_entries(skel->maps.chunks0, options.maxChunks) != 0 ||
      bpf_map__set_max_entries(skel->maps.chunks1, options.maxChunks) != 0)
    return errnoError("size fault_trace maps");
  // remove_migration_pte exists since 6.0; without it the CO-RE relocation of its ctx would fail
  // the whole load, so the program is left out where the kernel lacks the type.
  self->pageMigrationEvents_ = types.migrationPte;
  if (!self->pageMigrationEvents_) bpf_program__set_autoload(skel->progs.tt_remove_migration_pte, false);
  // Its PMD twin (5.16+, with transparent huge pages): with the PTE events only, a huge page the
  // kernel moved whole would be missing from the per-page view.
  self->hugePageMigrationEvents_ = self->pageMigrationEvents_ && types.migrationPmd;
  if (!self->hugePageMigrationEvents_) bpf_program__set_autoload(skel->progs.tt_remove_migration_pmd, false);
  // Attached after the rest, below: a kernel that loads them may still refuse to attach them.
  for (bpf_program* p : {skel->progs.tt_restore_begin, skel->progs.tt_restore_end}) {
    bpf_program__set_autoload(p, restoreProbes);
    bpf_program__set_autoattach(p, false);
  }
  bpf_program__set_autoattach(skel->progs.tt_page_fault_user, false);  // attached by track()
  if (int err = fault_trace__load(skel); err != 0) {
    loadFailed = true;
    return systemError(-err, "load BPF fault_trace");
  }
  if (int err = fault_trace__attach(skel); err != 0) {
    // libbpf finds a tracepoint's id through tracefs: without it mounted every attach fails with
    // ENOENT, which would read as a kernel without the tracepoints.
    std::error_code ec;
    if (err == -ENOENT && !std::filesystem::exists("/sys/kernel/tracing/events", ec) &&
        !std::filesystem::exists("/sys/kernel/debug/tracing/events", ec))
      return systemError(ENOENT, "attach BPF fault_trace tracepoints: tracefs is not mounted (mount -t tracefs tracefs "
                                 "/sys/kernel/tracing; systemd mounts it as sys-kernel-tracing.mount)");
    return systemError(-err, "attach BPF fault_trace tracepoints" + perf::paranoidHint(Fs("/proc"), -err));
  }
  if (restoreProbes) {
    // Without them the tracepoints charge the task they fire in, as on kernels without the BTF.
    // fexit first: an entry fentry writes is always deleted again, whichever attach fails.
    bpf_link* end = bpf_program__attach(skel->progs.tt_restore_end);
    bpf_link* begin = end != nullptr ? bpf_program__attach(skel->progs.tt_restore_begin) : nullptr;
    if (begin != nullptr && end != nullptr) {
      self->restoreLinks_ = {begin, end};
      self->pageOwnerAttribution_ = true;
    } else {
      const int err = errno;
      if (end != nullptr) bpf_link__destroy(end);
      TT_LOG(Warn) << "fault_trace: fentry/fexit remove_migration_pte not attached (" << std::strerror(err)
                   << "): kernel moves are charged to the task they run in";
    }
  }
  self->ring_ = ring_buffer__new(bpf_map__fd(skel->maps.events), &FaultTrace::onEvent, self.get(), nullptr);
  if (self->ring_ == nullptr) return errnoError("ring_buffer__new fault_trace");
  return self;
}

FaultTrace::~FaultTrace() {
  if (faultLink_ != nullptr) bpf_link__destroy(faultLink_);
  // The tracepoints first (nothing reads `restoring` after), then fentry before fexit (a call
  // that passed fentry still deletes its entry on the way out).
  if (skel_ != nullptr) fault_trace__detach(skel_);
  for (bpf_link* l : restoreLinks_)
    if (l != nullptr) bpf_link__destroy(l);
  if (ring_ != nullptr) ring_buffer__free(ring_);
  if (skel_ != nullptr) fault_trace__destroy(skel_);
}

int FaultTrace::onEvent(void* ctx, void* data, size_t size) {
  auto* self = static_cast<FaultTrace*>(ctx);
  if (size < sizeof(tt_event) || self->current_ == nullptr) return 0;
  tt_event e;
  std::memcpy(&e, data, sizeof e);
  (*self->current_)(e);
  return 0;
}

Result<void> FaultTrace::track(pid_t tgid) {
  std::lock_guard lock(linkMutex_);
  if (auto set = setTgidBit(bpf_map__fd(skel_->maps.tracked_bits), pidMax_, tgid, true, "fault_trace"); !set)
    return set.error();
  const bool added = tracked_.insert(tgid).second;
  if (auto attached = updateFaultLink(); !attached) {
    if (added) {  // a process tracked already stays tracked
      tracked_.erase(tgid);
      (void)setTgidBit(bpf_map__fd(skel_->maps.tracked_bits), pidMax_, tgid, false, "fault_trace");
    }
    return attached.error();
  }
  return {};
}

Result<void> FaultTrace::untrack(pid_t tgid) {
  std::lock_guard lock(linkMutex_);
  auto cleared = setTgidBit(bpf_map__fd(skel_->maps.tracked_bits), pidMax_, tgid, false, "fault_trace");
  tracked_.erase(tgid);
  (void)updateFaultLink();  // detaching cannot fail
  return cleared;
}

Result<void> FaultTrace::setFaultProgramPaused(bool paused) {
  std::lock_guard lock(linkMutex_);
  paused_ = paused;
  return updateFaultLink();
}

bool FaultTrace::tracksAny() const {
  std::lock_guard lock(linkMutex_);
  return !tracked_.empty();
}

bool FaultTrace::faultProgramAttached() const {
  std::lock_guard lock(linkMutex_);
  return faultLink_ != nullptr;
}

Result<void> FaultTrace::updateFaultLink() {
  const bool wanted = !tracked_.empty() && !paused_;
  if (wanted && faultLink_ == nullptr) {
    faultLink_ = bpf_program__attach(skel_->progs.tt_page_fault_user);
    if (faultLink_ == nullptr) return systemError(errno, "attach fault_trace to page_fault_user");
  } else if (!wanted && faultLink_ != nullptr) {
    bpf_link__destroy(faultLink_);
    faultLink_ = nullptr;
  }
  return {};
}

Result<size_t> FaultTrace::drainFaultCounts(std::vector<ChunkCounts>& out) {
  return firstTouches_.drain(chunkMapFdsOf(*skel_), out);
}

Result<size_t> FaultTrace::poll(const EventFn& fn) {
  current_ = &fn;
  const int n = ring_buffer__consume(ring_);
  current_ = nullptr;
  if (n < 0) return systemError(-n, "consume fault_trace ring buffer");
  return static_cast<size_t>(n);
}

Result<size_t> FaultTrace::pollWait(const EventFn& fn, int timeoutMs) {
  current_ = &fn;
  const int n = ring_buffer__poll(ring_, timeoutMs);
  current_ = nullptr;
  if (n < 0 && n != -EINTR) return systemError(-n, "poll fault_trace ring buffer");
  return static_cast<size_t>(n < 0 ? 0 : n);
}

Result<std::pair<uint64_t, uint64_t>> FaultTrace::faultProgramRunTime() const {
  return programRunTime(bpf_program__fd(skel_->progs.tt_page_fault_user), "fault_trace page-fault program");
}

Result<MigrationTotals> FaultTrace::migrationTotals() const {
  const int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) return systemError(-ncpu, "libbpf_num_possible_cpus");
  std::vector<uint64_t> perCpu(static_cast<size_t>(ncpu));
  MigrationTotals totals;
  for (uint32_t i = 0; i < TT_FAULT_NR_STATS; ++i) {
    if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.migrations), &i, perCpu.data()) != 0)
      return errnoError("read fault_trace migration totals");
    uint64_t sum = 0;
    for (uint64_t v : perCpu) sum += v;
    if (i == TT_FAULT_STAT_DROPPED)
      totals.dropped = sum;
    else if (i == TT_FAULT_STAT_CHUNKS_FULL)
      totals.firstTouchChunksFull = sum;
    else if (i == TT_FAULT_STAT_SATURATED)
      totals.firstTouchSaturated = sum + firstTouches_.saturated();
    else if (i == TT_FAULT_STAT_UNDONE)
      totals.undone = sum;
    else if (i % 2 == 0)
      totals.succeeded[i / 2] = sum;
    else
      totals.failed[i / 2] = sum;
  }
  return totals;
}

}  // namespace tt::sys::bpf
