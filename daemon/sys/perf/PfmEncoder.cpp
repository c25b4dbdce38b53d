#include "sys/perf/PfmEncoder.h"

#include <perfmon/pfmlib_perf_event.h>

#include <cstring>
#include <mutex>

namespace tt::sys::perf {

namespace {
std::once_flag g_once;
int g_initResult = PFM_SUCCESS;
}  // namespace

Result<void> pfmInitialize() {
  std::call_once(g_once, [] { g_initResult = pfm_initialize(); });
  if (g_initResult != PFM_SUCCESS) return logicError(std::string("pfm_initialize: ") + pfm_strerror(g_initResult));
  return {};
}

std::string pfmHostPmuName() {
  if (!pfmInitialize()) return {};
  pfm_pmu_info_t info;
  std::memset(&info, 0, sizeof info);
  info.size = sizeof info;
  // PFM_PMU_PERF_EVENT is the generic OS PMU; we want the first present hardware core PMU.
  for (int pmu = PFM_PMU_NONE + 1; pmu < PFM_PMU_MAX; ++pmu) {
    if (pfm_get_pmu_info(static_cast<pfm_pmu_t>(pmu), &info) != PFM_SUCCESS) continue;
    if (info.is_present && info.type == PFM_PMU_TYPE_CORE && info.name != nullptr) return info.name;
  }
  return {};
}

bool pfmKnows(const std::string& event) {
  if (!pfmInitialize()) return false;
  return pfm_find_event(event.c_str()) >= 0;
}

Result<perf_event_attr> pfmEncode(const std::string& event) {
  if (auto init = pfmInitialize(); !init) return init.error();
  perf_event_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  pfm_perf_encode_arg_t arg;
  std::memset(&arg, 0, sizeof arg);
  arg.attr = &attr;
  arg.size = sizeof arg;
  char* fstr = nullptr;
  arg.fstr = &fstr;
  const int ret = pfm_get_os_event_encoding(event.c_str(), PFM_PLM3, PFM_OS_PERF_EVENT_EXT, &arg);
  std::free(fstr);
  if (ret != PFM_SUCCESS) return logicError("libpfm4 encoding of " + event + ": " + pfm_strerror(ret));
  return attr;
}

}  // namespace tt::sys::perf
