// Baseline of `sources_bench cost`: attached to the same per-CPU sampling events as the paths it
// is compared with, it does nothing and returns 0, so the kernel drops each sample without
// writing it to a ring. A run with it measures the per-sample work every path pays (the event's
// overflow handling, preparing the sample, entering a BPF program) apart from what each path adds.
#include "vmlinux.h"

#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

SEC("perf_event")
int tt_drop_sample(struct bpf_perf_event_data* ctx) {
  return 0;
}

// Reference of `sources_bench path-cost`: attached beside a ring, it returns 1, so the kernel goes
// on to write the sample to the ring as if no program were there. The ring with it minus the ring
// alone is what the kernel's call into a perf_event program costs (the in-kernel path's own
// overhead around its program), measured on the path that pays it.
SEC("perf_event")
int tt_keep_sample(struct bpf_perf_event_data* ctx) {
  return 1;
}

// Baseline of `sources_bench touch-rounds`: an empty program on the fault tracer's raw tracepoint,
// so a run with it measures what enabling the tracepoint and entering a BPF program on every user
// fault costs, apart from the tracer's own filter and counting.
SEC("raw_tracepoint/page_fault_user")
int tt_fault_noop(void* ctx) {
  return 0;
}
