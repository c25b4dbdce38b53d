// In-kernel aggregation of sampled data addresses: attached (BPF_PROG_TYPE_PERF_EVENT) to each
// per-CPU sampling event, it counts samples per (tgid, 4 KiB page) for tracked tgids only and
// returns 0 so the kernel does not write the sample into the perf ring at all. Counts live in
// blocks of 512 per-page counters, one block per (tgid, 2 MiB-aligned virtual chunk): one hash
// element then covers 2 MiB of tracked memory instead of 4 KiB (about 0.03% of it instead of 2.3%
// when every page is sampled), and a new hash element (the expensive allocation) is needed once per
// chunk instead of once per page. The daemon reads and clears `chunks` once per epoch
// (BPF_MAP_LOOKUP_AND_DELETE_BATCH) and expands each block into per-page evidence.
#include "vmlinux.h"

#include <bpf/bpf_helpers.h>

#include "tt_events.h"
#include "tt_tgid_filter.h"

char LICENSE[] SEC("license") = "GPL";


// Per-page sample counts per chunk. Not preallocated: its memory follows the chunks sampled in
// one epoch (the daemon empties it every epoch), not the size of the tracked memory. When full,
// samples in new chunks are counted in stats[TT_AGG_MAP_FULL] and dropped until the next drain.
// max_entries (chunks) is set by the daemon before load.
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, struct tt_chunk_key);
  __type(value, struct tt_chunk_counts);
  __uint(max_entries, 16384);
} chunks SEC(".maps");

// The all-zero block a new chunk is inserted with. Never written by the program nor the daemon:
// a 512-byte value does not fit the BPF stack next to the key, so it comes from a map. Per-CPU so
// the lookup is inlined and never shared between CPUs.
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __type(key, __u32);
  __type(value, struct tt_chunk_counts);
  __uint(max_entries, 1);
} zero_block SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __type(key, __u32);
  __type(value, __u64);
  __uint(max_entries, TT_AGG_NR_STATS);
} stats SEC(".maps");

static __always_inline void bump(__u32 index) {
  __u64* v = bpf_map_lookup_elem(&stats, &index);
  if (v) *v += 1;
}

SEC("perf_event")
int tt_count_sample(struct bpf_perf_event_data* ctx) {
  bump(TT_AGG_SAMPLES);
  __u32 tgid = bpf_get_current_pid_tgid() >> 32;
  if (!tt_tgid_tracked(tgid)) return 0;
  bump(TT_AGG_TRACKED);
  __u64 addr = ctx->addr;
  if (addr == 0) {
    bump(TT_AGG_NO_ADDR);
    return 0;
  }
  struct tt_chunk_key key = {.tgid = tgid, .pad = 0, .chunk = addr & ~(TT_CHUNK_BYTES - 1)};
  __u32 page = (addr >> TT_PAGE_SHIFT) & (TT_CHUNK_PAGES - 1);
  struct tt_chunk_counts* block = bpf_map_lookup_elem(&chunks, &key);
  if (!block) {
    __u32 zero = 0;
    struct tt_chunk_counts* fresh = bpf_map_lookup_elem(&zero_block, &zero);
    if (!fresh) return 0;
    // BPF_NOEXIST: when another CPU inserted the chunk first the update fails (-EEXIST) and the
    // lookup below finds that CPU's block, so no counts are overwritten by zeros.
    int err = bpf_map_update_elem(&chunks, &key, fresh, BPF_NOEXIST);
    block = bpf_map_lookup_elem(&chunks, &key);
    if (!block) {
      bump(TT_AGG_MAP_FULL);  // map full (-E2BIG), no memory, or drained in between: dropped
      return 0;
    }
    if (err == 0) bump(TT_AGG_NEW_CHUNKS);
  }
  // Non-atomic, saturating increment. Samples are a statistical estimate of heat: two CPUs
  // sampling the same page of the same process at the same instant may lose one increment, which
  // is rare (it needs the same page sampled on two CPUs within a few ns) and harmless, while an
  // atomic add costs a locked instruction on every sample. u8 saturating at 255: a page sampled
  // 255 times in one epoch is as hot as heat needs to know (at the PMU's default period that is
  // ~2.5 M sampled events per page per epoch), and a u16 block (1 KiB) would double the state.
  __u8 c = block->count[page];
  if (c != 255)
    block->count[page] = c + 1;
  else
    bump(TT_AGG_SATURATED);
  return 0;  // 0: the sample is consumed here, nothing goes to the perf ring
}
