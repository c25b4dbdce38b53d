// All configured hotness sources of the daemon, opened together.
//
//   auto set = SourceSet::open(config.sources(), topology);   // logs one line per source
//   set->addProcess(tgid);  ...  set->collect(evidence);       // each epoch
//   set->removeProcess(tgid);  set->shutdown();                // or just destroy it
//
// Threads: none of its own. Every method is called from one thread (the service's epoch loop);
// the kernel aggregates (BPF maps, perf rings, BPF ring buffer) between calls.
// Kernel tiering (NUMA balancing in any mode, demotion) is detected and logged at open; with
// kernel_tiering: DISABLE it is switched off until shutdown()/destruction restores it (the old
// values saved in kernel_tiering_state_file, restored at the next open if the daemon died).
//
// Live tuning (applyConfig, used by SIGHUP and `tensortierctl tune`): cpu_budget_percent,
// pmu.min_period/max_period/sample_cost_ns and software_faults.period/max_period/sample_cost_ns
// change the sampling sources' budget and bounds at once (the running period is clamped into the
// new bounds); every other key opens kernel facilities and takes effect at the next restart.
#pragma once

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "sources/Source.h"
#include "sys/Fs.h"
#include "sys/access/Sysctl.h"
#include "tensortier/v1/sources_config.pb.h"
#include "topology/Topology.h"

namespace tt::sources {

class SourceSet {
 public:
  // Opens every enabled source of `config` on the real kernel (procfs/sysfs roots from config and
  // /sys). Never fails: sources that cannot run are listed in statusLines() and skipped.
  [[nodiscard]] static std::unique_ptr<SourceSet> open(const tensortier::v1::SourcesConfig& config,
                                                       const topology::Topology& topology);
  // The kernel-tiering part of open(): restores what a previous run that died left saved, logs the
  // state as one or two lines appended to `lines`, and turns it off (the guard) with DISABLE. A
  // state file of the unit's (prepareKernelTiering) is left to the unit.
  [[nodiscard]] static std::unique_ptr<sys::KernelTieringGuard> openKernelTiering(
      const tensortier::v1::SourcesConfig& config, const sys::Fs& procfs, const sys::Fs& sysfs,
      std::vector<std::string>& lines);
  // `tensortierd --prepare-kernel-tiering`, the unit's ExecStartPre, run with full privileges
  // (the daemon's capabilities do not let it write kernel.numa_balancing): restores what a run
  // that died left saved and, with DISABLE, turns kernel tiering off with a state file marked as
  // the unit's, which its ExecStopPost restores from. What it did goes to `lines`; false when it
  // could not do what the config asks (the service starts anyway and reports it).
  static bool prepareKernelTiering(const tensortier::v1::SourcesConfig& config, const sys::Fs& procfs,
                                   const sys::Fs& sysfs, std::vector<std::string>& lines);
  // From already-built sources (unit tests pass fakes).
  explicit SourceSet(std::vector<std::unique_ptr<Source>> sources,
                     const tensortier::v1::SourcesConfig& config = tensortier::v1::SourcesConfig(),
                     std::vector<std::string> extraLines = {});
  ~SourceSet();
  SourceSet(const SourceSet&) = delete;
  SourceSet& operator=(const SourceSet&) = delete;

  // Starts/stops tracking a process in every available source. Errors of single sources are
  // returned joined; the other sources still track it. addProcess's error is ESRCH when the
  // process has exited (no procfs entry).
  [[nodiscard]] Result<void> addProcess(pid_t tgid);
  [[nodiscard]] Result<void> removeProcess(pid_t tgid);
  // Registered regions of a tracked process, for the sources that scan ranges (Source::setRanges).
  void setRanges(pid_t tgid, const std::vector<std::pair<uint64_t, uint64_t>>& ranges);
  [[nodiscard]] const std::set<pid_t>& tracked() const { return tracked_.all(); }

  // Appends the evidence of every available source since the last call. Errors are returned joined,
  // evidence from the others is kept, and each source's are logged: at Warn when its error is new
  // (the first, or another than the last one logged), at Debug when it repeats, so a source failing
  // the same way every epoch says so once; Info when it collects again.
  [[nodiscard]] Result<void> collect(EvidenceBatch& out);
  // Kernel page moves of tracked processes since the last call (fault-trace source).
  void takeKernelMoves(std::vector<KernelMove>& out);

  // One line per configured source: "pmu: unavailable: ..." / "fault-trace: ok: ...", then
  // extraLines(). For the start log.
  [[nodiscard]] std::vector<std::string> statusLines() const;
  // The start lines that are not a source's own status: kernel tiering, topology, sources not
  // opened and why ("software-faults: not opened: ..."). `tensortierctl status` shows them.
  [[nodiscard]] const std::vector<std::string>& extraLines() const { return extraLines_; }
  [[nodiscard]] size_t availableCount() const;
  [[nodiscard]] const std::vector<std::unique_ptr<Source>>& sources() const { return sources_; }
  [[nodiscard]] Source* find(std::string_view name) const;

  // The keys (dotted paths, e.g. "sources.pmu.min_period") that differ between two configs,
  // split into those applyConfig() applies live and those that need a restart.
  struct ConfigChanges {
    std::vector<std::string> live;
    std::vector<std::string> restart;
  };
  [[nodiscard]] static ConfigChanges classifyChanges(const tensortier::v1::SourcesConfig& running,
                                                     const tensortier::v1::SourcesConfig& next);
  // `running` with the live keys of `next`: the config in effect after applyConfig(next).
  [[nodiscard]] static tensortier::v1::SourcesConfig withLiveKeys(const tensortier::v1::SourcesConfig& running,
                                                                  const tensortier::v1::SourcesConfig& next);
  // Applies the live keys of `next` to every sampling source (pmu, software-faults); returns what
  // changed. Keys needing a restart are listed in the result and left as they run. Errors of
  // single sources are returned joined; the others are still tuned.
  [[nodiscard]] Result<ConfigChanges> applyConfig(const tensortier::v1::SourcesConfig& next);
  // The config the sources run with (open()'s, plus live changes).
  [[nodiscard]] const tensortier::v1::SourcesConfig& config() const { return config_; }

  // Stops every source (detaches BPF, closes perf fds, stops kdamonds) and restores kernel
  // tiering settings if they were changed. Idempotent; the destructor calls it.
  void shutdown();

 private:
  std::vector<std::unique_ptr<Source>> sources_;
  std::vector<std::string> extraLines_;
  std::unique_ptr<sys::KernelTieringGuard> tieringGuard_;
  TrackedProcesses tracked_;
  tensortier::v1::SourcesConfig config_;
  // Per source (by index): the last error logged at Warn and how often it repeated since.
  struct CollectErrors {
    std::string lastLogged;
    uint64_t repeats = 0;  // of lastLogged, since it was logged
    uint64_t failed = 0;   // collects failed in a row
  };
  std::vector<CollectErrors> collectErrors_;
};

// The status line of one source as statusLines() prints it.
[[nodiscard]] std::string formatStatus(const Source& source);

}  // namespace tt::sources
