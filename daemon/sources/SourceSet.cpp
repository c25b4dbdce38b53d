#include "sources/SourceSet.h"

#include <algorithm>
#include <optional>

#include <google/protobuf/text_format.h>

#include "core/Log.h"
#include "sources/DamonSource.h"
#include "sources/FaultTraceSource.h"
#include "sources/PmuEvents.h"
#include "sources/SamplingSource.h"
#include "sources/SoftDirtySource.h"
#include "sys/ProcStat.h"
#include "sys/perf/PfmEncoder.h"

namespace tt::sources {

void KernelMoveTotals::add(const std::vector<KernelMove>& moves) {
  for (const KernelMove& m : moves) {
    switch (m.why) {
      case KernelMove::Why::Promotion: promoted += m.pages; break;
      case KernelMove::Why::Demotion: demoted += m.pages; break;
      case KernelMove::Why::Syscall: syscall += m.pages; break;
      case KernelMove::Why::Other: other += m.pages; break;
    }
  }
}


namespace pb = tensortier::v1;

namespace {

Aggregation aggregationOf(const pb::SourcesConfig& c) {
  return c.aggregation() == pb::USER_RING ? Aggregation::UserRing : Aggregation::InKernel;
}

// A source that could not even be built (its kernel interface is missing); keeps its line.
class UnavailableSource final : public Source {
 public:
  UnavailableSource(std::string name, std::string why) : name_(std::move(name)), status_{false, std::move(why)} {}
  std::string_view name() const override { return name_; }
  const SourceStatus& status() const override { return status_; }
  Result<void> addProcess(pid_t) override { return {}; }
  Result<void> removeProcess(pid_t) override { return {}; }
  Result<void> collect(EvidenceBatch&) override { return {}; }

