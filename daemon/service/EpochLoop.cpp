#include "service/EpochLoop.h"

#include <time.h>

#include <algorithm>
#include <set>

#include "core/Buffers.h"
#include "core/Log.h"
#include "sys/ThreadName.h"

namespace tt::service {

uint64_t EpochLoop::monotonicNowNs() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

EpochLoop::EpochLoop(registry::Registry& registry, EpochStages stages, metrics::Registry& metrics)
    : registry_(registry),
      stages_(stages),
      metrics_(metrics),
      initialBandwidth_(
          static_cast<double>(tensortier::v1::PolicyConfig::default_instance().initial_migration_bandwidth())),
      epochs_(metrics.counter("tensortier_epochs_total", "Epochs run (collect, heat, plan, submit)")),
      epochDuration_(metrics.histogram("tensortier_epoch_duration_seconds", "Duration of one epoch",
                                       {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5})),
      promotedPages_(metrics.counter("tensortier_promoted_pages_total", "4 KiB pages moved to a fast node")),
      demotedPages_(metrics.counter("tensortier_demoted_pages_total", "4 KiB pages moved to a slow node")),
      promotedBytes_(metrics.counter("tensortier_promoted_bytes_total", "Bytes moved to a fast node")),
      demotedBytes_(metrics.counter("tensortier_demoted_bytes_total", "Bytes moved to a slow node")),
      planMoves_(metrics.counter("tensortier_plan_moves_total", "Move requests in submitted plans")),
      plansDeferred_(metrics.counter("tensortier_plans_deferred_total",
                                     "Plans not submitted because the engine still ran the previous one")),
      earlyEpochs_(metrics.counter("tensortier_early_epochs_total",
                                   "Epochs run before their period was over, when the engine finished a plan that "
                                   "had held one back")) {
  // Shown from the first status request on, before any epoch (the first may be minutes away at a
  // long epoch_ms): the start notes, fixed once the sources are open, and each source's status.
  if (stages_.source) {
    stats_.sourceNotes = stages_.source->notes();
    stats_.sources = stages_.source->status();
  }
  if (stages_.executor) stages_.executor->setIdleCallback([this] { onExecutorIdle(); });
}

EpochLoop::~EpochLoop() {
  stop();
  // The executor may outlive the loop: once this returns, its callback into the loop is gone.
  if (stages_.executor) stages_.executor->setIdleCallback({});
}

void EpochLoop::onExecutorIdle() {
  std::lock_guard lock(waitMutex_);
  if (!replanWhenIdle_) return;
  replanWhenIdle_ = false;
  wakeEarly_ = true;
  waitCv_.notify_all();
}

void EpochLoop::setPeriod(std::chrono::milliseconds period) {
  periodMs_.store(std::max<int64_t>(1, period.count()));
  waitCv_.notify_all();  // a shorter period takes effect now, not after the old one
}

void EpochLoop::start() {
  if (thread_.joinable()) return;
  {
    std::lock_guard lock(waitMutex_);
    stopRequested_ = false;
    // A plan that finished while the loop was stopped wakes nothing: the first epoch plans anyway.
    replanWhenIdle_ = false;
    wakeEarly_ = false;
  }
  thread_ = std::thread([this] {
    sys::nameThisThread("tt-epoch");
    threadMain();
  });
}

void EpochLoop::stop() {
  {
    std::lock_guard lock(waitMutex_);
    stopRequested_ = true;
  }
  waitCv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void EpochLoop::threadMain() {
  auto next = std::chrono::steady_clock::now();
  for (;;) {
    bool early = false;
    {
      std::unique_lock lock(waitMutex_);
      next += std::chrono::milliseconds(periodMs_.load());
      const auto now = std::chrono::steady_clock::now();
      if (next < now) next = now;  // an overlong epoch: do not try to catch up
      for (;;) {
        while (!stopRequested_ && !wakeEarly_) {
          auto until = next;
          const bool slice = keepAlive_ && keepAliveInterval_.count() > 0 &&
                             std::chrono::steady_clock::now() + keepAliveInterval_ < next;
          if (slice) until = std::chrono::steady_clock::now() + keepAliveInterval_;
          if (waitCv_.wait_until(lock, until) == std::cv_status::timeout) {
            if (!slice) break;
            lock.unlock();
            keepAlive_();
            lock.lock();
          }
        }
        if (stopRequested_) return;
        if (!wakeEarly_) break;  // the period is over
        wakeEarly_ = false;
        const auto woke = std::chrono::steady_clock::now();
        if (woke >= next) break;  // due anyway: not an early epoch
        // The engine finished the plan that held the last epoch's back. A callback that came late
        // (its thread stalled) may find the engine running a newer plan: the loop then waits for
        // that one, asking for the wake-up again before it looks, so an end in between is not lost.
        replanWhenIdle_ = true;
        lock.unlock();
        const bool busy = stages_.executor != nullptr && stages_.executor->counters().planInFlight;
        lock.lock();
        if (!busy) {
          // Plan now, not up to a period later, and count the next period from here (plans are
          // sized to one period).
          early = true;
          next = woke;
          break;
        }
      }
    }
    if (early) {
      TT_LOG(Debug) << "epoch: the engine is idle again: the held-back plan is made now";
      std::lock_guard stats(statsMutex_);
      ++stats_.earlyEpochs;
      earlyEpochs_.inc();
    }
    runOnce(monotonicNowNs());
  }
}

void EpochLoop::applyEvents(uint64_t nowNs) {
  using T = registry::RegistryEvent::Type;
  std::set<pid_t> rangesChanged;
  for (auto& ev : registry_.drainEvents()) {
    switch (ev.type) {
      case T::ProcessAdded:
        if (stages_.source) {
          if (auto r = stages_.source->addProcess(ev.tgid); !r && r.error().code == ESRCH) {
            // The normal race of a client that exits right after registering.
            TT_LOG(Info) << "sources: " << r.error().message();
          } else if (!r) {
            TT_LOG(Warn) << "sources: " << r.error().message();
          }
        }
        break;
      case T::ProcessRemoved:
        (void)unpin(ev.tgid, 0);
        stuck_.removeProcess(ev.tgid);
        if (stages_.executor) stages_.executor->cancelProcess(ev.tgid);
        if (stages_.source) (void)stages_.source->removeProcess(ev.tgid);
        if (stages_.policy) stages_.policy->removeProcess(ev.tgid);
        regions_.erase(ev.tgid);
        if (stages_.trace) stages_.trace->onProcessExit(ev.tgid, nowNs);
        metrics_.removeSeries("tensortier_process_fast_tier_bytes", {{"pid", std::to_string(ev.tgid)}});
        {
          std::lock_guard lock(statsMutex_);
          fastBytes_.erase(ev.tgid);
        }
        break;
      case T::RegionAdded:
        if (stages_.policy) {
          if (auto r = stages_.policy->addRegion(ev.region); !r) {
            TT_LOG(Warn) << "policy: region " << ev.region.id << ": " << r.error().message();
          }
        }
        regions_[ev.tgid][ev.region.start] = ev.region;
        rangesChanged.insert(ev.tgid);
        if (stages_.trace) stages_.trace->onRegion(ev.region);
        break;
      case T::RegionRemoved:
        (void)unpin(ev.tgid, ev.region.id);
        stuck_.removeRange(ev.tgid, ev.region.start, ev.region.length);
        if (stages_.policy) stages_.policy->removeRegion(ev.region.id);
        if (auto p = regions_.find(ev.tgid); p != regions_.end()) {
          p->second.erase(ev.region.start);
          if (p->second.empty()) regions_.erase(p);
        }
        rangesChanged.insert(ev.tgid);
        break;
      case T::Mark:
        // Marks arrive in batches at the epoch; their own times are what the schedule learns
        // from, and what a late promotion is judged against when reading a log.
        TT_LOG(Debug) << "mark: process " << ev.mark.tgid << " step " << ev.mark.step << " "
                      << (ev.mark.type == MarkType::StepBegin ? "begins"
                          : ev.mark.type == MarkType::StepEnd ? "ends"
                                                              : "phase " + ev.mark.phase)
                      << ", " << (nowNs - std::min(nowNs, ev.mark.timestampNs)) / 1'000'000 << " ms before this epoch";
        if (stages_.policy) stages_.policy->onMark(ev.mark);
        if (stages_.trace) stages_.trace->onMark(ev.mark);
        break;
    }
  }
  // Sources that scan address ranges follow the registered regions (merged where they touch).
  if (stages_.source)
    for (pid_t tgid : rangesChanged) {
      std::vector<std::pair<uint64_t, uint64_t>> ranges;
      if (auto p = regions_.find(tgid); p != regions_.end())
        for (const auto& [start, region] : p->second) {
          if (!ranges.empty() && ranges.back().second >= start) ranges.back().second = std::max(ranges.back().second, start + region.length);
          else ranges.emplace_back(start, start + region.length);
        }
      stages_.source->setRanges(tgid, ranges);
    }
}

MigrationRates EpochLoop::updateRates(const ExecutorCounters& counters) {
  // Bytes moved per epoch would understate what the engine can do (it idles when plans are
  // small, and the next plan would shrink with it): a direction's rate is the engine's busy-time
  // throughput that way, from epochs that moved enough to time, smoothed, capped by its limit.
  // Apart, because the copies differ (on Optane a demotion's writes are the slow side) and so may
  // the limits: one figure for both sized a plan of equal promotions and demotions by their mean.
  const auto measure = [](double& measured, const MoveTiming& now, const MoveTiming& before) {
    const uint64_t bytes = now.busyBytes - std::min(now.busyBytes, before.busyBytes);
    const uint64_t ns = now.busyNs - std::min(now.busyNs, before.busyNs);
    if (bytes < kMinBandwidthSampleBytes || ns == 0) return;
    const double sample = static_cast<double>(bytes) * 1e9 / static_cast<double>(ns);
    measured = measured == 0 ? sample : 0.5 * measured + 0.5 * sample;
  };
  measure(measuredPromote_, counters.promoteTiming, lastCounters_.promoteTiming);
  measure(measuredDemote_, counters.demoteTiming, lastCounters_.demoteTiming);
  // A direction not timed yet is taken to copy as fast as the other, which is closer than the
  // initial value once either has been timed. Neither timed: the initial bandwidth under each
  // limit, which binds from the first plan (with a low limit, an epoch may move less than a
  // sample's worth and the rate is never measured, so plans would stay sized for the initial
  // one). Handed over each plan rather than left to the policy's own copy of the initial value,
  // so that a limit raised again, or a reloaded initial value, is followed by the heat model too
  // (it keeps the last it was given).
  const MigrationRates timed{measuredPromote_, measuredDemote_};
  const MigrationRates filled = timed.filledIn(initialBandwidth_.load());
  const auto capped = [](double rate, double limit) { return limit > 0 ? std::min(rate, limit) : rate; };
  const MigrationRates rates{capped(filled.promoteBytesPerSec, counters.promoteTiming.rateLimitBytesPerSec),
                             capped(filled.demoteBytesPerSec, counters.demoteTiming.rateLimitBytesPerSec)};
  {
    std::lock_guard lock(statsMutex_);
    // Status says which direction has been timed: 0 for one that has not (planned as the other).
    stats_.migrationRates = {measuredPromote_ > 0 ? rates.promoteBytesPerSec : 0,
                             measuredDemote_ > 0 ? rates.demoteBytesPerSec : 0};
  }
  const char* const kRateHelp = "Copy rate the planner sizes plans by, per direction (measured, or assumed until timed)";
  metrics_.gauge("tensortier_migration_rate_bytes_per_second", kRateHelp, {{"direction", "promote"}})
      .set(rates.promoteBytesPerSec);
  metrics_.gauge("tensortier_migration_rate_bytes_per_second", kRateHelp, {{"direction", "demote"}})
      .set(rates.demoteBytesPerSec);
  return rates;
}

void EpochLoop::runBeforeNextEpoch(std::function<void()> task) {
  std::lock_guard lock(tasksMutex_);
  tasks_.push_back(std::move(task));
}

void EpochLoop::runOnce(uint64_t nowNs) {
  std::lock_guard run(runMutex_);
  std::vector<std::function<void()>> tasks;
  {
    std::lock_guard lock(tasksMutex_);
    tasks.swap(tasks_);
  }
  for (auto& task : tasks) task();
  const auto began = std::chrono::steady_clock::now();
  // The epoch this run closes: since the previous run, or one period for the first.
  const uint64_t epochNs = lastNowNs_ == 0 || nowNs <= lastNowNs_
                               ? static_cast<uint64_t>(periodMs_.load()) * 1'000'000ULL
                               : nowNs - lastNowNs_;
  const double epochSeconds = static_cast<double>(epochNs) / 1e9;
  const uint64_t sinceNs = nowNs - std::min(nowNs, epochNs);  // the span this epoch's evidence covers
  lastNowNs_ = nowNs;
  readStuckPages();  // before the events: a process's exit or a region's removal drops its holds
  applyEvents(nowNs);

  releaseIfOversized(evidence_.records, 4096);  // a scan of 1 GiB can be 6 MiB of records
  releaseIfOversized(evidence_.blocks, 64);      // a 1 GiB first-touch storm is 512 blocks of 792 bytes
  evidence_.clear();
  if (stages_.source) {
    if (auto r = stages_.source->collect(evidence_); !r) {
      TT_LOG(Debug) << "sources: " << r.error().message();
    }
  }
  if (stages_.trace) {
    stages_.trace->onEvidence(evidence_, sinceNs, nowNs);
    stages_.trace->endEpoch(nowNs);
  }

  ExecutorCounters counters;
  if (stages_.executor) {
    {
      // This epoch plans from what the engine says now: an early epoch asked for before is this one.
      std::lock_guard lock(waitMutex_);
      replanWhenIdle_ = false;
      wakeEarly_ = false;
    }
    counters = stages_.executor->counters();
  }
  const MigrationRates rates = updateRates(counters);
  // An idle engine has finished every manual plan submitted before this epoch (submitManual waits
  // for the run lock): none of their moves is left to carry into a later one.
  if (!counters.planInFlight) unfinishedPins_.clear();

  if (log::enabled(log::Level::Debug) && !evidence_.empty()) {
    TT_LOG(Debug) << "epoch: evidence for " << evidence_.pages() << " pages (" << evidence_.records.size()
                  << " records, " << evidence_.blocks.size() << " blocks), weight " << evidence_.weight();
  }
  uint64_t moves = 0;
  PolicyView view;
  if (stages_.policy) {
    stages_.policy->observe(evidence_, sinceNs, nowNs);
    std::vector<ManualPin> pins;
    {
      std::lock_guard lock(pinsMutex_);
      std::erase_if(pins_, [nowNs](const ManualPin& p) { return p.expiresNs != 0 && nowNs >= p.expiresNs; });
      pins = pins_;
    }
    // The next plan comes with the next epoch: this one may use the engine until then.
    const auto untilNextNs = static_cast<uint64_t>(periodMs_.load()) * 1'000'000ULL;
    if (!counters.planInFlight) inFlightMoves_.clear();
    // Manual moves made since the last plan (pinned moves retried with it included): the policy
    // did not plan them, so it is told of them once even if the engine has finished them already,
    // and reads their ranges again.
    inFlightMoves_.insert(inFlightMoves_.end(), manualMovesUnseen_.begin(), manualMovesUnseen_.end());
    manualMovesUnseen_.clear();
    // A pin's manual move is carried into the plan only while it is unsettled: a finished plan left
    // pages of it off the pin's node (busy pages, the node full), and the pin keeps the planner from
    // moving them. A settled one is not: a pinned range that is where the user put it would cost
    // the engine a pass over it in every plan. The plans finished since the last look say which
    // pinned moves settled, the newest that mentions a pin deciding (a manual plan that finished
    // right after another must not hide it); a pin none mentions keeps what an earlier plan said.
    // One that stays unsettled (pages pinned by RDMA or GPU registrations, a node that stays full)
    // is retried after 1, 2, 4 ... up to kMaxPinRetryEpochs epochs. (The plan goes to an idle engine only, below, so it
    // supersedes no manual plan.)
    // More plans finished than are read (a burst of manual moves within one epoch): a pin that the
    // plans read do not mention may have been left unsettled by one not read, and is retried once
    // rather than taken for settled (a settled one costs the engine one pass).
    std::vector<MoveRequest> retried;
    if (!counters.planInFlight && stages_.executor) {
      std::vector<std::vector<FinishedRun>> finished;  // newest first; every plan is done (the engine is idle)
      const bool unread = generation_ - pinsReadGeneration_ > kPinPlansRead;
      if (!pins.empty()) {
        const uint64_t oldest = std::max(pinsReadGeneration_, generation_ - std::min(generation_, kPinPlansRead)) + 1;
        for (uint64_t g = generation_; g >= oldest && g > 0; --g)
          if (auto runs = stages_.executor->runsOf(g)) finished.push_back(std::move(*runs));  // none: superseded unstarted
      }
      pinsReadGeneration_ = generation_;
      std::map<PinKey, PinRetry> live;
      for (const ManualPin& p : pins) {
        const PinKey key{p.tgid, p.start, p.length, p.node};
        bool mentioned = false, settled = true;
        for (const std::vector<FinishedRun>& runs : finished) {
          for (const FinishedRun& r : runs)
            if (r.tgid == p.tgid && r.targetNode == p.node && r.start < p.start + p.length && p.start < r.start + r.length) {
              mentioned = true;
              settled = settled && r.settled;
            }
          if (mentioned) break;
        }
        const auto known = pinRetries_.find(key);
        if (mentioned ? settled : (known == pinRetries_.end() && !unread)) continue;  // settled, or never unsettled
        PinRetry r = known == pinRetries_.end() ? PinRetry{} : known->second;
        if (r.epochsLeft == 0) {
          retried.push_back({p.tgid, p.start, p.length, p.node, kManualPriority, p.regionId});
          r.epochsLeft = std::min<uint32_t>(kMaxPinRetryEpochs, r.wait == 0 ? 1 : 2 * r.wait);
          r.wait = r.epochsLeft;
        } else {
          --r.epochsLeft;
        }
        live[key] = r;
      }
      pinRetries_ = std::move(live);  // settled or unpinned ones are forgotten
    }
    const std::vector<StuckRange> stuck = stuck_.nextPlan(!counters.planInFlight);
    MigrationPlan plan = stages_.policy->plan(nowNs, untilNextNs, rates, pins, inFlightMoves_, stuck);
    if (!retried.empty() && !counters.planInFlight) {
      TT_LOG(Debug) << "epoch: " << retried.size() << " pinned range(s) not settled yet: their manual move is retried";
      plan.moves.insert(plan.moves.begin(), retried.begin(), retried.end());
    }
    moves = plan.moves.size();
    // While the engine still runs the previous plan, the residency this plan was made from misses
    // the batch in flight (up to batch_pages): superseding it could promote that batch's worth
    // over the budget. The plan is dropped, and the loop runs its next epoch as soon as the engine
    // is idle, planning from settled placement. Plans are sized to one period at the measured
    // rates, so an engine a little slower than measured overruns now and then; waiting for
    // the next period instead would leave it idle for most of one, and a swap that needs two
    // plans would land that much later.
    if (!plan.moves.empty() && stages_.executor && counters.planInFlight) {
      TT_LOG(Debug) << "epoch: engine still busy with plan " << generation_ << "; this epoch's plan (" << moves
                    << " moves) is dropped, to be made again when the engine is idle";
      {
        std::lock_guard lock(statsMutex_);
        ++stats_.plansDeferred;
      }
      plansDeferred_.inc();
      moves = 0;
      plan.moves.clear();
      {
        std::lock_guard lock(waitMutex_);
        replanWhenIdle_ = true;
      }
      // The engine may have gone idle since its counters were read, before the flag was set.
      if (!stages_.executor->counters().planInFlight) onExecutorIdle();
    }
    if (!plan.moves.empty() && stages_.executor) {
      plan.generation = ++generation_;
      std::vector<MoveRequest> submitted = plan.moves;
      if (auto r = stages_.executor->submit(std::move(plan)); !r) {
        TT_LOG(Warn) << "engine refused plan " << generation_ << ": " << r.error().message();
      } else {
        if (log::enabled(log::Level::Debug)) {
          uint64_t bytes = 0;
          for (const auto& m : submitted) bytes += m.length;
          TT_LOG(Debug) << "epoch: plan " << generation_ << " submitted: " << moves << " moves, " << bytes / kBasePageSize
                        << " pages, planned at " << rates.promoteBytesPerSec / 1e6 << " MB/s up, "
                        << rates.demoteBytesPerSec / 1e6 << " MB/s down";
        }
        lastPolicyGeneration_ = generation_;
        inFlightMoves_ = std::move(submitted);
        manualMovesUnseen_.insert(manualMovesUnseen_.end(), retried.begin(), retried.end());
        planMoves_.add(static_cast<double>(moves));
        std::lock_guard lock(statsMutex_);
        ++stats_.plansSubmitted;
      }
    }
    const auto heat = stages_.policy->regionHeat();
    registry_.publishHeat(heat);
    view = stages_.policy->view();
  }

  updateResidency();
  exportCounters(epochSeconds, counters);

  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - began).count();
  epochs_.inc();
  epochDuration_.observe(ms / 1000.0);
  {
    std::lock_guard lock(statsMutex_);
    ++stats_.epochs;
    stats_.lastEpochMs = ms;
    stats_.lastPlanMoves = moves;
    stats_.stuck = stuck_.totals();
    stats_.policy = view;
    if (stages_.executor && epochSeconds > 0) {
      stats_.promoteBytesPerSec =
          static_cast<double>(counters.promotedBytes - std::min(counters.promotedBytes, lastCounters_.promotedBytes)) /
          epochSeconds;
      stats_.demoteBytesPerSec =
          static_cast<double>(counters.demotedBytes - std::min(counters.demotedBytes, lastCounters_.demotedBytes)) /
          epochSeconds;
    }
  }
  if (stages_.executor) lastCounters_ = counters;
  if (keepAlive_) keepAlive_();
}

void EpochLoop::readStuckPages() {
  if (!stages_.executor || lastPolicyGeneration_ == stuckReadGeneration_) return;
  // The pages the engine left busy in the policy's own last plan, read once, also when manual plans
  // have finished behind it since (runsOf: the executor keeps a few plans' reports). Pinned
  // ranges' moves (retried in a policy plan) are the pins' business, not held here.
  const std::optional<std::vector<FinishedRun>> finished = stages_.executor->runsOf(lastPolicyGeneration_);
  if (!finished) return;
  const std::vector<FinishedRun>& runs = *finished;
  stuckReadGeneration_ = lastPolicyGeneration_;
  std::vector<ManualPin> pins;
  {
    std::lock_guard lock(pinsMutex_);
    pins = pins_;
  }
  std::vector<FinishedRun> own;
  for (const FinishedRun& r : runs)
    if (std::none_of(pins.begin(), pins.end(), [&r](const ManualPin& p) {
          return p.tgid == r.tgid && p.start < r.start + r.length && r.start < p.start + p.length;
        }))
      own.push_back(r);
  stuck_.onFinishedPlan(own);
}

void EpochLoop::updateResidency() {
  if (!stages_.residency || regions_.empty()) return;
  uint64_t totalPages = 0;
  for (const auto& [pid, regions] : regions_)
    for (const auto& [start, r] : regions) totalPages += r.length / kBasePageSize;
  const uint64_t stride = std::max<uint64_t>(1, (totalPages + kResidencyPagesPerEpoch - 1) / kResidencyPagesPerEpoch);
  std::map<pid_t, uint64_t> result;
  for (const auto& [pid, regions] : regions_) {
    uint64_t bytes = 0;
    bool ok = true;
    for (const auto& [start, r] : regions) {
      auto fast = stages_.residency->fastBytes(pid, r.start, r.length, stride);
      if (!fast) {
        ok = false;  // the process is exiting; its removal event follows
        break;
      }
      bytes += *fast;
    }
    if (!ok) continue;
    result[pid] = bytes;
    metrics_.gauge("tensortier_process_fast_tier_bytes", "Registered bytes of a process on fast nodes (sampled)",
                   {{"pid", std::to_string(pid)}})
        .set(static_cast<double>(bytes));
  }
  std::lock_guard lock(statsMutex_);
  fastBytes_ = std::move(result);
}

void EpochLoop::exportCounters(double epochSeconds, const ExecutorCounters& c) {
  const registry::Totals totals = registry_.totals();
  metrics_.gauge("tensortier_registered_processes", "Client processes with registrations")
      .set(static_cast<double>(totals.processes));
  metrics_.gauge("tensortier_registered_regions", "Registered regions").set(static_cast<double>(totals.regions));
  metrics_.gauge("tensortier_registered_bytes", "Bytes in registered regions")
      .set(static_cast<double>(totals.registeredBytes));
  metrics_.gauge("tensortier_connections", "Open client connections").set(static_cast<double>(totals.connections));

  if (stages_.executor) {
    auto delta = [](uint64_t now, uint64_t before) { return static_cast<double>(now >= before ? now - before : now); };
    promotedPages_.add(delta(c.promotedPages, lastCounters_.promotedPages));
    demotedPages_.add(delta(c.demotedPages, lastCounters_.demotedPages));
    promotedBytes_.add(delta(c.promotedBytes, lastCounters_.promotedBytes));
    demotedBytes_.add(delta(c.demotedBytes, lastCounters_.demotedBytes));
    const StuckMoves::Totals stuck = stuck_.totals();
    const char* const kStuckHelp =
        "4 KiB pages the policy's moves left busy (pinned by the kernel), held where they are, by the tier they are on";
    metrics_.gauge("tensortier_stuck_pages", kStuckHelp, {{"tier", "fast"}}).set(static_cast<double>(stuck.fastPages));
    metrics_.gauge("tensortier_stuck_pages", kStuckHelp, {{"tier", "slow"}}).set(static_cast<double>(stuck.slowPages));
    // Busy ranges past the holds' bound are asked again at once: a rising count says the bound
    // (StuckMoves::kMaxRanges) is too small for what the kernel pins.
    metrics_
        .counter("tensortier_stuck_ranges_not_held_total",
                 "Busy ranges the policy's moves left that were not held back because the holds were full")
        .add(delta(stuck.notHeld, stuckNotHeldExported_));
    stuckNotHeldExported_ = stuck.notHeld;
    for (const auto& [reason, pages] : c.failedPages) {
      const auto before = lastCounters_.failedPages.find(reason);
      metrics_.counter("tensortier_migration_failed_pages_total", "Pages not migrated, by reason", {{"reason", reason}})
          .add(delta(pages, before == lastCounters_.failedPages.end() ? 0 : before->second));
    }
    // lastCounters_ is advanced by runOnce after the rates are computed.
  }
  if (stages_.source) {
    auto reports = stages_.source->status();
    {
      std::lock_guard lock(statsMutex_);
      stats_.sources = reports;
    }
    // Sources report running totals; a counter grows by what changed since the last epoch (a
    // total that went down, a source reopened, counts from zero again).
    auto grow = [this](const std::string& name, const std::string& help, const metrics::Labels& labels,
                       uint64_t total) {
      std::string key = name;
      for (const auto& [k, v] : labels) key += "," + k + "=" + v;
      const auto before = lastTotals_.find(key);
      const uint64_t prev = before == lastTotals_.end() ? 0 : before->second;
      metrics_.counter(name, help, labels).add(static_cast<double>(total >= prev ? total - prev : total));
      lastTotals_[key] = total;
    };
    sources::KernelMoveTotals kernelMoves;  // seen by whichever source traces the kernel's moves
    for (const auto& s : reports) {
      grow("tensortier_samples_total", "Samples/events seen by each source", {{"source", s.name}}, s.samples);
      grow("tensortier_source_lost_total", "Records or counts the kernel dropped (full ring or count map), by source",
           {{"source", s.name}}, s.lost);
      grow("tensortier_source_throttled_total", "Times the kernel throttled a sampling event, by source",
           {{"source", s.name}}, s.throttled);
      kernelMoves.promoted += s.kernelMoves.promoted;
      kernelMoves.demoted += s.kernelMoves.demoted;
      kernelMoves.syscall += s.kernelMoves.syscall;
      kernelMoves.other += s.kernelMoves.other;
      if (s.systemMigrations) {
        const std::pair<const char*, const sources::SystemMigrations::Pages*> byReason[] = {
            {"promoted", &s.systemMigrations->promotion},
            {"demoted", &s.systemMigrations->demotion},
            {"syscall", &s.systemMigrations->syscall},
            {"other", &s.systemMigrations->other}};
        for (const auto& [reason, pages] : byReason) {
          static const char* const kHelp =
              "Pages the kernel migrated on the whole machine since the daemon started, by reason and result "
              "(promoted: NUMA balancing; demoted: reclaim, kswapd's for every process; syscall: "
              "move_pages/migrate_pages/mbind, the daemon's own moves too)";
          grow("tensortier_kernel_migrated_pages_system_total", kHelp, {{"reason", reason}, {"result", "succeeded"}},
               pages->succeeded);
          grow("tensortier_kernel_migrated_pages_system_total", kHelp, {{"reason", reason}, {"result", "failed"}},
               pages->failed);
        }
        if (s.systemMigrations->trackedUndone)
          grow("tensortier_kernel_undone_entries_total",
               "Page-table entries of tracked processes' pages the kernel mapped back to the page they had (a "
               "migration that failed and was undone, a huge page split in place): not moves",
               {}, *s.systemMigrations->trackedUndone);
      }
      metrics_.counter("tensortier_sampling_cpu_seconds_total", "Estimated CPU time spent sampling (kernel work in sampled threads + daemon), by source",
                       {{"source", s.name}})
          .add(s.cpuPercent / 100.0 * epochSeconds);
      metrics_.gauge("tensortier_source_active", "1 when the source runs", {{"source", s.name}})
          .set(s.active ? 1 : 0);
      metrics_.gauge("tensortier_source_paused",
                     "1 while the source is detached over the CPU budget (the fault trace's storm guard)",
                     {{"source", s.name}})
          .set(s.paused ? 1 : 0);
      grow("tensortier_source_pauses_total", "Times the source was detached over the CPU budget", {{"source", s.name}},
           s.pauses);
    }
    const std::pair<const char*, uint64_t> moves[] = {{"promoted", kernelMoves.promoted},
                                                      {"demoted", kernelMoves.demoted},
                                                      {"syscall", kernelMoves.syscall},
                                                      {"other", kernelMoves.other}};
    for (const auto& [reason, pages] : moves)
      grow("tensortier_kernel_moved_pages_total",
           "Pages of tracked processes the kernel itself moved, by reason (promoted: NUMA balancing; demoted: "
           "reclaim; syscall: move_pages/migrate_pages/mbind a tracked process made of its own pages, the "
           "daemon's in-process mbind moves too)",
           {{"reason", reason}}, pages);
  }
}

Result<void> EpochLoop::submitManual(MigrationPlan plan) {
  if (!stages_.executor) return logicError("no migration engine in this daemon");
  std::lock_guard run(runMutex_);
  return submitManualLocked(std::move(plan), {});
}

Result<void> EpochLoop::submitManual(MigrationPlan plan, uint64_t nowNs, uint64_t pinNs) {
  if (!stages_.executor) return logicError("no migration engine in this daemon");
  // Under the run lock: no epoch may plan between the submit and the pins.
  std::lock_guard run(runMutex_);
  std::vector<ManualPin> added;
  for (const auto& m : plan.moves)
    added.push_back({m.tgid, m.regionId, m.start, m.length, m.targetNode, pinNs == 0 ? 0 : nowNs + pinNs});
  if (auto r = submitManualLocked(std::move(plan), added); !r) return r;
  std::lock_guard lock(pinsMutex_);
  for (const auto& a : added) {
    std::erase_if(pins_, [&a](const ManualPin& p) {
      return p.tgid == a.tgid && p.start < a.start + a.length && a.start < p.start + p.length;
    });
    pins_.push_back(a);
  }
  return {};
}

Result<void> EpochLoop::submitManualLocked(MigrationPlan plan, const std::vector<ManualPin>& pinning) {
  // The plan supersedes the engine's, which may be a manual one still moving pinned ranges: their
  // moves come along (those of live pins the new plan does not cover), so a pinned range ends up
  // where the user put it. An idle engine has finished them all.
  std::vector<ManualPin> unfinished;
  if (stages_.executor->counters().planInFlight) {
    std::lock_guard lock(pinsMutex_);
    for (const ManualPin& u : unfinishedPins_) {
      const bool live = std::any_of(pins_.begin(), pins_.end(), [&u](const ManualPin& p) {
        return p.tgid == u.tgid && p.start == u.start && p.length == u.length && p.node == u.node;
      });
      const bool covered = std::any_of(plan.moves.begin(), plan.moves.end(), [&u](const MoveRequest& m) {
        return m.tgid == u.tgid && m.start < u.start + u.length && u.start < m.start + m.length;
      });
      if (live && !covered) unfinished.push_back(u);
    }
  }
  for (const ManualPin& u : unfinished)
    plan.moves.push_back({u.tgid, u.start, u.length, u.node, kManualPriority, u.regionId});
  plan.generation = ++generation_;
  std::vector<MoveRequest> moves = plan.moves;
  if (auto r = stages_.executor->submit(std::move(plan)); !r) return r;
  // Moved by hand: whatever the policy's moves left busy there is the manual move's business now.
  for (const MoveRequest& m : moves) stuck_.removeRange(m.tgid, m.start, m.length);
  if (stages_.policy) manualMovesUnseen_.insert(manualMovesUnseen_.end(), moves.begin(), moves.end());
  unfinished.insert(unfinished.end(), pinning.begin(), pinning.end());
  unfinishedPins_ = std::move(unfinished);
  return {};
}

size_t EpochLoop::unpin(pid_t tgid, uint64_t regionId) {
  std::lock_guard lock(pinsMutex_);
  return std::erase_if(pins_, [&](const ManualPin& p) {
    return p.tgid == tgid && (regionId == 0 || p.regionId == regionId);
  });
}

std::vector<ManualPin> EpochLoop::pins() const {
  std::lock_guard lock(pinsMutex_);
  return pins_;
}

std::vector<PageHeatView> EpochLoop::hottestPages(size_t limit, pid_t tgid, uint64_t nowNs) {
  if (!stages_.policy || limit == 0) return {};
  std::lock_guard run(runMutex_);
  return stages_.policy->hottestPages(limit, tgid, nowNs);
}

EpochStats EpochLoop::stats() const {
  std::lock_guard lock(statsMutex_);
  return stats_;
}

std::map<pid_t, uint64_t> EpochLoop::fastBytesByProcess() const {
  std::lock_guard lock(statsMutex_);
  return fastBytes_;
}

}  // namespace tt::service
