#include "sources/SoftDirtySource.h"

#include <algorithm>
#include <cerrno>
#include <cmath>

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
  if (!status_.available || processes_.contains(tgid)) return {};
  if (auto r = tracker_->track(tgid); !r) return r.error();
  processes_.try_emplace(tgid);
  return {};
}

Result<void> SoftDirtySource::removeProcess(pid_t tgid) {
  if (auto it = processes_.find(tgid); it != processes_.end()) drop(it);
  return {};
}

std::map<pid_t, SoftDirtySource::Process>::iterator SoftDirtySource::drop(std::map<pid_t, Process>::iterator it) {
  tracker_->untrack(it->first);
  return processes_.erase(it);
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
        it = drop(it);
        continue;
      }
      if (!ranges) {
        errors += ranges.error().message() + "; ";
        ++it;
        continue;
      }
      // Whole pages covering each range (ranges from regions and smaps are page aligned anyway),
      // numbered across the ranges: the window is [windowStart, windowStart + budget), wrapped.
      uint64_t total = 0;
      for (const auto& [rangeStart, rangeEnd] : *ranges)
        total += (rangeEnd - (rangeStart & ~(kBasePageSize - 1)) + kBasePageSize - 1) / kBasePageSize;
      const uint64_t window = std::min(total, maxPages_);
      const uint64_t first = total > window && total > 0 ? p.windowStart % total : 0;
      const std::pair<uint64_t, uint64_t> parts[2] = {{first, std::min(total, first + window)},
                                                      {0, first + window > total ? first + window - total : 0}};
      dirty_.clear();
      uint64_t offset = 0;  // pages of the ranges before this one
      for (const auto& [rangeStart, rangeEnd] : *ranges) {
        const uint64_t start = rangeStart & ~(kBasePageSize - 1);
        const uint64_t pages = (rangeEnd - start + kBasePageSize - 1) / kBasePageSize;
        bool failed = false;
        for (const auto& [lo, hi] : parts) {
          const uint64_t from = std::max(lo, offset), to = std::min(hi, offset + pages);
          if (from >= to) continue;
          if (auto r = tracker_->dirtyPages(tgid, start + (from - offset) * kBasePageSize, to - from, dirty_); !r) {
            // Gone since its ranges were read: an exit, not an error (clear() below drops it).
            if (r.error().code != ENOENT && r.error().code != ESRCH) errors += r.error().message() + "; ";
            failed = true;
            break;
          }
        }
        if (failed) break;
        offset += pages;
      }
      p.windowStart = total > 0 ? (first + window) % total : 0;
      // Each page read stands for the epochs until the window comes back to it, total / window on
      // average: whole weights, the fraction carried to the next epoch (10 pages, window 4: 2, 3).
      uint32_t weight = 1;
      if (window > 0 && total > window) {
        p.weightCarry += static_cast<double>(total) / static_cast<double>(window);
        weight = static_cast<uint32_t>(std::clamp<double>(std::floor(p.weightCarry), 1, 1 << 20));
        p.weightCarry -= weight;
      }
      for (uint64_t page : dirty_) {
        AccessEvidence e;
        e.tgid = tgid;
        e.page = page;
        e.weight = weight;
        e.kind = AccessKind::Store;
        out.records.push_back(e);
      }
      counters_.samples += dirty_.size();
      counters_.evidence += dirty_.size();
    }
    if (auto c = tracker_->clear(tgid); !c) {
      if (c.error().code == ENOENT || c.error().code == ESRCH) {
        it = drop(it);
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
