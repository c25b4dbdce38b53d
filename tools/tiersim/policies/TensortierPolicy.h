// tensortier's own policy in the simulator: the daemon's heat model (daemon/heat) and planner
// (daemon/policy), the same code, behind the simulator's Policy interface (tools/tiersim/Policy.h).
#pragma once

#include <memory>

#include "Policy.h"
#include "tensortier/v1/policy_config.pb.h"

namespace tt::tiersim {

// The simulator registers it as "tensortier" (Sweep.cpp) with a default PolicyConfig, i.e. the
// daemon's defaults. `samplePeriod`: 1 in how many cache-line accesses the simulator samples (a
// sample stands for that many, as the daemon weighs a sample by its period); `memoryParallelism`:
// the misses in flight of the cost model, for the slow tier's penalty per line; `scaleDivisor`:
// the trace's (Trace::scaleDivisor), which divides the planning period as it divides the
// baselines' periods (Baselines.h).
[[nodiscard]] std::unique_ptr<Policy> makeTensortierPolicy(const tensortier::v1::PolicyConfig& config,
                                                           uint32_t samplePeriod = 199, double memoryParallelism = 64,
                                                           uint32_t scaleDivisor = 1);
// Plans the policy has made so far (at most one per planning period); 0 for any other policy.
[[nodiscard]] uint64_t tensortierPlans(const Policy& policy);

}  // namespace tt::tiersim
