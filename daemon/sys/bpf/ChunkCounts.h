// User-space side of the per-chunk page counters BPF programs keep in kernel (bpf/tt_chunk_counts.h):
// a hash of (tgid, 2 MiB-aligned chunk) -> 512 per-page u8 counters, read and emptied once per epoch.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/Result.h"

namespace tt::sys::bpf {

inline constexpr uint32_t kChunkPages = 512;  // TT_CHUNK_PAGES
inline constexpr uint64_t kChunkBytes = uint64_t{kChunkPages} * 4096;
inline constexpr uint8_t kChunkCountMax = 255;  // a page's counter saturates here

// One drained block: events of page `base + i * 4096` in counts[i] (0 = none).
struct ChunkCounts {
  uint32_t tgid = 0;
  uint64_t base = 0;  // 2 MiB aligned
  std::array<uint8_t, kChunkPages> counts{};
};

// Drains one `chunks` map (its fd is known once the program is loaded). Not thread-safe; one per map.
class ChunkCountMap {
 public:
  // `what` names the map in errors ("perf_sample_agg chunks").
  explicit ChunkCountMap(std::string what) : what_(std::move(what)) {}

  // Reads and removes every block of map `mapFd` (BPF_MAP_LOOKUP_AND_DELETE_BATCH; falls back to
  // a key walk on kernels without batch ops). Appends to `out`; returns the number appended.
  [[nodiscard]] Result<size_t> drain(int mapFd, std::vector<ChunkCounts>& out);

 private:
  std::string what_;
  bool batchUnsupported_ = false;
  uint32_t batch_ = 256;  // blocks per batch call; grows when one hash bucket holds more
  std::vector<uint8_t> keys_, values_;
};

}  // namespace tt::sys::bpf
