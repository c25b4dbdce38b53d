// Where a region's pages are: bytes per NUMA node and bytes not faulted in yet, from
// move_pages(2) with nodes = NULL (sys::PageMover::queryPages), read in bounded chunks.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "core/Result.h"
#include "registry/Registry.h"
#include "sys/PageMover.h"

namespace tt::ipc {

struct Placement {
  std::map<int, uint64_t> bytesPerNode;
  uint64_t unmappedBytes = 0;
};

// Pages one request (a client's QueryPlacement, tensortierctl regions) may ask the kernel about:
// move_pages(2) runs on the daemon's event loop, 137-202 ns a page here, so 1 GiB of 4 KiB pages
// is about 36-53 ms. Regions over more pages in all are read at every Nth page (registrations may
// be terabytes of reserved memory).
inline constexpr uint64_t kPlacementPagesPerRequest = 262144;
// The stride for `regions` regions of `totalPages` pages in all: each region is read at least at
// its first page, so the stride keeps sum(ceil(pages_i / stride)) <= kPlacementPagesPerRequest.
// nullopt when the regions alone are more than that (the request must ask for fewer).
[[nodiscard]] std::optional<uint64_t> placementStride(uint64_t totalPages, uint64_t regions);
// The 4 KiB pages of `regions`, for placementStride.
[[nodiscard]] uint64_t pagesOf(std::span<const registry::RegionRecord> regions);

class PlacementReader {
 public:
  explicit PlacementReader(sys::PageMover& mover) : mover_(mover) {}

  // Every page of [start, start + length) when `stride` is 1; with a larger stride only every
  // stride-th page is queried and counted as `stride` pages (a cheap estimate for big regions).
  // Thread-safe (client queries and admin listings run on ipc::RequestWorkers) as far as the mover
  // is.
  [[nodiscard]] Result<Placement> read(pid_t pid, uint64_t start, uint64_t length, uint64_t stride = 1) const;

 private:
  static constexpr size_t kChunkPages = 16384;
  sys::PageMover& mover_;
};

}  // namespace tt::ipc
