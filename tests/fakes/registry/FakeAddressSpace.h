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
  // Whether `pid` is dumpable from now on (a file-capability exec makes it not); until set, it is.
  void setDumpable(pid_t pid, bool dumpable) {
    if (dumpable)
      undumpable_.erase(pid);
    else
      undumpable_.insert(pid);
  }
  // The process execs a setid program right after the next quick id check (between a request's
  // check and its probe): the checks after it see these ids.
  void execAfterNextQuickCheck(pid_t pid, uid_t uid, gid_t gid) { pendingExec_[pid] = {uid, gid}; }
  Result<bool> runsAs(pid_t pid, uid_t uid, gid_t gid, bool afterExec) override {
    ++(afterExec ? settledIdChecks : idChecks);
    if (failing_.count(pid)) return systemError(ESRCH, "stat /proc/" + std::to_string(pid));
    auto it = owners_.find(pid);
    const bool runs = (it == owners_.end() || it->second == std::pair{uid, gid}) && !undumpable_.count(pid);
    if (auto e = pendingExec_.find(pid); !afterExec && e != pendingExec_.end()) {
      owners_[pid] = e->second;
      pendingExec_.erase(e);
    }
    return runs;
  }
  // The process runs exec keeping its ids: the address space probed so far is gone, which the
  // next probe (ESTALE) or replacedAddressSpace reports once.
  void execKeepingIds(pid_t pid) { replaced_.insert(pid); }
  bool pinsAddressSpace(pid_t /*pid*/) override { return pins; }
  Result<bool> replacedAddressSpace(pid_t pid) override { return replaced_.erase(pid) != 0; }
  // Without `mayOpen`, EWOULDBLOCK unless `pins` (as if every address space were pinned, or none).
  Result<bool> rangeMapped(pid_t pid, uid_t /*uid*/, uint64_t start, uint64_t end, bool mayOpen = true) override {
    if (!mayOpen && !pins) return systemError(EWOULDBLOCK, "pid " + std::to_string(pid) + ": nothing pinned");
    ++calls;
    if (failing_.count(pid)) return systemError(ESRCH, "open /proc/" + std::to_string(pid) + "/maps");
    if (replaced_.erase(pid)) return systemError(ESTALE, "pid " + std::to_string(pid) + " ran exec");
    for (const auto& [s, e] : ranges_[pid])
      if (s <= start && end <= e) return true;
    return false;
  }
  int idChecks = 0, settledIdChecks = 0;
  bool pins = false;  // what pinsAddressSpace says
  int calls = 0;

 private:
  std::map<pid_t, std::vector<std::pair<uint64_t, uint64_t>>> ranges_;
  std::set<pid_t> failing_;
  std::set<pid_t> undumpable_;
  std::set<pid_t> replaced_;
  std::map<pid_t, std::pair<uid_t, gid_t>> owners_;
  std::map<pid_t, std::pair<uid_t, gid_t>> pendingExec_;
};

}  // namespace tt::test
