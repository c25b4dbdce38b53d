// Test harness for the in-kernel chunk counters (bpf/tt_chunk_counts.h): runs the daemon's own
// counting code on synthetic events through BPF_PROG_TEST_RUN, so the privileged tests can drive
// what no event on a machine without a PMU delivers (a memory tier per sample) and a staging and
// merge sequence of their choosing, in the real kernel. Not part of the daemon.
#include "vmlinux.h"

#include <bpf/bpf_helpers.h>

#include "tt_events.h"
#include "tt_chunk_counts.h"

char LICENSE[] SEC("license") = "GPL";

// ctx (the test run's input): tgid, kind, tier, address. Counts one event; returns 1 when it was
// dropped (map full or a contended merge).
SEC("raw_tp")
int tt_count_event(__u64* ctx) {
  struct tt_chunk_result r = tt_chunk_count((__u32)ctx[0], (__u32)ctx[1], (__u32)ctx[2], ctx[3]);
  return r.dropped ? 1 : 0;
}
