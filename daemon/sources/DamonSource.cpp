#include "sources/DamonSource.h"

#include "core/Log.h"

namespace tt::sources {

DamonSource::DamonSource(sys::DamonSysfs damon, sys::DamonAttrs attrs, uint64_t maxPagesPerEpoch)
    : damon_(std::move(damon)), attrs_(attrs), maxPages_(maxPagesPerEpoch) {}

DamonSource::~DamonSource() {
  for (const auto& [tgid, slot] : slots_) {
    if (auto s = damon_.stop(slot); !s) {
      TT_LOG(Warn) << "DAMON stop for pid " << tgid << ": " << s.error().message();
    }
  }
}

void DamonSource::open() {
  if (!damon_.available()) {
    status_ = {false, "no DAMON sysfs (/sys/kernel/mm/damon/admin): kernel without CONFIG_DAMON_SYSFS"};
    return;
  }
  if (auto p = damon_.prepare(); !p) {
    status_ = {false, "DAMON sysfs: " + p.error().message()};
    return;
  }
  status_ = {true, "DAMON vaddr via sysfs, " + std::to_string(damon_.slots()) + " kdamonds, sample " +
                       std::to_string(attrs_.sampleUs) + " us, aggregate " + std::to_string(attrs_.aggrUs) + " us"};
}

Result<void> DamonSource::addProcess(pid_t tgid) {
  if (!status_.available || slots_.contains(tgid)) return {};
  for (uint32_t slot = 0; slot < damon_.slots(); ++slot) {
    bool used = false;
    for (const auto& [t, s] : slots_) used = used || s == slot;
    if (used) continue;
    if (auto r = damon_.start(slot, tgid, attrs_); !r) return r.error();
    slots_[tgid] = slot;
    return {};
  }
  return logicError("DAMON: all " + std::to_string(damon_.slots()) + " kdamond slots in use; pid " +
                    std::to_string(tgid) + " not monitored (raise sources.damon.max_processes)");
}

Result<void> DamonSource::removeProcess(pid_t tgid) {
  auto it = slots_.find(tgid);
  if (it == slots_.end()) return {};
  auto r = damon_.stop(it->second);
  slots_.erase(it);
  return r;
}

Result<void> DamonSource::collect(EvidenceBatch& out) {
  std::string errors;
  for (const auto& [tgid, slot] : slots_) {
    auto regions = damon_.regions(slot);
    if (!regions) {
      errors += regions.error().message() + "; ";
      continue;
    }
    uint64_t budget = maxPages_;
    for (const auto& r : *regions) {
      ++counters_.samples;
      if (r.nrAccesses == 0) continue;
      for (uint64_t page = r.start & ~(kBasePageSize - 1); page < r.end && budget > 0; page += kBasePageSize, --budget) {
        AccessEvidence e;
        e.tgid = tgid;
        e.page = page;
        e.kind = AccessKind::Access;
        e.weight = r.nrAccesses;
        out.records.push_back(e);
        ++counters_.evidence;
      }
    }
  }
  if (!errors.empty()) return logicError("DAMON: " + errors);
  return {};
}

}  // namespace tt::sources
