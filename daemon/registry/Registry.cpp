#include "registry/Registry.h"

#include <algorithm>

#include "core/Log.h"

namespace tt::registry {

Registry::Registry(AddressSpaceInspector& inspector, Limits limits) : inspector_(inspector), limits_(limits) {}

void Registry::setLimits(const Limits& limits) {
  std::lock_guard lock(mutex_);
  limits_ = limits;  // existing registrations over a lowered limit stay; new ones are refused
}

Limits Registry::limits() const {
  std::lock_guard lock(mutex_);
  return limits_;
}

Result<void> Registry::openConnection(uid_t uid) {
  std::lock_guard lock(mutex_);
  if (connections_ >= limits_.maxConnections)
    return systemError(EUSERS, "connection limit (" + std::to_string(limits_.maxConnections) + ") reached");
  UidUsage& u = usage_[uid];
  if (u.connections >= limits_.maxConnectionsPerUid)
    return systemError(EDQUOT, "uid " + std::to_string(uid) + " has " + std::to_string(u.connections) +
                                   " connections, the per-uid limit");
  ++u.connections;
  ++connections_;
  return {};
}

void Registry::closeConnection(uid_t uid) {
  std::lock_guard lock(mutex_);
  auto it = usage_.find(uid);
  if (it == usage_.end() || it->second.connections == 0) return;
  --it->second.connections;
  --connections_;
  if (it->second.connections == 0 && it->second.regions == 0) usage_.erase(it);
}

bool Registry::attachProcess(const Peer& peer, const std::string& clientName, bool acceptsMbind) {
  std::lock_guard lock(mutex_);
  auto [it, inserted] = processes_.try_emplace(peer.pid);
  Process& p = it->second;
  if (inserted) {
    p.uid = peer.uid;
    p.gid = peer.gid;
    p.incarnation = ++incarnations_;
  }
  if (!clientName.empty()) p.clientName = clientName;
  p.acceptsMbind = p.acceptsMbind || acceptsMbind;
  ++p.connections;
  if (inserted) pushEvent({RegistryEvent::Type::ProcessAdded, peer.pid, {}, {}});
  return inserted;
}

bool Registry::detachProcess(pid_t pid) {
  {
    std::lock_guard lock(mutex_);
    auto it = processes_.find(pid);
    if (it == processes_.end()) return false;
    if (it->second.connections > 1) {
      --it->second.connections;
      return false;
    }
  }
  removeProcess(pid);
  return true;
}

size_t Registry::removeProcess(pid_t pid) {
  inspector_.forget(pid);  // a later process with this pid must be read afresh
  std::lock_guard lock(mutex_);
  auto it = processes_.find(pid);
  if (it == processes_.end()) return 0;
  Process& p = it->second;
  const size_t n = p.byStart.size();
  while (!p.byStart.empty()) {
    auto r = regions_.find(p.byStart.begin()->second);
    if (r == regions_.end()) {
      p.byStart.erase(p.byStart.begin());
      continue;
    }
    eraseRegionLocked(p, r);
  }
  auto u = usage_.find(p.uid);
  if (u != usage_.end() && u->second.connections == 0 && u->second.regions == 0) usage_.erase(u);
  processes_.erase(it);
  pushEvent({RegistryEvent::Type::ProcessRemoved, pid, {}, {}});
  return n;
}

bool Registry::hasProcess(pid_t pid) const {
  std::lock_guard lock(mutex_);
  return processes_.count(pid) != 0;
}

uint64_t Registry::incarnationOf(pid_t pid) const {
  std::lock_guard lock(mutex_);
  auto it = processes_.find(pid);
  return it == processes_.end() ? 0 : it->second.incarnation;
}

bool Registry::registeredUnder(pid_t pid, uid_t uid) const {
  std::lock_guard lock(mutex_);
  auto it = processes_.find(pid);
  return it != processes_.end() && it->second.uid == uid;
}

Result<void> Registry::checkRunsAs(const Peer& peer, bool afterExec) {
  if (peer.uid == 0) return {};
  auto runs = inspector_.runsAs(peer.pid, peer.uid, peer.gid, afterExec);
  if (!runs) return withContext(runs.error(), "checking who pid " + std::to_string(peer.pid) + " runs as");
  if (!*runs)
    return systemError(EKEYREVOKED, "pid " + std::to_string(peer.pid) + " does not run as uid " +
                                        std::to_string(peer.uid) + " gid " + std::to_string(peer.gid) +
                                        ", the ids this connection was opened with, or is not dumpable (a setuid, "
                                        "setgid or file-capability exec, changed ids, or PR_SET_DUMPABLE 0: the "
                                        "kernel keeps its memory map from that uid, and so does the daemon): the "
                                        "connection is closed");
  return {};
}

Result<bool> Registry::runsAsRegistered(pid_t pid, bool afterExec) {
  uid_t uid = 0;
  gid_t gid = 0;
  {
    std::lock_guard lock(mutex_);
    auto it = processes_.find(pid);
    if (it == processes_.end()) return false;
    uid = it->second.uid;
    gid = it->second.gid;
  }
  if (uid == 0) return true;
  return inspector_.runsAs(pid, uid, gid, afterExec);
}

std::vector<pid_t> Registry::processesWithChangedIds() {
  std::vector<Peer> registered;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [pid, p] : processes_)
      if (p.uid != 0) registered.push_back({pid, p.uid, p.gid});
  }
  std::vector<pid_t> changed;
  for (const Peer& p : registered)
    if (auto runs = inspector_.runsAs(p.pid, p.uid, p.gid, false); runs && !*runs) changed.push_back(p.pid);
  return changed;
}

