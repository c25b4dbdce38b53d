/* Per-page counters in per-2 MiB-chunk blocks, the in-kernel aggregation every tensortier BPF
 * program that counts page events shares (perf_sample_agg: sampled addresses; fault_trace:
 * first-touch faults). One hash element per (tgid, 2 MiB-aligned virtual chunk) holds 512 u8
 * counters, one per 4 KiB page: an element covers 2 MiB of tracked memory instead of 4 KiB (about
 * 0.03% of it when every page is counted), and the expensive element allocation happens once per
 * chunk instead of once per page.
 *
 * In front of the hash sits one staging block per CPU (struct tt_chunk_stage): events land in the
 * block of the chunk the CPU counted last, in per-CPU memory, and the block is merged into the hash
 * only when an event falls in another chunk. Sampled and faulting addresses come in runs (a kernel
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
 * What is still not exact: two CPUs merging into the same chunk's block at the same instant (a
 * merge is a few hundred nanoseconds) may lose one of the two updates of a word, i.e. up to one
 * CPU's counts for 8 pages. Counts are a statistical estimate of heat; an atomic compare-and-swap
 * per word would make every merge pay a locked instruction per dirty word to close that window.
 *
 * Include once per program, after bpf_helpers.h and tt_events.h. */
#ifndef TT_CHUNK_COUNTS_H
#define TT_CHUNK_COUNTS_H

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
  __u32 dropped;    /* 1: not counted, its chunk could not be staged (the staged one could not be merged) */
};

/* Index of the lowest set bit of a non-zero word: de Bruijn multiplication (BPF has no ctz). */
#define TT_DEBRUIJN64 0x03f79d71b4cb0a89ULL
static const __u8 tt_debruijn_index[64] = {
    0,  1,  48, 2,  57, 49, 28, 3,  61, 58, 50, 42, 38, 29, 17, 4,  62, 55, 59, 36, 53, 51,
    43, 22, 45, 39, 33, 30, 24, 18, 12, 5,  63, 47, 56, 27, 60, 41, 37, 16, 54, 35, 52, 21,
    44, 32, 23, 11, 46, 26, 40, 15, 34, 20, 31, 10, 25, 14, 19, 9,  13, 8,  7,  6,
};

/* Eight u8 counters added lane by lane, each saturating at 255 (no carry between lanes). Adds the
 * events the saturation discarded to *lost. */
static __always_inline __u64 tt_add_u8x8_saturating(__u64 a, __u64 b, __u32* lost) {
  const __u64 high = 0x8080808080808080ULL;
  const __u64 ones = 0x0101010101010101ULL;
  __u64 sum = ((a & ~high) + (b & ~high)) ^ ((a ^ b) & high);
  __u64 carry = ((a & b) | ((a | b) & ~sum)) & high; /* carry out of each lane's bit 7 */
  if (!carry) return sum;
  __u64 overflowed = carry >> 7; /* 1 in each lane whose a + b passed 255 */
  /* Such a lane holds a + b - 256, so it lost a + b - 255 = lane + 1 events. Horizontal byte sum
   * in 16-bit lanes first: eight lanes of up to 255 do not fit one byte. */
  __u64 wrapped = sum & (overflowed * 0xff);
  __u64 pairs = (wrapped & 0x00ff00ff00ff00ffULL) + ((wrapped >> 8) & 0x00ff00ff00ff00ffULL);
  *lost += (__u32)((pairs * 0x0001000100010001ULL) >> 48) + (__u32)((overflowed * ones) >> 56);
  return sum | (overflowed * 0xff);
}

/* Merges a staging block into its chunk's block in `hash` (inserting it when the chunk is new) and
 * empties it. Only words marked dirty are read and cleared. Returns 0 when the chunk could not be
 * inserted (hash full, no memory): the block then stays staged as it is. */
static __always_inline int tt_chunk_merge(void* hash, struct tt_chunk_stage* s, struct tt_chunk_result* r) {
  __u64 dirty = s->dirty;
  int merge = 1;
  struct tt_chunk_counts* block = bpf_map_lookup_elem(hash, &s->key);
  if (!block) {
    /* BPF_NOEXIST: when another CPU inserted the chunk first the update fails (-EEXIST) and the
     * lookup below finds that CPU's block, so no counts are overwritten. The insert copies all 512
     * counters: words not marked dirty are zero (the daemon zeroes the half, merges clear what
     * they read). */
    if (bpf_map_update_elem(hash, &s->key, s->count, BPF_NOEXIST) == 0) {
      r->new_chunks = 1;
      merge = 0;
    } else {
      block = bpf_map_lookup_elem(hash, &s->key);
      if (!block) return 0;
    }
  }
  __u64* dst = block ? (__u64*)block->count : 0;
  __u64* src = (__u64*)s->count;
  for (int i = 0; i < 64 && dirty; i++) {
    __u32 w = tt_debruijn_index[((dirty & -dirty) * TT_DEBRUIJN64) >> 58] & 63;
    dirty &= dirty - 1;
    /* Non-atomic, saturating add: see the header comment for what a collision loses. */
    if (merge && dst) dst[w] = tt_add_u8x8_saturating(dst[w], src[w], &r->saturated);
    src[w] = 0;
  }
  s->dirty = 0;
  s->events = 0;
  return 1;
}

/* Counts one event of `tgid` at virtual address `addr`. */
static __always_inline struct tt_chunk_result tt_chunk_count(__u32 tgid, __u64 addr) {
  struct tt_chunk_result r = {0, 0, 0};
  __u32 zero = 0;
  __u64* generation = bpf_map_lookup_elem(&chunk_generation, &zero);
  if (!generation) return r;
  __u32 half = *generation & 1;
  struct tt_chunk_stage* s = bpf_map_lookup_elem(&chunk_stage, &half);
  if (!s) return r;
  __u64 chunk = addr & ~(TT_CHUNK_BYTES - 1);
  if (s->key.chunk != chunk || s->key.tgid != tgid) {
    if (s->key.tgid != 0 && !tt_chunk_merge(half ? (void*)&chunks1 : (void*)&chunks0, s, &r)) {
      r.dropped = 1;
      return r;
    }
    s->key.tgid = tgid;
    s->key.pad = 0;
    s->key.chunk = chunk;
  }
  __u32 page = (addr >> TT_PAGE_SHIFT) & (TT_CHUNK_PAGES - 1);
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
