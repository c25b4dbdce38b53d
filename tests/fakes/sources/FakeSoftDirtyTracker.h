// Soft-dirty bits held in memory: a page written (markWritten) stays dirty until clear(pid).
#pragma once

#include <map>
#include <set>
#include <string>

#include "sys/access/SoftDirty.h"

namespace tt::fakes {

class FakeSoftDirtyTracker final : public sys::SoftDirtyTracker {
 public:
  Result<void> track(pid_t pid) override {
    tracked.insert(pid);
    return {};
  }
  void untrack(pid_t pid) override { tracked.erase(pid); }
  Result<void> clear(pid_t pid) override {
    if (exited.contains(pid)) return systemError(ENOENT, "open " + std::to_string(pid) + "/clear_refs");
    ++clears[pid];
    dirty[pid].clear();
    return {};
  }
  Result<void> dirtyPages(pid_t pid, uint64_t start, uint64_t pages, std::vector<uint64_t>& out) override {
    if (exited.contains(pid)) return systemError(ENOENT, "open " + std::to_string(pid) + "/pagemap");
    for (uint64_t p : dirty[pid])
      if (p >= start && p < start + pages * 4096) out.push_back(p);
    return {};
  }
  void markWritten(pid_t pid, uint64_t page) { dirty[pid].insert(page); }

  std::map<pid_t, std::set<uint64_t>> dirty;
  std::map<pid_t, int> clears;
  std::set<pid_t> exited;  // its /proc/PID files are gone
  std::set<pid_t> tracked;
};

}  // namespace tt::fakes
