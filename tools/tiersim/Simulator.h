// Replays a trace through the cost model (CostModel.h) with one placement policy (Policy.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "CostModel.h"
#include "Policy.h"
#include "Trace.h"

namespace tt::tiersim {

struct SimTier {
  TierSpec spec;
  uint64_t capacityPages = 0;  // the last tier is always given room for the whole footprint
};

struct SimConfig {
  std::vector<SimTier> tiers;              // index = TierId; at least two
  double memoryParallelism = 64;           // cache-line misses in flight across the step's cores
  double computeOverlap = 0;               // 0: step = compute + stall; 1: max(compute, stall)
  uint64_t windowNs = 20'000;              // cost-model window, trace (compute) time
  uint64_t epochNs = 1'000'000;            // policy epoch, simulated time
  // Sampled accesses: each cache-line access is a sample with probability 1/samplePeriod. A
  // record stands for count x Trace::samplePeriod lines and is delivered once per sample they give:
  // Binomial(lines, 1/samplePeriod) times, mean lines/samplePeriod. 0 = none.
  uint32_t samplePeriod = 199;
  // NUMA-balancing scanner (TPP-like policies): bytes of address space made hint-faulting per
  // simulated second, and the cost the application pays per hint fault. 0 = no scanner.
  double hintScanBytesPerSec = 0;
  double hintFaultNs = 1'000;
  // Page copy engine ceiling (move_pages of 4 KiB pages by one kernel thread is about 1-2 GB/s:
  // Yan et al., "Nimble Page Management for Tiered Memory Systems", ASPLOS'19).
  double migrationCopyBytesPerNs = 2.0;
  // Share of the copy time that overlaps the application (a background migration thread): charged
  // as stolen bandwidth instead of time. The rest is on the critical path.
  // Copies are not instant: the moves a policy emits are queued in order and one engine copies
  // them at copyBytesPerNs(from, to, migrationCopyBytesPerNs) in simulated time. A page changes
  // tier when its own copy completes (accesses before are served by the old tier); the
  // destination is reserved on acceptance, the source freed on completion. When a copy starts,
  // (1 - overlap) x its copy time is charged as time; its overlap x 4 KiB of stolen read (source)
  // and write (destination) traffic is charged to the cost-model windows it runs in, at the
  // engine's rate. A newer move of a queued page replaces the queued one (a move back to the
  // page's current tier just cancels it); a move of the page being copied is refused.
  double migrationOverlap = 0.5;
  uint64_t seed = 1;
  uint64_t warmupSteps = 0;                // steps excluded from the summary
  // The all-DRAM bound: tier 0 gets room for the whole footprint.
  bool unboundedFastTier = false;
};

// A step runs from the previous step's StepEnd (the first step: its StepBegin) to its own StepEnd:
// what happens between a StepEnd and the next StepBegin (an epoch due there and its copies, a
// recording's gap between steps) is the next step's. So every simulated ns and every migrated
// byte from the first StepBegin to the last StepEnd is counted in exactly one step.
struct StepStats {
  uint64_t step = 0;
  double timeNs = 0;          // simulated, previous StepEnd (or StepBegin) to StepEnd
  double computeNs = 0;       // trace time, the same span
  double stallNs = 0;         // memory stall added
  double migrationNs = 0;     // migration copy time on the critical path (copies started in the step)
  double hintFaultNs = 0;
  uint64_t migratedBytes = 0;  // copies completed in the step
  uint64_t fastLines = 0;     // cache-line accesses served by tier 0
  uint64_t totalLines = 0;
};

struct SimResult {
  std::string policy;
  std::string trace;
  std::vector<StepStats> steps;
  double totalTimeNs = 0;            // simulated time of the whole replay
  // Summary over the steps after warm-up (all steps when there are no more).
  double meanStepNs = 0;
  double meanMigratedBytesPerStep = 0;
  double fastHitFraction = 0;        // share of line accesses served by tier 0
  uint64_t promotedPages = 0;        // to a faster tier, whole run
  uint64_t demotedPages = 0;
  uint64_t refusedMoves = 0;         // to a full tier, of an untouched page, or of a page being copied
  uint64_t cancelledMoves = 0;       // queued copies replaced by a newer move of the page
  uint64_t queuedPagesAtEnd = 0;     // copies accepted but not completed when the trace ended
  uint64_t samples = 0;
  uint64_t hintFaults = 0;
  uint64_t epochs = 0;
};

// Runs one replay. Deterministic: the same trace, policy state and config (seed) give the same
// result. Errors: a trace that fails validateTrace, a config with fewer than two tiers (or more
// than three), a tier without bandwidth, or a copy engine rate that is not positive and finite.
[[nodiscard]] Result<SimResult> simulate(const Trace& trace, Policy& policy, const SimConfig& config,
                                         bool offline);

}  // namespace tt::tiersim
