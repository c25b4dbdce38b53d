// Vocabulary shared across roles: what sources report, what clients register, what the planner
// hands the migration engine. Kept here, in core, so no role depends on another just for a struct.
//
// Data flow: sources -> EvidenceBatch (AccessEvidence records, EvidenceBlocks) -> heat -> policy -> MigrationPlan -> migrate.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace tt {

inline constexpr uint64_t kBasePageSize = 4096;
inline constexpr uint64_t kHugePageSize = 2ULL << 20;

// ---- Access evidence (daemon/sources -> daemon/heat) --------------------------------------------

enum class AccessKind : uint8_t {
  Load,    // a sampled load (PEBS load-latency, IBS op, DAMON read)
  Store,   // a sampled or observed store (retired stores, soft-dirty)
  Fault,   // a page fault on the page (first touch)
  Hint,    // a NUMA hinting fault: the kernel saw an access to an unmapped-for-hinting page
  Access,  // an access of unknown direction (DAMON, accessed bits)
};

// Which memory served a sampled access, when the PMU says (data_src); Unknown otherwise. FastTier is
// local DRAM; RemoteRam is DRAM of another node (another socket's, or a CPU-less node that the PMU
// reports as RAM rather than PMEM or CXL): data_src does not name the node, so whether that is the
// slow tier depends on the machine's topology; SlowTier is PMEM or CXL memory.
enum class ServedBy : uint8_t { Unknown, FastTier, SlowTier, Cache, RemoteRam };

struct AccessEvidence {
  pid_t tgid = 0;
  uint64_t page = 0;     // virtual address of the 4 KiB page (low 12 bits zero)
  uint32_t weight = 1;   // how many accesses this record stands for (sample count, period-scaled)
  AccessKind kind = AccessKind::Access;
  ServedBy servedBy = ServedBy::Unknown;
  uint16_t latencyCycles = 0;  // PEBS/IBS load latency when known, else 0
};

// Evidence for the pages of one aligned 2 MiB chunk of one process and one kind, as in-kernel
// aggregation counts it: a count per page and a bit per page for each memory that served it.
// Why blocks and not a record per page: sampled pages come in runs, and the counts arrive from
// the kernel in this shape already. Expanding them into 24-byte records cost the daemon more per
// sample than the kernel's counting (docs/benchmarks.md, "Hotness sources"); a block is 792 bytes
// for up to 512 pages (1.5 bytes per page when the chunk is fully sampled), and the heat model
// folds a run of pages into its unit at once.
inline constexpr uint32_t kBlockPages = 512;
inline constexpr uint64_t kBlockBytes = uint64_t{kBlockPages} * kBasePageSize;
// The memories a block has a bit plane for, fastest first.
inline constexpr std::array<ServedBy, 4> kBlockTiers = {ServedBy::Cache, ServedBy::FastTier, ServedBy::RemoteRam,
                                                        ServedBy::SlowTier};
inline constexpr uint32_t kBlockTierWords = kBlockPages / 64;  // words per bit plane

// Of two memories that served accesses to one page, the slower (kBlockTiers order; Unknown below
// all): what the page costs is what matters to placement. Records and blocks both keep it.
[[nodiscard]] ServedBy slowerOf(ServedBy a, ServedBy b);

struct EvidenceBlock {
  pid_t tgid = 0;
  AccessKind kind = AccessKind::Access;
  uint64_t base = 0;            // kBlockBytes aligned virtual address of page 0
  uint32_t weightPerCount = 1;  // accesses one count stands for (a sampler's period)
  std::array<uint8_t, kBlockPages> counts{};  // per page; 0: no evidence for the page
  // Plane p (kBlockTiers[p]) word w bit b: page 64 w + b was served by that memory at least once.
  std::array<uint64_t, kBlockTiers.size() * kBlockTierWords> served{};

  // counts[page] x weightPerCount, saturating: what one record of the page would weigh.
  [[nodiscard]] uint32_t weight(uint32_t page) const;
  // The slowest memory that served the page (Unknown: none known), as a record keeps it.
  [[nodiscard]] ServedBy servedBy(uint32_t page) const;
  void setServedBy(uint32_t page, ServedBy by);
  // Whether any page has a serving memory (software events never do).
  [[nodiscard]] bool tiered() const;
  // Pages with evidence.
  [[nodiscard]] size_t pages() const;
  // The record the page would have been (count 0 gives a record of weight 0).
  [[nodiscard]] AccessEvidence record(uint32_t page) const;
};

// One epoch's evidence from every source: records (one per tgid, page, kind) and blocks (one per
// tgid, chunk, kind). A page may have a record from one source and a block entry from another,
// as it may have records from two sources.
struct EvidenceBatch {
  // Virtual ranges of a tracked process whose pages the kernel migrated by itself (NUMA balancing
  // promotions, reclaim demotions, compaction): not evidence of access, but where those pages are
  // changed without the daemon's doing.
  struct MovedRange {
    pid_t tgid = 0;
    uint64_t start = 0;
    uint64_t length = 0;
  };
  std::vector<AccessEvidence> records;
  std::vector<EvidenceBlock> blocks;
  std::vector<MovedRange> movedByKernel;

