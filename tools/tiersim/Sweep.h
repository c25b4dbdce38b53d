// The policy registry and the sweep behind `tiersim sweep`: every model x fast-memory fraction x
// policy, normalised to the all-DRAM bound.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "Policy.h"
#include "Simulator.h"
#include "Trace.h"

namespace tt::tiersim {

struct PolicyContext {
  uint32_t scaleDivisor = 1;
  double memoryParallelism = 64;
  // 1 in how many cache-line accesses the simulator samples for the policy (SimConfig::
  // samplePeriod): an online policy knows its own sampler's period, as the daemon does.
  uint32_t samplePeriod = 199;
  // The rest of the cost model, for offline yardsticks that plan against it (oracle-prefetch);
  // online policies must not use them (a real system does not know its cost model).
  double computeOverlap = 0;
  double migrationOverlap = 0.5;
  uint64_t windowNs = 20'000;
};

struct PolicyEntry {
  std::string name;
  bool offline = false;          // gets the whole trace at init
  bool unboundedFast = false;    // the all-DRAM bound
  bool usesHintFaults = false;   // runs with the NUMA-balancing scanner on
  // The policy's own PMU sample period at full scale (divided by the trace's scale divisor, see
  // HeMem.cpp); 0: the simulator's (SimConfig::samplePeriod).
  uint32_t samplePeriod = 0;
  std::function<std::unique_ptr<Policy>(const PolicyContext&)> make;
};

// all-dram, first-touch, tpp, hemem, memtis, autotm-static, the oracles (oracle-lookahead,
// oracle-prefetch: yardsticks) and, when tools/tiersim/policies builds
// tt_tiersim_tensortier, tensortier.
[[nodiscard]] const std::vector<PolicyEntry>& policyRegistry();
[[nodiscard]] const PolicyEntry* findPolicy(const std::string& name);

struct SweepOptions {
  std::vector<std::string> models;          // empty: all
  std::vector<double> fastFractions = {0.1, 0.2, 0.3, 0.5};
  std::vector<std::string> policies;        // empty: all registered
  std::vector<std::string> tiers = {"dram", "optane"};
  double middleFraction = 0.3;              // three tiers: the middle tier's share of the footprint
  // Online policies need a few steps to settle (TPP: two NUMA-scan rotations, about 16 steps at
  // the kernel's scan rate), so the summary is over the last 10 of 30 steps.
  uint32_t steps = 30;
  uint32_t warmupSteps = 20;
  uint32_t scaleDivisor = 16;
  uint32_t jobs = 1;
  uint64_t seed = 1;
  // Linux NUMA balancing: numa_balancing_scan_size_mb = 256 per scan_period_min_ms = 1000.
  double hintScanBytesPerSec = 256.0 * 1024 * 1024;
  SimConfig base;                           // cost-model knobs; tiers/capacities are filled per run
};

// The simulator configuration of one run (what `tiersim run` and the sweep share).
[[nodiscard]] Result<SimConfig> makeSimConfig(const SweepOptions& options, const Trace& trace,
                                              double fastFraction, const PolicyEntry& policy);

// What a policy of `trace` run under `config` is built with.
[[nodiscard]] PolicyContext makePolicyContext(const Trace& trace, const SimConfig& config);

struct SweepCell {
  std::string model;
  double fastFraction = 0;
  std::string policy;
  SimResult result;
  double normalised = 0;       // mean step time / all-DRAM mean step time
};

struct SweepResult {
  std::vector<SweepCell> cells;
  std::vector<std::string> policies;     // column order
  std::vector<std::string> traceNotes;   // one line per model: footprint, pages, records
  double seconds = 0;                    // wall time of the sweep
};

[[nodiscard]] Result<SweepResult> runSweep(const SweepOptions& options);
[[nodiscard]] std::string sweepMarkdown(const SweepResult& result, const SweepOptions& options);
[[nodiscard]] std::string sweepCsv(const SweepResult& result);

}  // namespace tt::tiersim
