#include "sys/bpf/ChunkCounts.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <map>
#include <tuple>

#include "tt_events.h"

namespace tt::sys::bpf {

static_assert(kChunkPages == TT_CHUNK_PAGES && kChunkBytes == TT_CHUNK_BYTES);
static_assert(kTierPlanes == TT_TIER_PLANES && kTierWords == TT_TIER_WORDS);
static_assert(sizeof(tt_chunk_counts) == kChunkPages + kTierWords * 8 && sizeof(tt_chunk_key) == 16);
// Per-CPU values are laid out at 8-byte strides; the BPF side reads count[] as u64 words and
// inserts a new chunk from count[] on, so tier[] must follow it as in tt_chunk_counts.
static_assert(sizeof(tt_chunk_stage) == 32 + sizeof(tt_chunk_counts) && offsetof(tt_chunk_stage, count) == 32 &&
              offsetof(tt_chunk_stage, tier) == 32 + offsetof(tt_chunk_counts, tier));

namespace {

// A drained block with the identity of its kernel key and no counts yet.
ChunkCounts blockOf(const tt_chunk_key& key, const tt_u8* count, const void* tier) {
  ChunkCounts c;
  c.tgid = key.tgid;
  c.kind = key.kind;
  c.base = key.chunk;
  std::memcpy(c.counts.data(), count, kChunkPages);
  std::memcpy(c.tiers.data(), tier, kTierWords * sizeof(uint64_t));
  return c;
}

ChunkCounts blockOf(const tt_chunk_key& key, const uint8_t* value) {
  return blockOf(key, value + offsetof(tt_chunk_counts, count), value + offsetof(tt_chunk_counts, tier));
}

}  // namespace

MergeResult mergeStaged(const std::vector<ChunkCounts>& staged, std::vector<ChunkCounts>& out, size_t from) {
  MergeResult result;
  if (staged.empty()) return result;
  auto add = [&result](ChunkCounts& block, const ChunkCounts& more) {
    for (uint32_t i = 0; i < kChunkPages; ++i) {
      const uint32_t sum = uint32_t{block.counts[i]} + more.counts[i];
      if (sum > kChunkCountMax) result.saturated += sum - kChunkCountMax;
      block.counts[i] = static_cast<uint8_t>(std::min<uint32_t>(kChunkCountMax, sum));
    }
    for (uint32_t w = 0; w < kTierWords; ++w) block.tiers[w] |= more.tiers[w];
  };
  // At most one staged block per CPU against up to a whole epoch of drained blocks: index the
  // staged side (folding CPUs that staged the same chunk), then walk the drained blocks once.
  std::map<std::tuple<uint32_t, uint32_t, uint64_t>, ChunkCounts> pending;
  for (const ChunkCounts& s : staged) {
    auto [it, inserted] = pending.emplace(std::tuple{s.tgid, s.kind, s.base}, s);
    if (!inserted) add(it->second, s);
  }
  for (size_t i = from; i < out.size() && !pending.empty(); ++i) {
    auto it = pending.find(std::tuple{out[i].tgid, out[i].kind, out[i].base});
    if (it == pending.end()) continue;
    add(out[i], it->second);
    pending.erase(it);
  }
  for (auto& [key, block] : pending) {
    out.push_back(block);
    ++result.appended;
  }
  return result;
}

Result<size_t> ChunkCountMap::drain(const ChunkMapFds& maps, std::vector<ChunkCounts>& out) {
  // 1. Hand the programs the other half.
  const uint32_t zero = 0;
  const uint64_t next = generation_ + 1;
  if (bpf_map_update_elem(maps.generation, &zero, &next, BPF_ANY) != 0)
    return errnoError("bump drain generation of " + what_);
  const auto idle = static_cast<uint32_t>(generation_ & 1);
  generation_ = next;
  // 2. Wait until no program that read the old generation is still running: the kernel answers
  //    an update of a map-in-map with synchronize_rcu(), and BPF programs run under RCU.
  const int inner = maps.graceInner;
  if (bpf_map_update_elem(maps.grace, &zero, &inner, BPF_ANY) != 0)
    return errnoError("wait for a grace period after bumping " + what_);
  // 3. The idle half's hash: blocks merged by the programs during the last generation.
  const size_t from = out.size();
  auto drained = drainHash(maps.chunks[idle], out);
  if (!drained) return drained.error();
  // 4. What the programs had staged in the idle half, merged in so each chunk stays one block.
  staged_.clear();
  if (auto collected = collectStage(maps.stage, idle, staged_); !collected) return collected.error();
  const MergeResult merged = mergeStaged(staged_, out, from);
  saturated_ += merged.saturated;
  return *drained + merged.appended;
}

Result<void> ChunkCountMap::collectStage(int fd, uint32_t half, std::vector<ChunkCounts>& staged) {
  const int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) return systemError(-ncpu, "libbpf_num_possible_cpus");
  stage_.assign(size_t(ncpu) * sizeof(tt_chunk_stage), 0);
  if (bpf_map_lookup_elem(fd, &half, stage_.data()) != 0) return errnoError("read staging blocks of " + what_);
  for (int cpu = 0; cpu < ncpu; ++cpu) {
    tt_chunk_stage s;
    std::memcpy(&s, stage_.data() + size_t(cpu) * sizeof s, sizeof s);
    if (s.key.tgid == 0 || (s.dirty == 0 && s.tier_dirty == 0)) continue;
    staged.push_back(blockOf(s.key, s.count, s.tier));
  }
  // Zeroed before the next bump hands this half back to the programs.
  std::fill(stage_.begin(), stage_.end(), uint8_t{0});
  if (bpf_map_update_elem(fd, &half, stage_.data(), BPF_ANY) != 0) return errnoError("zero staging blocks of " + what_);
  return {};
}

