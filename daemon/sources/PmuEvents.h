// Which precise memory-sampling events to open on this CPU, as perf_event_attrs:
//   Intel: PEBS load-latency loads (MEM_TRANS_RETIRED:LOAD_LATENCY, ldlat threshold) and retired
//          stores (MEM_INST_RETIRED:ALL_STORES / MEM_UOPS_RETIRED:ALL_STORES), encoded by libpfm4
//          for the detected core PMU, precise_ip 2;
//   AMD:   IBS Op through the dynamic `ibs_op` PMU (type from sysfs), counting dispatched ops.
// Every attr samples ADDR|TID|WEIGHT|DATA_SRC (|PHYS_ADDR when asked).
#pragma once

#include <linux/perf_event.h>

#include <optional>
#include <string>
#include <vector>

#include "core/Result.h"
#include "core/Types.h"

namespace tt::sources {

struct PmuPlanInput {
  std::string corePmu;               // libpfm4's detected core PMU ("skx", "amd64_fam19h_zen3"), or ""
  std::optional<uint32_t> ibsOpType; // /sys/bus/event_source/devices/ibs_op/type when present
  uint64_t period = 10007;
  uint32_t loadLatencyCycles = 64;
  bool sampleStores = true;
  bool physicalAddresses = false;
};

struct PmuPlan {
  std::vector<perf_event_attr> events;
  std::vector<AccessKind> kinds;  // parallel to events: what each samples (IBS ops: either)
  std::string description;  // "Intel PEBS on skx: skx::MEM_TRANS_RETIRED:LOAD_LATENCY:ldlat=64, ..."
};

// Candidate libpfm4 event names for an Intel core PMU, most precise first.
[[nodiscard]] std::vector<std::string> intelLoadEventNames(const std::string& pmu, uint32_t ldlat);
[[nodiscard]] std::vector<std::string> intelStoreEventNames(const std::string& pmu);

// Builds the plan; an error says why this CPU has no usable precise sampling.
[[nodiscard]] Result<PmuPlan> planPmuEvents(const PmuPlanInput& in);

}  // namespace tt::sources
