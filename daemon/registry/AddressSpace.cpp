#include "registry/AddressSpace.h"

#include <sys/stat.h>

#include <algorithm>
#include <string>

namespace tt::registry {

Result<bool> ProcMapsInspector::rangeMapped(pid_t pid, uid_t uid, uint64_t start, uint64_t end, bool mayOpen) {
  const auto now = std::chrono::steady_clock::now();
  KernelQuery kernelQuery = KernelQuery::kUnknown;
  {
    std::lock_guard lock(mutex_);
    kernelQuery = kernelQuery_;
  }
  // Without the ioctl a probe may read the whole maps file (~30 ms at 65k VMAs, unbudgeted): not
  // on the loop either.
  auto wouldRead = [pid] {
    return systemError(EWOULDBLOCK, "pid " + std::to_string(pid) + ": this kernel has no PROCMAP_QUERY (a read may wait)");
  };
  if (!mayOpen && kernelQuery == KernelQuery::kMissing) return wouldRead();
  auto handle = pinned(pid, mayOpen);
  if (!handle) return handle.error();
  if (kernelQuery == KernelQuery::kMissing) return readMapsFile(pid, **handle, start, end, now);
  const uint64_t allowed = takeBudget(uid, now);
  if (allowed == 0)
    return systemError(EDQUOT, "uid " + std::to_string(uid) + " has had " + std::to_string(walkVmasPerSecond_) +
                                   " VMAs looked up in the last second, the most per second: retry later");
  auto asked = (*handle)->queryRange(start, end, allowed);
  if (!asked) {
    refund(uid, allowed);
    if (asked.error().code == ESRCH) return replaced(pid);
    if (asked.error().code != ENOTTY) return asked.error();
    {
      std::lock_guard lock(mutex_);
      kernelQuery_ = KernelQuery::kMissing;
    }
    if (!mayOpen) return wouldRead();
    return readMapsFile(pid, **handle, start, end, now);
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

Result<bool> ProcMapsInspector::readMapsFile(pid_t pid, const sys::MapsHandle& handle, uint64_t start, uint64_t end,
                                             std::chrono::steady_clock::time_point now) {
  bool cached = false;
  {
    std::lock_guard lock(mutex_);
    auto it = cache_.find(pid);
    cached = it != cache_.end() && now - it->second.readAt < kCacheFor && sys::rangeMapped(it->second.maps, start, end);
  }
  if (cached) {
    // The cache is of the pinned address space: an exec since makes it the old program's.
    auto alive = handle.alive();
    if (!alive) return alive.error();
    if (*alive) return true;
    return replaced(pid);
  }
  auto maps = handle.read();
  if (!maps) return maps.error().code == ENOENT ? systemError(ESRCH, maps.error().context) : maps.error();
  if (maps->empty()) return replaced(pid);  // a live address space has a stack at least
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

Result<std::shared_ptr<const sys::MapsHandle>> ProcMapsInspector::pinned(pid_t pid, bool mayOpen) {
  {
    std::lock_guard lock(mutex_);
    if (auto it = pinned_.find(pid); it != pinned_.end()) return it->second;
  }
  if (!mayOpen)
    return systemError(EWOULDBLOCK, "pid " + std::to_string(pid) + ": no address space pinned yet (the open may wait)");
  auto opened = sys::MapsHandle::open(procfs_, pid);  // may wait out an exec: outside the lock
  if (!opened) return opened.error();
  auto handle = std::make_shared<const sys::MapsHandle>(std::move(*opened));
  std::lock_guard lock(mutex_);
  return pinned_.try_emplace(pid, std::move(handle)).first->second;
}

Result<bool> ProcMapsInspector::replaced(pid_t pid) {
  forget(pid);
  struct stat st{};
  const std::string dir = procfs_.resolve(std::to_string(pid));
  if (::stat(dir.c_str(), &st) != 0) return systemError(ESRCH, "pid " + std::to_string(pid) + " exited");
  return systemError(ESTALE, "pid " + std::to_string(pid) +
                                 " ran exec since its address space was first looked at: its regions described the "
                                 "program it ran before, and are dropped; register again");
}

bool ProcMapsInspector::pinsAddressSpace(pid_t pid) {
  std::lock_guard lock(mutex_);
  return pinned_.count(pid) != 0;
}

Result<bool> ProcMapsInspector::replacedAddressSpace(pid_t pid) {
  std::shared_ptr<const sys::MapsHandle> handle;
  {
    std::lock_guard lock(mutex_);
    auto it = pinned_.find(pid);
    if (it == pinned_.end()) return false;
    handle = it->second;
  }
  auto alive = handle->alive();
  if (!alive) return alive.error();
  if (*alive) return false;
  auto gone = replaced(pid);
  if (!gone && gone.error().code == ESTALE) return true;
  return gone.error();
}

void ProcMapsInspector::forget(pid_t pid) {
  std::lock_guard lock(mutex_);
  cache_.erase(pid);
  pinned_.erase(pid);
}

}  // namespace tt::registry
