// Soft-dirty source: every epoch, the pages of each tracked process whose soft-dirty bit is set
// (written since the previous epoch) become Store evidence, then the bits are cleared. Scans the
// process's registered regions (setRanges, from the epoch loop) or, for a process that registered
// none, its writable anonymous mappings and [heap] from /proc/PID/maps, up to a page budget.
// The first epoch after addProcess only clears: every page starts soft-dirty.
//
// New and changed mappings: the kernel marks a mapping created or grown since the last clear
// (VM_SOFTDIRTY: a new mmap, merged with a neighbour or not, every brk) and pagemap then shows every
// resident page of it soft-dirty until the next clear, written or not. So pages in a mapping
// whose boundaries are not those it had at the last clear give no evidence that epoch, as in the
// first epoch; the epoch after, they do.
//
// Past the budget: clear_refs clears the whole process, so a page that is not read in an epoch
// loses that epoch's writes for good. The budget is therefore a window that moves on by its size
// every epoch, wrapping around the ranges, so every page is read once every ceil(total / budget)
// epochs; each page read then stands for total / budget epochs' writes (its record's weight, as a
// sample stands for its period). A window fixed at the start would never see the pages past it.
#pragma once

#include <map>
#include <memory>

#include "sources/Source.h"
#include "sys/Fs.h"
#include "sys/ProcMaps.h"
#include "sys/access/SoftDirty.h"

namespace tt::sources {

class SoftDirtySource final : public Source {
 public:
  // `supported`: the result of sys::probeSoftDirty() (injected so tests run on fakes).
  SoftDirtySource(std::unique_ptr<sys::SoftDirtyTracker> tracker, sys::Fs procfs, uint64_t maxPagesPerEpoch,
                  Result<bool> supported);

  std::string_view name() const override { return "soft-dirty"; }
  const SourceStatus& status() const override { return status_; }
  Result<void> addProcess(pid_t tgid) override;
  Result<void> removeProcess(pid_t tgid) override;
  Result<void> collect(EvidenceBatch& out) override;
  SourceCounters counters() const override { return counters_; }

  // Restricts the scan of `tgid` to these [start, end) ranges (its registered regions): no pagemap
  // reads outside them; empty = all writable anonymous mappings and [heap] (a client that
  // registered nothing).
  void setRanges(pid_t tgid, const std::vector<std::pair<uint64_t, uint64_t>>& ranges) override;

 private:
  struct Process {
    bool primed = false;
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    // [start, end) of each mapping as the last clear left it, sorted: only pages in a mapping with
    // the same boundaries now have bits that mean "written since" (see collect()).
    std::vector<std::pair<uint64_t, uint64_t>> clearedMappings;
    uint64_t windowStart = 0;  // the page (counted across the ranges) the next window starts at
    double weightCarry = 0;    // the fraction of total / window the rounded weights left over
  };
  // The ranges to read this epoch, given the process's mappings now (in address order).
  [[nodiscard]] static std::vector<std::pair<uint64_t, uint64_t>> scanRanges(const Process& p,
                                                                             const std::vector<sys::Vma>& maps);

  std::unique_ptr<sys::SoftDirtyTracker> tracker_;
  sys::Fs procfs_;
  uint64_t maxPages_;
  SourceStatus status_;
  SourceCounters counters_;
  std::map<pid_t, Process> processes_;
  // Forgets a process here and in the tracker; returns the next one.
  std::map<pid_t, Process>::iterator drop(std::map<pid_t, Process>::iterator it);
  std::vector<uint64_t> dirty_;
};

}  // namespace tt::sources
