// The cost model of tiersim: what an access, a window of accesses and a page copy cost in time.
//
// Model (documented in docs/benchmarks.md, "Policy simulator (tiersim)"):
//  - A trace's timestamps are compute time: the time the step would take if memory were free.
//  - The accesses of each short window (SimConfig::windowNs of trace time) cost, per tier,
//      max(latency term, bandwidth term)
//    latency term   = (read lines * read latency + write lines * write latency) / memory parallelism
//    bandwidth term = read bytes / read bandwidth + write bytes / write bandwidth
//    (a roofline per tier: streaming DNN kernels keep many misses in flight, so most windows are
//    bandwidth bound; the latency term dominates only for sparse, irregular windows). Tiers are
//    summed (conservative: they share the core's miss-handling resources).
//  - Window time = compute + stall - overlap * min(compute, stall); overlap 0 (default) gives the
//    plain "compute + memory stall" model.
//  - A migration copies 4 KiB per page at min(copy engine rate, source read bw, destination write
//    bw); the non-overlapped share is charged directly, the overlapped share runs beside the
//    application and is charged as bandwidth it steals from both tiers, in the windows the copy
//    runs in (the replay's copy queue, Simulator.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tt::tiersim {

inline constexpr double kCacheLineBytes = 64.0;
inline constexpr double kPageBytes = 4096.0;

struct TierSpec {
  std::string name;
  double readLatencyNs = 0;
  double writeLatencyNs = 0;
  double readBandwidthBytesPerNs = 0;   // GB/s == bytes/ns
  double writeBandwidthBytesPerNs = 0;
};

// Published figures, one socket. See CostModel.cpp for the sources.
[[nodiscard]] TierSpec dramTier();
[[nodiscard]] TierSpec optaneTier(int dimms = 6);
[[nodiscard]] TierSpec cxlTier();
// "dram", "optane" (6 interleaved DIMMs), "optane1" (one DIMM), "cxl"; nullopt-like: empty name.
[[nodiscard]] TierSpec tierByName(const std::string& name);

// Traffic of one tier in one window.
struct TierTraffic {
  uint64_t readLines = 0;
  uint64_t writeLines = 0;
  double extraReadBytes = 0;   // bandwidth stolen by overlapped migration copies
  double extraWriteBytes = 0;
};

[[nodiscard]] double latencyTermNs(const TierSpec& tier, const TierTraffic& traffic,
                                   double memoryParallelism);
[[nodiscard]] double bandwidthTermNs(const TierSpec& tier, const TierTraffic& traffic);
// max(latency term, bandwidth term).
[[nodiscard]] double tierStallNs(const TierSpec& tier, const TierTraffic& traffic,
                                 double memoryParallelism);
// compute + stall - overlap * min(compute, stall).
[[nodiscard]] double windowTimeNs(double computeNs, double stallNs, double overlap);
// Copy rate of a page migration from one tier to another, bytes per ns.
[[nodiscard]] double copyBytesPerNs(const TierSpec& from, const TierSpec& to,
                                    double copyEngineBytesPerNs);

}  // namespace tt::tiersim
