#include "registry/AddressSpace.h"

namespace tt::registry {

Result<bool> ProcMapsInspector::rangeMapped(pid_t pid, uint64_t start, uint64_t end) {
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(mutex_);
    auto it = cache_.find(pid);
    if (it != cache_.end() && now - it->second.readAt < kCacheFor && sys::rangeMapped(it->second.maps, start, end))
      return true;
  }
  auto maps = sys::readMaps(procfs_, pid);
  if (!maps) return maps.error();
  const bool mapped = sys::rangeMapped(*maps, start, end);
  std::lock_guard lock(mutex_);
  cache_[pid] = Cached{std::move(*maps), now};
  return mapped;
}

void ProcMapsInspector::forget(pid_t pid) {
  std::lock_guard lock(mutex_);
  cache_.erase(pid);
}

}  // namespace tt::registry
