// Whether an address range is mapped in a process: the registry asks this before it accepts a
// region, so a client can only name memory that is really mapped in its own address space.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
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
  // `uid` is who asks (the work done for each uid is bounded). ESTALE when the process ran exec
  // since its address space was first asked about (the inspector pins that one), ESRCH when it is
  // gone. Without `mayOpen`, EWOULDBLOCK where the answer would need more than one ioctl on an
  // address space pinned before: pinning opens the maps file, which waits out an exec in progress,
  // and kernels without PROCMAP_QUERY read the whole file (the event loop asks this way).
  [[nodiscard]] virtual Result<bool> rangeMapped(pid_t pid, uid_t uid, uint64_t start, uint64_t end,
                                                 bool mayOpen = true) = 0;
  // Whether rangeMapped answers `pid` from an address space it pinned at its first call, by an
  // open that waited out any exec in progress: a check of the ids after that call then needs no
  // wait of its own (nothing it answers can describe a program exec'd after that open).
  [[nodiscard]] virtual bool pinsAddressSpace(pid_t pid) = 0;
  // Whether the address space pinned for `pid` is gone while the process lives: it ran exec since,
  // and what was registered describes the program it ran before. False when none is pinned.
  [[nodiscard]] virtual Result<bool> replacedAddressSpace(pid_t pid) = 0;
  // The process is gone (or its pid is about to mean another process): drop what is cached.
  virtual void forget(pid_t /*pid*/) {}
  // Whether the process runs with these effective ids now (a setuid or setgid exec changes them)
  // and is dumpable, so that the kernel would let those ids read its memory map too (an exec of
  // a file-capability program keeps the ids but not that); with `afterExec`, once an exec in
  // progress has installed its credentials (sys::processOwner). ESRCH when the process is gone.
  [[nodiscard]] virtual Result<bool> runsAs(pid_t pid, uid_t uid, gid_t gid, bool afterExec) = 0;
};

// /proc/PID/maps through sys::Fs (procfs root from the config, a fixture tree in tests).
//
// A client that kept registering unmapped ranges used to have its whole maps file re-read each
// time: with ~65k VMAs, ~30 ms per request (of the event loop then, of a request worker now), at
// no cost to the client. Where the kernel answers PROCMAP_QUERY (6.11+), a range
// is asked of it VMA by VMA (~0.8 us each, a few us for the usual one or two), and each uid may
// have at most `walkVmasPerSecond` VMAs looked up per second (a token bucket; 65536 by default:
// ~50 ms of a thread a second, plus one ioctl more per request); a range past what is left is
// refused with EDQUOT (LIMIT_EXCEEDED: retry later), having spent the rest, and a range of more
// VMAs than that never fits. The maps file is not read there.
//
// A process's maps file is opened once, at its first probe, and kept open until it is forgotten
// (sys::MapsHandle): every answer then describes the address space it had at that open, and a
// registration makes one ioctl where it made two opens. Opening it waits for the process's exec
// lock, which an exec holds while it tears the old address space down (0.66 s at 8 GiB here),
// and the first probe after an exec waits for the exec's ids (the registry asks), as a fresh open
// would (so does the placement queries' post-read check: their move_pages read is of whatever the
// process runs now). Those waits happen on ipc::RequestWorkers, not on the event loop: the
// registry and this inspector are called from several threads. An exec since is seen as that address
// space gone (ESTALE from rangeMapped, or replacedAddressSpace, which the server sweeps). Not
// seen: an exec while another process shares the address space (clone with CLONE_VM, not a
// thread) and keeps it alive; probes then go on answering from that shared address space, and
// the regions stay. (Telling it by /proc/PID/stat's stack and argument addresses was tried and
// dropped: that read waits on an exec in progress, ~0.7 s at 6 GiB, and reads 0 once the first
// thread has exited.)
//
// Kernels without the ioctl (ENOTTY; also fixture trees) read the maps file, and keep a process's
// parsed maps for `kCacheFor`: a training process registers many tensors in a burst, and a range
// covered by the cached maps is accepted without re-reading; anything else re-reads (refusing
// misses would refuse freshly mapped tensors). The cost of a stale accept (a range unmapped
// within that second) is only failed moves on the client's own memory: identity and ownership
// come from SO_PEERCRED, not from this check.
class ProcMapsInspector final : public AddressSpaceInspector {
 public:
  static constexpr std::chrono::milliseconds kCacheFor{1000};
  static constexpr uint64_t kWalkVmasPerSecond = 65536;

  explicit ProcMapsInspector(std::string procfsRoot, uint64_t walkVmasPerSecond = kWalkVmasPerSecond)
      : procfs_(std::move(procfsRoot)), walkVmasPerSecond_(walkVmasPerSecond) {}
  Result<bool> rangeMapped(pid_t pid, uid_t uid, uint64_t start, uint64_t end, bool mayOpen = true) override;
  bool pinsAddressSpace(pid_t pid) override;
  Result<bool> replacedAddressSpace(pid_t pid) override;
  void forget(pid_t pid) override;
  Result<bool> runsAs(pid_t pid, uid_t uid, gid_t gid, bool afterExec) override;

 private:
  struct Cached {
    std::vector<sys::Mapping> maps;
    std::chrono::steady_clock::time_point readAt;
  };
  struct Budget {
    double vmas = 0;  // VMAs the uid may still have looked up
    std::chrono::steady_clock::time_point at;
  };
  // Whether PROCMAP_QUERY works here: unknown until first asked, then what the kernel said.
  enum class KernelQuery { kUnknown, kWorks, kMissing };

  // Takes the VMAs a walk may use from `uid`'s budget (refilled since last time); `refund`
  // gives back what it did not use.
  [[nodiscard]] uint64_t takeBudget(uid_t uid, std::chrono::steady_clock::time_point now);
  void refund(uid_t uid, uint64_t vmas);
  [[nodiscard]] Result<bool> readMapsFile(pid_t pid, const sys::MapsHandle& handle, uint64_t start, uint64_t end,
                                          std::chrono::steady_clock::time_point now);
  // The process's pinned maps file, opened on first use (EWOULDBLOCK instead without `mayOpen`).
  [[nodiscard]] Result<std::shared_ptr<const sys::MapsHandle>> pinned(pid_t pid, bool mayOpen);
  // The pinned address space is gone: forgets it; ESTALE if the process lives (an exec), else ESRCH.
  [[nodiscard]] Result<bool> replaced(pid_t pid);

  sys::Fs procfs_;
  const uint64_t walkVmasPerSecond_;
  std::mutex mutex_;
  KernelQuery kernelQuery_ = KernelQuery::kUnknown;
  std::unordered_map<pid_t, Cached> cache_;
  std::unordered_map<pid_t, std::shared_ptr<const sys::MapsHandle>> pinned_;
  std::unordered_map<uid_t, Budget> budgets_;
};

}  // namespace tt::registry
