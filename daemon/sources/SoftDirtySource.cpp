#include "sources/SoftDirtySource.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <iterator>
#include <utility>
#include <vector>

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

namespace {

using Range = std::pair<uint64_t, uint64_t>;

bool exited(const Error& e) { return e.code == ENOENT || e.code == ESRCH; }

// The boundaries of the mappings that are the same in both reads, sorted.
std::vector<Range> sameInBoth(const std::vector<sys::Vma>& before, const std::vector<sys::Vma>& after) {
  std::vector<Range> a, b, both;
  for (const auto& v : before) a.emplace_back(v.start, v.end);
  for (const auto& v : after) b.emplace_back(v.start, v.end);
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
  return both;
}

}  // namespace

std::vector<Range> SoftDirtySource::scanRanges(const Process& p, const std::vector<sys::Vma>& maps) {
  std::vector<Range> wanted = p.ranges;
  // Writable, not resident: maps has no Rss (smaps would, at the cost of a walk of every page table
  // of the process), and pagemap reads of pages not present cost little. A mapping that cannot be
  // written holds no writes, however large.
  if (wanted.empty())
    for (const auto& v : maps)
      if (v.writable && (v.path.empty() || v.path == "[heap]")) wanted.emplace_back(v.start, v.end);
  // Only the parts in mappings the last clear left as they are: split at mapping boundaries, so a
  // registered region over two mappings, one of them grown, still gives the other's evidence.
  std::vector<Range> ranges;
  for (const auto& [start, end] : wanted) {
    auto m = std::partition_point(maps.begin(), maps.end(), [&](const sys::Vma& v) { return v.end <= start; });
    for (; m != maps.end() && m->start < end; ++m)
      if (std::binary_search(p.clearedMappings.begin(), p.clearedMappings.end(), Range{m->start, m->end}))
        ranges.emplace_back(std::max(start, m->start), std::min(end, m->end));
  }
  return ranges;
}

// Which bits mean "written": clear_refs 4 clears each mapping's VM_SOFTDIRTY along with the pages'
// bits, and the kernel sets it again on a mapping it creates or grows (mmap, brk, mremap), after
// which pagemap shows bit 55 on every page of it. So the bits of a mapping with the boundaries it
// had at the last clear are its writes; any other mapping is skipped for the epoch.
// The boundaries at the clear are read twice, before the scan (that read also gives the ranges)
// and right after the clear, and only those the two reads agree on count. The read after alone is
// not enough: a mapping grown between the clear and that read is flagged again, yet would be
// recorded with its new boundaries and every page of it reported next epoch. The read before
// alone would lose, for one epoch, the evidence of a mapping changed between it and the clear
// (which the clear did clean); the two together lose that too, but only for a change in that
// short gap. Not detected (accepted): a mapping unmapped and mapped again with the same boundaries,
// or grown and shrunk back, between two clears; its resident pages are reported for one epoch.
Result<void> SoftDirtySource::collect(EvidenceBatch& out) {
  if (!status_.available) return {};
  std::string errors;
  for (auto it = processes_.begin(); it != processes_.end();) {
    const pid_t tgid = it->first;
    Process& p = it->second;
    auto maps = sys::readVmasFromMaps(procfs_, tgid);
    if (!maps && exited(maps.error())) {
      it = drop(it);
      continue;
    }
    if (!maps) {  // not cleared either: the bits keep the writes until an epoch can read them
      errors += maps.error().message() + "; ";
      ++it;
      continue;
    }
    const bool scanned = p.primed;
    uint32_t weight = 1;
    dirty_.clear();
    if (scanned) {
      const std::vector<Range> ranges = scanRanges(p, *maps);
      // Whole pages covering each range (ranges from regions and maps are page aligned anyway),
      // numbered across the ranges: the window is [windowStart, windowStart + budget), wrapped.
      uint64_t total = 0;
      for (const auto& [rangeStart, rangeEnd] : ranges)
        total += (rangeEnd - (rangeStart & ~(kBasePageSize - 1)) + kBasePageSize - 1) / kBasePageSize;
      const uint64_t window = std::min(total, maxPages_);
      const uint64_t first = total > window && total > 0 ? p.windowStart % total : 0;
      const std::pair<uint64_t, uint64_t> parts[2] = {{first, std::min(total, first + window)},
                                                      {0, first + window > total ? first + window - total : 0}};
      uint64_t offset = 0;  // pages of the ranges before this one
      for (const auto& [rangeStart, rangeEnd] : ranges) {
        const uint64_t start = rangeStart & ~(kBasePageSize - 1);
        const uint64_t pages = (rangeEnd - start + kBasePageSize - 1) / kBasePageSize;
        bool failed = false;
        for (const auto& [lo, hi] : parts) {
          const uint64_t from = std::max(lo, offset), to = std::min(hi, offset + pages);
          if (from >= to) continue;
          if (auto r = tracker_->dirtyPages(tgid, start + (from - offset) * kBasePageSize, to - from, dirty_); !r) {
            // Gone since its ranges were read: an exit, not an error (clear() below drops it).
            if (!exited(r.error())) errors += r.error().message() + "; ";
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
      if (window > 0 && total > window) {
        p.weightCarry += static_cast<double>(total) / static_cast<double>(window);
        weight = static_cast<uint32_t>(std::clamp<double>(std::floor(p.weightCarry), 1, 1 << 20));
        p.weightCarry -= weight;
      }
    }
    if (auto c = tracker_->clear(tgid); !c) {
      if (exited(c.error())) {
        it = drop(it);
        continue;
      }
      // Not cleared: the bits still hold these writes for the next epoch to read, and
      // clearedMappings still hold.
      errors += c.error().message() + "; ";
      ++it;
      continue;
    }
    p.primed = true;
    auto after = sys::readVmasFromMaps(procfs_, tgid);
    if (!after && exited(after.error())) {
      it = drop(it);
      continue;
    }
    if (!after) errors += after.error().message() + "; ";  // then nothing counts as unchanged
    p.clearedMappings = after ? sameInBoth(*maps, *after) : std::vector<Range>{};
    // Only now are this epoch's pages told apart: a mapping grown while it was scanned (a brk, an
    // mmap merged into it) was flagged as a whole before the scan read it, and its boundaries then
    // differ between the two reads.
    size_t kept = 0;
    for (uint64_t page : dirty_) {
      const auto m = std::upper_bound(p.clearedMappings.begin(), p.clearedMappings.end(), page,
                                      [](uint64_t v, const Range& r) { return v < r.first; });
      if (m == p.clearedMappings.begin() || page >= std::prev(m)->second) continue;
      AccessEvidence e;
      e.tgid = tgid;
      e.page = page;
      e.weight = weight;
      e.kind = AccessKind::Store;
      out.records.push_back(e);
      ++kept;
    }
    counters_.samples += kept;
    counters_.evidence += kept;
    ++it;
  }
  if (!errors.empty()) return logicError("soft-dirty: " + errors);
  return {};
}

}  // namespace tt::sources
