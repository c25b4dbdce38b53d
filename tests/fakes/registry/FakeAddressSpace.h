// A fake of the registry's address-space check: mapped ranges per pid, set by the test.
#pragma once

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "registry/AddressSpace.h"

namespace tt::test {

// Mapped ranges per pid, set by the test.
class FakeAddressSpace final : public registry::AddressSpaceInspector {
 public:
  void map(pid_t pid, uint64_t start, uint64_t end) { ranges_[pid].emplace_back(start, end); }
  void fail(pid_t pid) { failing_.insert(pid); }
  // The effective ids `pid` runs as from now on; until set, whichever ids ask (its peer's).
  void setOwner(pid_t pid, uid_t uid, gid_t gid) { owners_[pid] = {uid, gid}; }
  Result<bool> runsAs(pid_t pid, uid_t uid, gid_t gid) override {
    if (failing_.count(pid)) return systemError(ENOENT, "stat /proc/" + std::to_string(pid));
    auto it = owners_.find(pid);
    return it == owners_.end() || it->second == std::pair{uid, gid};
  }
  Result<bool> rangeMapped(pid_t pid, uint64_t start, uint64_t end) override {
    ++calls;
    if (failing_.count(pid)) return systemError(ESRCH, "open /proc/" + std::to_string(pid) + "/maps");
    for (const auto& [s, e] : ranges_[pid])
      if (s <= start && end <= e) return true;
    return false;
  }
  int calls = 0;

 private:
  std::map<pid_t, std::vector<std::pair<uint64_t, uint64_t>>> ranges_;
  std::set<pid_t> failing_;
  std::map<pid_t, std::pair<uid_t, gid_t>> owners_;
};

}  // namespace tt::test
