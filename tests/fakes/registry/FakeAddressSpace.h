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
};

}  // namespace tt::test
