// Event names -> perf_event_attr through libpfm4 (pfm_get_os_event_encoding, PFM_OS_PERF_EVENT_EXT).
//
// libpfm4 knows the event tables of PMUs that are not present; with LIBPFM_FORCE_PMU set before
// the first call, it activates a named PMU model (e.g. "skx", "amd64_fam19h_zen3") so names can be
// encoded (and tested) on any machine. Fully qualified names ("skx::MEM_TRANS_RETIRED:LOAD_LATENCY")
// are looked up in that PMU's table.
#pragma once

#include <linux/perf_event.h>

#include <string>

#include "core/Result.h"

namespace tt::sys::perf {

// Initialises libpfm4 once per process (thread-safe); returns its error afterwards too.
[[nodiscard]] Result<void> pfmInitialize();

// Name of the default (detected) core PMU, e.g. "amd64_fam19h_zen3"; empty when none.
[[nodiscard]] std::string pfmHostPmuName();

// Encodes `event` for user-space sampling (PFM_PLM3). The returned attr has type/config/config1
// set (config1 carries the PEBS load-latency threshold for ldlat=), nothing else.
[[nodiscard]] Result<perf_event_attr> pfmEncode(const std::string& event);

// True when libpfm4 knows `event` (pfm_find_event >= 0).
[[nodiscard]] bool pfmKnows(const std::string& event);

}  // namespace tt::sys::perf
