/* Per-page counters in per-2 MiB-chunk blocks, the in-kernel aggregation every tensortier BPF
 * program that counts page events shares (perf_sample_agg: sampled addresses; fault_trace:
 * first-touch faults). One hash element per (tgid, 2 MiB-aligned virtual chunk) holds 512 u8
 * counters, one per 4 KiB page: an element covers 2 MiB of tracked memory instead of 4 KiB (about
 * 0.03% of it when every page is counted), and the expensive element allocation happens once per
 * chunk instead of once per page. The daemon reads and clears `chunks` once per epoch
 * (BPF_MAP_LOOKUP_AND_DELETE_BATCH, daemon/sys/bpf/ChunkCounts.h) and expands each block into
 * per-page evidence. Include once per program, after bpf_helpers.h and tt_events.h. */
#ifndef TT_CHUNK_COUNTS_H
#define TT_CHUNK_COUNTS_H

/* Not preallocated: its memory follows the chunks counted in one epoch (the daemon empties it
 * every epoch), not the size of the tracked memory. max_entries (chunks) is set by the daemon
 * before load; when full, events in new chunks are dropped (TT_CHUNK_MAP_FULL) until the next
 * drain. */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, struct tt_chunk_key);
  __type(value, struct tt_chunk_counts);
  __uint(max_entries, 16384);
} chunks SEC(".maps");

/* The all-zero block a new chunk is inserted with. Never written by the program nor the daemon:
 * a 512-byte value does not fit the BPF stack next to the key, so it comes from a map. Per-CPU so
 * the lookup is inlined and never shared between CPUs. */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __type(key, __u32);
  __type(value, struct tt_chunk_counts);
  __uint(max_entries, 1);
} zero_block SEC(".maps");

enum tt_chunk_result {
  TT_CHUNK_COUNTED = 0,
  TT_CHUNK_COUNTED_NEW = 1, /* counted in a chunk this call inserted */
  TT_CHUNK_SATURATED = 2,   /* not counted: the page's counter was already 255 */
  TT_CHUNK_MAP_FULL = 3,    /* dropped: map full (-E2BIG), no memory, or drained in between */
};

/* Counts one event of `tgid` at virtual address `addr`. */
static __always_inline enum tt_chunk_result tt_chunk_count(__u32 tgid, __u64 addr) {
  struct tt_chunk_key key = {.tgid = tgid, .pad = 0, .chunk = addr & ~(TT_CHUNK_BYTES - 1)};
  __u32 page = (addr >> TT_PAGE_SHIFT) & (TT_CHUNK_PAGES - 1);
  enum tt_chunk_result result = TT_CHUNK_COUNTED;
  struct tt_chunk_counts* block = bpf_map_lookup_elem(&chunks, &key);
  if (!block) {
    __u32 zero = 0;
    struct tt_chunk_counts* fresh = bpf_map_lookup_elem(&zero_block, &zero);
    if (!fresh) return TT_CHUNK_MAP_FULL;
    /* BPF_NOEXIST: when another CPU inserted the chunk first the update fails (-EEXIST) and the
     * lookup below finds that CPU's block, so no counts are overwritten by zeros. */
    int err = bpf_map_update_elem(&chunks, &key, fresh, BPF_NOEXIST);
    block = bpf_map_lookup_elem(&chunks, &key);
    if (!block) return TT_CHUNK_MAP_FULL;
    if (err == 0) result = TT_CHUNK_COUNTED_NEW;
  }
  /* Non-atomic, saturating increment. Counts are a statistical estimate of heat: two CPUs counting
   * the same page of the same process at the same instant may lose one increment, which is rare
   * (same page, two CPUs, within a few ns) and harmless, while an atomic add costs a locked
   * instruction on every event. u8 saturating at 255: a page counted 255 times in one epoch is as
   * hot as heat needs to know, and a u16 block (1 KiB) would double the state. */
  __u8 c = block->count[page];
  if (c == 255) return TT_CHUNK_SATURATED;
  block->count[page] = c + 1;
  return result;
}

#endif
