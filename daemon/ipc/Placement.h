// Where a region's pages are: bytes per NUMA node and bytes not faulted in yet, from
// move_pages(2) with nodes = NULL (sys::PageMover::queryPages), read in bounded chunks.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <vector>

#include "core/Result.h"
#include "sys/PageMover.h"

namespace tt::ipc {

struct Placement {
  std::map<int, uint64_t> bytesPerNode;
  uint64_t unmappedBytes = 0;
};

class PlacementReader {
 public:
  explicit PlacementReader(sys::PageMover& mover) : mover_(mover) {}

  // Every page of [start, start + length) when `stride` is 1; with a larger stride only every
  // stride-th page is queried and counted as `stride` pages (a cheap estimate for big regions).
  [[nodiscard]] Result<Placement> read(pid_t pid, uint64_t start, uint64_t length, uint64_t stride = 1);

 private:
  static constexpr size_t kChunkPages = 16384;
  sys::PageMover& mover_;
  std::vector<void*> pages_;
  std::vector<int> status_;
};

}  // namespace tt::ipc
