// A simulated move_pages(2): per-process, per-page node state with the kernel's observable
// behaviour, and failures to inject.
//
// Kernel behaviours reproduced (mm/migrate.c, do_pages_move): a page already on the target gets
// the node as status; an unmapped page -ENOENT (never touched) or -EFAULT; an entry anywhere in a
// 2 MiB THP moves the whole folio; a page that cannot be isolated gets -EBUSY; a page that is
// pinned is left unmigrated and the call returns a positive count WITHOUT writing the statuses
// of the entries queued with it (they stay as the caller left them); a full target node gives
// -ENOMEM; a process that has exited fails the whole call with ESRCH.
#pragma once

#include <errno.h>
#include <sys/types.h>

#include <algorithm>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "core/Types.h"
#include "sys/PageMover.h"

namespace tt::fakes {

class FakePageMover final : public sys::PageMover {
 public:
  struct Call {
    pid_t pid = 0;
    std::vector<uint64_t> pages;
    int node = -1;  // nodes[0] (the engine never mixes targets in a call)
    bool moveAll = false;
  };

  // Maps [start, start + length) of `pid` on `node`; `huge` makes every 2 MiB block one folio.
  void map(pid_t pid, uint64_t start, uint64_t length, int node, bool huge = false) {
    std::lock_guard lock(mutex_);
    for (uint64_t a = start; a < start + length; a += kBasePageSize) {
      auto [it, inserted] = procs_[pid].pages.try_emplace(a, node);
      if (!inserted) --count_[it->second], it->second = node;
      ++count_[node];
    }
    if (huge)
      for (uint64_t a = start; a < start + length; a += kHugePageSize) procs_[pid].hugeHeads.insert(a);
  }
  // EBUSY status for the next `times` attempts to move the page.
  void setBusy(pid_t pid, uint64_t page, int times) { std::lock_guard l(mutex_); procs_[pid].busy[page] = times; }
  // Pinned (long-term GUP) for the next `times` attempts: unmigrated, statuses of the call unwritten.
  void setPinned(pid_t pid, uint64_t page, int times) { std::lock_guard l(mutex_); procs_[pid].pinned[page] = times; }
  // At most `pages` 4 KiB pages fit on `node` (the rest get -ENOMEM).
  void setNodeCapacity(int node, uint64_t pages) { std::lock_guard l(mutex_); capacity_[node] = pages; }
  // The process exits after `calls` more move_pages calls (query or move) on it: ESRCH after that.
  void exitAfterCalls(pid_t pid, int calls) { std::lock_guard l(mutex_); procs_[pid].callsUntilExit = calls; }
  void exitNow(pid_t pid) { std::lock_guard l(mutex_); procs_[pid].exited = true; }
  // Every call on `pid` fails with this errno (EPERM: no ptrace access).
  void failCallsWith(pid_t pid, int err) { std::lock_guard l(mutex_); procs_[pid].callErrno = err; }
  // Pages shared with another process: -EACCES unless MPOL_MF_MOVE_ALL.
  void setShared(pid_t pid, uint64_t page) { std::lock_guard l(mutex_); procs_[pid].shared.insert(page); }
  // Runs at the start of every moving call (not queries), outside the lock: lets tests cancel,
  // supersede or kill in the middle of a plan.
  void onMove(std::function<void(size_t callIndex)> hook) { std::lock_guard l(mutex_); hook_ = std::move(hook); }
  // Runs when a moving call returns, after its pages moved, outside the lock: a caller that is
  // slow to get back from the kernel.
  void afterMove(std::function<void(size_t callIndex)> hook) { std::lock_guard l(mutex_); after_ = std::move(hook); }

  [[nodiscard]] int nodeOf(pid_t pid, uint64_t page) const {
    std::lock_guard lock(mutex_);
    auto p = procs_.find(pid);
    if (p == procs_.end()) return -ENOENT;
    auto it = p->second.pages.find(page);
    return it == p->second.pages.end() ? -ENOENT : it->second;
  }
  // Whether the page is pinned for further attempts (the in-process mover's mbind leaves it too).
  [[nodiscard]] bool isPinned(pid_t pid, uint64_t page) const {
    std::lock_guard lock(mutex_);
    auto p = procs_.find(pid);
    if (p == procs_.end()) return false;
    auto it = p->second.pinned.find(page);
    return it != p->second.pinned.end() && it->second > 0;
  }
  [[nodiscard]] uint64_t pagesOn(int node) const {
    std::lock_guard lock(mutex_);
    return pagesOnLocked(node);
  }
  [[nodiscard]] std::vector<Call> calls() const { std::lock_guard l(mutex_); return calls_; }
  [[nodiscard]] size_t queryCalls() const { std::lock_guard l(mutex_); return queries_; }
  [[nodiscard]] size_t maxConcurrentCalls() const { std::lock_guard l(mutex_); return maxConcurrent_; }

