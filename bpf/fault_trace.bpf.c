// Page faults and kernel page migrations of tracked processes: first-touch faults counted per
// page in chunk blocks (tt_chunk_counts.h), everything else through one BPF ring buffer.
//
//   exceptions/page_fault_user   every user fault (raw tracepoint: address, x86 error code):
//                                first touch (not present; on x86 also a NUMA hinting fault, whose
//                                PTE is PROT_NONE) counted per page; protection faults (hint on a
//                                present page, write-protect) sent as events
//   migrate/mm_migrate_pages     a batch finished: pages succeeded/failed and the reason; counted
//                                for all processes per reason class (kswapd demotes for everyone),
//                                and reported as an event when the current task is tracked
//   migrate/remove_migration_pte one page table entry of a migrated page restored (6.0+): the
//                                address, in the migrating task's context; without the fentry
//                                program below charged to that task: NUMA-balancing promotions
//                                run in the faulting (tracked) task, so they carry the tracked
//                                tgid, while reclaim demotions run in kswapd and go unattributed
//   thp/remove_migration_pmd     the same for a huge page mapped by one PMD (5.16+), which
//                                remove_migration_pte skips
//   fentry/fexit remove_migration_pte  the kernel function both tracepoints fire in (where its
//                                BTF has it): whose page it restores (the VMA's mm owner, so
//                                moves made in another task, kswapd's demotions, compaction,
//                                are attributed too) and whether it maps the old page back (an
//                                undone migration or a huge page split in place, not a move)
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "tt_events.h"
#include "tt_tgid_filter.h"
#include "tt_chunk_counts.h"

char LICENSE[] SEC("license") = "GPL";

const volatile bool report_first_touch = true;
const volatile bool report_write_protect = true;

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 1 << 20);
} events SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __type(key, __u32);
  __type(value, __u64);
  __uint(max_entries, TT_FAULT_NR_STATS);
} migrations SEC(".maps");

// x86 page-fault error code bits (arch/x86/include/asm/trap_pf.h).
#define X86_PF_PROT 0x1
#define X86_PF_WRITE 0x2

// Reason class of the migration a thread is running (pushed at mm_migrate_pages_start, popped at
// mm_migrate_pages), so per-page remove_migration_pte events carry it too. A stack: allocating the
// new page of a move_pages(2) call can enter direct reclaim, which demotes through a nested
// migrate_pages(), and the outer call's remaining pages must keep their own class.
#define TT_MIGRATING_DEPTH 4
struct migrating_classes {
  __u16 cls[TT_MIGRATING_DEPTH];
  __u32 depth; /* may exceed TT_MIGRATING_DEPTH: the deeper classes are not kept */
};
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __type(key, __u32);
  __type(value, struct migrating_classes);
  __uint(max_entries, 4096);
} migrating SEC(".maps");

// The class of the migration the current thread is innermost in, or TT_MIG_OTHER.
static __always_inline __u16 migrating_class(__u32 tid) {
  struct migrating_classes* m = bpf_map_lookup_elem(&migrating, &tid);
  if (!m || m->depth == 0) return TT_MIG_OTHER;
  __u32 top = m->depth < TT_MIGRATING_DEPTH ? m->depth - 1 : TT_MIGRATING_DEPTH - 1;
  return m->cls[top & (TT_MIGRATING_DEPTH - 1)];
}

// What the remove_migration_pte call a thread is in restores (fentry sets it, fexit deletes it;
// the tracepoints inside the call read it): the tracked tgid that owns the page (0: untracked) and
// whether the entry is put back to the page it had (undo).
struct restore_info {
  __u32 owner;
  __u32 undo;
};
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __type(key, __u32);
  __type(value, struct restore_info);
  __uint(max_entries, 4096);
} restoring SEC(".maps");

static __always_inline void add_stat(__u32 index, __u64 n) {
  __u64* v = bpf_map_lookup_elem(&migrations, &index);
  if (v) *v += n;
}

// page_fault_user fires for every user fault of every process: one inlined array load filters them.
static __always_inline __u32 current_tracked_tgid(void) {
  __u32 tgid = bpf_get_current_pid_tgid() >> 32;
  return tt_tgid_tracked(tgid) ? tgid : 0;
}

static __always_inline void emit(__u32 tgid, __u16 kind, __u16 mig_class, __u64 addr, __u64 detail, __u64 failed) {
  struct tt_event* e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
  if (!e) {
    add_stat(TT_FAULT_STAT_DROPPED, 1);
    return;
  }
  e->tgid = tgid;
  e->kind = kind;
  e->mig_class = mig_class;
  e->addr = addr;
  e->detail = detail;
  e->failed = failed;
  bpf_ringbuf_submit(e, 0);
}