 private:
  std::string name_;
  SourceStatus status_;
};

std::unique_ptr<Source> openPmu(const pb::SourcesConfig& c, const sys::Fs& sysfs, const sys::Fs& procfs) {
  const auto& p = c.pmu();
  PmuPlanInput in;
  if (auto init = sys::perf::pfmInitialize(); !init)
    return std::make_unique<UnavailableSource>("pmu", init.error().message());
  in.corePmu = sys::perf::pfmHostPmuName();
  readPmuSysfs(sysfs, in);
  if (auto release = procfs.readLine("sys/kernel/osrelease")) in.kernelRelease = *release;
  in.period = p.initial_period();
  in.loadLatencyCycles = p.load_latency_cycles();
  in.sampleStores = p.sample_stores();
  in.physicalAddresses = p.physical_addresses();
  auto plan = planPmuEvents(in);
  if (!plan) return std::make_unique<UnavailableSource>("pmu", plan.error().message());
  SamplingOptions o;
  o.name = "pmu";
  o.events = plan->events;
  o.eventKinds = plan->kinds;
  o.groupLeaders = plan->groupLeaders;
  o.periodGranularity = plan->periodGranularity;
  o.periodMinimum = plan->minPeriod;
  o.eventDescription = plan->description;
  o.aggregation = aggregationOf(c);
  o.ringPages = p.ring_pages();
  o.minPeriod = p.min_period();
  o.maxPeriod = p.max_period();
  o.cpuBudgetPercent = c.cpu_budget_percent();
  o.sampleCostNs = p.sample_cost_ns();
  o.mapEntries = c.aggregation_map_entries();
  o.defaultKind = AccessKind::Load;
  auto s = std::make_unique<SamplingSource>(std::move(o), sysfs);
  s->open();
  return s;
}

}  // namespace

SamplingOptions softwareFaultOptions(uint64_t period, Aggregation aggregation) {
  SamplingOptions o;
  o.name = "software-faults";
  o.events = {softwareFaultAttr(period)};
  o.eventDescription = "PERF_COUNT_SW_PAGE_FAULTS every " + std::to_string(period) + " faults";
  o.aggregation = aggregation;
  o.minPeriod = period;
  o.maxPeriod = period;
  return o;
}

perf_event_attr softwareFaultAttr(uint64_t period) {
  perf_event_attr a{};
  a.size = sizeof a;
  a.type = PERF_TYPE_SOFTWARE;
  a.config = PERF_COUNT_SW_PAGE_FAULTS;
  a.sample_period = period;
  a.sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_ADDR;
  a.exclude_kernel = 1;
  a.disabled = 1;
  return a;
}

namespace {

// Restores what a state file holds under its lock, which stays in `held` for the caller to turn
// tiering off under; with no file (`fileThere` false: nothing to restore) no lock is taken.
Result<std::optional<sys::KernelTiering>> restoreUnderLock(const sys::Fs& procfs, const sys::Fs& sysfs,
                                                          const std::string& statePath, bool fileThere,
                                                          std::optional<sys::KernelTieringLock>& held,
                                                          std::string* leftAlone) {
  if (!fileThere) return std::optional<sys::KernelTiering>();
  auto lock = sys::KernelTieringLock::acquire(statePath);
  if (!lock) return lock.error();
  held.emplace(std::move(*lock));
  return sys::restoreKernelTiering(procfs, sysfs, statePath, *held, leftAlone);
}

}  // namespace

std::unique_ptr<sys::KernelTieringGuard> SourceSet::openKernelTiering(const pb::SourcesConfig& c,
                                                                     const sys::Fs& procfs, const sys::Fs& sysfs,
                                                                     std::vector<std::string>& lines) {
  const std::string& statePath = c.kernel_tiering_state_file();
  auto state = sys::loadKernelTieringState(statePath);
  if (state && *state && (*state)->byUnit) {
    // The unit's ExecStartPre turned it off, and its ExecStopPost puts it back.
    auto now = sys::readKernelTiering(procfs, sysfs);
    lines.push_back("kernel-tiering: turned off by the service's ExecStartPre until it stops (now " +
                    (now ? now->describe() : "unknown: " + now.error().message()) + "; was " +
                    (*state)->values.describe() + ", saved in " + statePath + ")");
    if (now && now->movesPages())
      lines.push_back("kernel-tiering: turned on again since (by an admin?): the kernel will move pages too");
    return nullptr;
  }
  // A previous run that died with kernel tiering turned off left the original values behind: put
  // them back first, or the values it set would be taken for the kernel's own (and "restored").
  // The lock taken for that is held on through turning it off again, so no other daemon comes in
  // between; with no file it is taken only to turn tiering off.
  bool mayChange = true;
  std::string leftAlone;
  std::optional<sys::KernelTieringLock> held;
  if (auto recovered = restoreUnderLock(procfs, sysfs, statePath, !state || *state, held, &leftAlone); !recovered) {
    lines.push_back("kernel-tiering: could NOT restore the values a previous run saved in " + statePath + ": " +
                    recovered.error().message() + " (left as they are)");
    mayChange = false;  // saving now would overwrite the originals
  } else if (*recovered) {
    lines.push_back("kernel-tiering: a previous run exited without restoring it: restored " + (*recovered)->describe() +
                    " from " + statePath + (leftAlone.empty() ? "" : ", but for what was changed since: " + leftAlone));
  }
  auto tiering = sys::readKernelTiering(procfs, sysfs);
  if (!tiering) {
    lines.push_back("kernel-tiering: unknown: " + tiering.error().message());
  } else if (!tiering->movesPages()) {
    lines.push_back("kernel-tiering: off (" + tiering->describe() + ")");
  } else if (c.kernel_tiering() == pb::DISABLE && mayChange) {
    auto g = held ? sys::KernelTieringGuard::disable(procfs, sysfs, statePath, std::move(*held))
                  : sys::KernelTieringGuard::disable(procfs, sysfs, statePath);
    if (g) {
      lines.push_back("kernel-tiering: was " + tiering->describe() + "; turned off until the daemon exits (" +
                      g->changes() + "; the old values saved in " + statePath + ")");
      return std::make_unique<sys::KernelTieringGuard>(std::move(*g));
    }
    lines.push_back("kernel-tiering: " + tiering->describe() + "; could NOT turn it off: " + g.error().message() +
                    " (the kernel will move pages too)");
  } else if (c.kernel_tiering() == pb::DISABLE) {
    lines.push_back("kernel-tiering: " + tiering->describe() + "; not turned off (see above): the kernel will move pages too");
  } else {
    lines.push_back("kernel-tiering: " + tiering->describe() + "; cooperating: " +
                    (c.fault_trace().enabled() && c.fault_trace().first_touch()
                         ? "its hint faults are evidence, its moves are counted (fault-trace)"
                         : c.fault_trace().enabled()
                               ? "its moves are counted (fault-trace); its hint faults are not evidence "
                                 "(fault_trace.first_touch is off, and hint faults are not-present faults too)"
                               : "neither its hint faults nor its moves are seen (fault_trace is off)"));
  }
  return nullptr;
}

bool SourceSet::prepareKernelTiering(const pb::SourcesConfig& c, const sys::Fs& procfs, const sys::Fs& sysfs,
                                     std::vector<std::string>& lines) {
  const std::string& statePath = c.kernel_tiering_state_file();
  std::string leftAlone;
  std::optional<sys::KernelTieringLock> held;
  auto state = sys::loadKernelTieringState(statePath);
  auto recovered = restoreUnderLock(procfs, sysfs, statePath, !state || *state, held, &leftAlone);
  if (!recovered) {
    lines.push_back("kernel-tiering: could NOT restore the values saved in " + statePath + ": " +
                    recovered.error().message() + " (left as they are)");
    return false;
  }
  if (*recovered)
    lines.push_back("kernel-tiering: restored " + (*recovered)->describe() + " from " + statePath +
                    (leftAlone.empty() ? "" : ", but for what was changed since: " + leftAlone));
  if (c.kernel_tiering() != pb::DISABLE) return true;
  auto tiering = sys::readKernelTiering(procfs, sysfs);
  if (!tiering) {
    lines.push_back("kernel-tiering: unknown: " + tiering.error().message());
    return false;
  }
  if (!tiering->movesPages()) {
    lines.push_back("kernel-tiering: off (" + tiering->describe() + ")");
    return true;
  }
  auto g = held ? sys::KernelTieringGuard::disable(procfs, sysfs, statePath, std::move(*held), /*byUnit=*/true)
                : sys::KernelTieringGuard::disable(procfs, sysfs, statePath, /*byUnit=*/true);
  if (!g) {
    lines.push_back("kernel-tiering: " + tiering->describe() + "; could NOT turn it off: " + g.error().message());
    return false;
  }
  lines.push_back("kernel-tiering: turned off for the service (" + g->changes() + "; the old values saved in " +
                  statePath + " for ExecStopPost)");
  g->release();
  return true;
}

std::unique_ptr<SourceSet> SourceSet::open(const pb::SourcesConfig& c, const topology::Topology& topology) {
  const sys::Fs sysfs("/sys");
  const sys::Fs procfs(c.procfs_root());
  std::vector<std::unique_ptr<Source>> sources;
  std::vector<std::string> lines;

  // Kernel tiering first: DISABLE must take effect before the sources start counting.
  std::unique_ptr<sys::KernelTieringGuard> guard = openKernelTiering(c, procfs, sysfs, lines);
  if (!topology.isTiered()) lines.push_back("topology: one tier only: served-by tiers will not be told apart");

  // BPF programs see the initial pid namespace's pids, and the daemon tracks the pids it sees: in
  // a namespace of its own (a container without the host's pids) the in-kernel filters would
  // match nothing, or other processes. Sampling then reads its ring, whose pids are the
  // daemon's; the fault trace has no such path. (Unknown: taken as the initial namespace, where
  // the shipped unit runs.)
  auto initialNs = sys::inInitialPidNamespace(procfs);
  const bool ownPidNamespace = initialNs && !*initialNs;
  pb::SourcesConfig sampling = c;
  if (ownPidNamespace) {
    sampling.set_aggregation(pb::USER_RING);
    lines.push_back("bpf: the daemon runs in a pid namespace of its own, and BPF programs see the initial "
                    "namespace's pids: sampling reads its ring (pids as the daemon sees them)");
  }
  if (c.pmu().enabled()) sources.push_back(openPmu(sampling, sysfs, procfs));
  bool faultTraceRuns = false;
  if (c.fault_trace().enabled() && ownPidNamespace) {
    lines.push_back("fault-trace: not opened: the daemon runs in a pid namespace of its own (its BPF programs "
                    "would see the initial namespace's pids)");
  } else if (c.fault_trace().enabled()) {
    sys::bpf::FaultTrace::Options o;
    o.ringBytes = c.fault_trace().ring_kib() * 1024U;
    o.reportFirstTouch = c.fault_trace().first_touch();
    // Counted even while soft-dirty runs, though soft-dirty write-protects every page each epoch
    // and reports the same writes: each written page is then two stores an epoch, as it was when
    // the fault trace sent these faults through its ring, and the planner's calibration (the
    // e2e tests' slow-access penalty) rests on that; with them left to soft-dirty alone the
    // service e2e tests promoted nothing. A single count belongs with evidence units (counting
    // vs presence), which the heat model does not tell apart yet.
    o.reportWriteProtect = true;
    o.maxChunks = c.aggregation_map_entries();
    FaultTraceSource::Guard storm;
    storm.pauseOverBudget = c.fault_trace().pause_over_budget();
    storm.cpuBudgetPercent = c.cpu_budget_percent();
    storm.faultCostNs = c.fault_trace().fault_cost_ns();
    auto s = std::make_unique<FaultTraceSource>(o, storm, procfs);
    s->open();
    faultTraceRuns = s->status().available && o.reportFirstTouch;
    sources.push_back(std::move(s));
  }
  // The fault trace counts every not-present fault of a tracked process per page; software-fault
  // sampling would see a sample of the same faults (and double their weight in heat) while its
  // system-wide events cost every fault on the machine a count. So it is the fallback for kernels
  // where the fault trace cannot run, unless asked for alongside it.
  if (c.software_faults().enabled() && faultTraceRuns && !c.software_faults().with_fault_trace()) {
    lines.push_back("software-faults: not opened: fault-trace counts the same faults "
                    "(sources.software_faults.with_fault_trace: false)");
  } else if (c.software_faults().enabled()) {
    SamplingOptions o = softwareFaultOptions(c.software_faults().period(), aggregationOf(sampling));
    o.ringPages = c.software_faults().ring_pages();
    o.maxPeriod = std::max(c.software_faults().period(), c.software_faults().max_period());
    o.cpuBudgetPercent = c.cpu_budget_percent();
    o.sampleCostNs = c.software_faults().sample_cost_ns();
    o.calibrateSampleCost = c.software_faults().calibrate_sample_cost();
    o.mapEntries = c.aggregation_map_entries();
    o.defaultKind = AccessKind::Fault;
    auto s = std::make_unique<SamplingSource>(std::move(o), sysfs);
    s->open();
    sources.push_back(std::move(s));
  }
  if (c.soft_dirty().enabled()) {
    sources.push_back(std::make_unique<SoftDirtySource>(std::make_unique<sys::ProcSoftDirtyTracker>(procfs), procfs,
                                                        c.soft_dirty().max_pages_per_epoch(), sys::probeSoftDirty()));
  }
  if (c.damon().enabled()) {
    const auto& d = c.damon();
    sys::DamonAttrs attrs;
    attrs.sampleUs = d.sample_interval_us();
    attrs.aggrUs = d.aggregate_interval_us();
    attrs.updateUs = std::max(attrs.aggrUs, 1000000U);
    attrs.minRegions = d.min_regions();
    attrs.maxRegions = d.max_regions();
    auto s = std::make_unique<DamonSource>(sys::DamonSysfs(sysfs, d.kdamond_index(), d.max_processes()), attrs,
                                           d.max_pages_per_epoch(), d.state_file());
    s->open();
    sources.push_back(std::move(s));
  }
  // A source the config leaves out says so too: at start and in the CLI "disabled" is then not
  // mistaken for "not tried".
  const std::pair<bool, const char*> configured[] = {
      {c.pmu().enabled(), "pmu: not opened: disabled (sources.pmu.enabled: false)"},
      {c.fault_trace().enabled(), "fault-trace: not opened: disabled (sources.fault_trace.enabled: false)"},
      {c.software_faults().enabled(), "software-faults: not opened: disabled (sources.software_faults.enabled: false)"},
      {c.soft_dirty().enabled(), "soft-dirty: not opened: disabled (sources.soft_dirty.enabled: false)"},
      {c.damon().enabled(), "damon: not opened: disabled (sources.damon.enabled: false)"},
  };
  for (const auto& [enabled, line] : configured)
    if (!enabled) lines.emplace_back(line);
  auto set = std::make_unique<SourceSet>(std::move(sources), c, std::move(lines));
  set->tieringGuard_ = std::move(guard);
  for (const auto& line : set->statusLines()) {
    TT_LOG(Info) << "sources: " << line;
  }
  if (set->availableCount() == 0) {
    TT_LOG(Warn) << "sources: no hotness source is available: heat will be empty";
  }
  return set;
}

SourceSet::SourceSet(std::vector<std::unique_ptr<Source>> sources, const pb::SourcesConfig& config,
                     std::vector<std::string> extraLines)
    : sources_(std::move(sources)), extraLines_(std::move(extraLines)), config_(config) {}

namespace {

// The live keys, each with how to copy it from one config into another.
struct LiveKey {
  const char* path;
  bool (*differs)(const pb::SourcesConfig&, const pb::SourcesConfig&);
  void (*copy)(const pb::SourcesConfig& from, pb::SourcesConfig& to);
};

const LiveKey kLiveKeys[] = {
    {"sources.fault_trace.fault_cost_ns",
     [](const pb::SourcesConfig& a, const pb::SourcesConfig& b) {
       return a.fault_trace().fault_cost_ns() != b.fault_trace().fault_cost_ns();
     },
     [](const pb::SourcesConfig& f, pb::SourcesConfig& t) {
       t.mutable_fault_trace()->set_fault_cost_ns(f.fault_trace().fault_cost_ns());
     }},
    {"sources.cpu_budget_percent",
     [](const pb::SourcesConfig& a, const pb::SourcesConfig& b) { return a.cpu_budget_percent() != b.cpu_budget_percent(); },
     [](const pb::SourcesConfig& f, pb::SourcesConfig& t) { t.set_cpu_budget_percent(f.cpu_budget_percent()); }},
    {"sources.pmu.min_period",
     [](const pb::SourcesConfig& a, const pb::SourcesConfig& b) { return a.pmu().min_period() != b.pmu().min_period(); },
     [](const pb::SourcesConfig& f, pb::SourcesConfig& t) { t.mutable_pmu()->set_min_period(f.pmu().min_period()); }},
    {"sources.pmu.max_period",
     [](const pb::SourcesConfig& a, const pb::SourcesConfig& b) { return a.pmu().max_period() != b.pmu().max_period(); },
     [](const pb::SourcesConfig& f, pb::SourcesConfig& t) { t.mutable_pmu()->set_max_period(f.pmu().max_period()); }},
    {"sources.pmu.sample_cost_ns",
     [](const pb::SourcesConfig& a, const pb::SourcesConfig& b) { return a.pmu().sample_cost_ns() != b.pmu().sample_cost_ns(); },
     [](const pb::SourcesConfig& f, pb::SourcesConfig& t) { t.mutable_pmu()->set_sample_cost_ns(f.pmu().sample_cost_ns()); }},
    {"sources.software_faults.period",
     [](const pb::SourcesConfig& a, const pb::SourcesConfig& b) {
       return a.software_faults().period() != b.software_faults().period();
     },
     [](const pb::SourcesConfig& f, pb::SourcesConfig& t) {
       t.mutable_software_faults()->set_period(f.software_faults().period());
     }},
    {"sources.software_faults.max_period",
     [](const pb::SourcesConfig& a, const pb::SourcesConfig& b) {
       return a.software_faults().max_period() != b.software_faults().max_period();
     },
     [](const pb::SourcesConfig& f, pb::SourcesConfig& t) {
       t.mutable_software_faults()->set_max_period(f.software_faults().max_period());
     }},
    {"sources.software_faults.sample_cost_ns",
     [](const pb::SourcesConfig& a, const pb::SourcesConfig& b) {
       return a.software_faults().sample_cost_ns() != b.software_faults().sample_cost_ns();
     },
     [](const pb::SourcesConfig& f, pb::SourcesConfig& t) {
       t.mutable_software_faults()->set_sample_cost_ns(f.software_faults().sample_cost_ns());
     }},
};

// The differing fields of two messages of one type, as dotted paths under `prefix`.
void differingFields(const google::protobuf::Message& a, const google::protobuf::Message& b, const std::string& prefix,
                     std::vector<std::string>& out) {
  const auto* d = a.GetDescriptor();
  const auto* ra = a.GetReflection();
  const auto* rb = b.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const auto* f = d->field(i);
    const std::string path = prefix + "." + f->name();
    if (f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE && !f->is_repeated()) {
      differingFields(ra->GetMessage(a, f), rb->GetMessage(b, f), path, out);
      continue;
    }
    auto single = [](const google::protobuf::Message& m, const google::protobuf::FieldDescriptor* field) {
      std::string text;
      google::protobuf::TextFormat::PrintFieldValueToString(m, field, -1, &text);
      return text;
    };
    if (f->is_repeated()) {
      const int n = ra->FieldSize(a, f);
      bool same = n == rb->FieldSize(b, f);
      for (int k = 0; same && k < n; ++k) {
        std::string ta, tb;
        google::protobuf::TextFormat::PrintFieldValueToString(a, f, k, &ta);
        google::protobuf::TextFormat::PrintFieldValueToString(b, f, k, &tb);
        same = ta == tb;
      }
      if (!same) out.push_back(path);
    } else if (single(a, f) != single(b, f)) {  // effective values: defaults compare as set
      out.push_back(path);
    }
  }
}

}  // namespace