std::vector<pid_t> Registry::processesThatExeced() {
  std::vector<pid_t> registered;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [pid, p] : processes_) registered.push_back(pid);
  }
  std::vector<pid_t> execed;
  for (pid_t pid : registered)
    if (auto replaced = inspector_.replacedAddressSpace(pid); replaced && *replaced) execed.push_back(pid);
  return execed;
}

bool Registry::execedSinceProbed(pid_t pid) {
  auto replaced = inspector_.replacedAddressSpace(pid);
  return replaced && *replaced;
}

bool Registry::acceptsMbind(pid_t pid) const {
  std::lock_guard lock(mutex_);
  auto it = processes_.find(pid);
  return it != processes_.end() && it->second.acceptsMbind;
}

Result<RegionInfo> Registry::registerRegion(const Peer& peer, const RegisterRequest& request, bool mayWait,
                                            uint64_t incarnation) {
  if (request.length == 0) return systemError(EINVAL, "region length is 0");
  const uint64_t start = request.address & ~(kBasePageSize - 1);
  if (request.address > UINT64_MAX - request.length) return systemError(EINVAL, "region wraps the address space");
  const uint64_t last = request.address + request.length - 1;
  if (last > UINT64_MAX - kBasePageSize) return systemError(EINVAL, "region ends past the address space");
  const uint64_t end = (last | (kBasePageSize - 1)) + 1;
  const uint64_t length = end - start;
  if (request.name.size() > 256) return systemError(EINVAL, "region name longer than 256 bytes");

  {
    std::lock_guard lock(mutex_);
    auto p = processes_.find(peer.pid);
    if (p == processes_.end() || (incarnation != 0 && p->second.incarnation != incarnation))
      return systemError(ESRCH, "process " + std::to_string(peer.pid) +
                                    " is not registered (no Hello, or it was dropped since: an exit, exec or id change)");
    // Regions are charged to the uid the process was registered under, the one their removal
    // refunds, also when a later connection of it has another uid (after a seteuid).
    const uid_t owner = p->second.uid;
    const UidUsage& u = usage_[owner];
    if (u.regions + 1 > limits_.maxRegionsPerUid)
      return systemError(EDQUOT, "uid " + std::to_string(owner) + " has " + std::to_string(u.regions) +
                                     " regions, the per-uid limit");
    if (u.bytes + length > limits_.maxBytesPerUid)
      return systemError(EDQUOT, "uid " + std::to_string(owner) + " would register " +
                                     std::to_string(u.bytes + length) + " bytes, over the per-uid limit " +
                                     std::to_string(limits_.maxBytesPerUid));
  }

  // The maps read is I/O: done without the lock; the overlap and limit checks are repeated below.
  auto mapped = inspector_.rangeMapped(peer.pid, peer.uid, start, end, mayWait);
  if (!mapped && mapped.error().code == EWOULDBLOCK) return mapped.error();
  // The address space first asked about is gone (an exec). An exec drops the old address space
  // before it commits the new ids (tearing it down takes 1.6 s at 8 GiB): whether the ids change
  // is known only once it has, so this waits for it (once an exec) and says which it was.
  if (!mapped && mapped.error().code == ESTALE) {
    if (!mayWait) return mapped.error();
    if (auto still = checkRunsAs(peer, true); !still) return still.error();
    return mapped.error();
  }
  // An exec since the caller's check would have had the answer describe the new program. An
  // inspector that pinned the address space waited out any exec when it did, so the check need not
  // (without mayWait the probe was of a pinned one).
  if (auto still = checkRunsAs(peer, mayWait && !inspector_.pinsAddressSpace(peer.pid)); !still) {
    inspector_.forget(peer.pid);  // what it pinned may be the new program's
    return still.error();
  }
  if (!mapped) return withContext(mapped.error(), "checking the address space of pid " + std::to_string(peer.pid));
  if (!*mapped) return systemError(EFAULT, "range not mapped in pid " + std::to_string(peer.pid));

  std::lock_guard lock(mutex_);
  auto p = processes_.find(peer.pid);
  if (p == processes_.end()) {
    inspector_.forget(peer.pid);  // pinned by the probe for a process no longer registered
    return systemError(ESRCH, "process " + std::to_string(peer.pid) + " went away");
  }
  if (incarnation != 0 && p->second.incarnation != incarnation)  // what the probe pinned is the new one's
    return systemError(ESRCH, "process " + std::to_string(peer.pid) + " went away (its pid is another process's now)");
  Process& proc = p->second;
  auto next = proc.byStart.lower_bound(start);
  if (next != proc.byStart.end() && next->first < end)
    return systemError(EEXIST, "overlaps region " + std::to_string(next->second));
  if (next != proc.byStart.begin()) {
    const auto prev = std::prev(next);
    const RegionInfo& pr = regions_.at(prev->second).info;
    if (pr.start + pr.length > start) return systemError(EEXIST, "overlaps region " + std::to_string(prev->second));
  }
  UidUsage& u = usage_[proc.uid];
  if (u.regions + 1 > limits_.maxRegionsPerUid || u.bytes + length > limits_.maxBytesPerUid)
    return systemError(EDQUOT, "per-uid limit reached for uid " + std::to_string(proc.uid));

  RegionRecord rec;
  rec.info.id = nextRegionId_++;
  rec.info.tgid = peer.pid;
  rec.info.start = start;
  rec.info.length = length;
  rec.info.kind = request.kind;
  rec.info.name = request.name;
  rec.info.expectedLifetimeSteps = request.expectedLifetimeSteps;
  proc.byStart.emplace(start, rec.info.id);
  proc.bytes += length;
  ++u.regions;
  u.bytes += length;
  RegionInfo info = rec.info;
  regions_.emplace(info.id, std::move(rec));
  pushEvent({RegistryEvent::Type::RegionAdded, peer.pid, info, {}});
  return info;
}

