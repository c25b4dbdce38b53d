// In-kernel aggregation of sampled data addresses: attached (BPF_PROG_TYPE_PERF_EVENT) to each
// per-CPU sampling event, it counts samples per (tgid, 4 KiB page) for tracked tgids only and
// returns 0 so the kernel does not write the sample into the perf ring at all. Counts live in
// per-chunk blocks of 512 per-page counters behind a per-CPU staging block (tt_chunk_counts.h; was
// one hash element per page: 2.3% of tracked memory instead of 0.03%).
//
// Four programs, one per kind of event, so that each sample pays only for what its event has:
//   tt_count_sample          software events: one kind, no data_src;
//   tt_count_sample_kinded   PMU events without data_src: the attach cookie names the kind;
//   tt_count_sample_sourced  PMU events with data_src (PEBS, IBS): the tier from the kernel's
//                            perf_sample_data, reached through bpf_cast_to_kern_ctx (6.2+);
//   tt_count_sample_sourced_read  the same for kernels without that kfunc (6.1), reading the
//                            sample through bpf_probe_read_kernel (two helper calls more).
// The owner (daemon/sys/bpf/PerfSampleAgg) loads only one of the two "sourced" programs.
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>

#include "tt_events.h"
#include "tt_data_src.h"
#include "tt_tgid_filter.h"
#include "tt_chunk_counts.h"

char LICENSE[] SEC("license") = "GPL";

/* Weak: libbpf leaves it unresolved on kernels without it, where the program calling it is not
 * loaded (its autoload is turned off before load). */
extern void* bpf_cast_to_kern_ctx(void* obj) __ksym __weak;

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

/* How a program learns what a sample is (a constant in each program: the inlined code keeps only
 * its own branch). */
enum sample_source {
  SOURCE_NONE,    /* the source's default kind, no tier */
  SOURCE_COOKIE,  /* kind from the attach cookie, no tier */
  SOURCE_KFUNC,   /* kind from the cookie, tier from data_src through bpf_cast_to_kern_ctx */
  SOURCE_READ,    /* kind from the cookie, tier from data_src through bpf_probe_read_kernel */
};

/* The sample's data_src when the kernel's record carries one. Since 6.1 the PMU driver says which
 * fields it filled in sample_flags, and data_src is left uninitialised otherwise (software events)
 * until perf_prepare_sample() fills in PERF_MEM_NA, which 6.3+ runs before the program and 6.1-6.2
 * only after it. Before 6.1 perf_sample_data_init() set it to PERF_MEM_NA. NA decodes as unknown. */
static __always_inline int data_src_direct(struct perf_sample_data* data, __u64* src) {
  if (bpf_core_field_exists(data->sample_flags) && !(data->sample_flags & PERF_SAMPLE_DATA_SRC)) return 0;
  *src = data->data_src.val;
  return 1;
}

/* The same through probe reads: one copy of the sample's head, sample_flags to data_src (about
 * 120 bytes), since each helper call costs far more than the bytes it copies. */
#define TT_SAMPLE_HEAD_WORDS 32
static __always_inline int data_src_copied(struct perf_sample_data* data, __u64* src) {
  __u64 head[TT_SAMPLE_HEAD_WORDS];
  __u32 src_at = bpf_core_field_offset(struct perf_sample_data, data_src);
  if (src_at > sizeof(head) - 8 || (src_at & 7)) return 0;
  if (bpf_probe_read_kernel(head, src_at + 8, data) != 0) return 0;
  if (bpf_core_field_exists(data->sample_flags)) {
    __u32 flags_at = bpf_core_field_offset(struct perf_sample_data, sample_flags);
    if (flags_at > src_at || (flags_at & 7)) return 0;
    if (!(head[flags_at / 8] & PERF_SAMPLE_DATA_SRC)) return 0;
  }
  *src = head[src_at / 8];
  return 1;
}

static __always_inline int count_sample(struct bpf_perf_event_data* ctx, enum sample_source how) {
  add(TT_AGG_SAMPLES, 1);
  __u32 tgid = bpf_get_current_pid_tgid() >> 32;
  if (!tt_tgid_tracked(tgid)) return 0;
  add(TT_AGG_TRACKED, 1);
  __u64 addr = ctx->addr;
  /* No address, or a kernel one: IBS cannot exclude kernel samples on kernels without its
   * software filter (x86-64 kernel addresses have the top bit set). */
  if (addr == 0 || (addr >> 63)) {
    add(TT_AGG_NO_ADDR, 1);
    return 0;
  }
  /* The kind is the event's (its attach cookie), never data_src's op: IBS samples loads and stores
   * alike, and a kind per op would change the staging key on almost every sample. */
  __u32 kind = how == SOURCE_NONE ? TT_KIND_DEFAULT : (__u32)bpf_get_attach_cookie(ctx);
  __u32 tier = TT_TIER_UNKNOWN;
  if (how == SOURCE_KFUNC || how == SOURCE_READ) {
    struct perf_sample_data* data = 0;
    if (how == SOURCE_KFUNC) {
      struct bpf_perf_event_data_kern* kctx = bpf_cast_to_kern_ctx(ctx);
      data = kctx->data;
    } else {
      /* The context is the kernel's struct bpf_perf_event_data_kern; the verifier lets a program
       * read only its uapi fields directly, so the sample pointer is copied out. */
      struct bpf_perf_event_data_kern* kctx = (void*)ctx;
      data = BPF_CORE_READ(kctx, data);
    }
    __u64 src = 0;
    int found = 0;
    if (data) found = how == SOURCE_KFUNC ? data_src_direct(data, &src) : data_src_copied(data, &src);
    if (found) {
      tier = tt_tier_of_data_src(src);
      if (tier != TT_TIER_UNKNOWN)
        add(TT_AGG_TIER_KNOWN, 1);
      else if (tt_data_src_na(src))
        add(TT_AGG_DATA_SRC_NA, 1);
    }
  }
  struct tt_chunk_result r = tt_chunk_count(tgid, kind, tier, addr);
  if (r.saturated) add(TT_AGG_SATURATED, r.saturated);
  if (r.new_chunks) add(TT_AGG_NEW_CHUNKS, r.new_chunks);
  if (r.dropped) add(TT_AGG_MAP_FULL, r.dropped);
  return 0;  // 0: the sample is consumed here, nothing goes to the perf ring
}

/* Events whose samples are all of the source's default kind (software page faults). */
SEC("perf_event")
int tt_count_sample(struct bpf_perf_event_data* ctx) {
  return count_sample(ctx, SOURCE_NONE);
}

/* Events of a source that samples several kinds without data_src: the attach cookie says what
 * this event samples (5.15+). A separate program so the single-kind sources do not pay for the
 * helper call on every sample. */
SEC("perf_event")
int tt_count_sample_kinded(struct bpf_perf_event_data* ctx) {
  return count_sample(ctx, SOURCE_COOKIE);
}

/* PMU events that record data_src (PEBS load latency and stores, IBS ops), 6.2+. */
SEC("perf_event")
int tt_count_sample_sourced(struct bpf_perf_event_data* ctx) {
  return count_sample(ctx, SOURCE_KFUNC);
}

/* The same on kernels without bpf_cast_to_kern_ctx. */
SEC("perf_event")
int tt_count_sample_sourced_read(struct bpf_perf_event_data* ctx) {
  return count_sample(ctx, SOURCE_READ);
}
