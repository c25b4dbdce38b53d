// The interface between the tiered-memory simulator and a placement policy.
//
// The simulator replays a trace (tools/tiersim/Trace.h) through a cost model of two or three tiers;
// every policy, the peers' re-implementations and tensortier's own (which runs daemon/heat and
// daemon/policy, the same library as the daemon), sees the run only through this interface.
//
// Time is simulated nanoseconds. Pages are 4 KiB, numbered 0..totalPages-1 in one simulated
// address space; a policy that needs virtual addresses uses kSimBase + page * 4096.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/Types.h"

namespace tt::tiersim {

using PageId = uint64_t;
inline constexpr uint64_t kSimBase = 0x7f0000000000ULL;
inline constexpr pid_t kSimTgid = 4242;

// Tier index: 0 = fast (DRAM), 1 = slow (PMEM/CXL), 2 = a third, slower tier when configured.
using TierId = uint8_t;

struct TraceRegion {
  uint64_t id = 0;
  PageId firstPage = 0;
  uint64_t pages = 0;
  RegionKind kind = RegionKind::Other;
  std::string name;
};

// One access record: `count` cache-line accesses to one page (a trace compresses repeated
// accesses to a page within a short interval into one record).
struct SimAccess {
  uint64_t timeNs = 0;
  PageId page = 0;
  uint32_t count = 1;
  bool write = false;
};

struct TierInfo {
  uint64_t capacityPages = 0;
  uint64_t usedPages = 0;
  double readLatencyNs = 0;
  double writeLatencyNs = 0;
  double readBandwidthBytesPerNs = 0;   // GB/s == bytes/ns
  double writeBandwidthBytesPerNs = 0;
};

struct EpochContext {
  uint64_t nowNs = 0;
  uint64_t epoch = 0;
  // index = TierId. usedPages counts where pages will be once the copy queue has drained (pages
  // resident, plus queued copies in, minus queued copies out), so capacityPages - usedPages is
  // the room a new move into the tier can still be accepted into.
  std::vector<TierInfo> tiers;
  // Tier that serves every page now (never-touched pages: 0; see present). A page whose copy is
  // queued or in flight shows its old tier until the copy completes; emitting the same move
  // again is a no-op, a different one replaces the queued copy (see SimConfig::migrationOverlap).
  const std::vector<TierId>* tierOf = nullptr;
  const std::vector<uint8_t>* present = nullptr; // 1 if the page has been touched (allocated)
  // Migration bandwidth the simulator charges, bytes per ns, fast<-slow and fast->slow.
  double promoteBytesPerNs = 0;
  double demoteBytesPerNs = 0;
  // Copies accepted in earlier epochs and not yet completed (the one in flight included): the
  // copy engine's backlog. Added with the copy queue; policies that ignore it still work.
  uint64_t queuedPages = 0;
  // PTE accessed ("young") bit of every page: the simulator sets it on every access; a policy that
  // emulates kernel LRU aging (the TPP-like one) tests and clears it, as page_referenced() does.
  // Added after the first version of this interface; policies that do not age an LRU ignore it.
  std::vector<uint8_t>* accessedBits = nullptr;
  // For offline policies only (their full trace is in trace time, not simulated time): how far the
  // replay has got in the trace, and how many cache-line accesses one unit of SimAccess::count
  // stands for (the trace's recording period). Online policies must not use them.
  uint64_t traceNowNs = 0;
  uint32_t linesPerCount = 1;
};

struct PageMove {
  PageId page = 0;
  TierId to = 0;
};

class Policy {
 public:
  virtual ~Policy() = default;
  [[nodiscard]] virtual std::string name() const = 0;

  // Called once before the replay. Offline policies (the AutoTM-like static optimum, the all-DRAM
  // bound) get the whole trace in `fullTrace`; online policies get nullptr and must not peek.
  virtual void init(const std::vector<TraceRegion>& regions, uint64_t totalPages,
                    const std::vector<TierInfo>& tiers, const std::vector<SimAccess>* fullTrace) = 0;

  // Where a page goes on first touch (the kernel's first-touch allocation: fast while it has room).
  // Default: the fastest tier with free capacity.
  [[nodiscard]] virtual TierId firstTouchTier(PageId page, const std::vector<TierInfo>& tiers) const;

  // A sampled access, as a PMU / BPF source would deliver it (the simulator samples at its
  // configured rate, e.g. 1 in N, and scales nothing: count is the record's own count). Each call
  // is one sample, standing for N cache-line accesses: a record of L lines (count x the trace's
  // own sample period) is delivered Binomial(L, 1/N) times, so L/N times on average, at least
  // once with probability 1 - (1 - 1/N)^L.
  virtual void onSample(const SimAccess& access) = 0;

  // What a kernel NUMA-hinting scan would see: an access to a slow-tier page, at the simulator's
  // configured hint-scan rate. TPP-like policies use it; others may ignore it.
  virtual void onHintFault(const SimAccess& access) { (void)access; }

  // Client iteration marks (step begin/end, phase) as a registered training process sends them.
  virtual void onMark(const IterationMark& mark) = 0;

  // Once per epoch (configurable, e.g. 10 ms simulated): append the moves wanted now. The simulator
  // queues them in order behind earlier epochs' copies and copies them at its migration
  // bandwidth; each page changes tier when its copy completes. A move to a full tier is refused
  // (counted) unless the policy demotes out of it first in the same list (or an earlier one).
  virtual void onEpoch(const EpochContext& context, std::vector<PageMove>& moves) = 0;
};

}  // namespace tt::tiersim
