#include "registry/AddressSpace.h"

#include <algorithm>
#include <string>

namespace tt::registry {

Result<bool> ProcMapsInspector::rangeMapped(pid_t pid, uid_t uid, uint64_t start, uint64_t end) {
  const auto now = std::chrono::steady_clock::now();
  KernelQuery kernelQuery = KernelQuery::kUnknown;
  {
    std::lock_guard lock(mutex_);
    kernelQuery = kernelQuery_;
  }
  if (kernelQuery == KernelQuery::kMissing) return readMapsFile(pid, start, end, now);
  const uint64_t allowed = takeBudget(uid, now);
  if (allowed == 0)
    return systemError(EDQUOT, "uid " + std::to_string(uid) + " has had " + std::to_string(walkVmasPerSecond_) +
                                   " VMAs looked up in the last second, the most per second: retry later");
  auto asked = sys::queryRangeMapped(procfs_, pid, start, end, allowed);
  if (!asked) {
    refund(uid, allowed);
    if (asked.error().code != ENOTTY) return asked.error();
    {
      std::lock_guard lock(mutex_);
      kernelQuery_ = KernelQuery::kMissing;
    }
    return readMapsFile(pid, start, end, now);
  }
  refund(uid, allowed - asked->vmas);
  if (kernelQuery == KernelQuery::kUnknown) {
    std::lock_guard lock(mutex_);
    kernelQuery_ = KernelQuery::kWorks;
  }
  if (asked->answer == sys::RangeQuery::kUndecided)
    return systemError(EDQUOT, "the range spans more VMAs than uid " + std::to_string(uid) + " may have looked up now (" +
                                   std::to_string(walkVmasPerSecond_) + " a second): retry later");
  return asked->answer == sys::RangeQuery::kMapped;
}

uint64_t ProcMapsInspector::takeBudget(uid_t uid, std::chrono::steady_clock::time_point now) {
  std::lock_guard lock(mutex_);
  const double cap = static_cast<double>(walkVmasPerSecond_);
  auto [it, added] = budgets_.try_emplace(uid, Budget{cap, now});
  Budget& b = it->second;
  if (!added && now > b.at) {  // callers on other threads may come with an earlier `now`
    b.vmas = std::min(cap, b.vmas + cap * std::chrono::duration<double>(now - b.at).count());
    b.at = now;
  }
  // Full buckets are forgotten on the way (a uid's entry is re-made full): the map stays as small
  // as the uids that used their budget in the last second.
  if (budgets_.size() > 64)
    std::erase_if(budgets_, [&](const auto& e) {
      return e.first != uid && e.second.vmas + cap * std::chrono::duration<double>(now - e.second.at).count() >= cap;
    });
  const auto taken = static_cast<uint64_t>(b.vmas);
  b.vmas -= static_cast<double>(taken);
  return taken;
}

void ProcMapsInspector::refund(uid_t uid, uint64_t vmas) {
  std::lock_guard lock(mutex_);
  if (auto it = budgets_.find(uid); it != budgets_.end())
    it->second.vmas = std::min(static_cast<double>(walkVmasPerSecond_), it->second.vmas + static_cast<double>(vmas));
}

Result<bool> ProcMapsInspector::readMapsFile(pid_t pid, uint64_t start, uint64_t end,
                                             std::chrono::steady_clock::time_point now) {
  {
    std::lock_guard lock(mutex_);
    auto it = cache_.find(pid);
    if (it != cache_.end() && now - it->second.readAt < kCacheFor && sys::rangeMapped(it->second.maps, start, end))
      return true;
  }
  auto maps = sys::readMaps(procfs_, pid);
  if (!maps) return maps.error().code == ENOENT ? systemError(ESRCH, maps.error().context) : maps.error();
  const bool mapped = sys::rangeMapped(*maps, start, end);
  std::lock_guard lock(mutex_);
  cache_[pid] = Cached{std::move(*maps), now};
  return mapped;
}

Result<bool> ProcMapsInspector::runsAs(pid_t pid, uid_t uid, gid_t gid, bool afterExec) {
  auto owner = sys::processOwner(procfs_, pid, afterExec);
  if (!owner) return owner.error();
  return *owner == sys::ProcessOwner{uid, gid, true};
}

void ProcMapsInspector::forget(pid_t pid) {
  std::lock_guard lock(mutex_);
  cache_.erase(pid);
}

}  // namespace tt::registry