void Registry::eraseRegionLocked(Process& process, std::unordered_map<uint64_t, RegionRecord>::iterator it) {
  const RegionInfo& info = it->second.info;
  process.byStart.erase(info.start);
  process.bytes -= info.length;
  auto u = usage_.find(process.uid);
  if (u != usage_.end()) {
    --u->second.regions;
    u->second.bytes -= info.length;
  }
  RegistryEvent ev{RegistryEvent::Type::RegionRemoved, info.tgid, {}, {}};
  ev.region.id = info.id;
  ev.region.tgid = info.tgid;
  ev.region.start = info.start;
  ev.region.length = info.length;
  regions_.erase(it);
  pushEvent(std::move(ev));
}

Result<void> Registry::unregisterRegion(const Peer& peer, uint64_t regionId) {
  std::lock_guard lock(mutex_);
  auto it = regions_.find(regionId);
  // Another process's region answers exactly like a missing one: ids reveal nothing.
  if (it == regions_.end() || it->second.info.tgid != peer.pid)
    return systemError(ENOENT, "no region " + std::to_string(regionId) + " in pid " + std::to_string(peer.pid));
  eraseRegionLocked(processes_.at(peer.pid), it);
  return {};
}

void Registry::mark(const Peer& peer, IterationMark mark) {
  std::lock_guard lock(mutex_);
  auto p = processes_.find(peer.pid);
  if (p == processes_.end()) return;
  mark.tgid = peer.pid;
  if (mark.type != MarkType::PhaseBegin) p->second.lastStep = mark.step;
  if (queuedMarks_ >= kMaxQueuedMarks) {
    // The older half of the queued marks goes in one pass: a mark at a time was a scan and a move
    // of the whole queue per mark, under the lock the epoch loop takes, for a client that floods.
    size_t drop = queuedMarks_ / 2;
    queuedMarks_ -= drop;
    auto kept = events_.begin();
    for (auto it = events_.begin(); it != events_.end(); ++it) {
      if (drop > 0 && it->type == RegistryEvent::Type::Mark) {
        --drop;
        continue;
      }
      if (kept != it) *kept = std::move(*it);
      ++kept;
    }
    events_.erase(kept, events_.end());
  }
  ++queuedMarks_;
  pushEvent({RegistryEvent::Type::Mark, peer.pid, {}, std::move(mark)});
}

