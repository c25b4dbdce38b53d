#include "sources/FaultTraceSource.h"

#include <optional>

#include "core/Buffers.h"

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

SystemMigrations toSystemMigrations(const sys::bpf::MigrationTotals& totals) {
  SystemMigrations m;
  auto pages = [&](int cls) { return SystemMigrations::Pages{totals.succeeded[cls], totals.failed[cls]}; };
  m.promotion = pages(TT_MIG_PROMOTE);
  m.demotion = pages(TT_MIG_DEMOTE);
  m.syscall = pages(TT_MIG_SYSCALL);
  m.other = pages(TT_MIG_OTHER);
  return m;
}

uint64_t appendNotPresentFaults(const std::vector<sys::bpf::ChunkCounts>& blocks, FaultedPages& faulted,
                                std::vector<EvidenceBlock>& out) {
  static_assert(sys::bpf::kChunkPages == kBlockPages);
  uint64_t events = 0;
  for (const auto& block : blocks) {
    const auto tgid = static_cast<pid_t>(block.tgid);
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

void FaultTraceSource::open() {
  auto t = sys::bpf::FaultTrace::start(options_);
  if (!t) {
    status_ = {false, "eBPF exceptions/page_fault_user + migrate/*: " + t.error().message()};
    return;
  }
  trace_ = std::move(*t);
  status_ = {true, std::string("eBPF exceptions/page_fault_user") +
                       (options_.reportFirstTouch ? " (first touches counted per page in kernel" : " (no first touches") +
                       "; attached while a process is tracked)" +
                       " + migrate/mm_migrate_pages" +
                       (trace_->pageMigrationEvents() ? " + migrate/remove_migration_pte"
                                                      : " (no remove_migration_pte on this kernel: batch counts only)") +
                       ", ring " + std::to_string(options_.ringBytes / 1024) + " KiB"};
}

Result<void> FaultTraceSource::addProcess(pid_t tgid) {
  if (!trace_) return {};
  return trace_->track(tgid);
}

Result<void> FaultTraceSource::removeProcess(pid_t tgid) {
  seen_.erase(tgid);
  if (!trace_) return {};
  return trace_->untrack(tgid);
}

Result<void> FaultTraceSource::collect(EvidenceBatch& out) {
  if (!trace_) return {};
  // First touches (and, on x86, NUMA hinting faults: both not present) arrive as per-page counts.
  blocks_.clear();
  auto drained = trace_->drainFirstTouches(blocks_);
  // Blocks drained before an error are gone from the kernel: turn them into evidence anyway and
  // report the error after the rest of the epoch's work.
  std::optional<Error> drainError;
  if (!drained) drainError = drained.error();
  const size_t blocksBefore = out.blocks.size();
  const uint64_t events = appendNotPresentFaults(blocks_, seen_, out.blocks);
  releaseIfOversized(blocks_, 1024);  // a storm's blocks (up to maxChunks of 528 bytes) are not kept
  const bool pageEvents = trace_->pageMigrationEvents();
  auto n = trace_->poll([&](const tt_event& e) {
    const auto tgid = static_cast<pid_t>(e.tgid);
    switch (e.kind) {
      case TT_EV_FAULT_HINT: pending_.add(tgid, e.addr, AccessKind::Hint, 1); break;
      case TT_EV_FAULT_WRITE_PROTECT: pending_.add(tgid, e.addr, AccessKind::Store, 1); break;
      default:
        if (auto move = kernelMoveOf(e, pageEvents); move && moves_.size() < kMaxPendingMoves) moves_.push_back(*move);
        break;
    }
  });
  if (!n) return n.error();
  counters_.samples += events + *n;
  for (size_t b = blocksBefore; b < out.blocks.size(); ++b) counters_.evidence += out.blocks[b].pages();
  counters_.evidence += pending_.flush(out.records);
  if (auto totals = trace_->migrationTotals()) {
    counters_.lost = totals->dropped + totals->firstTouchChunksFull;
    systemMigrations_ = toSystemMigrations(*totals);
  }
  if (drainError) return *drainError;
  return {};
}

void FaultTraceSource::takeKernelMoves(std::vector<KernelMove>& out) {
  out.insert(out.end(), moves_.begin(), moves_.end());
  moves_.clear();
}

Result<sys::bpf::MigrationTotals> FaultTraceSource::migrationTotals() const {
  if (!trace_) return logicError("fault-trace source is not running");
  return trace_->migrationTotals();
}

}  // namespace tt::sources