SourceSet::ConfigChanges SourceSet::classifyChanges(const pb::SourcesConfig& running, const pb::SourcesConfig& next) {
  std::vector<std::string> all;
  differingFields(running, next, "sources", all);
  ConfigChanges out;
  for (const auto& path : all) {
    bool live = false;
    for (const auto& k : kLiveKeys) live = live || path == k.path;
    (live ? out.live : out.restart).push_back(path);
  }
  return out;
}

pb::SourcesConfig SourceSet::withLiveKeys(const pb::SourcesConfig& running, const pb::SourcesConfig& next) {
  pb::SourcesConfig out = running;
  for (const auto& k : kLiveKeys)
    if (k.differs(running, next)) k.copy(next, out);
  return out;
}

Result<SourceSet::ConfigChanges> SourceSet::applyConfig(const pb::SourcesConfig& next) {
  ConfigChanges changes = classifyChanges(config_, next);
  if (changes.live.empty()) return changes;
  const pb::SourcesConfig tuned = withLiveKeys(config_, next);
  std::string errors;
  for (auto& s : sources_) {
    SamplingLimits limits;
    limits.cpuBudgetPercent = tuned.cpu_budget_percent();
    if (s->name() == "pmu") {
      limits.minPeriod = tuned.pmu().min_period();
      limits.maxPeriod = tuned.pmu().max_period();
      limits.sampleCostNs = tuned.pmu().sample_cost_ns();
    } else if (s->name() == "software-faults") {
      limits.minPeriod = tuned.software_faults().period();
      limits.maxPeriod = std::max(tuned.software_faults().period(), tuned.software_faults().max_period());
      limits.sampleCostNs = tuned.software_faults().sample_cost_ns();
    } else if (s->name() == "fault-trace") {
      limits.sampleCostNs = tuned.fault_trace().fault_cost_ns();  // per fault: the storm guard's charge
    } else {
      continue;
    }
    if (auto r = s->setSamplingLimits(limits); !r) errors += std::string(s->name()) + ": " + r.error().message() + "; ";
  }
  // What failed keeps its previous period; the budget and bounds are recorded either way, so the
  // adaptive sampler works within them from the next epoch.
  config_ = tuned;
  if (!errors.empty()) return logicError("tuning sources: " + errors);
  return changes;
}

