// The three stages of the epoch loop, each behind a narrow interface, so the loop and its tests
// work with fakes (tests/fakes/service) and the daemon with adapters to the real roles
// (service/Adapters.h: sources::SourceSet, heat::HeatModel + policy::Planner, migrate::Engine).
//
// Every call comes from the epoch thread, except PlanExecutor::counters() and submit(), which the
// admin handler (event-loop thread) also uses: implementations make those two thread-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/Result.h"
#include "core/Types.h"
#include "tensortier/v1/config.pb.h"

namespace tt::service {

struct SourceReport {
  std::string name;
  bool active = false;
  std::string detail;  // what it runs with, or why it is off
  uint64_t samples = 0;
  double cpuPercent = 0;  // estimated sampling cost in the last epoch (kernel + daemon), percent of one CPU
};

// Sources of access evidence for registered processes.
class EvidenceSource {
 public:
  virtual ~EvidenceSource() = default;
  [[nodiscard]] virtual Result<void> addProcess(pid_t tgid) = 0;
  [[nodiscard]] virtual Result<void> removeProcess(pid_t tgid) = 0;
  // Appends the evidence gathered since the previous call.
  [[nodiscard]] virtual Result<void> collect(std::vector<AccessEvidence>& out) = 0;
  [[nodiscard]] virtual std::vector<SourceReport> status() const = 0;
  // Live tuning of the knobs the sources can change while running (sources::SourceSet says which);
  // the others are left as they run until a restart. An error says which source failed.
  [[nodiscard]] virtual Result<void> applyConfig(const tensortier::v1::SourcesConfig& config) = 0;
  virtual void shutdown() = 0;
};

// A range moved by hand (tensortierctl migrate): the policy leaves its placement alone until
// expiresNs (CLOCK_MONOTONIC; 0 = until unpinned). The epoch loop owns the pins.
struct ManualPin {
  pid_t tgid = 0;
  uint64_t regionId = 0;
  uint64_t start = 0;
  uint64_t length = 0;
  int node = -1;  // where the user moved it
  uint64_t expiresNs = 0;
};

struct PolicyView {
  uint64_t fastBudgetBytes = 0;  // 0 = unknown
  uint64_t fastUsedBytes = 0;    // managed bytes on fast nodes at the last plan
};

// Heat model + planner: evidence and marks in, a MigrationPlan out.
class PlacementPolicy {
 public:
  virtual ~PlacementPolicy() = default;
  [[nodiscard]] virtual Result<void> addRegion(const RegionInfo& region) = 0;
  virtual void removeRegion(uint64_t regionId) = 0;
  virtual void removeProcess(pid_t tgid) = 0;
  virtual void observe(std::span<const AccessEvidence> evidence, uint64_t nowNs) = 0;
  virtual void onMark(const IterationMark& mark) = 0;
  // Closes the epoch at `nowNs` and returns the moves to make now (generation is set by the loop).
  // No move may touch a pinned range; its fast bytes count against the budgets.
  [[nodiscard]] virtual MigrationPlan plan(uint64_t nowNs, double migrationBytesPerSec,
                                           std::span<const ManualPin> pins) = 0;
  // Heat per registered region as of the last plan.
  [[nodiscard]] virtual std::vector<std::pair<uint64_t, double>> regionHeat() const = 0;
  [[nodiscard]] virtual PolicyView view() const = 0;
  [[nodiscard]] virtual Result<void> applyConfig(const tensortier::v1::PolicyConfig& config) = 0;
};

struct ExecutorCounters {
  uint64_t promotedPages = 0;  // 4 KiB units
  uint64_t demotedPages = 0;
  uint64_t promotedBytes = 0;
  uint64_t demotedBytes = 0;
  std::map<std::string, uint64_t> failedPages;  // by reason: "busy", "no_memory", ...
  uint64_t plans = 0;
};

// The migration engine.
class PlanExecutor {
 public:
  virtual ~PlanExecutor() = default;
  [[nodiscard]] virtual Result<void> submit(MigrationPlan plan) = 0;
  virtual void cancelProcess(pid_t tgid) = 0;
  [[nodiscard]] virtual ExecutorCounters counters() const = 0;
  [[nodiscard]] virtual Result<void> applyConfig(const tensortier::v1::MigrationConfig& config) = 0;
  // SIGTERM: let the in-flight batch finish for up to `graceMs`, cancel the rest, join threads.
  virtual void shutdown(uint32_t graceMs) = 0;
};

}  // namespace tt::service
