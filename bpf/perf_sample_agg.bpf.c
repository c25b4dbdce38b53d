// In-kernel aggregation of sampled data addresses: attached (BPF_PROG_TYPE_PERF_EVENT) to each
// per-CPU sampling event, it counts samples per (tgid, 4 KiB page) for tracked tgids only and
// returns 0 so the kernel does not write the sample into the perf ring at all. Counts live in
// per-chunk blocks of 512 per-page counters behind a per-CPU staging block (tt_chunk_counts.h; was
// one hash element per page: 2.3% of tracked memory instead of 0.03%).
#include "vmlinux.h"

#include <bpf/bpf_helpers.h>

#include "tt_events.h"
#include "tt_tgid_filter.h"
#include "tt_chunk_counts.h"

char LICENSE[] SEC("license") = "GPL";

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __type(key, __u32);
  __type(value, __u64);
  __uint(max_entries, TT_AGG_NR_STATS);
} stats SEC(".maps");

static __always_inline void add(__u32 index, __u64 n) {
  __u64* v = bpf_map_lookup_elem(&stats, &index);
  if (v) *v += n;
}

static __always_inline int count_sample(struct bpf_perf_event_data* ctx, int kinded) {
  add(TT_AGG_SAMPLES, 1);
  __u32 tgid = bpf_get_current_pid_tgid() >> 32;
  if (!tt_tgid_tracked(tgid)) return 0;
  add(TT_AGG_TRACKED, 1);
  __u64 addr = ctx->addr;
  if (addr == 0) {
    add(TT_AGG_NO_ADDR, 1);
    return 0;
  }
  __u32 kind = kinded ? (__u32)bpf_get_attach_cookie(ctx) : TT_KIND_DEFAULT;
  struct tt_chunk_result r = tt_chunk_count(tgid, kind, addr);
  if (r.saturated) add(TT_AGG_SATURATED, r.saturated);
  if (r.new_chunks) add(TT_AGG_NEW_CHUNKS, r.new_chunks);
  if (r.dropped) add(TT_AGG_MAP_FULL, r.dropped);
  return 0;  // 0: the sample is consumed here, nothing goes to the perf ring
}

/* Events whose samples are all of the source's default kind (software page faults). */
SEC("perf_event")
int tt_count_sample(struct bpf_perf_event_data* ctx) {
  return count_sample(ctx, 0);
}

/* Events of a source that samples several kinds (PEBS loads and stores): the attach cookie says
 * what this event samples (5.15+). A separate program so the single-kind sources do not pay for
 * the helper call on every sample. */
SEC("perf_event")
int tt_count_sample_kinded(struct bpf_perf_event_data* ctx) {
  return count_sample(ctx, 1);
}
