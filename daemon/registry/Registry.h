// The registry: which processes are clients, which regions each registered, per-uid usage and
// limits, and a change log (process/region added/removed, iteration marks) that the epoch loop
// drains to feed sources and heat.
//
// Identity: every call names the peer (pid/uid from SO_PEERCRED, taken by daemon/ipc); a region is
// always registered for the peer's own pid and checked against its address space first.
//
// Errors carry an errno that says which protocol error it is: EINVAL bad request, EFAULT not
// mapped, EEXIST overlap, ENOENT no such region, EDQUOT a per-uid limit, EUSERS the global
// connection limit. daemon/ipc maps them to ErrorCode.
//
// Scale: regions are kept per process in an interval map (start -> id, non-overlapping) plus one
// id -> region hash; about 250 bytes per region, so 100k regions stay well under 64 MiB.
//
// Thread-safety: every public call takes one mutex; the ipc loop, its request workers
// (ipc::RequestWorkers: registrations) and the epoch thread share it, and none holds it across
// I/O (a registration's maps check is done outside it, and its checks repeated after).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/Result.h"
#include "core/Types.h"
#include "registry/AddressSpace.h"

namespace tt::registry {

struct Peer {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

struct Limits {
  uint32_t maxConnections = 4096;        // all uids together
  uint32_t maxConnectionsPerUid = 256;
  uint32_t maxRegionsPerUid = 262144;
  uint64_t maxBytesPerUid = 1ULL << 44;
};

struct RegisterRequest {
  uint64_t address = 0;  // need not be aligned: whole pages are covered
  uint64_t length = 0;
  RegionKind kind = RegionKind::Other;
  std::string name;
  uint64_t expectedLifetimeSteps = 0;
};

struct ProcessSummary {
  pid_t pid = 0;
  uid_t uid = 0;
  std::string clientName;
  bool acceptsMbind = false;
  uint32_t connections = 0;
  uint64_t regions = 0;
  uint64_t registeredBytes = 0;
  uint64_t lastStep = 0;
};

struct RegionRecord {
  RegionInfo info;
  // Last values the epoch loop published (0 until a heat model is wired).
  double heat = 0;
  double steadySteps = 0;  // steps the region has been in use without a break (heat::UnitHeat)
};

// What the epoch loop publishes per region after each plan.
struct RegionHeat {
  uint64_t regionId = 0;
  double heat = 0;
  double steadySteps = 0;
};

struct RegistryEvent {
  enum class Type : uint8_t { ProcessAdded, ProcessRemoved, RegionAdded, RegionRemoved, Mark };
  Type type = Type::ProcessAdded;
  pid_t tgid = 0;
  RegionInfo region;  // RegionAdded; RegionRemoved carries id and tgid, start/length
  IterationMark mark; // Mark
};

struct Totals {
  uint64_t processes = 0;
  uint64_t regions = 0;
  uint64_t registeredBytes = 0;
  uint64_t connections = 0;
};

class Registry {
 public:
  // Marks queued beyond this between two drains are dropped oldest-first, the older half of them
  // at a time (a stalled epoch loop must not grow the daemon without bound).
  static constexpr size_t kMaxQueuedMarks = 65536;

  Registry(AddressSpaceInspector& inspector, Limits limits);

  void setLimits(const Limits& limits);
  [[nodiscard]] Limits limits() const;

  // A new connection of `uid`: counted against the connection limits (EUSERS / EDQUOT).
  [[nodiscard]] Result<void> openConnection(uid_t uid);
  void closeConnection(uid_t uid);

  // The peer's process said Hello. Returns true when the process was not known yet (the caller
  // then starts watching its pidfd).
  bool attachProcess(const Peer& peer, const std::string& clientName, bool acceptsMbind);
  // One of the process's connections closed; when none is left, the process and its regions go.
  // Returns whether the process was removed.
  bool detachProcess(pid_t pid);
  // The process exited (pidfd) or was replaced: drop it and all its regions. Returns the number
  // of regions removed.
  size_t removeProcess(pid_t pid);
  [[nodiscard]] bool hasProcess(pid_t pid) const;
  // Whether the process is known and was registered under `uid` (its regions are charged to it).
  [[nodiscard]] bool registeredUnder(pid_t pid, uid_t uid) const;

