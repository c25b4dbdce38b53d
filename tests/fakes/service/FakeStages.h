// Fakes of the epoch loop's stages (daemon/service/Stages.h): they record what the loop did and
// return scripted evidence and plans.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "service/EpochLoop.h"
#include "service/Stages.h"

namespace tt::test {

class FakeEvidenceSource final : public service::EvidenceSource {
 public:
  Result<void> addProcess(pid_t tgid) override {
    tracked.insert(tgid);
    if (addError) return *addError;
    return {};
  }
  Result<void> removeProcess(pid_t tgid) override {
    tracked.erase(tgid);
    removed.push_back(tgid);
    return {};
  }
  void setRanges(pid_t tgid, const std::vector<std::pair<uint64_t, uint64_t>>& r) override { ranges[tgid] = r; }
  Result<void> collect(EvidenceBatch& out) override {
    out.records.insert(out.records.end(), next.begin(), next.end());
    out.blocks.insert(out.blocks.end(), nextBlocks.begin(), nextBlocks.end());
    next.clear();
    nextBlocks.clear();
    ++collects;
    return {};
  }
  std::vector<service::SourceReport> status() const override { return reports; }
  std::vector<std::string> notes() const override { return noteLines; }
  Result<void> applyConfig(const tensortier::v1::SourcesConfig&) override { return {}; }
  void shutdown() override { shutdownCalled = true; }

  std::set<pid_t> tracked;
  std::map<pid_t, std::vector<std::pair<uint64_t, uint64_t>>> ranges;  // as last set
  std::vector<pid_t> removed;
  std::vector<AccessEvidence> next;       // handed out by the next collect()
  std::vector<EvidenceBlock> nextBlocks;  // likewise
  std::vector<service::SourceReport> reports;
  std::vector<std::string> noteLines;  // what notes() returns
  std::optional<Error> addError;       // what addProcess() returns (it still tracks)
  int collects = 0;
  bool shutdownCalled = false;
};

// Heat = sum of evidence weights per region; plans whatever `nextPlan` holds.
class FakePolicy final : public service::PlacementPolicy {
 public:
  Result<void> addRegion(const RegionInfo& region) override {
    regions[region.id] = region;
    return {};
  }
  void removeRegion(uint64_t regionId) override { regions.erase(regionId); }
  void removeProcess(pid_t tgid) override { removedProcesses.push_back(tgid); }
  void observe(const EvidenceBatch& evidence, uint64_t sinceNs, uint64_t nowNs) override {
    lastObserveSinceNs = sinceNs;
    lastObserveNs = nowNs;
    evidence.forEachRecord([&](const AccessEvidence& e) {
      for (const auto& [id, r] : regions)
        if (r.tgid == e.tgid && e.page >= r.start && e.page < r.start + r.length) heat[id] += e.weight;
    });
    observed += evidence.pages();
  }
  void onMark(const IterationMark& mark) override { marks.push_back(mark); }
  MigrationPlan plan(uint64_t, uint64_t intervalNs, const MigrationRates& rates,
                     std::span<const service::ManualPin> pins,
                     std::span<const MoveRequest> stillMoving, std::span<const StuckRange> stuck) override {
    lastStillMoving.assign(stillMoving.begin(), stillMoving.end());
    lastStuck.assign(stuck.begin(), stuck.end());
    lastIntervalNs = intervalNs;
    lastRates = rates;
    lastPins.assign(pins.begin(), pins.end());
    ++plans;
    MigrationPlan p = nextPlan;
    nextPlan = {};
    if (!laterPlans.empty()) {
      nextPlan = laterPlans.front();
      laterPlans.pop_front();
    }
    return p;
  }
  std::vector<registry::RegionHeat> regionHeat() const override {
    std::vector<registry::RegionHeat> out;
    for (const auto& [id, h] : heat) out.push_back({id, h, 0});
    return out;
  }
  service::PolicyView view() const override {
    service::PolicyView v = learned;
    v.fastBudgetBytes = budget;
    return v;
  }
  // No per-page heat (AdminServiceTest answers top --pages from the real heat model).
  std::vector<service::PageHeatView> hottestPages(size_t, pid_t, uint64_t) const override { return {}; }
  Result<void> applyConfig(const tensortier::v1::PolicyConfig&) override { return {}; }

