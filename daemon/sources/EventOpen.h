// Opening one planned sampling event on one CPU, the order and fallback SamplingSource needs:
//   - a group leader, when the plan has one (mem-loads-aux on Sapphire Rapids / Alder Lake), is
//     opened first and the event joins its group (the kernel checks the leader when the member
//     is opened: intel_pmu_hw_config returns ENODATA otherwise);
//   - an event the kernel refuses while it samples PERF_SAMPLE_PHYS_ADDR (EACCES without
//     CAP_SYS_ADMIN / perf_event_paranoid > 0, EINVAL on PMUs that cannot give it) is opened
//     again without it: physical addresses are asked for "where allowed" (issue #4), and the
//     rest of the sample is still worth having. A retry that fails too returns its own error
//     (the refusal was not about physical addresses).
// Generic over the handle so the order and the fallback are tested with a fake opener; the
// daemon's opener is sys::perf::PerfEvent::open.
#pragma once

#include <linux/perf_event.h>

#include <cerrno>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

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

// Opens `attr` (and `leader` first, when given) on `cpu`. When PERF_SAMPLE_PHYS_ADDR had to be
// dropped, clears it in `attr` (so the caller's other CPUs open the same event) and sets
// `physAddrRefusal` to the kernel's refusal.
template <class Handle>
[[nodiscard]] Result<OpenedOnCpu<Handle>> openOnCpu(perf_event_attr& attr, const perf_event_attr* leader, int cpu,
                                                    const EventOpener<Handle>& opener,
                                                    std::optional<Error>& physAddrRefusal) {
  std::optional<Handle> lead;
  int groupFd = -1;
  if (leader != nullptr) {
    auto l = opener.open(*leader, cpu, -1, true);
    if (!l) return withContext(l.error(), "group leader");
    groupFd = opener.fd(*l);
    lead.emplace(std::move(*l));
  }
  auto ev = opener.open(attr, cpu, groupFd, false);
  if (!ev && (attr.sample_type & PERF_SAMPLE_PHYS_ADDR) != 0) {
    perf_event_attr without = attr;
    without.sample_type &= ~static_cast<uint64_t>(PERF_SAMPLE_PHYS_ADDR);
    auto retry = opener.open(without, cpu, groupFd, false);
    if (!retry) return retry.error();
    physAddrRefusal = ev.error();
    attr = without;
    ev = std::move(retry);
  }
  if (!ev) return ev.error();
  return OpenedOnCpu<Handle>{std::move(lead), std::move(*ev)};
}

template <class Handle>
struct OpenedOnCpus {
  std::vector<OpenedOnCpu<Handle>> opened;  // one per CPU it opened on, in the order of `cpus`
  std::vector<int> cpus;
  std::vector<int> skipped;  // CPUs the event's PMU does not cover
};

// Opens `attr` (led by `leader`, when given) on each of `cpus` (openOnCpu). A CPU refused with
// ENOENT or ENODEV is skipped and listed: the event's PMU does not cover it (on hybrid Intel parts
// the P-core PMU, cpu_core, refuses the E-cores: x86_pmu_event_init checks supported_cpus), and
// sampling the CPUs it does cover is what the plan can give. Any other refusal, or every CPU
// skipped, fails the whole open.
template <class Handle>
[[nodiscard]] Result<OpenedOnCpus<Handle>> openOnCpus(perf_event_attr& attr, const perf_event_attr* leader,
                                                      const std::vector<int>& cpus, const EventOpener<Handle>& opener,
                                                      std::optional<Error>& physAddrRefusal) {
  OpenedOnCpus<Handle> out;
  std::optional<Error> lastSkip;
  for (int cpu : cpus) {
    auto ev = openOnCpu<Handle>(attr, leader, cpu, opener, physAddrRefusal);
    if (!ev && (ev.error().code == ENOENT || ev.error().code == ENODEV)) {
      out.skipped.push_back(cpu);
      lastSkip = ev.error();
      continue;
    }
    if (!ev) return withContext(ev.error(), "cpu " + std::to_string(cpu));
    out.opened.push_back(std::move(*ev));
    out.cpus.push_back(cpu);
  }
  if (out.opened.empty() && lastSkip) return withContext(*lastSkip, "on every cpu");
  return out;
}

}  // namespace tt::sources
