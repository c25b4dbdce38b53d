// Vocabulary shared across roles: what sources report, what clients register, what the planner
// hands the migration engine. Kept here, in core, so no role depends on another just for a struct.
//
// Data flow: sources -> AccessEvidence -> heat -> policy -> MigrationPlan -> migrate.
#pragma once

#include <sys/types.h>

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
};

struct MigrationPlan {
  uint64_t generation = 0;  // increases; a newer plan supersedes an in-flight older one
  std::vector<MoveRequest> moves;
};

[[nodiscard]] const char* accessKindName(AccessKind kind);
[[nodiscard]] const char* regionKindName(RegionKind kind);

}  // namespace tt