  std::map<uint64_t, RegionInfo> regions;
  std::map<uint64_t, double> heat;
  std::vector<pid_t> removedProcesses;
  std::vector<IterationMark> marks;
  MigrationPlan nextPlan;
  std::deque<MigrationPlan> laterPlans;  // nextPlan after each plan(), in turn
  std::vector<service::ManualPin> lastPins;  // as handed to the last plan()
  std::vector<MoveRequest> lastStillMoving;  // as handed to the last plan()
  std::vector<StuckRange> lastStuck;         // as handed to the last plan()
  size_t observed = 0;
  uint64_t lastObserveNs = 0;
  uint64_t lastObserveSinceNs = 0;
  uint64_t lastIntervalNs = 0;
  MigrationRates lastRates{-1, -1};
  int plans = 0;
  uint64_t budget = 0;
  service::PolicyView learned;  // feature weights and clocks view() reports
};

class FakeExecutor final : public service::PlanExecutor {
 public:
  Result<void> submit(MigrationPlan plan) override {
    std::lock_guard lock(mutex);
    submitted.push_back(std::move(plan));
    return {};
  }
  void cancelProcess(pid_t tgid) override {
    std::lock_guard lock(mutex);
    cancelled.push_back(tgid);
  }
  service::ExecutorCounters counters() const override {
    std::lock_guard lock(mutex);
    service::ExecutorCounters c = current;
    if (inFlightReadsLeft > 0 && --inFlightReadsLeft == 0) current.planInFlight = false;
    return c;
  }
  // As the engine: a callback being called finishes before a new one replaces it.
  void setIdleCallback(std::function<void()> callback) override {
    std::lock_guard lock(callbackMutex);
    idleCallback = std::move(callback);
  }
  // What the engine does when its plan finishes: idle, then the callback told.
  void finishPlan() {
    {
      std::lock_guard lock(mutex);
      current.planInFlight = false;
    }
    callIdle();
  }
  // The callback alone (a late one, after the engine took another plan).
  void callIdle() {
    std::lock_guard lock(callbackMutex);
    if (idleCallback) idleCallback();
  }
  std::optional<std::vector<service::FinishedRun>> runsOf(uint64_t generation) const override {
    std::lock_guard lock(mutex);
    std::vector<service::FinishedRun> out;
    for (const auto& r : runs)
      if (r.generation == generation) out.push_back(r);
    if (out.empty()) return std::nullopt;
    return out;
  }
  Result<void> applyConfig(const tensortier::v1::MigrationConfig&) override { return {}; }
  void shutdown(uint32_t) override {}

  mutable std::mutex mutex;
  std::vector<service::FinishedRun> runs;  // the finished plans' runs (each carries its plan's generation)
  std::vector<MigrationPlan> submitted;
  std::vector<pid_t> cancelled;
  mutable service::ExecutorCounters current;
  // > 0: the plan in flight finishes after this many more counters() reads, its idle callback
  // having found nothing to do (a plan that ends while the loop decides what to do with its own).
  mutable int inFlightReadsLeft = 0;
  std::mutex callbackMutex;
  std::function<void()> idleCallback;
};

// Records the calls a trace sink gets, as "kind:detail" lines in call order.
class FakeTraceSink final : public service::TraceSink {
 public:
  void onRegion(const RegionInfo& region) override { calls.push_back("region:" + std::to_string(region.id)); }
  void onMark(const IterationMark& mark) override { calls.push_back("mark:" + std::to_string(mark.step)); }
  void onProcessExit(pid_t tgid, uint64_t nowNs) override {
    calls.push_back("exit:" + std::to_string(tgid) + "@" + std::to_string(nowNs));
  }
  void onEvidence(const EvidenceBatch& evidence, uint64_t sinceNs, uint64_t nowNs) override {
    calls.push_back("evidence:" + std::to_string(evidence.pages()) + "@" + std::to_string(sinceNs) + "-" +
                    std::to_string(nowNs));
  }
  void endEpoch(uint64_t nowNs) override { calls.push_back("end@" + std::to_string(nowNs)); }
  std::vector<std::string> calls;
};

}  // namespace tt::test
