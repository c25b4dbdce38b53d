#include "sources/PmuEvents.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <utility>

#include "sys/perf/PfmEncoder.h"

namespace tt::sources {

namespace {

constexpr uint64_t kSampleType = PERF_SAMPLE_TID | PERF_SAMPLE_ADDR | PERF_SAMPLE_WEIGHT | PERF_SAMPLE_DATA_SRC;

constexpr uint64_t kIbsPeriodUnit = 16;     // IbsOpMaxCnt counts in units of 16 ops
constexpr uint64_t kIbsOpMinPeriod = 0x90;  // perf_ibs_op.min_period
constexpr uint64_t kIbsOpCntCtl = 1ULL << 19;  // count dispatched ops, not cycles
// INTEL_ARCH_EVENT_MASK part of the load-latency event the kernel ties to mem-loads-aux
// (is_mem_loads_event: event 0xcd umask 0x01), and the aux event (event 0x03 umask 0x82, as
// perf's MEM_LOADS_AUX 0x8203).
constexpr uint64_t kMemLoadsEvent = 0x01cd;
constexpr uint64_t kMemLoadsAuxConfig = 0x8203;

void finish(perf_event_attr& a, const PmuPlanInput& in) {
  a.size = sizeof a;
  a.sample_period = in.period;
  a.sample_type = kSampleType | (in.physicalAddresses ? PERF_SAMPLE_PHYS_ADDR : 0);
  a.exclude_kernel = 1;
  a.exclude_hv = 1;
  a.disabled = 1;
}

bool isAmd(const std::string& pmu) { return pmu.rfind("amd64", 0) == 0; }

}  // namespace

void readPmuSysfs(const sys::Fs& sysfs, PmuPlanInput& in) {
  if (auto ibs = sys::perf::pmuType(sysfs, "ibs_op")) in.ibsOpType = *ibs;
  // Absent before 6.14 (ENOENT); a format we cannot read as one bit counts as absent too.
  if (auto bit = sys::perf::pmuFormatBit(sysfs, "ibs_op", "swfilt")) in.ibsSwfilt = *bit;
  // perf decides the same way (is_mem_loads_aux_event: pmu_have_event("cpu"/"cpu_core",
  // "mem-loads-aux")); the kernel shows the attribute only with PMU_FL_MEM_LOADS_AUX.
  in.memLoadsAux = sys::perf::pmuHasEvent(sysfs, "cpu", "mem-loads-aux") ||
                   sys::perf::pmuHasEvent(sysfs, "cpu_core", "mem-loads-aux");
}

std::vector<std::string> intelLoadEventNames(const std::string& pmu, uint32_t ldlat) {
  const std::string lat = ":ldlat=" + std::to_string(ldlat);
  return {pmu + "::MEM_TRANS_RETIRED:LOAD_LATENCY" + lat, pmu + "::MEM_TRANS_RETIRED:LAT_ABOVE_THR" + lat,
          pmu + "::MEM_LOAD_RETIRED:L3_MISS", pmu + "::MEM_LOAD_UOPS_RETIRED:L3_MISS"};
}

std::vector<std::string> intelStoreEventNames(const std::string& pmu) {
  return {pmu + "::MEM_INST_RETIRED:ALL_STORES", pmu + "::MEM_UOPS_RETIRED:ALL_STORES"};
}

std::optional<std::pair<int, int>> kernelVersionOf(const std::string& release) {
  int major = 0, minor = 0;
  char dot = 0;
  std::istringstream s(release);
  if (!(s >> major >> dot >> minor) || dot != '.') return std::nullopt;
  return std::pair{major, minor};
}

Result<PmuPlan> planPmuEvents(const PmuPlanInput& in) {
  PmuPlan plan;
  if (in.corePmu.empty() && !in.ibsOpType) return logicError("no core PMU detected by libpfm4 and no ibs_op PMU");
  if (isAmd(in.corePmu) || (in.corePmu.empty() && in.ibsOpType)) {
    if (!in.ibsOpType)
      return logicError("AMD CPU (" + in.corePmu + ") but no ibs_op PMU in /sys/bus/event_source/devices "
                        "(IBS not exposed, e.g. in a VM)");
    // Before 6.1 the IBS driver gave its samples no data address (perf_ibs_handle_irq fills
    // PERF_SAMPLE_ADDR and DATA_SRC since then), though the open succeeds: the source would look
    // available and never see a page.
    if (auto v = kernelVersionOf(in.kernelRelease); v && *v < std::pair{6, 1})
      return logicError("AMD IBS Op: kernel " + in.kernelRelease +
                        " gives IBS samples no data address (PERF_SAMPLE_ADDR from IBS needs Linux 6.1)");
    perf_event_attr a;
    std::memset(&a, 0, sizeof a);
    a.type = *in.ibsOpType;
    a.config = kIbsOpCntCtl;
    finish(a, in);
    plan.periodGranularity = kIbsPeriodUnit;
    plan.minPeriod = kIbsOpMinPeriod;
    a.sample_period = std::max<uint64_t>(kIbsOpMinPeriod, in.period & ~(kIbsPeriodUnit - 1));
    std::string filter;
    if (in.ibsSwfilt) {
      __u64* words[] = {&a.config, &a.config1, &a.config2};
      *words[in.ibsSwfilt->word] |= uint64_t{1} << in.ibsSwfilt->bit;
      filter = "user mode only (swfilt)";
    } else {
      // NO_EXCLUDE: every exclude flag must stay clear; kernel-mode ops are sampled and the
      // readers drop their kernel data addresses.
      a.exclude_kernel = 0;
      a.exclude_hv = 0;
      filter = "no swfilt: kernel data addresses dropped by the reader";
    }
    plan.events.push_back(a);
    plan.kinds.push_back(AccessKind::Access);
    plan.groupLeaders.emplace_back();
    plan.description = "AMD IBS Op (ibs_op type " + std::to_string(*in.ibsOpType) + ", " + filter + ")";
    return plan;
  }
  std::string chosen;
  for (const auto& name : intelLoadEventNames(in.corePmu, in.loadLatencyCycles)) {
    auto a = sys::perf::pfmEncode(name);
    if (!a) continue;
    finish(*a, in);
    a->precise_ip = 2;
    plan.events.push_back(*a);
    plan.kinds.push_back(AccessKind::Load);
    chosen = name;
    if (in.memLoadsAux && (a->config & 0xffff) == kMemLoadsEvent) {
      // Counting only: the member samples. Same type and hybrid PMU bits (config[63:32]) as the
      // load event, so both are on one PMU.
      perf_event_attr lead;
      std::memset(&lead, 0, sizeof lead);
      lead.size = sizeof lead;
      lead.type = a->type;
      lead.config = kMemLoadsAuxConfig | (a->config & ~0xffffffffULL);
      lead.exclude_kernel = 1;
      lead.exclude_hv = 1;
      lead.disabled = 1;
      plan.groupLeaders.push_back(lead);
      chosen += " (group led by mem-loads-aux)";
    } else {
      plan.groupLeaders.emplace_back();
    }
    break;
  }
  if (plan.events.empty()) return logicError("no PEBS load event known to libpfm4 for core PMU " + in.corePmu);
  if (in.sampleStores) {
    for (const auto& name : intelStoreEventNames(in.corePmu)) {
      auto a = sys::perf::pfmEncode(name);
      if (!a) continue;
      finish(*a, in);
      a->precise_ip = 2;
      plan.events.push_back(*a);
      plan.kinds.push_back(AccessKind::Store);
      plan.groupLeaders.emplace_back();
      chosen += ", " + name;
      break;
    }
  }
  plan.description = "Intel PEBS on " + in.corePmu + ": " + chosen;
  return plan;
}

}  // namespace tt::sources
