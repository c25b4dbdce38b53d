#include "sys/bpf/ChunkCounts.h"

#include <bpf/bpf.h>

#include <cerrno>
#include <cstring>

#include "tt_events.h"

namespace tt::sys::bpf {

static_assert(kChunkPages == TT_CHUNK_PAGES && kChunkBytes == TT_CHUNK_BYTES);
static_assert(sizeof(tt_chunk_counts) == kChunkPages && sizeof(tt_chunk_key) == 16);

Result<size_t> ChunkCountMap::drain(int fd, std::vector<ChunkCounts>& out) {
  size_t total = 0;
  auto append = [&](uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) {
      tt_chunk_key k;
      std::memcpy(&k, keys_.data() + i * sizeof k, sizeof k);
      ChunkCounts& c = out.emplace_back();
      c.tgid = k.tgid;
      c.base = k.chunk;
      std::memcpy(c.counts.data(), values_.data() + size_t{i} * kChunkPages, kChunkPages);
    }
    total += n;
  };
  if (!batchUnsupported_) {
    uint64_t inBatch = 0, outBatch = 0;
    bool first = true;
    for (;;) {
      keys_.resize(size_t{batch_} * sizeof(tt_chunk_key));
      values_.resize(size_t{batch_} * kChunkPages);
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
  values_.resize(kChunkPages);
  while (bpf_map_get_next_key(fd, nullptr, &next) == 0) {
    if (bpf_map_lookup_elem(fd, &next, values_.data()) == 0) {
      ChunkCounts& c = out.emplace_back();
      c.tgid = next.tgid;
      c.base = next.chunk;
      std::memcpy(c.counts.data(), values_.data(), kChunkPages);
      ++total;
    }
    if (bpf_map_delete_elem(fd, &next) != 0 && errno != ENOENT) return errnoError("delete " + what_ + " chunk");
  }
  return total;
}

}  // namespace tt::sys::bpf
