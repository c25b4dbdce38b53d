#include "sources/SamplingSource.h"

#include <algorithm>
#include <optional>
#include <sstream>

#include "core/Buffers.h"
#include "core/Log.h"
#include "sources/EventOpen.h"
#include "sources/PerfDecode.h"
#include "tt_events.h"

namespace tt::sources {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

uint32_t scaledWeight(uint64_t count, uint64_t period) {
  const uint64_t p = std::max<uint64_t>(1, period);
  return count > UINT32_MAX / p ? UINT32_MAX : static_cast<uint32_t>(count * p);
}

// The kernel's blocks and the evidence blocks have the same shape: the counts and the tier planes
// are copied as they are. The planes line up because both list the memories fastest first
// (enum tt_sample_tier from 1; kBlockTiers), which ChunkEvidenceTest checks through servedBy.
static_assert(sys::bpf::kChunkPages == kBlockPages);
static_assert(sys::bpf::kTierWords == kBlockTiers.size() * kBlockTierWords);
static_assert(TT_TIER_CACHE == 1 && TT_TIER_FAST == 2 && TT_TIER_REMOTE_RAM == 3 && TT_TIER_SLOW == 4);

size_t appendChunkBlocks(const std::vector<sys::bpf::ChunkCounts>& chunks, AccessKind kind, uint64_t period,
                         std::vector<EvidenceBlock>& out) {
  size_t pages = 0;
  out.reserve(out.size() + chunks.size());
  for (const auto& c : chunks) {
    EvidenceBlock& b = out.emplace_back();
    b.tgid = static_cast<pid_t>(c.tgid);
    b.kind = sampleKindOf(c.kind, kind);
    b.base = c.base;
    b.weightPerCount = static_cast<uint32_t>(std::clamp<uint64_t>(period, 1, UINT32_MAX));
    b.counts = c.counts;
    std::copy(c.tiers.begin(), c.tiers.end(), b.served.begin());
    const size_t n = b.pages();
    if (n == 0) out.pop_back();  // a block whose counts were all merged away
    pages += n;
  }
  return pages;
}

SamplingSource::SamplingSource(SamplingOptions options, sys::Fs sysfs)
    : options_(std::move(options)),
      sysfs_(std::move(sysfs)),
      controller_(options_.events.empty() ? 1 : options_.events.front().sample_period, PeriodLimits{}) {
  period_ = options_.events.empty() ? 1 : options_.events.front().sample_period;
  counters_.period = period_;
  (void)controller_.setLimits(periodLimits());
  controller_.resetPeriod(period_);  // the events open at their configured period
  counters_.sampleCostNs = controller_.limits().sampleCostNs;
}

PeriodLimits SamplingSource::periodLimits() const {
  PeriodLimits l;
  l.minPeriod = std::max(options_.minPeriod, options_.periodMinimum);
  l.maxPeriod = options_.maxPeriod;
  l.granularity = options_.periodGranularity;
  l.budgetPercent = options_.cpuBudgetPercent;
  l.sampleCostNs = calibratedCostNs_ > 0 ? calibratedCostNs_ : options_.sampleCostNs;
  l.eventCountNs = calibratedCostNs_ > 0 ? eventCountNs_ : 0;
  // The storm floor needs the cost of the event itself, known only from calibration. A fixed
  // period (min == max) is the operator's choice and stays as configured.
  l.floorPeriod = options_.minPeriod < options_.maxPeriod
                      ? stormFloorPeriod(l.sampleCostNs, l.eventCountNs, eventCostNs_, options_.cpuBudgetPercent)
                      : 1;
  return l;
}

// Calibration of the kernel-side cost of software page-fault sampling.
//
// Why measure rather than configure: the cost is the perf overflow path plus the BPF program (or
// the ring write), paid by the faulting thread; it differs several-fold between machines, kernels
// and virtualisation (~0.5-0.7 us per sample here), and no CPU-time counter of the daemon's sees
// it. Enabling the event also costs every fault something (the kernel walks its per-CPU software
// event list and counts: ~45 ns here), sampled or not.
// How: the daemon's own thread takes bursts of first-touch faults (fresh pages, one fault each,
// the storm case) in three states: events disabled, enabled at a period no burst reaches
// (counting only), enabled at period 1 (every fault sampled), the order rotating between rounds;
// CLOCK_THREAD_CPUTIME_ID counts the fault handling of this thread only, so other load on the
// machine affects it much less than wall time would. Its own tgid is tracked during the bursts
// so the BPF program does the full work of a tracked sample (map insert of a new page), the worst
// case; the entries are drained and dropped before any process is tracked.
//   event cost    = median(disabled) / pages
//   counting cost = median over rounds of (counting - disabled) / pages (clamped at 0)
//   sample cost   = median over rounds of (sampled - counting) / pages
// 9 rounds x 3 x 2048 faults: ~0.1-0.2 s at start. A sample cost <= 0 (noise) fails: the configured
// sample_cost_ns is used instead.
Result<void> SamplingSource::calibrate() {
  constexpr size_t kPages = 2048;  // the counting cost is ~3% of a fault: long bursts, less noise
  constexpr int kRounds = 9;
  constexpr uint64_t kCountOnly = uint64_t{1} << 40;  // no burst reaches it: counting, no sample
  auto setAll = [&](bool on, uint64_t period) -> Result<void> {
    for (const auto& ev : events_) {
      if (on) {
        if (auto r = ev->setPeriod(period); !r) return r.error();
      }
      if (auto r = on ? ev->enable() : ev->disable(); !r) return r.error();
    }
    return {};
  };
  auto discard = [&] {
    for (const auto& ev : events_) ev->drain([](std::span<const uint8_t>) {});
  };
  const pid_t self = sys::perf::currentTgid();
  if (agg_)
    if (auto r = agg_->track(self); !r) return r.error();
  std::vector<double> disabled, counting, sampling;
  Result<void> result{};
  for (int k = 0; k < kRounds && result; ++k) {
    double perFault[3] = {0, 0, 0};  // disabled, counting, sampled
    for (int j = 0; j < 3 && result; ++j) {
      const int state = (j + k) % 3;
      if (auto r = setAll(state != 0, state == 2 ? 1 : kCountOnly); !r) {
        result = r.error();
        break;
      }
      auto ns = sys::perf::faultBurstCpuNs(kPages);
      if (!ns) {
        result = ns.error();
        break;
      }
      perFault[state] = static_cast<double>(*ns) / kPages;
      discard();  // keep the user rings from filling (a full ring makes samples cheaper)
    }
    disabled.push_back(perFault[0]);
    counting.push_back(perFault[1] - perFault[0]);
    sampling.push_back(perFault[2] - perFault[1]);
  }
  if (agg_) {
    (void)agg_->untrack(self);
    std::vector<sys::bpf::ChunkCounts> drop;
    (void)agg_->drain(drop);
    // The calibration's own samples are not the workload's: start counting after them.
    if (auto st = agg_->stats()) lastAggSamples_ = st->tracked - st->noAddress;
  }
  discard();
  if (auto r = setAll(true, period_); !r && result) result = r.error();
  if (!result) return result;
  const double event = median(disabled), count = std::max(0.0, median(counting)), sample = median(sampling);
  TT_LOG(Debug) << options_.name << ": calibration per fault: " << event << " ns, + " << count
                << " ns counting, + " << sample << " ns per sample";
  if (sample <= 0 || event <= 0)
    return logicError("calibration of the sample cost measured " + std::to_string(sample) + " ns (noise)");
  calibratedCostNs_ = sample;
  eventCountNs_ = count;
  eventCostNs_ = event;
  return {};
}

SamplingSource::~SamplingSource() {
  agg_.reset();  // detach the BPF links before the event fds close
  events_.clear();
  leaders_.clear();
}

Result<void> SamplingSource::openEvents(uint32_t ringPages, bool forProgram) {
  auto opened = openEachEvent(ringPages, forProgram);
  // What opened before the failure (earlier events, earlier CPUs) is closed: their fds and ring
  // mmaps would stay for the daemon's lifetime, charged against perf_event_mlock_kb.
  if (!opened) closeEvents();
  return opened;
}

void SamplingSource::closeEvents() {
  skippedCpus_.clear();
  events_.clear();
  leaders_.clear();
  eventSampleType_.clear();
  eventKind_.clear();
}

Result<void> SamplingSource::openEachEvent(uint32_t ringPages, bool forProgram) {
  closeEvents();
  auto cpus = sys::perf::onlineCpus(sysfs_);
  if (!cpus) return cpus.error();
  using Handle = std::unique_ptr<sys::perf::PerfEvent>;
  const EventOpener<Handle> opener{
      [&](const perf_event_attr& attr, int cpu, int groupFd, bool isLeader) {
        return sys::perf::PerfEvent::open(attr, -1, cpu, isLeader ? 0 : ringPages, groupFd);
      },
      [](const Handle& h) { return h->fd(); }};
  for (size_t k = 0; k < options_.events.size(); ++k) {
    const AccessKind kind = k < options_.eventKinds.size() ? options_.eventKinds[k] : options_.defaultKind;
    const bool led = k < options_.groupLeaders.size() && options_.groupLeaders[k].has_value();
    perf_event_attr& configured = options_.events[k];  // PHYS_ADDR dropped here stays dropped on reopen
    configured.disabled = 1;
    perf_event_attr trimmed = forProgram ? aggregatedAttr(configured) : configured;
    perf_event_attr& a = forProgram ? trimmed : configured;
    std::optional<Error> physRefused;
    auto evs = openOnCpus<Handle>(a, led ? &*options_.groupLeaders[k] : nullptr, *cpus, opener, physRefused);
    if (!evs) return evs.error();
    if (physRefused) {
      physAddrDropped_ = physRefused->message();
      TT_LOG(Warn) << options_.name << ": PERF_SAMPLE_PHYS_ADDR refused, sampling without it: " << physAddrDropped_;
    }
    if (!evs->skipped.empty()) {
      std::string list;
      for (int cpu : evs->skipped) list += (list.empty() ? "" : ",") + std::to_string(cpu);
      skippedCpus_ += (skippedCpus_.empty() ? "" : "; ") + std::string("event ") + std::to_string(k) + " not on cpus " +
                      list + " (its PMU does not cover them)";
    }
    for (auto& ev : evs->opened) {
      if (ev.leader) leaders_.push_back(std::move(*ev.leader));
      events_.push_back(std::move(ev.event));
      eventSampleType_.push_back(a.sample_type);
      eventKind_.push_back(kind);
    }
  }
  return {};
}

void SamplingSource::open() {
  if (options_.events.empty()) {
    status_ = {false, options_.eventDescription};
    return;
  }
  std::string fallbackWhy;
  if (options_.aggregation == Aggregation::InKernel) {
    auto agg = sys::bpf::PerfSampleAgg::load(sys::bpf::kPidMaxLimit, options_.mapEntries);
    if (!agg) {
      fallbackWhy = "BPF unavailable (" + agg.error().message() + "), ";
    } else if (auto opened = openEvents(kControlRingPages, true); !opened) {
      status_ = {false, options_.eventDescription + ": " + opened.error().message()};
      return;
    } else {
      agg_ = std::move(*agg);
      for (size_t i = 0; i < events_.size(); ++i) {
        const bool recordsDataSrc = (eventSampleType_[i] & PERF_SAMPLE_DATA_SRC) != 0;
        if (auto a = agg_->attach(events_[i]->fd(), sampleKindCode(eventKind_[i]), recordsDataSrc); !a) {
          fallbackWhy = "BPF attach failed (" + a.error().message() + "), ";
          agg_.reset();
          break;
        }
      }
    }
  }
  if (!agg_) {
    if (auto opened = openEvents(options_.ringPages, false); !opened) {
      status_ = {false, options_.eventDescription + ": " + opened.error().message()};
      return;
    }
  }
  aggregation_ = agg_ ? Aggregation::InKernel : Aggregation::UserRing;
  // Members count only while their leader is enabled too.
  for (const auto& ev : leaders_) {
    if (auto e = ev->enable(); !e) {
      status_ = {false, options_.eventDescription + ": group leader: " + e.error().message()};
      agg_.reset();
      closeEvents();
      return;
    }
  }
  for (const auto& ev : events_) {
    if (auto e = ev->enable(); !e) {
      status_ = {false, options_.eventDescription + ": " + e.error().message()};
      agg_.reset();
      closeEvents();  // the leaders were enabled above: each would hold a PMU counter per CPU for nothing
      return;
    }
  }
  std::string costFrom = "configured";
  if (options_.calibrateSampleCost) {
    if (auto c = calibrate(); !c) {
      TT_LOG(Warn) << options_.name << ": " << c.error().message() << "; using the configured "
                   << options_.sampleCostNs << " ns per sample";
      costFrom = "configured, calibration failed";
    } else {
      costFrom = "calibrated";
    }
  }
  const uint64_t next = controller_.setLimits(periodLimits());
  counters_.sampleCostNs = controller_.limits().sampleCostNs;
  if (next != period_) {
    if (auto r = changePeriod(next); !r) {
      TT_LOG(Warn) << options_.name << ": " << r.error().message();
    }
  }
  controller_.resetPeriod(period_);
  std::ostringstream d;
  d << options_.eventDescription << ", " << events_.size() << " per-CPU events, period " << period_;
  if (options_.minPeriod < options_.maxPeriod) {
    d << " (adaptive " << controller_.lowestPeriod() << ".." << options_.maxPeriod << ")";
    if (calibratedCostNs_ > 0 && controller_.lowestPeriod() >= options_.maxPeriod)
      d << " (counting every fault alone costs a faulting thread over half the budget)";
  }
  d << ", " << static_cast<uint64_t>(counters_.sampleCostNs) << " ns per sample";
  if (calibratedCostNs_ > 0)
    d << " + " << static_cast<uint64_t>(eventCountNs_) << " ns per event counted, on a " << static_cast<uint64_t>(eventCostNs_)
      << " ns fault";
  d << " (" << costFrom << "), " << fallbackWhy
    << (agg_ ? "in-kernel aggregation (BPF)" : "user-space ring reader");
  const bool recordsDataSrc = std::any_of(eventSampleType_.begin(), eventSampleType_.end(),
                                          [](uint64_t t) { return (t & PERF_SAMPLE_DATA_SRC) != 0; });
  if (agg_ && recordsDataSrc) {
    // Where the tier comes from on this path: the kernel's sample, or nowhere (the reason).
    if (agg_->dataSrcReader() != sys::bpf::DataSrcReader::None)
      d << ", tier per sample from data_src (" << sys::bpf::toString(agg_->dataSrcReader()) << ")";
    else
      d << ", no tier: data_src readers did not load (" << agg_->dataSrcReaderError() << ")";
  }
  if (!physAddrDropped_.empty()) d << ", no physical addresses (PERF_SAMPLE_PHYS_ADDR refused: " << physAddrDropped_ << ")";
  if (!skippedCpus_.empty()) d << ", " << skippedCpus_;
  status_ = {true, d.str()};
  lastCounts_.assign(events_.size(), 0);
  uint64_t events = 0, overflows = 0;
  takeCounts(events, overflows);  // the counts so far (calibration included) are not an epoch's
  lastWallNs_ = sys::perf::monotonicNs();
}

void SamplingSource::takeCounts(uint64_t& events, uint64_t& overflows) {
  events = 0;
  for (size_t i = 0; i < events_.size(); ++i) {
    auto c = events_[i]->count();
    if (!c) continue;
    events += *c - std::min(*c, lastCounts_[i]);
    lastCounts_[i] = *c;
  }
  overflows = period_ ? events / period_ : events;
}

Result<void> SamplingSource::addProcess(pid_t tgid) {
  ring_.track(tgid);
  if (agg_) return agg_->track(tgid);
  return {};
}

Result<void> SamplingSource::removeProcess(pid_t tgid) {
  ring_.untrack(tgid);
  if (agg_) return agg_->untrack(tgid);
  return {};
}

std::optional<Error> SamplingSource::drainSamples(std::vector<EvidenceBlock>& blocks) {
  std::optional<Error> drainError;
  if (agg_) {
    chunks_.clear();
    auto n = agg_->drain(chunks_);
    if (!n) drainError = n.error();  // blocks drained before the error are deleted: keep them
    // Blocks are unique per (tgid, kind, chunk): they go out as they are, weighted by the period
    // the samples were taken at.
    counters_.evidence += appendChunkBlocks(chunks_, options_.defaultKind, period_, blocks);
    releaseIfOversized(chunks_, 1024);  // up to mapEntries blocks of 528 bytes
  }
  // The ring path's samples, and on the in-kernel path the throttle and lost records the kernel
  // still writes to each event's small control ring (the program consumes every sample): the
  // period controller needs them on both paths.
  for (size_t i = 0; i < events_.size(); ++i) {
    const uint64_t st = eventSampleType_[i];
    const AccessKind kind = eventKind_[i];
    events_[i]->drain([&](std::span<const uint8_t> r) { ring_.handle(r, st, kind, period_, counters_); });
  }
  return drainError;
}

Result<void> SamplingSource::collect(EvidenceBatch& out) {
  if (!status_.available) return {};
  const uint64_t cpu0 = sys::perf::threadCpuNs();
  // What was drained before a live period change, at the period it was sampled at.
  out.blocks.insert(out.blocks.end(), std::make_move_iterator(drainedBeforePeriodChange_.begin()),
                    std::make_move_iterator(drainedBeforePeriodChange_.end()));
  drainedBeforePeriodChange_.clear();
  const std::optional<Error> drainError = drainSamples(out.blocks);
  if (agg_) {
    // Samples as the program saw them: counts in the blocks saturate, the program's stats do not.
    if (auto st = agg_->stats()) {
      // Per-CPU counters read one after the other: `seen` can lag by a few; never count backwards.
      const uint64_t seen = st->tracked - std::min(st->tracked, st->noAddress);
      if (seen >= lastAggSamples_) {
        counters_.samples += seen - lastAggSamples_;
        lastAggSamples_ = seen;
      }
      // Samples the program could not count (its map full) are lost samples as much as a full
      // ring's are.
      if (st->mapFull >= lastAggMapFull_) {
        counters_.lost += st->mapFull - lastAggMapFull_;
        lastAggMapFull_ = st->mapFull;
      }
    }
  }
  counters_.evidence += ring_.flush(out.records);
  // BPF run time is not added: the calibrated per-sample cost already contains it (the program
  // runs in the faulting thread), and run-time stats are normally off.
  EpochCost epoch;
  takeCounts(epoch.events, epoch.overflows);
  epoch.throttled = counters_.throttled != throttledAtLastEpoch_;
  throttledAtLastEpoch_ = counters_.throttled;
  epoch.lost = counters_.lost - std::min(counters_.lost, lostAtLastEpoch_);
  lostAtLastEpoch_ = counters_.lost;
  epoch.daemonCpuNs = sys::perf::threadCpuNs() - cpu0;
  const uint64_t now = sys::perf::monotonicNs();
  epoch.wallNs = now - lastWallNs_;
  lastWallNs_ = now;
  adaptPeriod(epoch);
  if (drainError) return *drainError;
  return {};
}

uint64_t SamplingSource::bpfRunTimeNs() const {
  if (!agg_) return 0;
  auto rt = agg_->runTimeNsAndCount();
  return rt ? rt->first : 0;
}

void SamplingSource::adaptPeriod(const EpochCost& epoch) {
  if (epoch.wallNs == 0) return;
  const uint64_t next = controller_.update(epoch);
  counters_.costPercent = controller_.lastCostPercent();
  if (next == period_) return;
  // PERF_EVENT_IOC_PERIOD is synchronous (an IPI to each event's CPU) and restarts the period
  // count, so the new period holds from the next event on: no epoch of lag beyond this one.
  const uint64_t before = period_;
  if (auto r = changePeriod(next); !r) {
    TT_LOG(Warn) << options_.name << ": " << r.error().message();
    controller_.resetPeriod(period_);
    return;
  }
  TT_LOG(Debug) << options_.name << ": sample period " << before << " -> " << next << " (cost "
                << counters_.costPercent << "% of a CPU, " << epoch.overflows << " samples)";
}

Result<void> SamplingSource::changePeriod(uint64_t next) {
  // The events of an unavailable source are closed: only the recorded period changes.
  for (const auto& ev : events_)
    if (auto r = ev->setPeriod(next); !r) return r.error();
  period_ = next;
  counters_.period = next;
  return {};
}

Result<void> SamplingSource::setSamplingLimits(const SamplingLimits& limits) {
  if (limits.minPeriod == 0 || limits.minPeriod > limits.maxPeriod)
    return logicError(options_.name + ": sample period bounds [" + std::to_string(limits.minPeriod) + ", " +
                      std::to_string(limits.maxPeriod) + "] are empty");
  options_.cpuBudgetPercent = limits.cpuBudgetPercent;
  options_.minPeriod = limits.minPeriod;
  options_.maxPeriod = limits.maxPeriod;
  options_.sampleCostNs = limits.sampleCostNs;  // in use unless calibrated
  const uint64_t next = controller_.setLimits(periodLimits());
  counters_.sampleCostNs = controller_.limits().sampleCostNs;
  if (next == period_) return {};
  // Every sample carries the epoch's one period as its weight: what was sampled at the old period
  // is drained now, weighted by it, and handed out at the next collect.
  if (status_.available) {
    if (auto e = drainSamples(drainedBeforePeriodChange_)) {
      TT_LOG(Warn) << options_.name << ": draining before a period change: " << e->message();
    }
  }
  const uint64_t before = period_;
  if (auto r = changePeriod(next); !r) {
    controller_.resetPeriod(period_);
    return r.error();
  }
  TT_LOG(Info) << options_.name << ": sample period " << before << " -> " << next << " (live config)";
  return {};
}

}  // namespace tt::sources