  Result<long> movePages(pid_t pid, std::span<void* const> pages, std::span<const int> nodes, std::span<int> status,
                         bool moveAll) override {
    std::function<void(size_t)> hook, after;
    size_t index = 0;
    {
      std::lock_guard lock(mutex_);
      hook = hook_;
      after = after_;
      index = calls_.size();
      Call call{pid, {}, nodes.empty() ? -1 : nodes[0], moveAll};
      for (void* p : pages) call.pages.push_back(reinterpret_cast<uint64_t>(p));
      calls_.push_back(std::move(call));
      // A call is "in the kernel" from here to its return, the hook's time included.
      ++concurrent_;
      maxConcurrent_ = std::max(maxConcurrent_, concurrent_);
    }
    struct After {  // destroyed last: after the lock below is released
      const std::function<void(size_t)>& f;
      size_t i;
      ~After() {
        if (f) f(i);
      }
    } afterReturn{after, index};
    if (hook) hook(index);
    std::unique_lock lock(mutex_);
    struct Leave {
      size_t& c;
      ~Leave() { --c; }
    } leave{concurrent_};
    if (auto err = enterCallLocked(pid)) return systemError(err, "fake move_pages pid " + std::to_string(pid));
    Proc& proc = procs_[pid];
    long notMigrated = 0;
    bool pinnedSeen = false;
    const std::vector<int> callerStatus(status.begin(), status.end());
    std::vector<size_t> unwritten;  // queued or pinned: statuses the kernel does not store on a failed flush
    for (size_t i = 0; i < pages.size(); ++i) {
      const uint64_t addr = reinterpret_cast<uint64_t>(pages[i]) & ~(kBasePageSize - 1);
      const int target = nodes[i];
      auto it = proc.pages.find(addr);
      if (it == proc.pages.end()) {
        status[i] = -ENOENT;
        continue;
      }
      const uint64_t head = folioHead(proc, addr);
      const uint64_t folioPages = proc.hugeHeads.count(head) ? kHugePageSize / kBasePageSize : 1;
      const int from = proc.pages[head];
      if (from == target) {
        status[i] = target;
        continue;
      }
      if (proc.shared.count(addr) && !moveAll) {
        status[i] = -EACCES;
        continue;
      }
      if (auto b = proc.busy.find(addr); b != proc.busy.end() && b->second > 0) {
        --b->second;
        status[i] = -EBUSY;
        continue;
      }
      if (auto p = proc.pinned.find(addr); p != proc.pinned.end() && p->second > 0) {
        --p->second;
        pinnedSeen = true;
        ++notMigrated;
        unwritten.push_back(i);
        continue;
      }
      if (auto cap = capacity_.find(target); cap != capacity_.end() && count_[target] + folioPages > cap->second) {
        status[i] = -ENOMEM;
        continue;
      }
      for (uint64_t k = 0; k < folioPages; ++k) proc.pages[head + k * kBasePageSize] = target;
      count_[from] -= folioPages;
      count_[target] += folioPages;
      unwritten.push_back(i);
      status[i] = target;
    }
    if (pinnedSeen) {
      for (size_t i : unwritten) status[i] = callerStatus[i];
      return notMigrated;
    }
    return 0L;
  }

  Result<void> queryPages(pid_t pid, std::span<void* const> pages, std::span<int> status) override {
    std::lock_guard lock(mutex_);
    ++queries_;
    if (auto err = enterCallLocked(pid)) return systemError(err, "fake move_pages query pid " + std::to_string(pid));
    Proc& proc = procs_[pid];
    for (size_t i = 0; i < pages.size(); ++i) {
      const uint64_t addr = reinterpret_cast<uint64_t>(pages[i]) & ~(kBasePageSize - 1);
      auto it = proc.pages.find(addr);
      status[i] = it == proc.pages.end() ? -ENOENT : it->second;
    }
    return {};
  }

 private:
  struct Proc {
    std::map<uint64_t, int> pages;
    std::set<uint64_t> hugeHeads;
    std::map<uint64_t, int> busy, pinned;
    std::set<uint64_t> shared;
    int callsUntilExit = -1;
    bool exited = false;
    int callErrno = 0;
  };

  int enterCallLocked(pid_t pid) {
    Proc& proc = procs_[pid];
    if (proc.callsUntilExit == 0) proc.exited = true;
    if (proc.callsUntilExit > 0) --proc.callsUntilExit;
    if (proc.exited) return ESRCH;
    return proc.callErrno;
  }
  static uint64_t folioHead(const Proc& proc, uint64_t addr) {
    const uint64_t block = addr & ~(kHugePageSize - 1);
    return proc.hugeHeads.count(block) ? block : addr;
  }
  uint64_t pagesOnLocked(int node) const {
    auto it = count_.find(node);
    return it == count_.end() ? 0 : it->second;
  }

  mutable std::mutex mutex_;
  std::map<pid_t, Proc> procs_;
  std::map<int, uint64_t> capacity_;
  std::map<int, uint64_t> count_;  // pages per node
  std::vector<Call> calls_;
  size_t queries_ = 0;
  size_t concurrent_ = 0, maxConcurrent_ = 0;
  std::function<void(size_t)> hook_, after_;

};

}  // namespace tt::fakes
