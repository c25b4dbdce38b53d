#include "sources/DamonSource.h"

#include <algorithm>

#include "core/Log.h"

namespace tt::sources {

DamonSource::DamonSource(sys::DamonSysfs damon, sys::DamonAttrs attrs, uint64_t maxPagesPerEpoch, std::string stateFile)
    : damon_(std::move(damon)), attrs_(attrs), maxPages_(maxPagesPerEpoch), stateFile_(std::move(stateFile)) {}

void DamonSource::saveOwned() {
  if (stateFile_.empty() || !leftoversRead_) return;
  std::vector<sys::OwnedKdamond> owned;
  for (const auto& [slot, pid] : owned_) owned.push_back({damon_.firstKdamond() + slot, pid});
  if (auto r = sys::saveOwnedKdamonds(stateFile_, owned); !r) {
    TT_LOG(Warn) << "damon: could not save the kdamonds it runs: " << r.error().message()
                 << " (a run after a crash will leave them running as another tool's)";
  }
}

void DamonSource::stopLeftovers() {
  if (stateFile_.empty()) return;
  // From here on the file is this source's to rewrite, also when it cannot be read: the kdamonds
  // it starts must be listed, and an unreadable list names none that could be told apart.
  leftoversRead_ = true;
  auto listed = sys::loadOwnedKdamonds(stateFile_);
  if (!listed) {
    TT_LOG(Warn) << "damon: " << listed.error().message() << ": every kdamond found running is left alone";
    return;
  }
  for (const sys::OwnedKdamond& k : *listed) {
    if (k.kdamond < damon_.firstKdamond() || k.kdamond - damon_.firstKdamond() >= damon_.slots()) continue;
    const uint32_t slot = k.kdamond - damon_.firstKdamond();
    const auto busy = std::find(busy_slots_.begin(), busy_slots_.end(), slot);
    if (busy == busy_slots_.end()) continue;  // stopped by itself since
    // Restarted by someone else since (for another process): theirs now.
    if (auto target = damon_.targetPid(slot); !target || *target != k.pid) continue;
    busy_slots_.erase(busy);
    if (auto r = damon_.stop(slot); !r) {
      TT_LOG(Warn) << "damon: kdamond " << k.kdamond << " (pid " << k.pid << "), left running by a run that died, "
                   << "does not stop: " << r.error().message() << "; tried again at each collect";
      owned_[slot] = k.pid;
      stopping_slots_.push_back(slot);
      continue;
    }
    TT_LOG(Info) << "damon: stopped kdamond " << k.kdamond << " (pid " << k.pid << "), left running by a run that died";
  }
  saveOwned();
}

DamonSource::~DamonSource() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  // A kdamond turned off answers a request it had not answered yet, so stop them before joining.
  for (const auto& [tgid, slot] : slots_) {
    std::lock_guard sysfs(sysfsMutex_);
    if (auto s = damon_.stop(slot); !s) {
      TT_LOG(Warn) << "DAMON stop for pid " << tgid << ": " << s.error().message();
    } else {
      owned_.erase(slot);
    }
  }
  for (uint32_t slot : stopping_slots_) {
    std::lock_guard sysfs(sysfsMutex_);
    if (auto s = damon_.stop(slot); !s) {
      TT_LOG(Warn) << "DAMON stop of kdamond slot " << slot << ": " << s.error().message();
    } else {
      owned_.erase(slot);
    }
  }
  {
    std::lock_guard sysfs(sysfsMutex_);
    saveOwned();  // removes the file once all are stopped
  }
  if (refresher_.joinable()) refresher_.join();
}

void DamonSource::refreshLoop() {
  std::unique_lock lock(mutex_);
  while (true) {
    wake_.wait(lock, [this] { return stopping_ || (pending_ && !refreshed_); });
    if (stopping_) return;
    const auto slots = requested_;
    lock.unlock();
    std::vector<std::pair<std::pair<pid_t, uint32_t>, std::string>> errors;
    for (const auto& [tgid, slot] : slots) {
      {
        std::lock_guard check(mutex_);
        if (stopping_) return;  // shutdown: the other kdamonds' answers are not waited for
      }
      std::lock_guard sysfs(sysfsMutex_);
      if (auto r = damon_.requestRegions(slot); !r) errors.push_back({{tgid, slot}, r.error().message()});
    }
    lock.lock();
    refreshErrors_ = std::move(errors);
    refreshed_ = true;
  }
}