  // Whether the connection's peer may still act on its process: the process runs with the
  // effective uid and gid the connection was opened with (SO_PEERCRED; a root peer always may),
  // and is dumpable. A process that execs a setuid program, or a file-capability one (same ids,
  // but no longer dumpable), keeps its pid, and a child may have inherited its connection: without
  // this, that child could probe the new program's address space under the old ids
  // (registrations and placement say what is mapped where, which undoes its ASLR), which the
  // kernel itself would not show that uid either. A process not dumpable from the start (PR_SET_DUMPABLE
  // 0) cannot be told from one that became so after its connection was accepted, and is refused
  // too: only root may act on it.
  // EKEYREVOKED when not; ESRCH when the process is gone. Two stat(2)s, outside the lock; with
  // `afterExec` once an exec in progress has installed its ids: the check a request makes after
  // its probe, whose answer is dropped when it fails (an exec between the two).
  [[nodiscard]] Result<void> checkRunsAs(const Peer& peer, bool afterExec = false);
  // Whether the process still runs with the ids it was registered under, dumpable (true for root's).
  // False when it is not registered. For readers of its memory outside a request (listings).
  [[nodiscard]] Result<bool> runsAsRegistered(pid_t pid, bool afterExec = false);
  // The registered processes, not root's, that run with other ids than they were registered
  // under now, or are no longer dumpable (a setid or file-capability exec since): the service
  // drops them. Gone ones are left to their pidfd.
  [[nodiscard]] std::vector<pid_t> processesWithChangedIds();
  // The registered processes whose address space, as first probed, is gone while they live: they
  // ran exec since (a plain one: same ids), and their regions describe the program before. The
  // service drops them. One PROCMAP_QUERY each (sys::MapsHandle::alive).
  [[nodiscard]] std::vector<pid_t> processesThatExeced();
  // The same for one process (false when it was never probed).
  [[nodiscard]] bool execedSinceProbed(pid_t pid);
  // Whether the process said Hello with accepts_mbind on some connection (any thread).
  [[nodiscard]] bool acceptsMbind(pid_t pid) const;

  // Probes the peer's address space first (AddressSpaceInspector). Without `mayWait` it neither
  // opens the process's maps file nor waits for an exec's ids, which both may wait as long as an
  // exec takes to tear down the old address space (the event loop asks this way): EWOULDBLOCK
  // when no address space of the process is pinned yet (ask again with `mayWait`), and ESTALE, an
  // exec found, at once, also for a peer whose ids the exec may change (the caller then waits
  // for them: checkRunsAs with afterExec).
  // With `incarnation` (incarnationOf when the request began), only into that entry of the
  // process: a request that waited on a worker while the process exited and its pid was reused
  // must not add its region to the new process's entry.
  [[nodiscard]] Result<RegionInfo> registerRegion(const Peer& peer, const RegisterRequest& request,
                                                  bool mayWait = true, uint64_t incarnation = 0);
  // Which entry of `pid` is registered now: a number no other entry had (0: none).
  [[nodiscard]] uint64_t incarnationOf(pid_t pid) const;
  [[nodiscard]] Result<void> unregisterRegion(const Peer& peer, uint64_t regionId);
  void mark(const Peer& peer, IterationMark mark);

  // The regions of `pid` with these ids (all of them when `ids` is empty); unknown ids and ids of
  // other processes give ENOENT.
  [[nodiscard]] Result<std::vector<RegionRecord>> regionsOf(pid_t pid, std::span<const uint64_t> ids) const;
  [[nodiscard]] std::optional<RegionRecord> region(uint64_t id) const;
  // Every region, or those of one process (pid != 0), ordered by pid then address.
  [[nodiscard]] std::vector<RegionRecord> allRegions(pid_t pid = 0) const;
  [[nodiscard]] std::vector<ProcessSummary> processes() const;
  [[nodiscard]] Totals totals() const;

  // Heat per region from the heat model (epoch thread); unknown ids are ignored.
  void publishHeat(std::span<const RegionHeat> heat);

  // Everything that changed since the last drain, in order.
  [[nodiscard]] std::vector<RegistryEvent> drainEvents();

 private:
  struct Process {
    uid_t uid = 0;
    gid_t gid = 0;  // the effective ids of the connection that registered it
    std::string clientName;
    bool acceptsMbind = false;
    uint64_t incarnation = 0;
    uint32_t connections = 0;
    uint64_t bytes = 0;
    uint64_t lastStep = 0;
    std::map<uint64_t, uint64_t> byStart;  // region start -> id; regions never overlap
  };
  struct UidUsage {
    uint32_t connections = 0;
    uint64_t regions = 0;
    uint64_t bytes = 0;
  };

  void eraseRegionLocked(Process& process, std::unordered_map<uint64_t, RegionRecord>::iterator it);
  void pushEvent(RegistryEvent event);

  AddressSpaceInspector& inspector_;
  mutable std::mutex mutex_;
  Limits limits_;
  uint64_t nextRegionId_ = 1;
  uint64_t incarnations_ = 0;
  uint32_t connections_ = 0;
  std::unordered_map<pid_t, Process> processes_;
  std::unordered_map<uint64_t, RegionRecord> regions_;
  std::unordered_map<uid_t, UidUsage> usage_;
  std::vector<RegistryEvent> events_;
  size_t queuedMarks_ = 0;
};

}  // namespace tt::registry
