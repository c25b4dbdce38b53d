#include "CostModel.h"

#include <algorithm>

namespace tt::tiersim {

// DRAM: Izraelevitz et al., "Basic Performance Measurements of the Intel Optane DC Persistent
// Memory Module", arXiv:1903.05714 (2019), and Yang et al., "An Empirical Guide to the Behavior and
// Use of Scalable Persistent Memory", FAST'20: idle random read latency of local DDR4 about 81 ns;
// six DDR4-2666 channels of one Cascade Lake socket reach roughly 100 GB/s read and 80 GB/s write
// (we use 100 / 80; only the ratio to the slow tier matters for normalised results).
TierSpec dramTier() { return TierSpec{"dram", 81.0, 86.0, 100.0, 80.0}; }

// Optane DC PMM (first generation, App Direct / KMEM): same sources. Idle random read latency
// about 305 ns (sequential 169 ns); a store is acknowledged once it reaches the controller's write
// pending queue, about 94 ns; one DIMM sustains about 6.6 GB/s read and 2.3 GB/s write, and six
// interleaved DIMMs about 39 GB/s read and 13.9 GB/s write (scaling is near linear).
TierSpec optaneTier(int dimms) {
  const double n = std::max(1, dimms);
  return TierSpec{dimms == 1 ? "optane1" : "optane", 305.0, 94.0, 6.6 * n, 2.3 * n};
}

// CXL 1.1 memory expander (one ASIC device, DDR4/DDR5 behind a PCIe 5.0 x8/x16 link): Sun et al.,
// "Demystifying CXL Memory with Genuine CXL-Ready Systems and Devices", MICRO'23, measure about 2x
// to 2.5x local-DRAM latency and tens of GB/s per device; Li et al., "Pond", ASPLOS'23, estimate
// 70-90 ns over local DRAM for the expander path (170-250 ns total). We use 214 ns for reads and
// writes and 28 / 24 GB/s read / write: an approximation, not a specific product.
TierSpec cxlTier() { return TierSpec{"cxl", 214.0, 214.0, 28.0, 24.0}; }

TierSpec tierByName(const std::string& name) {
  if (name == "dram") return dramTier();
  if (name == "optane") return optaneTier(6);
  if (name == "optane1") return optaneTier(1);
  if (name == "cxl") return cxlTier();
  return TierSpec{};
}

double latencyTermNs(const TierSpec& tier, const TierTraffic& traffic, double memoryParallelism) {
  const double parallelism = std::max(1.0, memoryParallelism);
  return (static_cast<double>(traffic.readLines) * tier.readLatencyNs +
          static_cast<double>(traffic.writeLines) * tier.writeLatencyNs) /
         parallelism;
}

double bandwidthTermNs(const TierSpec& tier, const TierTraffic& traffic) {
  const double readBytes = static_cast<double>(traffic.readLines) * kCacheLineBytes + traffic.extraReadBytes;
  const double writeBytes = static_cast<double>(traffic.writeLines) * kCacheLineBytes + traffic.extraWriteBytes;
  double ns = 0;
  if (readBytes > 0) ns += readBytes / tier.readBandwidthBytesPerNs;
  if (writeBytes > 0) ns += writeBytes / tier.writeBandwidthBytesPerNs;
  return ns;
}

double tierStallNs(const TierSpec& tier, const TierTraffic& traffic, double memoryParallelism) {
  return std::max(latencyTermNs(tier, traffic, memoryParallelism), bandwidthTermNs(tier, traffic));
}

double windowTimeNs(double computeNs, double stallNs, double overlap) {
  const double o = std::clamp(overlap, 0.0, 1.0);
  return computeNs + stallNs - o * std::min(computeNs, stallNs);
}

double copyBytesPerNs(const TierSpec& from, const TierSpec& to, double copyEngineBytesPerNs) {
  return std::min({copyEngineBytesPerNs, from.readBandwidthBytesPerNs, to.writeBandwidthBytesPerNs});
}

}  // namespace tt::tiersim
