/* Per-page counters in per-2 MiB-chunk blocks, the in-kernel aggregation every tensortier BPF
 * program that counts page events shares (perf_sample_agg: sampled addresses; fault_trace:
 * first-touch faults). One hash element per (tgid, 2 MiB-aligned virtual chunk; for samples also
 * their kind, struct tt_chunk_key) holds 512 u8 counters, one per 4 KiB page, and a bit per page
 * and tier for the memories that served them (struct tt_chunk_counts): an element covers 2 MiB of tracked memory instead of 4 KiB (about
 * 0.03% of it when every page is counted), and the expensive element allocation happens once per
 * chunk instead of once per page.
 *
 * In front of the hash sits one staging block per CPU (struct tt_chunk_stage): events land in the
 * block of the key the CPU counted last, in per-CPU memory, and the block is merged into the hash
 * only when an event has another key: another chunk, or another event kind (PEBS loads and stores
 * are separate events; IBS ops are all counted as accesses, see perf_sample_agg.bpf.c). Sampled and faulting addresses come in runs (a kernel
 * streams a tensor, a process populates a buffer page after page), and the hash lookup (jhash of the
 * key, bucket walk, a cache miss or two) was most of the program's cost; a run of n events in one
 * chunk now pays it once instead of n times. Scattered events pay one merge each: a lookup, as
 * before, plus a few instructions per dirty 8-page word.
 *
 * Both the staging blocks and the hash are double-buffered by drain generation (`chunk_generation`,
 * written only by the daemon): programs count in chunk_stage[generation & 1] and merge into
 * chunks0 or chunks1 by the same parity. The daemon's drain (daemon/sys/bpf/ChunkCounts.h) bumps
 * the generation and then waits for an RCU grace period (an update of `chunk_grace`, a map-in-map:
 * the kernel answers it with synchronize_rcu() so that user space knows no program still runs with
 * what it saw before; the kernel's own selftests use it the same way). Every program that could
 * have read the old generation has then finished, even one stalled by an interrupt or a preempted
 * vCPU, so the old half, staging blocks and hash alike, has no writer left: the daemon empties the
 * hash, reads the staging blocks, merges them in and zeroes them before the next bump hands the
 * half back.
 *
 * Two CPUs may merge into the same chunk's block at the same time (threads streaming one tensor):
 * each dirty word is added with a compare-and-swap, a locked instruction per dirty word of a merge
 * (a merge comes once per run of events in one chunk), retried a few times; a word still
 * contended after that is dropped and counted.
 *
 * Include once per program, after bpf_helpers.h and tt_events.h. The word helpers (SWAR add, bit
 * scan) are in tt_counter_words.h, shared with the unit tests. */
#ifndef TT_CHUNK_COUNTS_H
#define TT_CHUNK_COUNTS_H

#include "tt_counter_words.h"

/* Not preallocated: its memory follows the chunks counted in one epoch (the daemon empties it
 * every epoch), not the size of the tracked memory. max_entries (chunks) is set by the daemon
 * before load; when full, a CPU whose staged chunk cannot be inserted keeps it staged (the drain
 * collects it) and drops events in other chunks (counted in `dropped`) until the next drain. One
 * hash per drain-generation parity. */
struct tt_chunk_hash {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, struct tt_chunk_key);
  __type(value, struct tt_chunk_counts);
  __uint(max_entries, 16384);
};
struct tt_chunk_hash chunks0 SEC(".maps");
struct tt_chunk_hash chunks1 SEC(".maps");

/* Never touched by the programs: the daemon's drain updates it to wait for a grace period. */
struct tt_chunk_grace_inner {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __type(key, __u32);
  __type(value, __u32);
  __uint(max_entries, 1);
};
struct tt_chunk_grace_inner chunk_grace_inner SEC(".maps");
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
  __type(key, __u32);
  __uint(max_entries, 1);
  __array(values, struct tt_chunk_grace_inner);
} chunk_grace SEC(".maps");

/* Two staging blocks per CPU, one per drain-generation parity. */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __type(key, __u32);
  __type(value, struct tt_chunk_stage);
  __uint(max_entries, 2);
} chunk_stage SEC(".maps");

/* The daemon's drain generation; the program only reads it. */
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __type(key, __u32);
  __type(value, __u64);
  __uint(max_entries, 1);
} chunk_generation SEC(".maps");

/* What counting one event did, for the calling program's statistics. */
struct tt_chunk_result {
  __u32 saturated;  /* events not counted: their page's counter was at 255, staged or merged */
  __u32 new_chunks; /* chunks a merge inserted into `chunks` */
  __u32 dropped;    /* events lost: the current one when its chunk could not be staged (the staged
                     * one could not be merged), or a word whose merge stayed contended */
};

/* Merges a staging block into its chunk's block in `hash` (inserting it when the chunk is new) and
 * empties it. Only words marked dirty are read and cleared. Returns 0 when the chunk could not be
 * inserted (hash full, no memory): the block then stays staged as it is. */
