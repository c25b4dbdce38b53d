// The kernel's DAMON access monitor through its sysfs interface (/sys/kernel/mm/damon/admin,
// Documentation/admin-guide/mm/damon/usage.rst), virtual-address mode.
//
// One kdamond per monitored process: a kdamond's "stat" scheme lists the regions it tried
// (tried_regions/N/{start,end,nr_accesses,age}) without saying which target they belong to, so
// one target per kdamond keeps them attributable. The slots (kdamonds/first .. first+slots-1) are
// created once; each is switched on and off on its own while the others run.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/Result.h"
#include "sys/Fs.h"

namespace tt::sys {

struct DamonAttrs {
  uint32_t sampleUs = 5000;
  uint32_t aggrUs = 100000;
  uint32_t updateUs = 1000000;
  uint32_t minRegions = 10;
  uint32_t maxRegions = 1000;
};

struct DamonRegion {
  uint64_t start = 0;
  uint64_t end = 0;
  uint32_t nrAccesses = 0;  // samples (of aggrUs / sampleUs) that saw the region accessed
  uint32_t age = 0;
};

// A kdamond this daemon started, as its state file lists them: `kdamond` is the index under
// kdamonds/ (not the slot), `pid` its target.
struct OwnedKdamond {
  uint32_t kdamond = 0;
  pid_t pid = 0;
  friend bool operator==(const OwnedKdamond&, const OwnedKdamond&) = default;
};
// The state file: one "kdamond=N pid=P" line each. A missing file is an empty list; a malformed
// one an error (naming the line).
[[nodiscard]] Result<std::vector<OwnedKdamond>> loadOwnedKdamonds(const std::string& path);
// Replaces the file whole (sys::replaceFile); an empty list removes it.
[[nodiscard]] Result<void> saveOwnedKdamonds(const std::string& path, const std::vector<OwnedKdamond>& owned);

class DamonSysfs {
 public:
  // `sysfs` rooted at /sys (or a fixture tree).
  DamonSysfs(Fs sysfs, uint32_t firstKdamond, uint32_t slots)
      : sysfs_(std::move(sysfs)), first_(firstKdamond), wanted_(slots), slots_(slots) {}

  [[nodiscard]] bool available() const;
  // Creates the kdamond slots (nr_kdamonds) and gives each slot that is off one context. Slots found
  // running are left as they are and returned: a kdamond refuses configuration writes while it runs
  // (EBUSY), and nothing says whose it is (an earlier run of the daemon that died, or another tool
  // such as damo, whose default is kdamond 0).
  // Growing nr_kdamonds makes the kernel remove every kdamond directory and create them anew: it
  // is refused (EBUSY) while any kdamond runs, and would throw away the setup of another tool's
  // kdamond that is configured but off. So it is not grown when a kdamond below `firstKdamond`
  // has a context, and when it cannot grow, the slots are the kdamonds at and after
  // `firstKdamond` that exist (fewer than asked; `slots()` says how many, `shortfall()` why).
  // An error when there are none.
  [[nodiscard]] Result<std::vector<uint32_t>> prepare();
  // Why prepare() gave fewer slots than asked for; empty when it did not.
  [[nodiscard]] const std::string& shortfall() const { return shortfall_; }
  // Puts nr_kdamonds back to what prepare() found, if it grew it: for a source that turns out
  // unusable after prepare() (the kernel lacks what it needs), so the machine is left as found.
  [[nodiscard]] Result<void> undoGrowth();
  // The pid a slot's kdamond monitors (its first target).
  [[nodiscard]] Result<pid_t> targetPid(uint32_t slot) const;
  // Configures slot `slot` for `pid` (vaddr, one "stat" scheme over all regions) and turns it on.
  [[nodiscard]] Result<void> start(uint32_t slot, pid_t pid, const DamonAttrs& attrs);
  [[nodiscard]] Result<void> stop(uint32_t slot);
  // Whether the slot's kdamond runs. It stops by itself when its target process exits.
  [[nodiscard]] Result<bool> running(uint32_t slot) const;
  // Whether this kernel's DAMON sysfs reports a scheme's tried regions (6.2+; 6.1 has DAMON sysfs
  // without them, so regions() could never succeed). Gives `slot` (off) its scheme directory to
  // look; a running slot is only looked at.
  [[nodiscard]] Result<bool> reportsRegions(uint32_t slot, bool running);
  // Whether this kernel's DAMON has the virtual-address operations (CONFIG_DAMON_VADDR): a slot's
  // contexts/0/avail_operations lists them (6.2+; a kernel without the file is taken to have them,
  // and start() says otherwise). DAMON_SYSFS builds without vaddr exist (this host: paddr only),
  // and there every start fails with EINVAL.
  [[nodiscard]] Result<bool> offersVaddr(uint32_t slot) const;
  // Asks the kdamond to refresh tried_regions. Blocks until it has: the kernel answers at the end
  // of the kdamond's current aggregation interval (aggr_us, 100 ms by default).
  [[nodiscard]] Result<void> requestRegions(uint32_t slot) const;
  // Reads tried_regions as the last request left them (does not block).
  [[nodiscard]] Result<std::vector<DamonRegion>> readRegions(uint32_t slot) const;
  // Both, one after the other.
  [[nodiscard]] Result<std::vector<DamonRegion>> regions(uint32_t slot);
  [[nodiscard]] uint32_t slots() const { return slots_; }
  [[nodiscard]] uint32_t firstKdamond() const { return first_; }

 private:
  [[nodiscard]] std::string dir(uint32_t slot) const;
  Fs sysfs_;
  uint32_t first_;
  uint32_t wanted_;  // the slots configured
  uint32_t slots_;   // the slots prepare() could have
  std::string shortfall_;
  std::optional<uint64_t> grewFrom_;  // nr_kdamonds before prepare() grew it (0 is a count too)
};

}  // namespace tt::sys