SourceSet::~SourceSet() { shutdown(); }

void SourceSet::shutdown() {
  for (pid_t tgid : tracked_.all())
    for (auto& s : sources_) (void)s->removeProcess(tgid);
  tracked_.clear();
  sources_.clear();
  tieringGuard_.reset();
}

Result<void> SourceSet::addProcess(pid_t tgid) {
  // The BPF filters are bitmaps over every possible tgid, with no entry limit of their own: the
  // configured bound is kept here, for every source alike.
  if (!tracked_.tracked(tgid) && tracked_.size() >= config_.max_tracked_processes())
    return systemError(EUSERS, "tracking pid " + std::to_string(tgid) + ": " + std::to_string(tracked_.size()) +
                                   " processes are tracked (sources.max_tracked_processes)");
  std::string errors;
  for (auto& s : sources_) {
    if (!s->status().available) continue;
    if (auto r = s->addProcess(tgid); !r)
      errors += (errors.empty() ? "" : "; ") + std::string(s->name()) + ": " + r.error().message();
  }
  tracked_.track(tgid);
  if (errors.empty()) return {};
  // A client that exits right after registering is gone before its first epoch: an exit, which
  // the registry's next event ends, not a fault of the sources.
  if (!sys::Fs(config_.procfs_root()).exists(std::to_string(tgid)))
    return systemError(ESRCH, "tracking pid " + std::to_string(tgid) + ": the process has exited (" + errors + ")");
  return logicError("tracking pid " + std::to_string(tgid) + ": " + errors);
}