// A raw tracepoint, not a classic one: a classic tracepoint program first has the kernel copy the
// event's fields into a per-CPU perf buffer, on every user fault of every process; a raw one gets
// the tracepoint's arguments as they are (TP_PROTO(unsigned long address, struct pt_regs *regs,
// unsigned long error_code), unchanged since 4.15).
SEC("raw_tracepoint/page_fault_user")
int tt_page_fault_user(struct bpf_raw_tracepoint_args* ctx) {
  __u32 tgid = current_tracked_tgid();
  if (!tgid) return 0;
  __u64 address = ctx->args[0];
  __u64 error = ctx->args[2];
  /* A user-mode fault at a kernel address (vsyscall emulation, a stray pointer) is no page of the
   * process: x86-64 kernel addresses have the top bit set (the sampling program drops them too). */
  if (address >> 63) return 0;
  if (!(error & X86_PF_PROT)) {
    // First touch: one per page a process populates, so a storm when it allocates; counting in
    // place costs a store into this CPU's staging block instead of a ring record (and no record is
    // lost to a full ring).
    if (!report_first_touch) return 0;
    struct tt_chunk_result r = tt_chunk_count(tgid, TT_KIND_DEFAULT, TT_TIER_UNKNOWN, address);
    if (r.saturated) add_stat(TT_FAULT_STAT_SATURATED, r.saturated);
    if (r.dropped) add_stat(TT_FAULT_STAT_CHUNKS_FULL, r.dropped);
    return 0;
  }
  if (error & X86_PF_WRITE) {
    if (!report_write_protect) return 0;
    // A write to a write-protected present page: copy-on-write after fork, and once per written
    // page per epoch while soft-dirty tracking write-protects them all (clear_refs). As many as
    // first touches, so counted in place the same way, with the store kind: as ring records they
    // overflowed the ring by the thousands.
    struct tt_chunk_result r = tt_chunk_count(tgid, TT_KIND_STORE, TT_TIER_UNKNOWN, address);
    if (r.saturated) add_stat(TT_FAULT_STAT_SATURATED, r.saturated);
    if (r.dropped) add_stat(TT_FAULT_STAT_CHUNKS_FULL, r.dropped);
    return 0;
  }
  emit(tgid, TT_EV_FAULT_HINT, 0, address, error, 0);
  return 0;
}

static __always_inline __u16 classify(int reason) {
  /* mbind(2) with MPOL_MF_MOVE is a system call moving pages as move_pages(2) does (tensortier's
   * engine makes it from inside a client, for the daemon). */
  if (bpf_core_enum_value_exists(enum migrate_reason, MR_MEMPOLICY_MBIND) &&
      reason == bpf_core_enum_value(enum migrate_reason, MR_MEMPOLICY_MBIND))
    return TT_MIG_SYSCALL;
  if (bpf_core_enum_value_exists(enum migrate_reason, MR_NUMA_MISPLACED) &&
      reason == bpf_core_enum_value(enum migrate_reason, MR_NUMA_MISPLACED))
    return TT_MIG_PROMOTE;
  if (bpf_core_enum_value_exists(enum migrate_reason, MR_DEMOTION) &&
      reason == bpf_core_enum_value(enum migrate_reason, MR_DEMOTION))
    return TT_MIG_DEMOTE;
  if (bpf_core_enum_value_exists(enum migrate_reason, MR_SYSCALL) &&
      reason == bpf_core_enum_value(enum migrate_reason, MR_SYSCALL))
    return TT_MIG_SYSCALL;
  return TT_MIG_OTHER;
}

SEC("tracepoint/migrate/mm_migrate_pages_start")
int tt_mm_migrate_pages_start(struct trace_event_raw_mm_migrate_pages_start* ctx) {
  __u32 tid = (__u32)bpf_get_current_pid_tgid();
  __u16 cls = classify(ctx->reason);
  struct migrating_classes* m = bpf_map_lookup_elem(&migrating, &tid);
  if (!m) {
    struct migrating_classes first = {{cls, 0, 0, 0}, 1};
    bpf_map_update_elem(&migrating, &tid, &first, BPF_ANY);
    return 0;
  }
  if (m->depth < TT_MIGRATING_DEPTH) m->cls[m->depth & (TT_MIGRATING_DEPTH - 1)] = cls;
  m->depth += 1;
  return 0;
}

SEC("tracepoint/migrate/mm_migrate_pages")
int tt_mm_migrate_pages(struct trace_event_raw_mm_migrate_pages* ctx) {
  __u32 tid = (__u32)bpf_get_current_pid_tgid();
  struct migrating_classes* m = bpf_map_lookup_elem(&migrating, &tid);
  if (m && m->depth > 1) m->depth -= 1;
  else bpf_map_delete_elem(&migrating, &tid);
  __u16 cls = classify(ctx->reason);
  __u64 ok = ctx->succeeded;
  __u64 failed = ctx->failed;
  add_stat(TT_MIG_STAT_SUCCEEDED(cls), ok);
  add_stat(TT_MIG_STAT_FAILED(cls), failed);
  __u32 tgid = current_tracked_tgid();
  if (tgid) emit(tgid, TT_EV_MIGRATE_BATCH, cls, 0, ok, failed);
  return 0;
}

