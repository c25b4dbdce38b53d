// In-kernel aggregation of sampled data addresses: attached (BPF_PROG_TYPE_PERF_EVENT) to each
// per-CPU sampling event, it counts samples per (tgid, 4 KiB page) for tracked tgids only and
// returns 0 so the kernel does not write the sample into the perf ring at all. The daemon reads
// and clears `counts` once per epoch (BPF_MAP_LOOKUP_AND_DELETE_BATCH) instead of every sample.
#include "vmlinux.h"

#include <bpf/bpf_helpers.h>

#include "tt_events.h"

char LICENSE[] SEC("license") = "GPL";

// Tracked processes as a bitmap over tgids (bit tgid % 64 of word tgid / 64); the daemon sets and
// clears bits at run time. An array lookup is inlined by the verifier: on every sample this costs
// a load instead of a hash lookup. Sized from kernel.pid_max before load.
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __type(key, __u32);
  __type(value, __u64);
  __uint(max_entries, 65536);
} tracked_bits SEC(".maps");

// Samples per page. Not preallocated: its memory follows the pages sampled in one epoch (the
// daemon empties it every epoch), not the size of the tracked memory. When full, new pages are
// counted in stats[TT_AGG_MAP_FULL] and dropped until the next drain.
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, struct tt_page_key);
  __type(value, __u64);
  __uint(max_entries, 262144);
} counts SEC(".maps");

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
  __u32 word = tgid >> 6;
  __u64* bits = bpf_map_lookup_elem(&tracked_bits, &word);
  if (!bits || !(*bits & (1ULL << (tgid & 63)))) return 0;
  bump(TT_AGG_TRACKED);
  __u64 addr = ctx->addr;
  if (addr == 0) {
    bump(TT_AGG_NO_ADDR);
    return 0;
  }
  struct tt_page_key key = {.tgid = tgid, .pad = 0, .page = addr & ~0xfffULL};
  __u64* count = bpf_map_lookup_elem(&counts, &key);
  if (count) {
    __sync_fetch_and_add(count, 1);
    return 0;
  }
  __u64 one = 1;
  if (bpf_map_update_elem(&counts, &key, &one, BPF_NOEXIST) != 0) {
    count = bpf_map_lookup_elem(&counts, &key);  // another CPU inserted it first
    if (count)
      __sync_fetch_and_add(count, 1);
    else
      bump(TT_AGG_MAP_FULL);
  }
  return 0;  // 0: the sample is consumed here, nothing goes to the perf ring
}
