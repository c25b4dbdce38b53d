// Opening one planned sampling event on one CPU, in the order SamplingSource needs: a group
// leader, when the plan has one (mem-loads-aux on Sapphire Rapids / Alder Lake), is opened
// first and the event joins its group (the kernel checks the leader when the member is opened:
// intel_pmu_hw_config returns ENODATA otherwise).
// Generic over the handle so the order is tested with a fake opener; the daemon's opener is
// sys::perf::PerfEvent::open.
#pragma once

#include <linux/perf_event.h>

#include <functional>
#include <optional>
#include <utility>

#include "core/Result.h"

namespace tt::sources {

template <class Handle>
struct OpenedOnCpu {
  std::optional<Handle> leader;  // open while `event` is (it leads its group)
  Handle event;
};

template <class Handle>
struct EventOpener {
  // Opens `attr` on `cpu` in the group led by `groupFd` (-1: none). Leaders get no ring.
  std::function<Result<Handle>(const perf_event_attr& attr, int cpu, int groupFd, bool isLeader)> open;
  std::function<int(const Handle&)> fd;
};

// Opens `attr` (and `leader` first, when given) on `cpu`.
template <class Handle>
[[nodiscard]] Result<OpenedOnCpu<Handle>> openOnCpu(const perf_event_attr& attr, const perf_event_attr* leader, int cpu,
                                                    const EventOpener<Handle>& opener) {
  std::optional<Handle> lead;
  int groupFd = -1;
  if (leader != nullptr) {
    auto l = opener.open(*leader, cpu, -1, true);
    if (!l) return withContext(l.error(), "group leader");
    groupFd = opener.fd(*l);
    lead.emplace(std::move(*l));
  }
  auto ev = opener.open(attr, cpu, groupFd, false);
  if (!ev) return ev.error();
  return OpenedOnCpu<Handle>{std::move(lead), std::move(*ev)};
}

}  // namespace tt::sources