void DamonSource::open() {
  if (!damon_.available()) {
    status_ = {false, "no DAMON sysfs (/sys/kernel/mm/damon/admin): kernel without CONFIG_DAMON_SYSFS"};
    return;
  }
  auto prepared = damon_.prepare();
  if (!prepared) {
    status_ = {false, "DAMON sysfs: " + prepared.error().message()};
    return;
  }
  busy_slots_ = *prepared;
  if (!damon_.shortfall().empty()) {
    TT_LOG(Warn) << "damon: " << damon_.shortfall();
  }
  {
    std::lock_guard sysfs(sysfsMutex_);
    stopLeftovers();
  }
  if (!busy_slots_.empty()) {
    std::string which;
    for (uint32_t s : busy_slots_) which += (which.empty() ? "" : ", ") + std::to_string(s);
    TT_LOG(Warn) << "damon: kdamond slots " << which << " (of " << damon_.slots() << ", from sources.damon.kdamond_index) "
                 << "were running at start for another tool (not listed in " << (stateFile_.empty() ? "no state file" : stateFile_)
                 << "): left alone until they stop";
  }
  // Any slot shows whether the kernel reports tried regions; one that is off can be given a scheme
  // to look, a running one only looked at.
  uint32_t probe = 0;
  while (probe < damon_.slots() && std::find(busy_slots_.begin(), busy_slots_.end(), probe) != busy_slots_.end()) ++probe;
  const bool probeRunning = probe == damon_.slots();
  // What this kernel's DAMON must have; false (the source unavailable, saying why) when it lacks it.
  auto has = [this](const Result<bool>& found, const char* without) {
    if (found && *found) return true;
    status_ = {false, found ? std::string(without) : "DAMON sysfs: " + found.error().message()};
    if (auto undo = damon_.undoGrowth(); !undo) {
      TT_LOG(Warn) << "damon: could not put nr_kdamonds back: " << undo.error().message();
    }
    return false;
  };
  if (!has(damon_.reportsRegions(probeRunning ? 0 : probe, probeRunning),
           "DAMON sysfs without schemes' tried_regions (kernel 6.2+): no way to read what it monitors") ||
      !has(damon_.offersVaddr(probeRunning ? 0 : probe),
           "DAMON without virtual-address monitoring (CONFIG_DAMON_VADDR; avail_operations lacks vaddr)"))
    return;
  status_ = {true, "DAMON vaddr via sysfs, " + std::to_string(damon_.slots()) + " kdamonds" +
                       (damon_.shortfall().empty() ? "" : " (fewer than configured: nr_kdamonds could not grow)") +
                       ", sample " + std::to_string(attrs_.sampleUs) + " us, aggregate " +
                       std::to_string(attrs_.aggrUs) + " us"};
  refresher_ = std::thread([this] { refreshLoop(); });
}

bool DamonSource::slotTaken(uint32_t slot) const {
  for (const auto& [t, s] : slots_)
    if (s == slot) return true;
  return std::find(stopping_slots_.begin(), stopping_slots_.end(), slot) != stopping_slots_.end() ||
         std::find(busy_slots_.begin(), busy_slots_.end(), slot) != busy_slots_.end();
}

