// The daemon's reads and writes of another user's /proc/PID files, with exactly the capabilities
// the shipped unit (systemd/tensortierd.service, CapabilityBoundingSet) leaves it. Training jobs
// run as their users, the daemon as root without most capabilities: /proc/PID/pagemap (mode 0400)
// and clear_refs (0200) belong to the process's user, so the daemon passes their permission checks
// only with CAP_DAC_OVERRIDE; CAP_SYS_PTRACE covers the ptrace check behind them, not the mode.
// Without it, soft-dirty saw nothing of any other user's process while its status said "ok".
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "support/ChildProcess.h"
#include "support/TestSupport.h"
#include "sys/Fs.h"
#include "sys/PageMover.h"
#include "sys/Pagemap.h"
#include "sys/ProcMaps.h"
#include "sys/access/SoftDirty.h"

namespace {

constexpr uid_t kNobody = 65534;
constexpr size_t kPage = 4096;

// The capability numbers of the names a unit may list (linux/capability.h).
const std::map<std::string, int>& capabilityNumbers() {
  static const std::map<std::string, int> numbers = {
      {"CAP_CHOWN", CAP_CHOWN},           {"CAP_DAC_OVERRIDE", CAP_DAC_OVERRIDE},
      {"CAP_DAC_READ_SEARCH", CAP_DAC_READ_SEARCH}, {"CAP_FOWNER", CAP_FOWNER},
      {"CAP_KILL", CAP_KILL},             {"CAP_SETUID", CAP_SETUID},
      {"CAP_SETGID", CAP_SETGID},         {"CAP_NET_ADMIN", CAP_NET_ADMIN},
      {"CAP_IPC_LOCK", CAP_IPC_LOCK},     {"CAP_SYS_PTRACE", CAP_SYS_PTRACE},
      {"CAP_SYS_ADMIN", CAP_SYS_ADMIN},   {"CAP_SYS_NICE", CAP_SYS_NICE},
      {"CAP_SYS_RESOURCE", CAP_SYS_RESOURCE}, {"CAP_PERFMON", CAP_PERFMON},
      {"CAP_BPF", CAP_BPF},
  };
  return numbers;
}

// The unit's CapabilityBoundingSet as capability numbers; a name this test does not know fails it.
std::vector<int> unitCapabilities() {
  const std::string unit = tt::test::readFileOrFail(tt::test::sourcePath("systemd/tensortierd.service"));
  std::smatch m;
  if (!std::regex_search(unit, m, std::regex("\nCapabilityBoundingSet=([^\n]*)\n"))) {
    ADD_FAILURE() << "no CapabilityBoundingSet in the unit";
    return {};
  }
  std::vector<int> caps;
  std::istringstream names(m[1].str());
  for (std::string name; names >> name;) {
    auto it = capabilityNumbers().find(name);
    if (it == capabilityNumbers().end()) {
      ADD_FAILURE() << "the unit names " << name << ", which this test does not know";
      continue;
    }
    caps.push_back(it->second);
  }
  return caps;
}

// Leaves the calling process (root) with exactly `caps` effective and permitted.
bool keepOnly(const std::vector<int>& caps) {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  for (int cap : caps) {
    data[cap / 32].effective |= 1U << (cap % 32);
    data[cap / 32].permitted |= 1U << (cap % 32);
  }
  return ::syscall(SYS_capset, &header, data) == 0;
}

// Runs `body` in a forked child of this (root) process holding only the unit's capabilities; its
// output (what failed, one line each) comes back as a string.
template <typename Body>
std::string withUnitCapabilities(Body body) {
  const std::vector<int> caps = unitCapabilities();
  return tt::test::outputOfChild(
      [&] { return keepOnly(caps) ? body() : std::string("capset: ") + std::strerror(errno) + "\n"; });
}

TEST(UnitCapabilities, ReachAnotherUsersProcFiles) {
  TT_REQUIRE_ROOT();
  tt::test::TouchingChild child(64 * kPage, kNobody);
  ASSERT_GT(child.pid(), 0);
  const pid_t pid = child.pid();
  const uint64_t base = child.address();
  const std::string failures = withUnitCapabilities([pid, base]() {
    std::string out;
    const tt::sys::Fs procfs("/proc");
    tt::sys::ProcSoftDirtyTracker softDirty(procfs);
    if (auto r = softDirty.track(pid); !r) out += "soft-dirty track: " + r.error().message() + "\n";
    if (auto r = softDirty.clear(pid); !r) out += "soft-dirty clear: " + r.error().message() + "\n";
    std::vector<uint64_t> dirty;
    if (auto r = softDirty.dirtyPages(pid, base, 64, dirty); !r) out += "soft-dirty read: " + r.error().message() + "\n";
    if (auto r = tt::sys::readSmaps(procfs, pid); !r) out += "smaps: " + r.error().message() + "\n";
    tt::sys::ProcHugePageProbe huge(procfs);
    if (auto r = huge.hugeRanges(pid, base, 64 * kPage); !r) out += "huge-page probe: " + r.error().message() + "\n";
    std::vector<void*> pages(64);
    for (size_t i = 0; i < pages.size(); ++i) pages[i] = reinterpret_cast<void*>(base + i * kPage);
    std::vector<int> status(pages.size(), -1000);
    tt::sys::LinuxPageMover mover;
    if (auto r = mover.queryPages(pid, pages, status); !r) out += "move_pages query: " + r.error().message() + "\n";
    return out;
  });
  EXPECT_EQ(failures, "") << "with the unit's capabilities the daemon cannot do its work on a process of uid "
                          << kNobody;
}

}  // namespace
