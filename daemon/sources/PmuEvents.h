// Which precise memory-sampling events to open on this CPU, as perf_event_attrs:
//   Intel: PEBS load-latency loads (MEM_TRANS_RETIRED:LOAD_LATENCY, ldlat threshold) and retired
//          stores (MEM_INST_RETIRED:ALL_STORES / MEM_UOPS_RETIRED:ALL_STORES), encoded by libpfm4
//          for the detected core PMU, precise_ip 2;
//   AMD:   IBS Op through the dynamic `ibs_op` PMU (type from sysfs), counting dispatched ops.
// Every attr samples ADDR|TID|WEIGHT|DATA_SRC (|PHYS_ADDR when asked).
//
// What the kernel accepts, from arch/x86/events (kernel sources checked for each):
//   - ibs_op has PERF_PMU_CAP_NO_EXCLUDE: any exclude_* flag fails with EINVAL, unless the
//     software filter bit is set (6.14+, perf_ibs_init: config2 & IBS_SW_FILTER_MASK; sysfs
//     format/swfilt says which bit, "config2:0"). Without it no flag is set, IBS samples kernel
//     mode too, and the sample readers drop kernel data addresses.
//   - IBS periods are in units of 16 ops: perf_ibs_init refuses or masks the low nibble (by
//     kernel version); on recent kernels PERF_EVENT_IOC_PERIOD's perf_ibs_check_period refuses
//     it, and periods under ibs_op's min_period 0x90.
//   - Sapphire/Emerald Rapids and Alder Lake P-cores (PMU_FL_MEM_LOADS_AUX, shown as the cpu /
//     cpu_core PMU's events/mem-loads-aux) refuse a load-latency event (0x01cd) sampling
//     DATA_SRC with ENODATA unless the group is led by mem-loads-aux (event=0x03,umask=0x82)
//     (intel_pmu_hw_config); perf mem opens the same group.
#pragma once

#include <linux/perf_event.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/Result.h"
#include "core/Types.h"
#include "sys/Fs.h"
#include "sys/perf/PerfEvent.h"

namespace tt::sources {

struct PmuPlanInput {
  std::string corePmu;               // libpfm4's detected core PMU ("skx", "amd64_fam19h_zen3"), or ""
  std::optional<uint32_t> ibsOpType; // /sys/bus/event_source/devices/ibs_op/type when present
  uint64_t period = 10007;
  uint32_t loadLatencyCycles = 64;
  bool sampleStores = true;
  bool physicalAddresses = false;
  // ibs_op's format/swfilt (6.14+): the bit that lets IBS take exclude_kernel / exclude_hv.
  std::optional<sys::perf::PmuConfigBit> ibsSwfilt;
  // The core PMU lists events/mem-loads-aux: load-latency sampling needs it as group leader.
  bool memLoadsAux = false;
  // The running kernel's release ("6.1.0-13-amd64", procfs sys/kernel/osrelease); "" = unknown.
  std::string kernelRelease;
};

// (major, minor) of a kernel release string; nullopt when it does not start with "N.N".
[[nodiscard]] std::optional<std::pair<int, int>> kernelVersionOf(const std::string& release);

// Fills in what sysfs says: ibsOpType, ibsSwfilt, memLoadsAux (cpu, or cpu_core on hybrids).
void readPmuSysfs(const sys::Fs& sysfs, PmuPlanInput& in);

struct PmuPlan {
  std::vector<perf_event_attr> events;
  std::vector<AccessKind> kinds;  // parallel to events: what each samples (IBS ops: either)
  // Parallel to events: a non-sampling event to open first on each CPU and lead the event's
  // group (mem-loads-aux), or none.
  std::vector<std::optional<perf_event_attr>> groupLeaders;
  uint64_t periodGranularity = 1;  // every period a multiple of it (IBS: 16)
  uint64_t minPeriod = 1;          // the smallest period the PMU accepts
  std::string description;  // "Intel PEBS on skx: skx::MEM_TRANS_RETIRED:LOAD_LATENCY:ldlat=64, ..."
};

// Candidate libpfm4 event names for an Intel core PMU, most precise first.
[[nodiscard]] std::vector<std::string> intelLoadEventNames(const std::string& pmu, uint32_t ldlat);
[[nodiscard]] std::vector<std::string> intelStoreEventNames(const std::string& pmu);

// Builds the plan; an error says why this CPU has no usable precise sampling.
[[nodiscard]] Result<PmuPlan> planPmuEvents(const PmuPlanInput& in);

}  // namespace tt::sources