Result<std::vector<RegionRecord>> Registry::regionsOf(pid_t pid, std::span<const uint64_t> ids) const {
  std::lock_guard lock(mutex_);
  std::vector<RegionRecord> out;
  if (ids.empty()) {
    auto p = processes_.find(pid);
    if (p == processes_.end()) return out;
    out.reserve(p->second.byStart.size());
    for (const auto& [start, id] : p->second.byStart) out.push_back(regions_.at(id));
    return out;
  }
  out.reserve(ids.size());
  for (uint64_t id : ids) {
    auto it = regions_.find(id);
    if (it == regions_.end() || it->second.info.tgid != pid)
      return systemError(ENOENT, "no region " + std::to_string(id) + " in pid " + std::to_string(pid));
    out.push_back(it->second);
  }
  return out;
}

std::optional<RegionRecord> Registry::region(uint64_t id) const {
  std::lock_guard lock(mutex_);
  auto it = regions_.find(id);
  if (it == regions_.end()) return std::nullopt;
  return it->second;
}

std::vector<RegionRecord> Registry::allRegions(pid_t pid) const {
  std::lock_guard lock(mutex_);
  std::vector<std::pair<pid_t, const Process*>> procs;
  for (const auto& [p, proc] : processes_)
    if (pid == 0 || p == pid) procs.emplace_back(p, &proc);
  std::sort(procs.begin(), procs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<RegionRecord> out;
  for (const auto& [p, proc] : procs)
    for (const auto& [start, id] : proc->byStart) out.push_back(regions_.at(id));
  return out;
}

std::vector<ProcessSummary> Registry::processes() const {
  std::lock_guard lock(mutex_);
  std::vector<ProcessSummary> out;
  out.reserve(processes_.size());
  for (const auto& [pid, p] : processes_)
    out.push_back({pid, p.uid, p.clientName, p.acceptsMbind, p.connections, p.byStart.size(), p.bytes, p.lastStep});
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.pid < b.pid; });
  return out;
}

Totals Registry::totals() const {
  std::lock_guard lock(mutex_);
  Totals t;
  t.processes = processes_.size();
  t.regions = regions_.size();
  for (const auto& [pid, p] : processes_) t.registeredBytes += p.bytes;
  t.connections = connections_;
  return t;
}

void Registry::publishHeat(std::span<const RegionHeat> heat) {
  std::lock_guard lock(mutex_);
  for (const RegionHeat& h : heat)
    if (auto it = regions_.find(h.regionId); it != regions_.end()) {
      it->second.heat = h.heat;
      it->second.steadySteps = h.steadySteps;
    }
}

std::vector<RegistryEvent> Registry::drainEvents() {
  std::lock_guard lock(mutex_);
  std::vector<RegistryEvent> out;
  out.swap(events_);
  queuedMarks_ = 0;
  return out;
}

void Registry::pushEvent(RegistryEvent event) { events_.push_back(std::move(event)); }

}  // namespace tt::registry
