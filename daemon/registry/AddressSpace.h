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
};

// /proc/PID/maps through sys::Fs (procfs root from the config, a fixture tree in tests).
//
// A training process has hundreds to thousands of VMAs and registers many tensors in a burst, so
// the parsed maps of a process are kept for `kCacheFor`: a range covered by the cached maps is
// accepted without re-reading; anything else re-reads. The cost of a stale accept (a range
// unmapped within that second) is only failed moves on the client's own memory: identity and
// ownership come from SO_PEERCRED, not from this check.
class ProcMapsInspector final : public AddressSpaceInspector {
 public:
  static constexpr std::chrono::milliseconds kCacheFor{1000};

  explicit ProcMapsInspector(std::string procfsRoot) : procfs_(std::move(procfsRoot)) {}
  Result<bool> rangeMapped(pid_t pid, uint64_t start, uint64_t end) override;
  void forget(pid_t pid) override;

 private:
  struct Cached {
    std::vector<sys::Mapping> maps;
    std::chrono::steady_clock::time_point readAt;
  };
  sys::Fs procfs_;
  std::mutex mutex_;
  std::unordered_map<pid_t, Cached> cache_;
};

}  // namespace tt::registry
