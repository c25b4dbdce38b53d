// Whether an address range is mapped in a process: the registry asks this before it accepts a
// region, so a client can only name memory that is really mapped in its own address space.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/Result.h"
#include "sys/Fs.h"
#include "sys/service/ProcessMaps.h"

namespace tt::registry {

class AddressSpaceInspector {
 public:
  virtual ~AddressSpaceInspector() = default;
  // True when all of [start, end) is mapped in `pid`; an error when the process cannot be read.
  [[nodiscard]] virtual Result<bool> rangeMapped(pid_t pid, uint64_t start, uint64_t end) = 0;
  // The process is gone (or its pid is about to mean another process): drop what is cached.
  virtual void forget(pid_t /*pid*/) {}
  // Whether the process runs with these effective ids now (a setuid or setgid exec changes them).
  [[nodiscard]] virtual Result<bool> runsAs(pid_t pid, uid_t uid, gid_t gid) = 0;
};

// /proc/PID/maps through sys::Fs (procfs root from the config, a fixture tree in tests).
//
// A training process has hundreds to thousands of VMAs and registers many tensors in a burst, so
// the parsed maps of a process are kept for `kCacheFor`: a range covered by the cached maps is
// accepted without re-reading. The cost of a stale accept (a range unmapped within that second)
// is only failed moves on the client's own memory: identity and ownership come from SO_PEERCRED,
// not from this check.
//
// Anything else is asked of the kernel VMA by VMA (PROCMAP_QUERY, 6.11+), up to `kQueryVmas`
// VMAs. The registry runs on the daemon's event loop, and a client that kept registering
// unmapped ranges used to have the whole maps file re-read each time: with ~65k VMAs, ~30 ms of
// the loop per request, at no cost to the client. A range spanning more VMAs than that reads the
// whole file, but at most once per `kCacheFor` per process; within that second such a range is
// judged by the last read (a range of that many VMAs mapped in the last second is refused as not
// mapped, and a retry after it succeeds). Kernels without the ioctl read the file on every miss,
// as before: refusing misses there would refuse freshly mapped tensors.
class ProcMapsInspector final : public AddressSpaceInspector {
 public:
  static constexpr std::chrono::milliseconds kCacheFor{1000};
  static constexpr size_t kQueryVmas = 256;  // ~0.2 ms of ioctls on this host (0.8 us per VMA)

  explicit ProcMapsInspector(std::string procfsRoot) : procfs_(std::move(procfsRoot)) {}
  Result<bool> rangeMapped(pid_t pid, uint64_t start, uint64_t end) override;
  void forget(pid_t pid) override;
  Result<bool> runsAs(pid_t pid, uid_t uid, gid_t gid) override;

 private:
  struct Cached {
    std::vector<sys::Mapping> maps;
    std::chrono::steady_clock::time_point readAt;
  };
  // Whether PROCMAP_QUERY works here: unknown until first asked, then what the kernel said.
  enum class KernelQuery { kUnknown, kWorks, kMissing };

  sys::Fs procfs_;
  std::mutex mutex_;
  KernelQuery kernelQuery_ = KernelQuery::kUnknown;
  std::unordered_map<pid_t, Cached> cache_;
};

}  // namespace tt::registry
