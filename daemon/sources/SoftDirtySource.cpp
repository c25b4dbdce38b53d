#include "sources/SoftDirtySource.h"

#include <cerrno>

#include "core/Log.h"
#include "sys/ProcMaps.h"

namespace tt::sources {

SoftDirtySource::SoftDirtySource(std::unique_ptr<sys::SoftDirtyTracker> tracker, sys::Fs procfs,
                                 uint64_t maxPagesPerEpoch, Result<bool> supported)
    : tracker_(std::move(tracker)), procfs_(std::move(procfs)), maxPages_(maxPagesPerEpoch) {
  if (!supported)
    status_ = {false, "soft-dirty probe failed: " + supported.error().message()};
  else if (!*supported)
    status_ = {false, "kernel without CONFIG_MEM_SOFT_DIRTY (pagemap bit 55 never sets after clear_refs 4)"};
  else
    status_ = {true, "/proc/PID/pagemap soft-dirty bits, cleared each epoch (clear_refs 4), up to " +
                         std::to_string(maxPages_) + " pages per process per epoch"};
}

Result<void> SoftDirtySource::addProcess(pid_t tgid) {
  if (!status_.available) return {};
  processes_.try_emplace(tgid);
  return {};
}

Result<void> SoftDirtySource::removeProcess(pid_t tgid) {
  processes_.erase(tgid);
  return {};
}

void SoftDirtySource::setRanges(pid_t tgid, const std::vector<std::pair<uint64_t, uint64_t>>& ranges) {
  auto it = processes_.find(tgid);
  if (it != processes_.end()) it->second.ranges = ranges;
}

Result<std::vector<std::pair<uint64_t, uint64_t>>> SoftDirtySource::scanRanges(pid_t tgid, const Process& p) const {
  if (!p.ranges.empty()) return p.ranges;
  auto vmas = sys::readSmaps(procfs_, tgid);
  if (!vmas) return vmas.error();
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& v : *vmas)
    if ((v.path.empty() || v.path == "[heap]") && v.rssBytes > 0) ranges.emplace_back(v.start, v.end);
  return ranges;
}

Result<void> SoftDirtySource::collect(EvidenceBatch& out) {
  if (!status_.available) return {};
  std::string errors;
  for (auto it = processes_.begin(); it != processes_.end();) {
    const pid_t tgid = it->first;
    Process& p = it->second;
    if (p.primed) {
      auto ranges = scanRanges(tgid, p);
      if (!ranges && ranges.error().code == ENOENT) {  // the process exited
        it = processes_.erase(it);
        continue;
      }
      if (!ranges) {
        errors += ranges.error().message() + "; ";
        ++it;
        continue;
      }
      uint64_t budget = maxPages_;
      dirty_.clear();
      for (const auto& [rangeStart, rangeEnd] : *ranges) {
        if (budget == 0) break;
        // Whole pages covering the range (ranges from regions and smaps are page aligned anyway).
        const uint64_t start = rangeStart & ~(kBasePageSize - 1);
        const uint64_t pages = std::min(budget, (rangeEnd - start + kBasePageSize - 1) / kBasePageSize);
        if (pages == 0) continue;
        if (auto r = tracker_->dirtyPages(tgid, start, pages, dirty_); !r) {
          errors += r.error().message() + "; ";
          break;
        }
        budget -= pages;
      }
      for (uint64_t page : dirty_) {
        AccessEvidence e;
        e.tgid = tgid;
        e.page = page;
        e.kind = AccessKind::Store;
        out.records.push_back(e);
      }
      counters_.samples += dirty_.size();
      counters_.evidence += dirty_.size();
    }
    if (auto c = tracker_->clear(tgid); !c) {
      if (c.error().code == ENOENT || c.error().code == ESRCH) {
        it = processes_.erase(it);
        continue;
      }
      errors += c.error().message() + "; ";
    } else {
      p.primed = true;
    }
    ++it;
  }
  if (!errors.empty()) return logicError("soft-dirty: " + errors);
  return {};
}

}  // namespace tt::sources
