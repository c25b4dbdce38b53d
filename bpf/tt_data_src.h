/* Decoding of perf's union perf_mem_data_src (include/uapi/linux/perf_event.h), shared by the
 * in-kernel sampling program (perf_sample_agg.bpf.c, which reads data_src from the kernel's sample)
 * and the user-space ring decoder (daemon/sources/PerfDecode.cpp), so that both aggregation paths
 * name the same tier and kind for the same sample. Plain C over tt_events.h's types; unit-tested
 * through PerfDecode (tests/unit/sources/PerfDecodeTest.cpp).
 *
 * The field layout and values are the uapi's, defined here so that neither side depends on the
 * installed kernel headers (CXL appeared in 6.2's headers, Debian 12 ships 6.1's) nor on macros,
 * which BTF (vmlinux.h) does not carry. */
#ifndef TT_DATA_SRC_H
#define TT_DATA_SRC_H

#include "tt_events.h"

#ifdef __bpf__
#define TT_DS_INLINE static __always_inline
#else
#define TT_DS_INLINE static inline
#endif

#define TT_DS_OP_SHIFT 0
#define TT_DS_LVL_SHIFT 5
#define TT_DS_LVL_NUM_SHIFT 33
#define TT_DS_REMOTE_SHIFT 37

/* mem_op */
#define TT_DS_OP_NA 0x01ULL
#define TT_DS_OP_LOAD 0x02ULL
#define TT_DS_OP_STORE 0x04ULL
/* mem_lvl (legacy bits; older drivers set only these) */
#define TT_DS_LVL_NA 0x01ULL
#define TT_DS_LVL_HIT 0x02ULL
#define TT_DS_LVL_MISS 0x04ULL
#define TT_DS_LVL_L1 0x08ULL
#define TT_DS_LVL_LFB 0x10ULL
#define TT_DS_LVL_L2 0x20ULL
#define TT_DS_LVL_L3 0x40ULL
#define TT_DS_LVL_LOC_RAM 0x80ULL
#define TT_DS_LVL_REM_RAM1 0x100ULL
#define TT_DS_LVL_REM_RAM2 0x200ULL
#define TT_DS_LVL_REM_CCE1 0x400ULL
#define TT_DS_LVL_REM_CCE2 0x800ULL
#define TT_DS_LVL_IO 0x1000ULL
#define TT_DS_LVL_UNC 0x2000ULL
/* mem_lvl_num (the precise field: Intel since Skylake, AMD IBS since 6.1) */
#define TT_DS_LVL_NUM_L1 0x01ULL
#define TT_DS_LVL_NUM_L2 0x02ULL
#define TT_DS_LVL_NUM_L3 0x03ULL
#define TT_DS_LVL_NUM_L4 0x04ULL
#define TT_DS_LVL_NUM_CXL 0x09ULL
#define TT_DS_LVL_NUM_IO 0x0aULL
#define TT_DS_LVL_NUM_ANY_CACHE 0x0bULL
#define TT_DS_LVL_NUM_LFB 0x0cULL
#define TT_DS_LVL_NUM_RAM 0x0dULL
#define TT_DS_LVL_NUM_PMEM 0x0eULL
#define TT_DS_LVL_NUM_NA 0x0fULL

/* Which memory served the access (enum tt_sample_tier): caches, local DRAM (fast), another node's
 * DRAM (the remote bit with RAM, or the legacy REM_RAM levels), PMEM and CXL (slow). Unknown when
 * the PMU left the level unset (N/A), and when the level it names missed without saying what
 * served the access instead. The kernel's encodings (arch/x86/events/intel/ds.c) this has to read
 * right besides the plain ones: pre-Skylake Intel's remote-DRAM load (PEBS source 0x0b) is the
 * legacy REM_RAM1 with level number L3; its "L3 miss, unknown source" (0x00) is MISS with L3; a
 * Haswell-style store that missed L1 is L1 | MISS with no level number. */
TT_DS_INLINE tt_u32 tt_tier_of_data_src(tt_u64 src) {
  tt_u64 lvl = (src >> TT_DS_LVL_SHIFT) & 0x3fff;
  tt_u64 lvl_num = (src >> TT_DS_LVL_NUM_SHIFT) & 0xf;
  switch (lvl_num) {
    case TT_DS_LVL_NUM_PMEM:
    case TT_DS_LVL_NUM_CXL: return TT_TIER_SLOW;
    case TT_DS_LVL_NUM_RAM: return ((src >> TT_DS_REMOTE_SHIFT) & 1) ? TT_TIER_REMOTE_RAM : TT_TIER_FAST;
    default: break;
  }
  if (lvl & (TT_DS_LVL_REM_RAM1 | TT_DS_LVL_REM_RAM2)) return TT_TIER_REMOTE_RAM;
  if (lvl & TT_DS_LVL_LOC_RAM) return TT_TIER_FAST;
  if (lvl & TT_DS_LVL_MISS) return TT_TIER_UNKNOWN;
  switch (lvl_num) {
    case TT_DS_LVL_NUM_L1:
    case TT_DS_LVL_NUM_L2:
    case TT_DS_LVL_NUM_L3:
    case TT_DS_LVL_NUM_L4:
    case TT_DS_LVL_NUM_ANY_CACHE:
    case TT_DS_LVL_NUM_LFB: return TT_TIER_CACHE;
    default: break;
  }
  if (lvl & (TT_DS_LVL_L1 | TT_DS_LVL_LFB | TT_DS_LVL_L2 | TT_DS_LVL_L3 | TT_DS_LVL_REM_CCE1 | TT_DS_LVL_REM_CCE2))
    return TT_TIER_CACHE;
  return TT_TIER_UNKNOWN;
}

/* Whether the data_src says "not available" in both op and level: what the kernel records for a
 * sample whose PMU wrote none (PERF_MEM_NA), and what a PMU reports for an access it could not
 * classify. */
TT_DS_INLINE int tt_data_src_na(tt_u64 src) {
  return ((src >> TT_DS_OP_SHIFT) & 0x1f) == TT_DS_OP_NA && ((src >> TT_DS_LVL_SHIFT) & 0x3fff) == TT_DS_LVL_NA;
}

/* Load or store from mem_op (enum tt_sample_kind); TT_KIND_ACCESS when neither bit is set. */
TT_DS_INLINE tt_u32 tt_kind_of_data_src(tt_u64 src) {
  tt_u64 op = (src >> TT_DS_OP_SHIFT) & 0x1f;
  if (op & TT_DS_OP_STORE) return TT_KIND_STORE;
  if (op & TT_DS_OP_LOAD) return TT_KIND_LOAD;
  return TT_KIND_ACCESS;
}

#endif
