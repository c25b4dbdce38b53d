/* Structs shared between tensortier's BPF programs (bpf/<name>.bpf.c) and their owning C++ classes
 * (daemon/sys/bpf). Plain fixed-width C so both compilers lay them out identically. */
#ifndef TT_EVENTS_H
#define TT_EVENTS_H

#ifdef __bpf__
typedef __u32 tt_u32;
typedef __u64 tt_u64;
typedef __u16 tt_u16;
typedef __u8 tt_u8;
#else
#include <stdint.h>
typedef uint32_t tt_u32;
typedef uint64_t tt_u64;
typedef uint16_t tt_u16;
typedef uint8_t tt_u8;
#endif

/* perf_sample_agg (samples) and fault_trace (first-touch faults) count events per 4 KiB page in
 * blocks of 512 counters, one block per (tgid, 2 MiB-aligned virtual chunk): tt_chunk_counts.h. */
#define TT_PAGE_SHIFT 12
#define TT_CHUNK_PAGES 512
#define TT_CHUNK_BYTES (TT_CHUNK_PAGES * 4096ULL)

/* Key of the in-kernel count blocks (`chunks` of tt_chunk_counts.h). */
struct tt_chunk_key {
  tt_u32 tgid;
  tt_u32 kind;  /* enum tt_sample_kind of the counted events (0 where the program has one kind) */
  tt_u64 chunk; /* virtual address of the chunk's first page (2 MiB aligned) */
};

/* What the events a sampling program counts are, from its attach cookie (perf_sample_agg: one per
 * perf event, so PEBS loads and stores are counted apart). */
enum tt_sample_kind {
  TT_KIND_DEFAULT = 0, /* the source's default kind */
  TT_KIND_LOAD = 1,
  TT_KIND_STORE = 2,
  TT_KIND_ACCESS = 3,  /* either (IBS ops without their data_src) */
};

/* Which memory served a sampled access, from the sample's perf_mem_data_src (tt_data_src.h). */
enum tt_sample_tier {
  TT_TIER_UNKNOWN = 0,    /* no data_src (software events), or the PMU left the level unset */
  TT_TIER_CACHE = 1,
  TT_TIER_FAST = 2,       /* local DRAM */
  TT_TIER_REMOTE_RAM = 3, /* another node's DRAM */
  TT_TIER_SLOW = 4,       /* PMEM or CXL */
};

/* Which memories served a block's pages: one bit per page per tier (cache, fast, remote RAM, slow:
 * enum tt_sample_tier 1..4), set when any counted event of the page was served from there. Bits,
 * not the key: a key per tier would merge the staging block on every change of tier (L1 hits mixed
 * with DRAM misses on one chunk are the common case) and multiply the blocks per chunk. */
#define TT_TIER_PLANES 4
#define TT_TIER_PLANE_WORDS (TT_CHUNK_PAGES / 64)
#define TT_TIER_WORDS (TT_TIER_PLANES * TT_TIER_PLANE_WORDS)

/* Value: events of page i of the chunk in count[i], saturating at 255; tier[t - 1][i / 64] bit
 * i % 64: page i was served by tier t at least once. */
struct tt_chunk_counts {
  tt_u8 count[TT_CHUNK_PAGES];
  tt_u64 tier[TT_TIER_PLANES][TT_TIER_PLANE_WORDS];
};

/* Per-CPU staging block (`chunk_stage` of tt_chunk_counts.h): the chunk this CPU counted in last.
 * Events in the same chunk as the previous one are counted here, in per-CPU memory, without a hash
 * lookup; the block is merged into `chunks` when the CPU moves on to another chunk, and the daemon
 * collects what is left at its drain. */
struct tt_chunk_stage {
  struct tt_chunk_key key; /* tgid 0: empty */
  tt_u64 dirty;            /* bit w set: count[8w .. 8w+7] may hold counts */
  tt_u32 events;           /* events counted in this block since it was last merged */
  tt_u32 tier_dirty;       /* bit 8p + w set: tier[p][w] may hold bits */
  /* count and tier as in struct tt_chunk_counts, contiguous: a new chunk is inserted from here */
  tt_u8 count[TT_CHUNK_PAGES];
  tt_u64 tier[TT_TIER_PLANES][TT_TIER_PLANE_WORDS];
};