Result<size_t> ChunkCountMap::drainHash(int fd, std::vector<ChunkCounts>& out) {
  size_t total = 0;
  auto append = [&](uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) {
      tt_chunk_key k;
      std::memcpy(&k, keys_.data() + i * sizeof k, sizeof k);
      out.push_back(blockOf(k, values_.data() + size_t{i} * sizeof(tt_chunk_counts)));
    }
    total += n;
  };
  if (!batchUnsupported_) {
    uint64_t inBatch = 0, outBatch = 0;
    bool first = true;
    for (;;) {
      keys_.resize(size_t{batch_} * sizeof(tt_chunk_key));
      values_.resize(size_t{batch_} * sizeof(tt_chunk_counts));
      uint32_t count = batch_;
      const int ret = bpf_map_lookup_and_delete_batch(fd, first ? nullptr : &inBatch, &outBatch, keys_.data(),
                                                      values_.data(), &count, nullptr);
      const int err = ret != 0 ? errno : 0;
      if (ret != 0 && err == ENOSPC && count == 0 && batch_ < (1U << 16)) {
        batch_ *= 2;  // one hash bucket holds more blocks than a batch: retry with a bigger one
        continue;
      }
      append(count);
      if (ret != 0 && err == ENOENT) return total;  // reached the end
      if (ret != 0 && (err == EINVAL || err == ENOTSUP || err == EOPNOTSUPP) && first && count == 0) {
        batchUnsupported_ = true;
        break;
      }
      if (ret != 0) return systemError(err, "lookup_and_delete_batch " + what_);
      inBatch = outBatch;
      first = false;
    }
  }
  // Key walk for kernels without batch ops: take the first key, read it, delete it, repeat.
  // Events counted between the read and the delete of one block are lost; rare and harmless.
  tt_chunk_key next{};
  values_.resize(sizeof(tt_chunk_counts));
  while (bpf_map_get_next_key(fd, nullptr, &next) == 0) {
    if (bpf_map_lookup_elem(fd, &next, values_.data()) == 0) {
      out.push_back(blockOf(next, values_.data()));
      ++total;
    }
    if (bpf_map_delete_elem(fd, &next) != 0 && errno != ENOENT) return errnoError("delete " + what_ + " chunk");
  }
  return total;
}

}  // namespace tt::sys::bpf