Result<void> DamonSource::addProcess(pid_t tgid) {
  if (!status_.available || slots_.contains(tgid)) return {};
  // Not while a request is in flight (see the header): the next collect starts it.
  std::unique_lock sysfs(sysfsMutex_, std::try_to_lock);
  std::string failed;
  if (!sysfs.owns_lock()) {
    waiting_.insert(tgid);
    // Whether a slot is free needs no sysfs write: without one, say so now, as below.
    bool anyFree = false;
    for (uint32_t slot = 0; slot < damon_.slots() && !anyFree; ++slot) anyFree = !slotTaken(slot);
    if (anyFree) {
      TT_LOG(Debug) << "damon: pid " << tgid << " is monitored from the next collect (a request is in flight)";
      return {};
    }
  } else if (startFor(tgid, failed)) {
    return {};
  }
  waiting_.insert(tgid);
  if (!failed.empty())
    return logicError("DAMON: pid " + std::to_string(tgid) + " not monitored yet (retried as slots free): " + failed);
  return logicError("DAMON: no free kdamond slot for pid " + std::to_string(tgid) + " yet (it gets the next that frees): of " +
                    std::to_string(damon_.slots()) + ", " + std::to_string(slots_.size()) + " monitor tracked processes, " +
                    std::to_string(stopping_slots_.size()) + " would not stop, " + std::to_string(busy_slots_.size()) +
                    " were running at start for others (raise sources.damon.max_processes)");
}

bool DamonSource::startFor(pid_t tgid, std::string& failed) {
  // A slot that will not start (a sysfs writer in the way) does not stop the others from being
  // tried.
  for (uint32_t slot = 0; slot < damon_.slots(); ++slot) {
    if (slotTaken(slot)) continue;
    if (auto r = damon_.start(slot, tgid, attrs_); !r) {
      failed += "slot " + std::to_string(slot) + ": " + r.error().message() + "; ";
      continue;
    }
    slots_[tgid] = slot;
    owned_[slot] = tgid;
    saveOwned();
    return true;
  }
  return false;
}

void DamonSource::startWaiting() {
  // Not while a request is in flight (it can take an aggregation interval): collect() never waits.
  std::unique_lock sysfs(sysfsMutex_, std::try_to_lock);
  if (!sysfs.owns_lock()) return;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    std::string failed;
    if (!startFor(*it, failed)) {
      if (!failed.empty()) {
        TT_LOG(Debug) << "damon: pid " << *it << " still not monitored: " << failed;
      }
      ++it;
      continue;
    }
    TT_LOG(Info) << "damon: pid " << *it << " monitored now, on kdamond slot " << slots_[*it];
    it = waiting_.erase(it);
  }
}

Result<void> DamonSource::removeProcess(pid_t tgid) {
  waiting_.erase(tgid);
  auto it = slots_.find(tgid);
  if (it == slots_.end()) return {};
  const uint32_t slot = it->second;
  slots_.erase(it);
  // Kept off the free slots and stopped at a later collect (or at shutdown) when it cannot be now:
  // a request in flight, or a stop that failed.
  std::unique_lock sysfs(sysfsMutex_, std::try_to_lock);
  if (!sysfs.owns_lock()) {
    stopping_slots_.push_back(slot);
    return {};
  }
  auto r = damon_.stop(slot);
  if (!r) {
    stopping_slots_.push_back(slot);
    return r;
  }
  owned_.erase(slot);
  saveOwned();
  return r;
}

void DamonSource::reviewSlots() {
  // Not while a request is in flight (it can take an aggregation interval): collect() never waits.
  std::unique_lock sysfs(sysfsMutex_, std::try_to_lock);
  if (!sysfs.owns_lock()) return;
  const size_t stuck = stopping_slots_.size();
  std::erase_if(stopping_slots_, [this](uint32_t slot) {
    auto r = damon_.stop(slot);
    if (!r) {
      TT_LOG(Debug) << "damon: kdamond slot " << slot << " still does not stop: " << r.error().message();
      return false;
    }
    owned_.erase(slot);
    return true;
  });
  if (stopping_slots_.size() != stuck) saveOwned();
  std::erase_if(busy_slots_, [this](uint32_t slot) {
    auto on = damon_.running(slot);
    return on && !*on;
  });
}

