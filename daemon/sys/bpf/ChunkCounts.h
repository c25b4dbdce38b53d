// User-space side of the per-chunk page counters BPF programs keep in kernel (bpf/tt_chunk_counts.h):
// a hash of (tgid, 2 MiB-aligned chunk) -> 512 per-page u8 counters behind one staging block per
// CPU, read and emptied once per epoch.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <bpf/libbpf.h>

#include "core/Result.h"

namespace tt::sys::bpf {

inline constexpr uint32_t kChunkPages = 512;  // TT_CHUNK_PAGES
inline constexpr uint64_t kChunkBytes = uint64_t{kChunkPages} * 4096;
inline constexpr uint8_t kChunkCountMax = 255;  // a page's counter saturates here

inline constexpr uint32_t kTierPlanes = 4;  // TT_TIER_PLANES: cache, fast, remote RAM, slow
inline constexpr uint32_t kTierWords = kTierPlanes * kChunkPages / 64;

// One drained block: events of page `base + i * 4096` in counts[i] (0 = none); which memories
// served them in one bit per page and tier (tt_chunk_counts).
struct ChunkCounts {
  uint32_t tgid = 0;
  uint32_t kind = 0;  // enum tt_sample_kind of the counted events (0: the source's default)
  uint64_t base = 0;  // 2 MiB aligned
  std::array<uint8_t, kChunkPages> counts{};
  std::array<uint64_t, kTierWords> tiers{};
  // Whether an event of page i was served by `tier` (enum tt_sample_tier, 1..kTierPlanes).
  [[nodiscard]] bool servedBy(uint32_t page, uint32_t tier) const {
    return tier >= 1 && tier <= kTierPlanes && ((tiers[(tier - 1) * (kChunkPages / 64) + page / 64] >> (page % 64)) & 1);
  }
  void setServedBy(uint32_t page, uint32_t tier) {
    if (tier >= 1 && tier <= kTierPlanes) tiers[(tier - 1) * (kChunkPages / 64) + page / 64] |= uint64_t{1} << (page % 64);
  }
};

// The maps behind one program's counters (bpf/tt_chunk_counts.h), known once it is loaded.
struct ChunkMapFds {
  std::array<int, 2> chunks{-1, -1};  // hash (tgid, chunk) -> 512 counters, one per generation parity
  int stage = -1;                     // per-CPU staging blocks, two halves by generation parity
  int generation = -1;                // the drain generation, written only here
  int grace = -1;                     // map-in-map whose update waits for an RCU grace period
  int graceInner = -1;                // the inner map that update installs
};

// The maps of a program that includes bpf/tt_chunk_counts.h, from its libbpf skeleton (every such
// skeleton names them alike). A template so this header needs no skeleton.
template <typename Skeleton>
[[nodiscard]] ChunkMapFds chunkMapFdsOf(const Skeleton& skel) {
  return {{bpf_map__fd(skel.maps.chunks0), bpf_map__fd(skel.maps.chunks1)},
          bpf_map__fd(skel.maps.chunk_stage),
          bpf_map__fd(skel.maps.chunk_generation),
          bpf_map__fd(skel.maps.chunk_grace),
          bpf_map__fd(skel.maps.chunk_grace_inner)};
}

// Adds staged blocks to the blocks drained in out[from..]: page by page, saturating at
// kChunkCountMax (tier bits or-ed), into the block of the same (tgid, kind, base), or appended when
// none was drained, so every (tgid, kind, base) stays in one block.
struct MergeResult {
  size_t appended = 0;    // blocks appended to `out`
  uint64_t saturated = 0;  // events the saturation discarded
};
MergeResult mergeStaged(const std::vector<ChunkCounts>& staged, std::vector<ChunkCounts>& out, size_t from);

// Drains one program's counters. Not thread-safe; one per loaded program.
class ChunkCountMap {
 public:
  // `what` names the map in errors ("perf_sample_agg chunks").
  explicit ChunkCountMap(std::string what) : what_(std::move(what)) {}

  // Moves the programs to the other half (bumps the generation), waits for a grace period so no
  // program still writes the half they left, then reads and removes every block of that half's
  // hash (BPF_MAP_LOOKUP_AND_DELETE_BATCH; a key walk on kernels without batch ops) and reads,
  // merges and zeroes its staging blocks. Appends to `out` one block per (tgid, chunk); returns
  // the number appended.
  [[nodiscard]] Result<size_t> drain(const ChunkMapFds& maps, std::vector<ChunkCounts>& out);

  // Events lost to saturation when drains merged staged blocks into drained ones (the programs
  // count what they lose themselves), since construction.
  [[nodiscard]] uint64_t saturated() const { return saturated_; }

 private:
  [[nodiscard]] Result<size_t> drainHash(int fd, std::vector<ChunkCounts>& out);
  [[nodiscard]] Result<void> collectStage(int fd, uint32_t half, std::vector<ChunkCounts>& staged);

  std::string what_;
  uint64_t generation_ = 0;  // the value in the generation map (0 at load)
  uint64_t saturated_ = 0;
  bool batchUnsupported_ = false;
  uint32_t batch_ = 256;  // blocks per batch call; grows when one hash bucket holds more
  std::vector<uint8_t> keys_, values_, stage_;
  std::vector<ChunkCounts> staged_;
};

}  // namespace tt::sys::bpf