/* Indices of perf_sample_agg's per-CPU `stats` array. */
enum tt_agg_stat {
  TT_AGG_SAMPLES = 0,    /* program runs (samples the event produced) */
  TT_AGG_TRACKED = 1,    /* samples of a tracked tgid */
  TT_AGG_NO_ADDR = 2,    /* tracked samples without a user-space data address */
  TT_AGG_MAP_FULL = 3,   /* samples dropped: their chunk could not be inserted when merged */
  TT_AGG_NEW_CHUNKS = 4, /* chunks inserted */
  TT_AGG_SATURATED = 5,  /* samples not counted: their page's counter was already 255 */
  TT_AGG_TIER_KNOWN = 6, /* tracked samples whose data_src named the memory that served them */
  TT_AGG_DATA_SRC_NA = 7, /* tracked samples whose data_src said "not available" (tt_data_src_na) */
  TT_AGG_NR_STATS = 8,
};

/* What one fault_trace ring-buffer record reports. First-touch faults (user faults on a
 * not-present page) and write-protect faults are not sent through the ring: they come in storms
 * (a process populating its memory; copy-on-write after fork; every written page once an epoch
 * under soft-dirty tracking), so they are counted per page in fault_trace's chunk blocks instead,
 * write-protect faults with the kind TT_KIND_STORE. (3 was the write-protect record.) */
enum tt_event_kind {
  TT_EV_FAULT_HINT = 2,          /* read fault on a present page (protection fault) */
  TT_EV_MIGRATE_PAGE = 4,        /* remove_migration_pte/_pmd of a tracked process's page */
  TT_EV_MIGRATE_BATCH = 5,       /* migrate/mm_migrate_pages in a tracked task's context */
};

/* Migration reasons as tensortier groups them (CO-RE maps the kernel's enum migrate_reason). */
enum tt_migrate_class {
  TT_MIG_OTHER = 0,
  TT_MIG_PROMOTE = 1, /* MR_NUMA_MISPLACED: NUMA balancing (tiering mode promotes this way) */
  TT_MIG_DEMOTE = 2,  /* MR_DEMOTION: reclaim demoting to a lower tier */
  TT_MIG_SYSCALL = 3, /* MR_SYSCALL, MR_MEMPOLICY_MBIND: move_pages/migrate_pages/mbind
                       * (tensortier's own moves, too) */
  TT_MIG_NR_CLASSES = 4,
};

struct tt_event {
  tt_u32 tgid;
  tt_u16 kind;      /* enum tt_event_kind */
  tt_u16 mig_class; /* enum tt_migrate_class, for TT_EV_MIGRATE_* */
  tt_u64 addr;      /* faulting / migrated virtual address; 0 for batches */
  tt_u64 detail;    /* fault: x86 error_code; batch: pages succeeded; page: log2 of the base
                     * pages the restored entry maps (0 for a PTE, 9 for a PMD) */
  tt_u64 failed;    /* batch: pages failed */
};

/* Indices of fault_trace's per-CPU `migrations` array: pages moved per class, all processes
 * (kswapd demotes on behalf of everyone, so this cannot be filtered by tgid). */
#define TT_MIG_STAT_SUCCEEDED(c) ((c) * 2)
#define TT_MIG_STAT_FAILED(c) ((c) * 2 + 1)
#define TT_MIG_NR_STATS (TT_MIG_NR_CLASSES * 2)
/* fault_trace drops (ring buffer full) are counted at this index of `migrations`. */
#define TT_FAULT_STAT_DROPPED TT_MIG_NR_STATS
/* First-touch faults not counted: their chunk could not be inserted (map full) / their page's
 * counter was already 255. */
#define TT_FAULT_STAT_CHUNKS_FULL (TT_MIG_NR_STATS + 1)
#define TT_FAULT_STAT_SATURATED (TT_MIG_NR_STATS + 2)
/* Page table entries of a tracked process's pages restored to the page they already mapped: a
 * migration that failed and was undone, or a huge page split in place. Not reported as moves. */
#define TT_FAULT_STAT_UNDONE (TT_MIG_NR_STATS + 3)
#define TT_FAULT_NR_STATS (TT_MIG_NR_STATS + 4)

#endif