  void clear() {
    records.clear();
    blocks.clear();
    movedByKernel.clear();
  }
  // No access evidence (kernel moves alone are none).
  [[nodiscard]] bool empty() const { return records.empty() && blocks.empty(); }
  // Pages with evidence: records plus the blocks' pages with a count.
  [[nodiscard]] size_t pages() const;
  // Accesses all of it stands for.
  [[nodiscard]] uint64_t weight() const;
  // Calls f(const AccessEvidence&) for every record, then for every block page with a count, in
  // page order: for consumers that want records (the recorder, tests).
  template <typename F>
  void forEachRecord(F&& f) const {
    for (const AccessEvidence& e : records) f(e);
    for (const EvidenceBlock& b : blocks)
      for (uint32_t i = 0; i < kBlockPages; ++i)
        if (b.counts[i] != 0) f(b.record(i));
  }
  [[nodiscard]] std::vector<AccessEvidence> flattened() const;
};

// ---- Regions registered by clients (daemon/registry, client_lib) ---------------------------------

enum class RegionKind : uint8_t { Weight, Gradient, OptimizerState, Activation, Workspace, Other };

struct RegionInfo {
  uint64_t id = 0;        // daemon-assigned, unique for the daemon's lifetime
  pid_t tgid = 0;
  uint64_t start = 0;     // page aligned
  uint64_t length = 0;    // bytes, page multiple
  RegionKind kind = RegionKind::Other;
  std::string name;
  uint64_t expectedLifetimeSteps = 0;  // client hint; 0 = unknown / whole run
};

// ---- Iteration marks (client -> heat) ------------------------------------------------------------

enum class MarkType : uint8_t { StepBegin, StepEnd, PhaseBegin };

struct IterationMark {
  pid_t tgid = 0;
  MarkType type = MarkType::StepBegin;
  uint64_t step = 0;
  std::string phase;        // "forward", "backward", "optimizer", or a framework's own label
  uint64_t timestampNs = 0; // CLOCK_MONOTONIC
};

// ---- Migration plan (daemon/policy -> daemon/migrate) -------------------------------------------

struct MoveRequest {
  pid_t tgid = 0;
  uint64_t start = 0;     // page aligned
  uint64_t length = 0;    // bytes, page multiple
  int targetNode = 0;
  int priority = 0;       // higher first: the engine orders batches by it
  uint64_t regionId = 0;  // 0 when the range is not a registered region
  // The planner's moves are between tiers: a page already on any node of the target's tier stays
  // where it is (a block partly on another fast node is not pulled over). false (tensortierctl
  // migrate): every page not on targetNode moves.
  bool betweenTiers = false;
};

struct MigrationPlan {
  uint64_t generation = 0;  // increases; a newer plan supersedes an in-flight older one
  std::vector<MoveRequest> moves;
};

// Bytes per second the engine copies each way (service -> heat, policy). Promotions (slow to
// fast) and demotions (fast to slow) differ on real slow tiers (Optane writes at about a third of
// its read bandwidth) and have rate limits of their own, so what a plan's copying takes is its
// promoted bytes at one rate plus its demoted bytes at the other. 0 = not known.
struct MigrationRates {
  double promoteBytesPerSec = 0;
  double demoteBytesPerSec = 0;
  [[nodiscard]] bool known() const;  // both positive and finite
  // Each direction not known copies as fast as the other (the same kernel copy between the same
  // nodes); neither known: `fallback` both ways.
  [[nodiscard]] MigrationRates filledIn(double fallback) const;
  friend bool operator==(const MigrationRates&, const MigrationRates&) = default;
};

// [start, start + length): whole 4 KiB pages.
struct AddressRange {
  uint64_t start = 0;
  uint64_t length = 0;
  friend bool operator==(const AddressRange&, const AddressRange&) = default;
};

// Pages the engine could not move off their node after every retry (busy: pinned by RDMA or GPU
// registrations, io_uring fixed buffers, ...). The planner leaves them where they are while they
// are held, and charges the fast ones to the budgets, so that it neither re-issues the move every
// plan nor sizes promotions into room that never frees.
struct StuckRange {
  pid_t tgid = 0;
  uint64_t start = 0;   // page aligned
  uint64_t length = 0;  // bytes, page multiple
  bool onFast = false;  // left on a fast node (a demotion failed); false: on a slow node
  // Due a retry: planned like any other pages, except that demoting them frees no room in that
  // plan (the promotions do not count on it until the demotion has succeeded).
  bool retry = false;
};

[[nodiscard]] const char* accessKindName(AccessKind kind);
[[nodiscard]] const char* regionKindName(RegionKind kind);

}  // namespace tt
