// DAMON source: the kernel's access monitor (vaddr) through sysfs, one kdamond per tracked
// process. Each epoch the regions DAMON saw accessed (nr_accesses > 0) become Access evidence on
// each of their pages, weight nr_accesses (up to 255), as evidence blocks: a region is usually
// many pages of equal weight, which a block per 2 MiB carries in 528 bytes where records take 24
// bytes a page. DAMON relies on page-table accessed bits: inside a TCG VM they are unreliable
// (docs/architecture.md, sources).
#pragma once

#include <map>
#include <memory>

#include "sources/Source.h"
#include "sys/access/DamonSysfs.h"

namespace tt::sources {

// Appends `regions` (sorted by start, not overlapping) of `tgid` as blocks, at most `maxPages`
// pages with evidence; returns the pages appended.
uint64_t appendRegionBlocks(pid_t tgid, const std::vector<sys::DamonRegion>& regions, uint64_t maxPages,
                            std::vector<EvidenceBlock>& out);

class DamonSource final : public Source {
 public:
  DamonSource(sys::DamonSysfs damon, sys::DamonAttrs attrs, uint64_t maxPagesPerEpoch);
  void open();

  std::string_view name() const override { return "damon"; }
  const SourceStatus& status() const override { return status_; }
  Result<void> addProcess(pid_t tgid) override;
  Result<void> removeProcess(pid_t tgid) override;
  Result<void> collect(EvidenceBatch& out) override;
  SourceCounters counters() const override { return counters_; }
  ~DamonSource() override;

 private:
  sys::DamonSysfs damon_;
  sys::DamonAttrs attrs_;
  uint64_t maxPages_;
  SourceStatus status_;
  SourceCounters counters_;
  std::map<pid_t, uint32_t> slots_;  // tgid -> kdamond slot
};

}  // namespace tt::sources