static __always_inline int tt_chunk_merge(void* hash, struct tt_chunk_stage* s, struct tt_chunk_result* r) {
  __u64 dirty = s->dirty;
  struct tt_chunk_counts* block = bpf_map_lookup_elem(hash, &s->key);
  if (!block) {
    /* BPF_NOEXIST: when another CPU inserted the chunk first the update fails (-EEXIST) and the
     * lookup below finds that CPU's block, so no counts are overwritten. The insert copies all 512
     * counters: words not marked dirty are zero (the daemon zeroes the half, merges clear what
     * they read). */
    if (bpf_map_update_elem(hash, &s->key, s->count, BPF_NOEXIST) == 0) {
      r->new_chunks = 1; /* inserted as it is: nothing to add, only the stage to clear */
    } else {
      block = bpf_map_lookup_elem(hash, &s->key);
      if (!block) return 0;
    }
  }
  __u64* dst = block ? (__u64*)block->count : 0; /* null: inserted above */
  __u64* src = (__u64*)s->count;
  for (int i = 0; i < 64 && dirty; i++) {
    __u32 w = tt_lowest_bit(dirty);
    dirty &= dirty - 1;
    if (dst) {
      __u64 old = dst[w];
      int added = 0;
      for (int attempt = 0; attempt < 4 && !added; attempt++) {
        __u32 lost = 0;
        __u64 sum = tt_add_u8x8_saturating(old, src[w], &lost);
        __u64 seen = __sync_val_compare_and_swap(&dst[w], old, sum);
        if (seen == old) {
          r->saturated += lost;
          added = 1;
        } else {
          old = seen; /* another CPU merged into this word in between: add to what it left */
        }
      }
      if (!added) r->dropped += tt_u8x8_sum(src[w]);
    }
    src[w] = 0;
  }
  /* Tier bits: or-ed in (an atomic or per word that has any; events without a tier set none). */
  __u32 tier_dirty = s->tier_dirty;
  __u64* tier_dst = block ? (__u64*)block->tier : 0;
  __u64* tier_src = (__u64*)s->tier;
  for (int i = 0; i < TT_TIER_WORDS && tier_dirty; i++) {
    __u32 w = tt_lowest_bit(tier_dirty) & (TT_TIER_WORDS - 1);
    tier_dirty &= tier_dirty - 1;
    if (tier_dst) __sync_fetch_and_or(&tier_dst[w], tier_src[w]);
    tier_src[w] = 0;
  }
  s->tier_dirty = 0;
  s->dirty = 0;
  s->events = 0;
  return 1;
}

/* Counts one event of `tgid` of kind `kind` (enum tt_sample_kind) served by `tier` (enum
 * tt_sample_tier) at virtual address `addr`. */
static __always_inline struct tt_chunk_result tt_chunk_count(__u32 tgid, __u32 kind, __u32 tier, __u64 addr) {
  struct tt_chunk_result r = {0, 0, 0};
  __u32 zero = 0;
  __u64* generation = bpf_map_lookup_elem(&chunk_generation, &zero);
  if (!generation) return r;
  __u32 half = *generation & 1;
  struct tt_chunk_stage* s = bpf_map_lookup_elem(&chunk_stage, &half);
  if (!s) return r;
  __u64 chunk = addr & ~(TT_CHUNK_BYTES - 1);
  if (s->key.chunk != chunk || s->key.tgid != tgid || s->key.kind != kind) {
    if (s->key.tgid != 0 && !tt_chunk_merge(half ? (void*)&chunks1 : (void*)&chunks0, s, &r)) {
      r.dropped = 1;
      return r;
    }
    s->key.tgid = tgid;
    s->key.kind = kind;
    s->key.chunk = chunk;
  }
  __u32 page = (addr >> TT_PAGE_SHIFT) & (TT_CHUNK_PAGES - 1);
  if (tier >= TT_TIER_CACHE && tier <= TT_TIER_SLOW) {
    /* Two bounded indices: the 6.1 verifier loses the bounds of one index or-ed together. */
    __u32 plane = (tier - 1) & (TT_TIER_PLANES - 1);
    __u32 word = (page >> 6) & (TT_TIER_PLANE_WORDS - 1);
    s->tier[plane][word] |= 1ULL << (page & 63);
    s->tier_dirty |= 1U << (plane * TT_TIER_PLANE_WORDS + word);
  }
  /* u8 saturating at 255: a page counted 255 times in one epoch is as hot as heat needs to know,
   * and a u16 block (1 KiB) would double the state. */
  __u8 c = s->count[page];
  if (c == 255) {
    r.saturated += 1;
    return r;
  }
  s->count[page] = c + 1;
  s->dirty |= 1ULL << (page >> 3);
  s->events += 1;
  return r;
}

#endif
