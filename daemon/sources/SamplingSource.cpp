#include "sources/SamplingSource.h"

#include <algorithm>
#include <sstream>
#include <tuple>

#include "core/Log.h"
#include "sources/PerfDecode.h"

namespace tt::sources {

size_t appendChunkEvidence(std::vector<sys::bpf::ChunkCounts>& chunks, AccessKind kind,
                           std::vector<AccessEvidence>& out) {
  std::sort(chunks.begin(), chunks.end(),
            [](const auto& a, const auto& b) { return std::tie(a.tgid, a.base) < std::tie(b.tgid, b.base); });
  const size_t before = out.size();
  // Exact reservation: growing by doubling would hold up to twice the epoch's evidence.
  size_t pages = 0;
  for (const auto& c : chunks)
    pages += static_cast<size_t>(std::count_if(c.counts.begin(), c.counts.end(), [](uint8_t n) { return n != 0; }));
  out.reserve(before + pages);
  for (const auto& c : chunks) {
    for (uint32_t i = 0; i < sys::bpf::kChunkPages; ++i) {
      if (c.counts[i] == 0) continue;
      AccessEvidence& e = out.emplace_back();
      e.tgid = static_cast<pid_t>(c.tgid);
      e.page = c.base + uint64_t{i} * kBasePageSize;
      e.weight = c.counts[i];
      e.kind = kind;
    }
  }
  return out.size() - before;
}

SamplingSource::SamplingSource(SamplingOptions options, sys::Fs sysfs)
    : options_(std::move(options)), sysfs_(std::move(sysfs)) {
  period_ = options_.events.empty() ? 1 : options_.events.front().sample_period;
  counters_.period = period_;
}

SamplingSource::~SamplingSource() {
  agg_.reset();  // detach the BPF links before the event fds close
  events_.clear();
}

Result<void> SamplingSource::openEvents(uint32_t ringPages) {
  events_.clear();
  eventSampleType_.clear();
  auto cpus = sys::perf::onlineCpus(sysfs_);
  if (!cpus) return cpus.error();
  for (const auto& attr : options_.events) {
    for (int cpu : *cpus) {
      perf_event_attr a = attr;
      a.disabled = 1;
      auto ev = sys::perf::PerfEvent::open(a, -1, cpu, ringPages);
      if (!ev) return ev.error();
      events_.push_back(std::move(*ev));
      eventSampleType_.push_back(a.sample_type);
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
    auto pidMax = sys::bpf::readPidMax("/proc");
    auto agg = pidMax ? sys::bpf::PerfSampleAgg::load(*pidMax, options_.mapEntries)
                      : Result<std::unique_ptr<sys::bpf::PerfSampleAgg>>(pidMax.error());
    if (!agg) {
      fallbackWhy = "BPF unavailable (" + agg.error().message() + "), ";
    } else if (auto opened = openEvents(0); !opened) {
      status_ = {false, options_.eventDescription + ": " + opened.error().message()};
      return;
    } else {
      agg_ = std::move(*agg);
      for (const auto& ev : events_) {
        if (auto a = agg_->attach(ev->fd()); !a) {
          fallbackWhy = "BPF attach failed (" + a.error().message() + "), ";
          agg_.reset();
          break;
        }
      }
    }
  }
  if (!agg_) {
    if (auto opened = openEvents(options_.ringPages); !opened) {
      status_ = {false, options_.eventDescription + ": " + opened.error().message()};
      return;
    }
  }
  aggregation_ = agg_ ? Aggregation::InKernel : Aggregation::UserRing;
  for (const auto& ev : events_) {
    if (auto e = ev->enable(); !e) {
      status_ = {false, options_.eventDescription + ": " + e.error().message()};
      events_.clear();
      agg_.reset();
      return;
    }
  }
  std::ostringstream d;
  d << options_.eventDescription << ", " << events_.size() << " per-CPU events, period " << period_ << ", "
    << fallbackWhy << (agg_ ? "in-kernel aggregation (BPF)" : "user-space ring reader");
  status_ = {true, d.str()};
  lastWallNs_ = sys::perf::monotonicNs();
}

Result<void> SamplingSource::addProcess(pid_t tgid) {
  tracked_.insert(tgid);
  if (agg_) return agg_->track(tgid);
  return {};
}

Result<void> SamplingSource::removeProcess(pid_t tgid) {
  tracked_.erase(tgid);
  if (agg_) return agg_->untrack(tgid);
  return {};
}

void SamplingSource::handleRecord(std::span<const uint8_t> record, uint64_t sampleType) {
  auto rec = decodeRecord(record, sampleType);
  if (!rec) {
    TT_LOG(Debug) << options_.name << ": undecodable perf record: " << rec.error().message();
    return;
  }
  switch (rec->type) {
    case RecordType::Sample: {
      const PerfSample& s = rec->sample;
      if (s.addr == 0 || !tracked_.contains(static_cast<pid_t>(s.pid))) return;
      ++counters_.samples;
      const bool hasSrc = (sampleType & PERF_SAMPLE_DATA_SRC) != 0;
      const AccessKind kind = hasSrc ? accessKindFromDataSrc(s.dataSrc) : options_.defaultKind;
      const ServedBy by = hasSrc ? servedByFromDataSrc(s.dataSrc) : ServedBy::Unknown;
      const auto latency = static_cast<uint16_t>(std::min<uint64_t>(s.weight, UINT16_MAX));
      pending_.add(static_cast<pid_t>(s.pid), s.addr, kind, 1, by, hasSrc ? latency : 0);
      return;
    }
    case RecordType::Lost: counters_.lost += rec->lost; return;
    case RecordType::Throttle: ++counters_.throttled; return;
    case RecordType::Unthrottle:
    case RecordType::Other: return;
  }
}

Result<void> SamplingSource::collect(std::vector<AccessEvidence>& out) {
  if (!status_.available) return {};
  const uint64_t cpu0 = sys::perf::threadCpuNs();
  if (agg_) {
    chunks_.clear();
    auto n = agg_->drain(chunks_);
    if (!n) return n.error();
    // Blocks are unique per (tgid, chunk) and the kind is the event's: no aggregation needed,
    // the pages go straight to `out`.
    counters_.evidence += appendChunkEvidence(chunks_, options_.defaultKind, out);
    // Do not keep the buffer of one exceptional epoch (up to mapEntries blocks of 528 bytes).
    if (chunks_.capacity() > 1024 && chunks_.capacity() > 4 * chunks_.size()) {
      chunks_.clear();
      chunks_.shrink_to_fit();
    }
    // Samples as the program saw them: counts in the blocks saturate, the program's stats do not.
    if (auto st = agg_->stats()) {
      const uint64_t seen = st->tracked - st->noAddress;
      counters_.samples += seen - lastAggSamples_;
      lastAggSamples_ = seen;
    }
  } else {
    for (size_t i = 0; i < events_.size(); ++i) {
      const uint64_t st = eventSampleType_[i];
      events_[i]->drain([&](std::span<const uint8_t> r) { handleRecord(r, st); });
    }
  }
  counters_.evidence += pending_.flush(out);
  const uint64_t costNs = sys::perf::threadCpuNs() - cpu0;
  const uint64_t now = sys::perf::monotonicNs();
  const uint64_t bpfNow = bpfRunTimeNs();
  adaptPeriod(costNs + (bpfNow - lastBpfNs_), now - lastWallNs_);
  lastBpfNs_ = bpfNow;
  lastWallNs_ = now;
  return {};
}

uint64_t SamplingSource::bpfRunTimeNs() const {
  if (!agg_) return 0;
  auto rt = agg_->runTimeNsAndCount();
  return rt ? rt->first : 0;
}

void SamplingSource::adaptPeriod(uint64_t costNs, uint64_t wallNs) {
  if (wallNs == 0) return;
  const double percent = 100.0 * static_cast<double>(costNs) / static_cast<double>(wallNs);
  counters_.costPercent = percent;
  if (options_.minPeriod >= options_.maxPeriod) return;
  uint64_t next = period_;
  if (percent > options_.cpuBudgetPercent)
    next = std::min(options_.maxPeriod, period_ * 2);
  else if (percent < options_.cpuBudgetPercent / 4)
    next = std::max(options_.minPeriod, period_ / 2);
  if (next == period_) return;
  const uint64_t before = period_;
  if (auto r = changePeriod(next); !r) {
    TT_LOG(Warn) << options_.name << ": " << r.error().message();
    return;
  }
  TT_LOG(Debug) << options_.name << ": sample period " << before << " -> " << next << " (cost " << percent << "% of a CPU)";
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
  const uint64_t next = std::clamp(period_, limits.minPeriod, limits.maxPeriod);
  if (next == period_) return {};
  const uint64_t before = period_;
  if (auto r = changePeriod(next); !r) return r.error();
  TT_LOG(Info) << options_.name << ": sample period " << before << " -> " << next << " (live config)";
  return {};
}

}  // namespace tt::sources