// x86: the entry of a huge mapping has _PAGE_PSE (bit 7). In a 4 KiB PTE that bit is PAT, which
// anonymous and page-cache mappings never set.
#define X86_PAGE_PSE (1ULL << 7)
// A PMD maps 2^9 base pages (x86-64, 4 KiB pages).
#define TT_PMD_ORDER 9

static __always_inline void emit_page_move(__u64 addr, __u64 order) {
  __u32 tid = (__u32)bpf_get_current_pid_tgid();
  __u16 mig_class = migrating_class(tid);
  __u32 tgid = current_tracked_tgid();
  struct restore_info* info = bpf_map_lookup_elem(&restoring, &tid);
  if (info) {
    if (info->undo) {
      if (info->owner) add_stat(TT_FAULT_STAT_UNDONE, 1);
      return;
    }
    // The page's owner, except for a system call's moves: those a tracked process made of its own
    // pages stay reported; another process's (tensortier's engine, a migrate_pages(2) of another
    // pid) are that process's to count.
    tgid = mig_class != TT_MIG_SYSCALL || info->owner == tgid ? info->owner : 0;
  }
  if (!tgid) return;
  emit(tgid, TT_EV_MIGRATE_PAGE, mig_class, addr, order, 0);
}

// Loaded only where the kernel has it (the owning class checks the BTF first). The event's detail
// is log2 of the base pages the restored entry maps. The tracepoint fires once per PTE with the
// compound order of that PTE's page: a large folio mapped by PTEs (a THP split in the page table,
// or an mTHP) gives one event per base page, the head page's with the folio's order and the tail
// pages' with 0, so counting 2^order counted the folio about twice. Only a huge entry (hugetlb)
// maps 2^order pages.
//
// The kernel restores a migration entry this way also when the move fails and the old page is
// mapped back (an undo, not a move), and when it splits a huge page in place. Where the fentry
// program below is loaded, those are told apart and not reported; elsewhere a failed migration of
// a tracked page is reported as a move (mm_migrate_pages' per-reason totals count it as failed).
SEC("tracepoint/migrate/remove_migration_pte")
int tt_remove_migration_pte(struct trace_event_raw_migration_pte* ctx) {
  emit_page_move(ctx->addr, (ctx->pte & X86_PAGE_PSE) ? (__u64)ctx->order : 0);
  return 0;
}

// A transparent huge page mapped by one PMD: 512 base pages (loaded only where the BTF has it).
SEC("tracepoint/thp/remove_migration_pmd")
int tt_remove_migration_pmd(struct trace_event_raw_migration_pmd* ctx) {
  emit_page_move(ctx->addr & ~((1ULL << (12 + TT_PMD_ORDER)) - 1), TT_PMD_ORDER);
  return 0;
}

// remove_migration_pte(folio, vma, addr, arg) maps `folio` where migration entries stand: the new
// page after a move, or the old one again (arg's folio) after a failed move or a split. It is an
// rmap callback (its address is taken), so it is never inlined and fentry can attach to it where
// the BTF names it; the tracepoints above fire inside it. Its last argument is a struct
// rmap_walk_arg holding the old folio since 6.12, the old folio itself before.
// The kernel's struct rmap_walk_arg (6.12+), declared here: vmlinux.h comes from the build
// host's kernel, which may be older than the type.
struct rmap_walk_arg___tt {
  struct folio* folio;
} __attribute__((preserve_access_index));

SEC("fentry/remove_migration_pte")
int BPF_PROG(tt_restore_begin, struct folio* folio, struct vm_area_struct* vma, unsigned long addr, void* arg) {
  struct folio* old = (struct folio*)arg;
  if (bpf_core_type_exists(struct rmap_walk_arg___tt)) old = BPF_CORE_READ((struct rmap_walk_arg___tt*)arg, folio);
  struct restore_info info = {0, folio == old};
  // The mm's owner (CONFIG_MEMCG) is the process whose page this is, whichever task restores it.
  __u32 owner = bpf_get_current_pid_tgid() >> 32;
  struct mm_struct* mm = vma->vm_mm;
  if (bpf_core_field_exists(mm->owner)) owner = BPF_CORE_READ(mm, owner, tgid);
  if (tt_tgid_tracked(owner)) info.owner = owner;
  __u32 tid = (__u32)bpf_get_current_pid_tgid();
  bpf_map_update_elem(&restoring, &tid, &info, BPF_ANY);
  return 0;
}

SEC("fexit/remove_migration_pte")
int BPF_PROG(tt_restore_end) {
  __u32 tid = (__u32)bpf_get_current_pid_tgid();
  bpf_map_delete_elem(&restoring, &tid);
  return 0;
}
