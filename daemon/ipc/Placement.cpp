#include "ipc/Placement.h"

#include <algorithm>

#include "core/Types.h"

namespace tt::ipc {

std::optional<uint64_t> placementStride(uint64_t totalPages, uint64_t regions) {
  constexpr uint64_t kBudget = kPlacementPagesPerRequest;
  if (regions > kBudget) return std::nullopt;
  if (totalPages <= kBudget) return 1;
  // sum(ceil(p_i / s)) <= totalPages / s + regions <= kBudget once s >= totalPages / (kBudget - regions).
  if (regions == kBudget) return totalPages;  // one page a region
  const uint64_t room = kBudget - regions;
  return std::max<uint64_t>(1, (totalPages + room - 1) / room);
}

uint64_t pagesOf(std::span<const registry::RegionRecord> regions) {
  uint64_t pages = 0;
  for (const auto& r : regions) pages += r.info.length / kBasePageSize;
  return pages;
}

Result<Placement> PlacementReader::read(pid_t pid, uint64_t start, uint64_t length, uint64_t stride) const {
  Placement out;
  if (stride == 0) stride = 1;
  const uint64_t pages = length / kBasePageSize;
  std::vector<void*> addresses;  // per call: callers on several threads
  std::vector<int> status;
  for (uint64_t first = 0; first < pages;) {
    addresses.clear();
    uint64_t weight = 0;
    for (uint64_t i = first; i < pages && addresses.size() < kChunkPages; i += stride) {
      addresses.push_back(reinterpret_cast<void*>(start + i * kBasePageSize));
    }
    const uint64_t next = first + addresses.size() * stride;
    status.assign(addresses.size(), 0);
    if (auto r = mover_.queryPages(pid, addresses, status); !r) return r.error();
    for (size_t k = 0; k < status.size(); ++k) {
      // The last sampled page stands for the pages up to the end, not a whole stride.
      const uint64_t idx = first + k * stride;
      weight = std::min(stride, pages - idx) * kBasePageSize;
      if (status[k] >= 0) out.bytesPerNode[status[k]] += weight;
      else out.unmappedBytes += weight;
    }
    first = next;
  }
  return out;
}

}  // namespace tt::ipc
