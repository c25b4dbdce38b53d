#include "registry/AddressSpace.h"

namespace tt::registry {

Result<bool> ProcMapsInspector::rangeMapped(pid_t pid, uint64_t start, uint64_t end) {
  const auto now = std::chrono::steady_clock::now();
  KernelQuery kernelQuery = KernelQuery::kUnknown;
  {
    std::lock_guard lock(mutex_);
    auto it = cache_.find(pid);
    if (it != cache_.end() && now - it->second.readAt < kCacheFor && sys::rangeMapped(it->second.maps, start, end))
      return true;
    kernelQuery = kernelQuery_;
  }
  if (kernelQuery != KernelQuery::kMissing) {
    auto asked = sys::queryRangeMapped(procfs_, pid, start, end, kQueryVmas);
    if (asked) {
      if (kernelQuery == KernelQuery::kUnknown) {
        std::lock_guard lock(mutex_);
        kernelQuery_ = KernelQuery::kWorks;
      }
      kernelQuery = KernelQuery::kWorks;
      if (*asked != sys::RangeQuery::kUndecided) return *asked == sys::RangeQuery::kMapped;
    } else if (asked.error().code == ENOTTY) {
      std::lock_guard lock(mutex_);
      kernelQuery_ = kernelQuery = KernelQuery::kMissing;
    } else {
      return asked.error();
    }
  }
  if (kernelQuery == KernelQuery::kWorks) {
    // Only a range of more than kQueryVmas VMAs gets here: the whole file, once per kCacheFor.
    std::lock_guard lock(mutex_);
    auto it = cache_.find(pid);
    if (it != cache_.end() && now - it->second.readAt < kCacheFor) {
      const auto age = std::chrono::duration_cast<std::chrono::milliseconds>(now - it->second.readAt);
      return systemError(EFAULT, "range spans more than " + std::to_string(kQueryVmas) +
                                     " VMAs and is not mapped in the maps read " + std::to_string(age.count()) +
                                     " ms ago (read at most once every " + std::to_string(kCacheFor.count()) +
                                     " ms for such ranges)");
    }
  }
  auto maps = sys::readMaps(procfs_, pid);
  if (!maps) return maps.error();
  const bool mapped = sys::rangeMapped(*maps, start, end);
  std::lock_guard lock(mutex_);
  cache_[pid] = Cached{std::move(*maps), now};
  return mapped;
}

Result<bool> ProcMapsInspector::runsAs(pid_t pid, uid_t uid, gid_t gid) {
  auto owner = sys::processOwner(procfs_, pid);
  if (!owner) return owner.error();
  return owner->uid == uid && owner->gid == gid;
}

void ProcMapsInspector::forget(pid_t pid) {
  std::lock_guard lock(mutex_);
  cache_.erase(pid);
}

}  // namespace tt::registry
