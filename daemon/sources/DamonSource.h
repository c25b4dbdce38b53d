// DAMON source: the kernel's access monitor (vaddr) through sysfs, one kdamond per tracked
// process. Each epoch the regions DAMON saw accessed (nr_accesses > 0) become Access evidence on
// each of their pages, weight nr_accesses. DAMON relies on page-table accessed bits: inside a
// TCG VM they are unreliable (docs/architecture.md, sources).
#pragma once

#include <map>
#include <memory>

#include "sources/Source.h"
#include "sys/access/DamonSysfs.h"

namespace tt::sources {

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