Result<void> DamonSource::collect(EvidenceBatch& out) {
  if (!refresher_.joinable()) return {};  // not open
  std::string errors;
  std::vector<std::pair<pid_t, uint32_t>> answered;
  std::vector<std::pair<pid_t, uint32_t>> unanswered;  // their request failed
  // Before the wait below: requests slower than an epoch must not keep slots from being freed.
  if (!stopping_slots_.empty() || !busy_slots_.empty()) reviewSlots();
  if (!waiting_.empty()) startWaiting();
  {
    std::lock_guard lock(mutex_);
    if (pending_ && !refreshed_) return {};  // the last requests still wait for their kdamonds
    if (pending_) {
      answered.swap(requested_);
      // Only for processes still monitored: a request to a kdamond stopped meanwhile fails.
      for (const auto& [key, message] : refreshErrors_) {
        unanswered.push_back(key);
        if (auto it = slots_.find(key.first); it != slots_.end() && it->second == key.second)
          errors += "pid " + std::to_string(key.first) + ": " + message + "; ";
      }
    }
    pending_ = refreshed_ = false;
  }
  for (const auto& [tgid, slot] : answered) {
    // A process removed since (its slot off, or given to another process) has nothing to read.
    auto it = slots_.find(tgid);
    if (it == slots_.end() || it->second != slot) continue;
    // A failed request refreshed nothing: what tried_regions holds is the last epoch's, already
    // reported. So is what a kdamond that stopped by itself (its process exited) holds.
    if (std::find(unanswered.begin(), unanswered.end(), std::pair{tgid, slot}) != unanswered.end()) continue;
    if (auto on = damon_.running(slot); on && !*on) continue;
    auto regions = damon_.readRegions(slot);  // the refresher is idle: no lock needed
    if (!regions) {
      errors += regions.error().message() + "; ";
      continue;
    }
    counters_.samples += regions->size();
    counters_.evidence += appendRegionBlocks(tgid, *regions, maxPages_, out.blocks);
  }
  if (!slots_.empty()) {
    {
      std::lock_guard lock(mutex_);
      requested_.assign(slots_.begin(), slots_.end());
      pending_ = true;
    }
    wake_.notify_one();
  }
  if (!errors.empty()) return logicError("DAMON: " + errors);
  return {};
}

uint64_t appendRegionBlocks(pid_t tgid, const std::vector<sys::DamonRegion>& regions, uint64_t maxPages,
                            std::vector<EvidenceBlock>& out) {
  // Over the budget, the most accessed regions get it (a fixed prefix by address would give the
  // low, often cold, addresses all of it every epoch): pages taken per region, by rank.
  auto pagesOf = [](const sys::DamonRegion& r) {
    const uint64_t start = r.start & ~(kBasePageSize - 1);
    return r.end > start ? (r.end - start + kBasePageSize - 1) / kBasePageSize : 0;
  };
  std::vector<size_t> rank;
  for (size_t i = 0; i < regions.size(); ++i)
    if (regions[i].nrAccesses > 0) rank.push_back(i);
  std::stable_sort(rank.begin(), rank.end(),
                   [&](size_t a, size_t b) { return regions[a].nrAccesses > regions[b].nrAccesses; });
  std::vector<uint64_t> take(regions.size(), 0);
  uint64_t budget = maxPages;
  for (size_t i : rank) {
    take[i] = std::min(pagesOf(regions[i]), budget);
    budget -= take[i];
  }
  // Then in address order: regions() sorts them by start and DAMON's regions do not overlap, so a
  // chunk's pages come together: one block per chunk, the last one appended being the one to fill.
  const size_t first = out.size();
  for (size_t i = 0; i < regions.size(); ++i) {
    const auto& r = regions[i];
    if (take[i] == 0) continue;
    const auto count = static_cast<uint8_t>(std::min<uint32_t>(r.nrAccesses, UINT8_MAX));
    uint64_t left = take[i];
    for (uint64_t page = r.start & ~(kBasePageSize - 1); page < r.end && left > 0; page += kBasePageSize, --left) {
      const uint64_t base = page & ~(kBlockBytes - 1);
      if (out.size() == first || out.back().base != base) {
        EvidenceBlock& b = out.emplace_back();
        b.tgid = tgid;
        b.kind = AccessKind::Access;
        b.base = base;
      }
      out.back().counts[(page - base) / kBasePageSize] = count;
    }
  }
  return maxPages - budget;
}

}  // namespace tt::sources