Result<void> SourceSet::removeProcess(pid_t tgid) {
  std::string errors;
  for (auto& s : sources_) {
    if (!s->status().available) continue;
    if (auto r = s->removeProcess(tgid); !r)
      errors += (errors.empty() ? "" : "; ") + std::string(s->name()) + ": " + r.error().message();
  }
  tracked_.untrack(tgid);
  if (!errors.empty()) return logicError("untracking pid " + std::to_string(tgid) + ": " + errors);
  return {};
}

void SourceSet::setRanges(pid_t tgid, const std::vector<std::pair<uint64_t, uint64_t>>& ranges) {
  for (auto& s : sources_)
    if (s->status().available) s->setRanges(tgid, ranges);
}

Result<void> SourceSet::collect(EvidenceBatch& out) {
  std::string errors;
  const size_t recordsBefore = out.records.size(), blocksBefore = out.blocks.size();
  collectErrors_.resize(sources_.size());
  for (size_t i = 0; i < sources_.size(); ++i) {
    Source& s = *sources_[i];
    if (!s.status().available) continue;
    CollectErrors& logged = collectErrors_[i];
    auto r = s.collect(out);
    if (r) {
      if (logged.failed > 0) {
        TT_LOG(Info) << s.name() << ": collecting again, after " << logged.failed << " failed collects";
      }
      logged = {};
      continue;
    }
    const std::string message = r.error().message();
    errors += std::string(s.name()) + ": " + message + "; ";
    if (message != logged.lastLogged) {
      TT_LOG(Warn) << s.name() << ": collect failed: " << message
                   << (logged.repeats > 0 ? " (the previous error repeated " + std::to_string(logged.repeats) + " times)" : "")
                   << "; logged again when it changes";
      logged.lastLogged = message;
      logged.repeats = 0;
    } else {
      ++logged.repeats;
      TT_LOG(Debug) << s.name() << ": collect failed again: " << message;
    }
    ++logged.failed;
  }
  // What the kernel counted for processes untracked since the last collect (exited, mostly) would
  // bring them back to life in the heat model.
  tracked_.filter(out, recordsBefore, blocksBefore);
  tracked_.collected();
  if (!errors.empty()) return logicError("collecting evidence: " + errors);
  return {};
}

void SourceSet::takeKernelMoves(std::vector<KernelMove>& out) {
  const size_t before = out.size();
  for (auto& s : sources_) s->takeKernelMoves(out);
  out.erase(std::remove_if(out.begin() + static_cast<std::ptrdiff_t>(before), out.end(),
                           [&](const KernelMove& m) { return !tracked_.tracked(m.tgid); }),
            out.end());
}

std::string formatStatus(const Source& s) {
  return std::string(s.name()) + (s.status().available ? ": ok: " : ": unavailable: ") + s.status().detail;
}

std::vector<std::string> SourceSet::statusLines() const {
  std::vector<std::string> lines;
  for (const auto& s : sources_) lines.push_back(formatStatus(*s));
  lines.insert(lines.end(), extraLines_.begin(), extraLines_.end());
  return lines;
}

size_t SourceSet::availableCount() const {
  size_t n = 0;
  for (const auto& s : sources_) n += s->status().available ? 1 : 0;
  return n;
}

Source* SourceSet::find(std::string_view name) const {
  for (const auto& s : sources_)
    if (s->name() == name) return s.get();
  return nullptr;
}

}  // namespace tt::sources
