#include "heat/HeatModel.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <numbers>
#include <string_view>

#include "core/Log.h"

namespace tt::heat {

std::vector<std::string> heatModelKeysChanged(const tensortier::v1::PolicyConfig& before,
                                              const tensortier::v1::PolicyConfig& after) {
  // Every key HeatModel and its parts read from the config; a key added there belongs here.
  static constexpr std::string_view kHeatKeys[] = {
      "heat_half_life_ms",   "heat_half_life_steps", "feature_learning_rate", "feature_weight_floor",
      "lookahead_step_fraction", "max_tracked_pages", "period_bin_ms",     "period_history_bins",
      "period_max_ms",       "period_min_confidence", "period_min_ms",      "schedule_buckets",
      "schedule_learning_rate", "step_period_hint_ms", "chunk_pages",      "initial_migration_bandwidth"};
  std::vector<std::string> changed;
  const auto* descriptor = tensortier::v1::PolicyConfig::descriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const auto* field = descriptor->field(i);
    if (std::find(std::begin(kHeatKeys), std::end(kHeatKeys), field->name()) == std::end(kHeatKeys)) continue;
    // The values in effect (an unset key has its default), not whether the files spelled them.
    const auto* r = before.GetReflection();
    bool differs = false;
    switch (field->cpp_type()) {
      case google::protobuf::FieldDescriptor::CPPTYPE_UINT32:
        differs = r->GetUInt32(before, field) != r->GetUInt32(after, field);
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_UINT64:
        differs = r->GetUInt64(before, field) != r->GetUInt64(after, field);
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_DOUBLE:
        differs = r->GetDouble(before, field) != r->GetDouble(after, field);
        break;
      default:  // no heat key has another type today: a key set in one and not the other differs
        differs = r->HasField(before, field) != r->HasField(after, field);
        break;
    }
    if (differs) changed.push_back(field->name());
  }
  return changed;
}
namespace {

constexpr double kLn2 = 0.69314718055994530942;

uint64_t chunkKey(pid_t tgid, uint64_t page) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(tgid)) << 42) | ((page / kBlockBytes) & ((1ULL << 42) - 1));
}
pid_t tgidOfKey(uint64_t key) { return static_cast<pid_t>(key >> 42); }
uint64_t chunkBaseOfKey(uint64_t key) { return (key & ((1ULL << 42) - 1)) * kBlockBytes; }

// Which region kinds a training phase touches, for processes that send phase marks but no samples
// reach us. An unknown or missing phase label touches everything.
bool kindActiveInPhase(RegionKind kind, std::string_view phase) {
  auto is = [&](std::initializer_list<std::string_view> names) {
    return std::any_of(names.begin(), names.end(), [&](std::string_view n) { return phase == n; });
  };
  const bool forward = is({"forward", "fwd", "FORWARD", "Forward"});
  const bool backward = is({"backward", "bwd", "BACKWARD", "Backward"});
  const bool optimizer = is({"optimizer", "optim", "update", "OPTIMIZER", "Optimizer"});
  if (!forward && !backward && !optimizer) return true;
  switch (kind) {
    case RegionKind::Weight: return true;
    case RegionKind::Activation: return forward || backward;
    case RegionKind::Workspace: return forward || backward;
    case RegionKind::Gradient: return backward || optimizer;
    case RegionKind::OptimizerState: return optimizer;
    case RegionKind::Other: return true;
  }
  return true;
}

}  // namespace

const char* featureName(size_t feature) {
  switch (feature) {
    case kFrequency: return "frequency";
    case kRecency: return "recency";
    case kSize: return "size";
    case kReuse: return "reuse";
    default: return "?";
  }
}

namespace {

SamplePeriodParams samplePeriodParamsOf(const tensortier::v1::PolicyConfig& config) {
  SamplePeriodParams p;
  p.binNs = uint64_t{config.period_bin_ms()} * 1'000'000;
  p.historyBins = config.period_history_bins();
  p.minPeriodNs = uint64_t{config.period_min_ms()} * 1'000'000;
  p.maxPeriodNs = uint64_t{config.period_max_ms()} * 1'000'000;
  p.minConfidence = config.period_min_confidence();
  return p;
}

uint64_t halfLifeNsOf(const tensortier::v1::PolicyConfig& config) {
  return std::max<uint64_t>(1, uint64_t{config.heat_half_life_ms()} * 1'000'000);
}

uint64_t chunkBytesOf(const tensortier::v1::PolicyConfig& config) {
  return uint64_t{std::max<uint32_t>(1, config.chunk_pages())} * kBasePageSize;
}

uint32_t bucketsOf(const tensortier::v1::PolicyConfig& config) { return std::max<uint32_t>(1, config.schedule_buckets()); }

// A schedule of accesses per bucket, resampled to `to` buckets of the same step: each new bucket
// gets the accesses of the old buckets in proportion to the time they share, so the accesses of
// the whole step are kept. Empty stays empty (a unit without a prior schedule).
void resampleSchedule(std::vector<double>& v, uint32_t to) {
  if (v.empty() || v.size() == to) return;
  const size_t from = v.size();
  std::vector<double> out(to, 0);
  // Bucket i of `from` covers [i * to, (i + 1) * to) of a step of from * to units; bucket j of `to`
  // covers [j * from, (j + 1) * from).
  for (size_t i = 0; i < from; ++i) {
    const uint64_t lo = i * to, hi = (i + 1) * to;
    for (size_t j = lo / from; j < to && j * from < hi; ++j) {
      const uint64_t overlap = std::min<uint64_t>(hi, (j + 1) * from) - std::max<uint64_t>(lo, j * from);
      out[j] += v[i] * static_cast<double>(overlap) / static_cast<double>(to);
    }
  }
  v = std::move(out);
}

}  // namespace

std::vector<std::string> heatModelChangeNotes(const tensortier::v1::PolicyConfig& before,
                                              const tensortier::v1::PolicyConfig& after) {
  std::vector<std::string> notes;
  for (const std::string& key : heatModelKeysChanged(before, after)) {
    std::string note = "policy." + key + ": live from the next epoch";
    if (key == "schedule_buckets") note += " (step schedules resampled, not relearned)";
    else if (key == "chunk_pages") note += " (chunks of unregistered pages regrouped, their heat kept)";
    else if (key == "period_bin_ms" || key == "period_history_bins")
      note += " (the sample-stream period history restarts; learned periods stay until re-estimated)";
    else if (key == "initial_migration_bandwidth")
      note += " (until the engine has timed its moves; no effect after)";
    notes.push_back(std::move(note));
  }
  return notes;
}

HeatModel::HeatModel(const tensortier::v1::PolicyConfig& config)
    : config_(config),
      sampleParams_(samplePeriodParamsOf(config)),
      halfLifeNs_(halfLifeNsOf(config)),
      chunkBytes_(chunkBytesOf(config)),
      buckets_(bucketsOf(config)),
      promoteBytesPerNs_(static_cast<double>(config.initial_migration_bandwidth()) / 1e9),
      demoteBytesPerNs_(promoteBytesPerNs_) {
  weights_.fill(1.0 / kFeatureCount);
  snapshot_.weights = weights_;
}

void HeatModel::reconfigure(const tensortier::v1::PolicyConfig& config) {
  // A reload that changes only the planner's keys (the common case) leaves the model alone.
  if (heatModelKeysChanged(config_, config).empty()) {
    config_ = config;
    return;
  }
  // Heat decays lazily, by the half-life in force when it is next touched: everything is first
  // brought to the model's time under the half-life it gathered with, so that a new one applies
  // from now on, not back to each page's last access.
  const uint64_t now = lastEpochNs_;
  for (auto& [tgid, map] : units_)
    for (auto& [start, u] : map) decayUnit(u, now);
  for (auto& [key, chunk] : pageChunks_) decayChunk(chunk, now, halfLifeOf(tgidOfKey(key)));
  // A clock that came from the hint is the hint's no longer when it is cleared: unknown until the
  // marks or the sample stream give one (a new non-zero hint replaces it at the next epoch).
  if (config.step_period_hint_ms() == 0 && config_.step_period_hint_ms() != 0)
    for (auto& [tgid, proc] : processes_)
      if (proc.clock.source == PeriodSource::Hint) proc.clock = StepClock{};
  // The other keys read where they are used (max_tracked_pages, the learning rates and floor,
  // lookahead_step_fraction) take effect through config_ alone.
  config_ = config;
  halfLifeNs_ = halfLifeNsOf(config);
  for (auto& [tgid, proc] : processes_) proc.halfLifeNs = halfLifeFor(proc);
  if (!ratesMeasured_) {
    promoteBytesPerNs_ = static_cast<double>(config.initial_migration_bandwidth()) / 1e9;
    demoteBytesPerNs_ = promoteBytesPerNs_;
  }
  sampleParams_ = samplePeriodParamsOf(config);
  for (auto& [tgid, proc] : processes_) proc.samples.setParams(sampleParams_);
  if (const uint32_t buckets = bucketsOf(config); buckets != buckets_) resampleSchedules(buckets);
  if (const uint64_t chunkBytes = chunkBytesOf(config); chunkBytes != chunkBytes_) {
    chunkBytes_ = chunkBytes;
    for (auto& [tgid, map] : units_) regroupChunks(tgid, map);
  }
}

void HeatModel::resampleSchedules(uint32_t buckets) {
  buckets_ = buckets;
  for (auto& [tgid, map] : units_)
    for (auto& [start, u] : map)
      for (auto* v : {&u.schedule, &u.stepAccum, &u.priorSchedule, &u.priorStepAccum}) resampleSchedule(*v, buckets);
}

void HeatModel::regroupChunks(pid_t tgid, UnitMap& map) {
  std::vector<Unit> old;
  uint64_t t = lastEpochNs_;  // reconfigure brought everything here (later times: brought to them)
  for (auto it = map.begin(); it != map.end();) {
    if (it->second.regionId != 0) {
      ++it;
      continue;
    }
    t = std::max({t, it->second.heatNs, it->second.priorHeatNs});  // none later after reconfigure's decay
    old.push_back(std::move(it->second));
    it = map.erase(it);
  }
  if (old.empty()) return;
  // `map` now holds the process's regions only: each new chunk is its aligned chunk cut back to the
  // regions on either side, as unitFor makes it.
  const double gapNs = steadyGapNs(process(tgid));
  UnitMap fresh;
  for (Unit& u : old) {
    decayUnit(u, t);
    const uint64_t end = u.start + u.length;
    // A piece's share of the unit's figures is its share of the unit's page heat: a 2 MiB chunk
    // cut into 64 KiB ones gives its heat to the pieces its hot pages are in. Without page heat
    // (forgotten over max_tracked_pages, or decayed to nothing) nothing says which pages were in
    // use, and a unit per piece could be millions: the first piece takes it all.
    const double unitPageHeat = pageHeatIn(tgid, u.start, end, t);
    // Only a run still going is carried over: one that ended long ago would date the new unit's.
    const bool liveRun = u.runAccesses > 0 && static_cast<double>(t) <= static_cast<double>(u.runLastNs) + gapNs;
    for (uint64_t at = u.start; at < end;) {
      const uint64_t aligned = at - at % chunkBytes_;
      const uint64_t pieceEnd = std::min(end, aligned + chunkBytes_);
      uint64_t lo = aligned, hi = aligned + chunkBytes_;
      auto next = map.upper_bound(at);
      if (next != map.end()) hi = std::min(hi, next->second.start);
      if (next != map.begin()) lo = std::max(lo, std::prev(next)->second.start + std::prev(next)->second.length);
      // Totals split by the piece's share; per-page figures are turned into totals here (times
      // the old unit's pages and the share) and divided by the new unit's pages below.
      const double share = unitPageHeat > 0 ? pageHeatIn(tgid, at, pieceEnd, t) / unitPageHeat : (at == u.start ? 1.0 : 0.0);
      if (!(share > 0)) {  // no evidence there: no unit until some comes (as unitFor makes them)
        at = pieceEnd;
        continue;
      }
      auto [it, added] = fresh.try_emplace(lo);
      Unit& n = it->second;
      if (added) {
        n.tgid = tgid;
        n.start = lo;
        n.length = hi - lo;
        n.heatNs = n.priorHeatNs = t;
        n.schedule.assign(buckets_, 0);
        n.stepAccum.assign(buckets_, 0);
      }
      const double pages = static_cast<double>(u.pages()) * share;
      n.heat += u.heat * share;
      n.observations += u.observations * share;
      n.epochAccesses += u.epochAccesses * share;
      n.priorHeat += u.priorHeat * share;
      n.lastAccessNs = std::max(n.lastAccessNs, u.lastAccessNs);
      n.accessed = n.accessed || u.accessed;
      n.scheduleValid = n.scheduleValid || u.scheduleValid;
      n.priorScheduleValid = n.priorScheduleValid || u.priorScheduleValid;
      auto addPerPage = [pages, this](std::vector<double>& to, const std::vector<double>& from) {
        if (from.empty()) return;
        if (to.empty()) to.assign(buckets_, 0);
        for (uint32_t b = 0; b < buckets_; ++b) to[b] += from[b] * pages;
      };
      addPerPage(n.schedule, u.schedule);
      addPerPage(n.stepAccum, u.stepAccum);
      addPerPage(n.priorSchedule, u.priorSchedule);
      addPerPage(n.priorStepAccum, u.priorStepAccum);
      if (liveRun) {
        // The run is as old as its oldest part: the pages were in steady use that long.
        n.runStartNs = n.runAccesses > 0 ? std::min(n.runStartNs, u.runStartNs) : u.runStartNs;
        n.runLastNs = std::max(n.runLastNs, u.runLastNs);
        n.runAccesses += u.runAccesses * share;
      }
      at = pieceEnd;
    }
  }
  for (auto& [start, n] : fresh) {
    const double pages = static_cast<double>(n.pages());
    for (auto* v : {&n.schedule, &n.stepAccum, &n.priorSchedule, &n.priorStepAccum})
      for (double& x : *v) x /= pages;
    map.emplace(start, std::move(n));
  }
}

double HeatModel::decayFactor(uint64_t fromNs, uint64_t toNs, uint64_t halfLifeNs) {
  if (toNs <= fromNs) return 1;
  return std::exp(-kLn2 * static_cast<double>(toNs - fromNs) / static_cast<double>(std::max<uint64_t>(1, halfLifeNs)));
}

uint64_t HeatModel::halfLifeFor(const Process& proc) const {
  if (proc.clock.known() && config_.heat_half_life_steps() > 0)
    return std::clamp<uint64_t>(static_cast<uint64_t>(config_.heat_half_life_steps() * static_cast<double>(proc.clock.periodNs)),
                                1, halfLifeNs_);
  return halfLifeNs_;
}

uint64_t HeatModel::halfLifeOf(pid_t tgid) const {
  auto it = processes_.find(tgid);
  return it == processes_.end() ? halfLifeNs_ : it->second.halfLifeNs;
}

double HeatModel::steadyGapNs(const Process& proc) const {
  return kSteadyGapSteps * std::max(stepNsOf(proc), static_cast<double>(planIntervalNs_));
}

double HeatModel::heatSpanNs(const Process& proc) {
  return static_cast<double>(proc.halfLifeNs) / std::numbers::ln2;
}

double HeatModel::stepNsOf(const Process& proc) {
  return proc.clock.known() ? static_cast<double>(proc.clock.periodNs) : heatSpanNs(proc);
}

HeatModel::Process& HeatModel::process(pid_t tgid) {
  auto it = processes_.find(tgid);
  if (it == processes_.end()) it = processes_.emplace(tgid, Process(sampleParams_, halfLifeNs_)).first;
  return it->second;
}

Result<void> HeatModel::addRegion(const RegionInfo& region) {
  if (region.id == 0) return logicError("add region: id 0 is reserved");
  if (region.start % kBasePageSize != 0 || region.length == 0 || region.length % kBasePageSize != 0)
    return logicError("add region " + std::to_string(region.id) + ": start and length must be non-zero page multiples");
  if (region.start + region.length < region.start) return logicError("add region: range wraps around");
  if (regionIndex_.count(region.id) != 0)
    return logicError("add region " + std::to_string(region.id) + ": id already registered");
  UnitMap& map = units_[region.tgid];
  const uint64_t end = region.start + region.length;
  for (auto it = map.lower_bound(0); it != map.end(); ++it) {
    const Unit& u = it->second;
    if (u.start >= end) break;
    if (u.regionId != 0 && u.start + u.length > region.start)
      return logicError("add region " + std::to_string(region.id) + ": overlaps region " + std::to_string(u.regionId));
  }
  // Chunks of unregistered pages inside the new region give way to it.
  for (auto it = map.begin(); it != map.end();) {
    const Unit& u = it->second;
    if (u.regionId == 0 && u.start < end && u.start + u.length > region.start) it = map.erase(it);
    else ++it;
  }
  Unit unit;
  unit.tgid = region.tgid;
  unit.start = region.start;
  unit.length = region.length;
  unit.regionId = region.id;
  unit.kind = region.kind;
  unit.schedule.assign(buckets_, 0);
  unit.stepAccum.assign(buckets_, 0);
  map.emplace(region.start, std::move(unit));
  regionIndex_[region.id] = {region.tgid, region.start};
  process(region.tgid);
  return {};
}

void HeatModel::removeRegion(uint64_t regionId) {
  auto it = regionIndex_.find(regionId);
  if (it == regionIndex_.end()) return;
  const pid_t tgid = it->second.first;
  auto m = units_.find(tgid);
  if (m != units_.end()) {
    if (auto u = m->second.find(it->second.second); u != m->second.end()) {
      forgetPageHeat(tgid, u->second.start, u->second.start + u->second.length);
      m->second.erase(u);
    }
  }
  regionIndex_.erase(it);
}

// The per-page heat of a tensor that is gone says nothing about what the allocator puts there
// next: a region registered at the same addresses would take its block weights from it.
void HeatModel::forgetPageHeat(pid_t tgid, uint64_t start, uint64_t end) {
  for (uint64_t base = start & ~(kBlockBytes - 1); base < end; base += kBlockBytes) {
    auto c = pageChunks_.find(chunkKey(tgid, base));
    if (c == pageChunks_.end()) continue;
    const uint64_t from = std::max(start, base), to = std::min(end, base + kBlockBytes);
    if (from == base && to == base + kBlockBytes) {
      pageChunks_.erase(c);
      continue;
    }
    PageChunk& chunk = c->second;
    for (uint64_t page = from; page < to; page += kBasePageSize) chunk.mantissa[(page - base) / kBasePageSize] = 0;
    chunk.pages = static_cast<uint32_t>(std::count_if(chunk.mantissa.begin(), chunk.mantissa.end(), [](uint16_t v) { return v != 0; }));
    chunk.top = *std::max_element(chunk.mantissa.begin(), chunk.mantissa.end());
    if (chunk.pages == 0) pageChunks_.erase(c);
  }
}

void HeatModel::removeProcess(pid_t tgid) {
  if (auto m = units_.find(tgid); m != units_.end()) {
    for (const auto& [start, u] : m->second)
      if (u.regionId != 0) regionIndex_.erase(u.regionId);
    units_.erase(m);
  }
  processes_.erase(tgid);
  std::erase_if(pageChunks_, [&](const auto& kv) { return tgidOfKey(kv.first) == tgid; });
}

HeatModel::Unit* HeatModel::unitFor(pid_t tgid, uint64_t page) {
  UnitMap& map = units_[tgid];
  auto next = map.upper_bound(page);
  uint64_t lowest = 0;
  if (next != map.begin()) {
    auto prev = std::prev(next);
    if (page < prev->second.start + prev->second.length) return &prev->second;
    lowest = prev->second.start + prev->second.length;
  }
  uint64_t start = page - page % chunkBytes_;
  uint64_t end = start + chunkBytes_;
  start = std::max(start, lowest);
  if (next != map.end()) end = std::min(end, next->second.start);
  Unit unit;
  unit.tgid = tgid;
  unit.start = start;
  unit.length = end - start;
  unit.schedule.assign(buckets_, 0);
  unit.stepAccum.assign(buckets_, 0);
  return &map.emplace(start, std::move(unit)).first->second;
}

void HeatModel::decayUnit(Unit& unit, uint64_t nowNs) {
  const uint64_t halfLife = process(unit.tgid).halfLifeNs;
  const double decay = decayFactor(unit.heatNs, nowNs, halfLife);
  unit.heat *= decay;
  unit.observations *= decay;
  unit.heatNs = std::max(unit.heatNs, nowNs);
  unit.priorHeat *= decayFactor(unit.priorHeatNs, nowNs, halfLife);
  unit.priorHeatNs = std::max(unit.priorHeatNs, nowNs);
}

void HeatModel::addAccess(Unit& unit, Process& proc, uint64_t nowNs, double accesses, double observations) {
  decayUnit(unit, nowNs);
  unit.heat += accesses;
  unit.observations += observations;
  unit.lastAccessNs = std::max(unit.lastAccessNs, nowNs);
  unit.accessed = true;
  unit.epochAccesses += accesses;
  if (accesses > 0) {
    // Evidence read over a span (a source read once per epoch) may stand for a use anywhere in it,
    // so the gap is measured from the span's start.
    const uint64_t seenFrom = spanSinceNs_ < nowNs ? spanSinceNs_ : nowNs;
    if (unit.runAccesses <= 0 || static_cast<double>(seenFrom) > static_cast<double>(unit.runLastNs) + steadyGapNs(proc)) {
      unit.runStartNs = seenFrom;
      unit.runAccesses = 0;
    }
    unit.runAccesses += accesses;
    unit.runLastNs = std::max(unit.runLastNs, nowNs);
  }
  if (spanSinceNs_ < nowNs) {
    if (unit.spanAccesses == 0 && accesses > 0) spanUnits_.push_back(&unit);
    unit.spanAccesses += accesses;
    return;
  }
  if (proc.clock.known() && proc.stepOpen)
    unit.stepAccum[proc.clock.bucketAt(nowNs, buckets_)] += accesses / static_cast<double>(unit.pages());
}

void HeatModel::spreadSpan(uint64_t nowNs) {
  const uint64_t since = spanSinceNs_;
  spanSinceNs_ = UINT64_MAX;
  if (spanUnits_.empty()) return;
  const uint64_t span = nowNs - since;
  // Per process: the share of the span's accesses each schedule bucket gets, from the time the
  // span spends in it (wrapped by the step clock). A span of several steps puts all its accesses
  // into the step in progress, spread evenly over its buckets, as a read at one instant did: the
  // steps before it in the span were not observed (see foldStep), and a source that reports a
  // page once per read however often it was touched (soft-dirty) would be undercounted k-fold if
  // the span were divided among its k steps. The period detector gets each process's accesses per
  // signature dimension, spread over its bins once.
  std::map<pid_t, std::vector<double>> shares;
  std::map<pid_t, SamplePeriodDetector::Signature> signatures;
  for (Unit* unit : spanUnits_) {
    Process& proc = process(unit->tgid);
    const double accesses = unit->spanAccesses;
    unit->spanAccesses = 0;
    signatures[unit->tgid][SamplePeriodDetector::dimOf(unit->start ^ (static_cast<uint64_t>(unit->tgid) << 48))] +=
        accesses;
    if (!proc.clock.known() || !proc.stepOpen) continue;
    auto [it, added] = shares.try_emplace(unit->tgid);
    std::vector<double>& share = it->second;
    if (added) share = bucketShares(proc.clock, since, span);
    const double perPage = accesses / static_cast<double>(unit->pages());
    for (uint32_t b = 0; b < buckets_; ++b) unit->stepAccum[b] += perPage * share[b];
  }
  for (const auto& [tgid, signature] : signatures) process(tgid).samples.addOver(since, nowNs, signature);
  spanUnits_.clear();
}

// In whole nanoseconds of step offset (a double of CLOCK_MONOTONIC time has 2 ns steps after 104
// days of uptime): whole periods give every bucket the same, the rest is walked bucket by bucket,
// at most buckets + 1 pieces.
std::vector<double> HeatModel::bucketShares(const StepClock& clock, uint64_t since, uint64_t span) const {
  const uint64_t period = clock.periodNs;
  const uint64_t buckets = buckets_;
  std::vector<double> overlap(buckets_, static_cast<double>(span / period) * static_cast<double>(period) /
                                            static_cast<double>(buckets));
  const auto signedPeriod = static_cast<int64_t>(period);
  int64_t r = (static_cast<int64_t>(since) - static_cast<int64_t>(clock.anchorNs)) % signedPeriod;
  if (r < 0) r += signedPeriod;
  auto offset = static_cast<uint64_t>(r);
  for (uint64_t left = span % period; left > 0;) {
    const uint64_t b = std::min(buckets - 1, offset * buckets / period);
    const uint64_t bucketEnd = ((b + 1) * period + buckets - 1) / buckets;  // > offset
    const uint64_t piece = std::min(left, std::max<uint64_t>(1, bucketEnd - offset));
    overlap[b] += static_cast<double>(piece);
    offset += piece;
    if (offset >= period) offset -= period;
    left -= piece;
  }
  for (double& o : overlap) o /= static_cast<double>(span);
  return overlap;
}

void HeatModel::addPrior(Unit& unit, uint64_t nowNs, double accesses, const std::vector<double>* shares) {
  decayUnit(unit, nowNs);
  unit.priorHeat += accesses;
  if (shares != nullptr) {
    if (unit.priorStepAccum.empty()) unit.priorStepAccum.assign(buckets_, 0);
    const double perPage = accesses / static_cast<double>(unit.pages());
    for (uint32_t b = 0; b < buckets_; ++b) unit.priorStepAccum[b] += perPage * (*shares)[b];
  }
}

void HeatModel::ingest(std::span<const AccessEvidence> batch, uint64_t nowNs, double scale) {
  startAt(nowNs);
  ingestRecords(batch, nowNs, scale);
  trimPages(nowNs);
}

void HeatModel::ingest(const EvidenceBatch& batch, uint64_t nowNs, double scale) { ingest(batch, nowNs, nowNs, scale); }

void HeatModel::ingest(const EvidenceBatch& batch, uint64_t sinceNs, uint64_t nowNs, double scale) {
  startAt(nowNs);
  if (sinceNs < nowNs) spanSinceNs_ = sinceNs;  // else stamped at nowNs, as one instant
  evidenceSpanNs_ = nowNs > sinceNs ? nowNs - sinceNs : 0;
  ingestRecords(batch.records, nowNs, scale);
  for (const EvidenceBlock& block : batch.blocks) ingestBlock(block, nowNs, scale);
  spreadSpan(nowNs);
  trimPages(nowNs);
}

void HeatModel::startAt(uint64_t nowNs) {
  if (!started_) {
    started_ = true;
    lastEpochNs_ = nowNs;
  }
}

HeatModel::PageChunk& HeatModel::pageChunk(pid_t tgid, uint64_t page, uint64_t nowNs, uint64_t halfLifeNs) {
  PageChunk& c = pageChunks_[chunkKey(tgid, page)];
  decayChunk(c, nowNs, halfLifeNs);
  return c;
}

void HeatModel::decayChunk(PageChunk& c, uint64_t nowNs, uint64_t halfLifeNs) {
  if (nowNs > c.lastNs) {
    if (c.pages != 0) {
      c.stepsPerAccess /= decayFactor(c.lastNs, nowNs, halfLifeNs);
      // A chunk whose hottest page decayed below kForgottenHeat (about 27 half-lives after a
      // single access) is forgotten: its pages stop counting as tracked, and a later access
      // starts it afresh at full resolution.
      constexpr double kForgottenHeat = 1e-8;
      if (static_cast<double>(c.top) < kForgottenHeat * c.stepsPerAccess) {
        c.mantissa.fill(0);
        c.pages = 0;
        c.top = 0;
        c.stepsPerAccess = 0;
      }
    }
    c.lastNs = nowNs;
  }
}

inline void HeatModel::addPageAccess(PageChunk& chunk, uint64_t page, double accesses) {
  if (!(accesses > 0)) return;
  const auto index = static_cast<uint32_t>((page / kBasePageSize) % kBlockPages);
  uint16_t& m = chunk.mantissa[index];
  const double steps = static_cast<double>(m) + accesses * chunk.stepsPerAccess;
  if (chunk.pages != 0 && steps < kMantissaMax + 0.5) {
    // Round to the nearest step; an addition worth less than half a step is lost.
    const auto next = static_cast<uint16_t>(steps + 0.5);
    if (m == 0 && next != 0) ++chunk.pages;
    m = next;
    chunk.top = std::max(chunk.top, next);
    return;
  }
  addPageAccessSlow(chunk, index, accesses);
}

// The slow path of addPageAccess, out of line so that the per-page path inlines: the chunk's first
// access, or one that outgrows the page's mantissa. Then the scale rises by the least power of two
// that makes the page fit and every mantissa is rounded to the new step. At least doubling means a
// run of pages each just past the top does not rescale the chunk once per page; a power of two
// makes the rounding a shift (the chunk's 512 mantissas in a few vector instructions; a hot set
// rescales about once per chunk and epoch, when the decay has halved the scale). Pages that round
// to 0 no longer count as pages with heat.
void HeatModel::addPageAccessSlow(PageChunk& chunk, uint32_t index, double accesses) {
  constexpr auto kMax = static_cast<double>(kMantissaMax);
  uint16_t& m = chunk.mantissa[index];
  if (!std::isfinite(accesses)) return;
  if (chunk.pages == 0) {
    // An empty chunk takes the scale of its first access: that page at full resolution.
    chunk.stepsPerAccess = kMax / accesses;
    m = kMantissaMax;
    chunk.top = kMantissaMax;
    chunk.pages = 1;
    return;
  }
  const double steps = static_cast<double>(m) + accesses * chunk.stepsPerAccess;
  int shift = 1;
  while (shift < 2048 && steps >= std::ldexp(kMax + 0.5, shift)) ++shift;  // bounded: ldexp reaches inf
  if (shift >= 17) {
    chunk.mantissa.fill(0);  // every other page is below half of the new step
  } else {
    // In 16-bit lanes: mi / 2^shift rounded half to even, then count the pages left. Half up
    // would keep a page of one step at one step through every rescale by 2 (1/2 -> 1), so a
    // page the chunk's hot pages had left far behind would never stop counting as tracked, and
    // its one step would stand for ever more accesses.
    const auto half = static_cast<uint16_t>(1U << (shift - 1));
    const auto belowHalf = static_cast<uint16_t>(half - 1);
    for (uint16_t& mi : chunk.mantissa) {
      const auto q = static_cast<uint16_t>(mi >> shift);
      const bool up = (mi & half) != 0 && ((mi & belowHalf) != 0 || (q & 1) != 0);
      mi = static_cast<uint16_t>(q + (up ? 1 : 0));
    }
  }
  // The page itself is the new top: at least 32768 steps, where every other page is at most
  // 65535 halved and rounded.
  const auto next = static_cast<uint16_t>(std::min(kMax, std::ldexp(steps, -shift)) + 0.5);
  m = next;
  uint16_t zeros = 0;
  for (uint16_t mi : chunk.mantissa) zeros = static_cast<uint16_t>(zeros + (mi == 0 ? 1 : 0));
  chunk.stepsPerAccess = std::ldexp(chunk.stepsPerAccess, -shift);
  chunk.pages = kBlockPages - zeros;
  chunk.top = next;
}

void HeatModel::ingestRecords(std::span<const AccessEvidence> batch, uint64_t nowNs, double scale) {
  pid_t lastTgid = -1;
  Process* proc = nullptr;
  for (const AccessEvidence& ev : batch) {
    if (ev.tgid != lastTgid || proc == nullptr) {
      proc = &process(ev.tgid);
      rollSteps(*proc, ev.tgid, nowNs);
      lastTgid = ev.tgid;
    }
    const double accesses = static_cast<double>(ev.weight) * scale;
    const uint64_t page = ev.page - ev.page % kBasePageSize;
    if (accesses > 0) addPageAccess(pageChunk(ev.tgid, page, nowNs, proc->halfLifeNs), page, accesses);
    Unit* unit = unitFor(ev.tgid, page);
    addAccess(*unit, *proc, nowNs, accesses, 1);
    if (spanSinceNs_ >= nowNs) proc->samples.add(nowNs, unit->start ^ (static_cast<uint64_t>(ev.tgid) << 48), accesses);
    proc->sampled = true;
    proc->evidenceThisEpoch = true;
    proc->evidenceInStep = true;
  }
}

// A block's pages are a run of addresses: the unit is looked up once per unit the run crosses
// (a chunk is one unit unless regions split it), and each unit and the period detector get the
// run's accesses at once. The units get what the records would give them (their updates are
// sums), up to the order of floating-point additions; per-page heat too, up to its rounding to the
// chunk's scale, which a page's several records meet once each.
void HeatModel::ingestBlock(const EvidenceBlock& block, uint64_t nowNs, double scale) {
  assert(block.base % kBlockBytes == 0 && "a block is one aligned chunk of page heat");
  Process& proc = process(block.tgid);
  rollSteps(proc, block.tgid, nowNs);
  Unit* unit = nullptr;
  double unitAccesses = 0;
  double unitObservations = 0;
  PageChunk* chunk = nullptr;  // fetched (or created) at the block's first page with a count
  auto flushUnit = [&] {
    if (unit == nullptr) return;
    addAccess(*unit, proc, nowNs, unitAccesses, unitObservations);
    if (spanSinceNs_ >= nowNs) proc.samples.add(nowNs, unit->start ^ (static_cast<uint64_t>(block.tgid) << 48), unitAccesses);
  };
  for (uint32_t i = 0; i < kBlockPages; ++i) {
    if (block.counts[i] == 0) continue;
    const uint64_t page = block.base + uint64_t{i} * kBasePageSize;
    const double accesses = static_cast<double>(block.weight(i)) * scale;
    if (chunk == nullptr) chunk = &pageChunk(block.tgid, block.base, nowNs, proc.halfLifeNs);
    addPageAccess(*chunk, page, accesses);
    if (unit == nullptr || page < unit->start || page >= unit->start + unit->length) {
      flushUnit();
      unit = unitFor(block.tgid, page);
      unitAccesses = 0;
      unitObservations = 0;
    }
    unitAccesses += accesses;
    unitObservations += 1;  // one observation per page, as the record the page stands for
  }
  flushUnit();
  if (unit == nullptr) return;
  proc.sampled = true;
  proc.evidenceThisEpoch = true;
  proc.evidenceInStep = true;
}

void HeatModel::trimPages(uint64_t nowNs) {
  // max_tracked_pages bounds the address space with per-page heat, in pages: chunks x 512.
  if (pageChunks_.size() * kBlockPages > config_.max_tracked_pages()) {
    // Forget the colder half of the chunks: per-page heat is detail (the units carry the model).
    std::vector<std::pair<double, uint64_t>> heats;
    heats.reserve(pageChunks_.size());
    for (const auto& [key, c] : pageChunks_) {
      // A chunk without pages with heat (created for evidence that counted nothing, or forgotten
      // and not yet touched again) ranks coldest (rangeHeat 0), not as 0/0, which would break the
      // ordering nth_element needs.
      heats.emplace_back(rangeHeat(c, 0, kBlockPages, nowNs, halfLifeOf(tgidOfKey(key))), key);
    }
    const size_t keep = std::max<size_t>(1, static_cast<size_t>(config_.max_tracked_pages() / 2 / kBlockPages));
    if (keep < heats.size()) {
      std::nth_element(heats.begin(), heats.begin() + static_cast<std::ptrdiff_t>(keep), heats.end(),
                       [](const auto& a, const auto& b) { return a.first > b.first; });
      for (size_t i = keep; i < heats.size(); ++i) pageChunks_.erase(heats[i].second);
    }
  }
}

void HeatModel::onMark(const IterationMark& mark) {
  Process& proc = process(mark.tgid);
  applyKindPrior(mark.tgid, proc, mark.timestampNs);
  const bool boundary = mark.type == MarkType::StepBegin || (mark.type == MarkType::StepEnd && !proc.sawStepBegin);
  if (mark.type == MarkType::StepBegin) proc.sawStepBegin = true;
  if (mark.type == MarkType::PhaseBegin) {
    proc.phase = mark.phase;
    const bool repeat = std::find(proc.phasesThisStep.begin(), proc.phasesThisStep.end(), mark.phase) !=
                        proc.phasesThisStep.end();
    if (repeat) return;
    if (proc.phasesThisStep.size() < kMaxPhasesPerStep) proc.phasesThisStep.push_back(mark.phase);
    // A phase mark says exactly where in the step we are: re-anchor the step on the phase's usual
    // offset, so that stalls earlier in this step (they vary with placement) do not shift the
    // buckets the schedule is read and learned in.
    if (proc.clock.source == PeriodSource::Marks && proc.stepOpen && mark.timestampNs >= proc.stepStartNs) {
      const double observed = static_cast<double>(mark.timestampNs - proc.stepStartNs);
      // Phase names come from the client: a step has a few phases, and a process that names more
      // (a counter in the name) gets no re-anchoring for the rest rather than a map that grows
      // with every mark.
      auto it = proc.phaseOffsetNs.find(mark.phase);
      if (it == proc.phaseOffsetNs.end() && proc.phaseOffsetNs.size() < kMaxPhasesPerStep)
        it = proc.phaseOffsetNs.emplace(mark.phase, observed).first;
      else if (it != proc.phaseOffsetNs.end())
        it->second = 0.8 * it->second + 0.2 * observed;
      const auto offset = it == proc.phaseOffsetNs.end() ? UINT64_MAX : static_cast<uint64_t>(it->second);
      if (offset <= mark.timestampNs) {
        proc.stepStartNs = mark.timestampNs - offset;
        proc.clock.anchorNs = proc.stepStartNs;
      }
    }
    return;
  }
  if (!boundary) {
    proc.phase.clear();
    return;
  }
  // A repeat of the boundary just marked (see MarkPeriodEstimator::add) starts no step.
  if (!proc.marks.add(mark.type == MarkType::StepEnd ? mark.step + 1 : mark.step, mark.timestampNs)) return;
  proc.step = mark.step;
  proc.phase.clear();
  proc.phasesThisStep.clear();
  updateClock(mark.tgid, proc, mark.timestampNs);
  if (!proc.clock.known()) return;
  const uint64_t t = mark.timestampNs;
  if (proc.stepOpen && t > proc.stepStartNs) {
    // A mark a good part of a step after the step we are in: that step is done. A mark soon after
    // a step we already rolled over by the clock just corrects where the step began.
    if (t - proc.stepStartNs >= proc.clock.periodNs / 2) foldStep(mark.tgid);
    proc.stepStartNs = t;
  } else if (!proc.stepOpen) {
    proc.stepOpen = true;
    proc.stepStartNs = t;
  }
  proc.clock.anchorNs = proc.stepStartNs;
}

void HeatModel::setMigrationRates(const MigrationRates& rates) {
  if (!rates.known()) return;
  promoteBytesPerNs_ = rates.promoteBytesPerSec / 1e9;
  demoteBytesPerNs_ = rates.demoteBytesPerSec / 1e9;
  ratesMeasured_ = true;
}

void HeatModel::foldStep(pid_t tgid) {
  auto m = units_.find(tgid);
  if (m == units_.end()) return;
  const double rate = config_.schedule_learning_rate();
  // A step no evidence arrived in was not observed, which is not the same as observed idle: when
  // the sources deliver once per epoch and an epoch spans many steps, folding the unobserved steps
  // as zeros would shrink every measured schedule by (1 - rate) per step to nothing. The schedule
  // learns from observed steps only (the prior has no such gaps: it follows the marks).
  Process& proc = process(tgid);
  const bool observed = proc.evidenceInStep;
  proc.evidenceInStep = false;
  for (auto& [start, u] : m->second) {
    if (!observed) {
      // Nothing to learn (the accumulation is empty: only evidence fills it).
    } else if (!u.scheduleValid) {
      u.schedule = u.stepAccum;
      u.scheduleValid = true;
    } else {
      for (uint32_t b = 0; b < buckets_; ++b) u.schedule[b] = (1 - rate) * u.schedule[b] + rate * u.stepAccum[b];
    }
    std::fill(u.stepAccum.begin(), u.stepAccum.end(), 0.0);
    // Empty prior vectors stand for zeros (see Unit). The flag turns valid at the first fold
    // for every unit, as it did when the vectors were zeros.
    if (!u.priorScheduleValid) {
      u.priorSchedule = u.priorStepAccum;
      u.priorScheduleValid = true;
    } else if (!u.priorStepAccum.empty()) {
      if (u.priorSchedule.empty()) u.priorSchedule.assign(buckets_, 0);
      for (uint32_t b = 0; b < buckets_; ++b)
        u.priorSchedule[b] = (1 - rate) * u.priorSchedule[b] + rate * u.priorStepAccum[b];
    } else {
      for (double& v : u.priorSchedule) v *= 1 - rate;
    }
    std::fill(u.priorStepAccum.begin(), u.priorStepAccum.end(), 0.0);
  }
}

void HeatModel::rollSteps(Process& proc, pid_t tgid, uint64_t nowNs) {
  if (!proc.clock.known()) return;
  const uint64_t period = proc.clock.periodNs;
  if (!proc.stepOpen) {
    proc.stepOpen = true;
    proc.stepStartNs = nowNs - std::min<uint64_t>(nowNs, static_cast<uint64_t>(proc.clock.phaseAt(nowNs) * static_cast<double>(period)));
    return;
  }
  if (nowNs < proc.stepStartNs + period) return;
  foldStep(tgid);
  // More than one step without any event: the accumulations are empty anyway; jump ahead.
  const uint64_t steps = (nowNs - proc.stepStartNs) / period;
  proc.stepStartNs += steps * period;
}

// The kind prior integrates the time since the previous mark (or epoch close) into the phase that
// was in progress: each millisecond of a phase is counted once, however many marks split it, so the
// mark rate does not change how much prior there is. It goes to the prior's own heat and schedule,
// never to the evidence: a prior by kind cannot tell two regions of one kind apart, and added as
// accesses at its fixed rate (one access per page per ms) it would bury the sources' evidence
// (about one per page per epoch from soft-dirty), make every region of the kind look as hot as the
// hottest, and teach the feature weights its own guess. blendPrior weighs it as a pseudo-count.
void HeatModel::applyKindPrior(pid_t tgid, Process& proc, uint64_t nowNs) {
  if (proc.lastPriorNs == 0 || nowNs <= proc.lastPriorNs) {
    proc.lastPriorNs = std::max(proc.lastPriorNs, nowNs);
    return;
  }
  // Each application visits every region of the process: marks closer together than this are
  // taken as one segment, in the phase of its end, so that a client sending marks as fast as the
  // socket allows costs at most epoch / kMinPriorSegmentNs passes over its regions per epoch.
  constexpr uint64_t kMinPriorSegmentNs = 1'000'000;
  if (nowNs - proc.lastPriorNs < kMinPriorSegmentNs) return;
  const uint64_t from = proc.lastPriorNs;
  proc.lastPriorNs = nowNs;
  auto m = units_.find(tgid);
  if (m == units_.end()) return;
  rollSteps(proc, tgid, from);
  const uint64_t mid = from + (nowNs - from) / 2;
  // One access per page per millisecond of the phase: only ratios between units matter, the blend
  // rescales the prior to the evidence.
  const double perPage = static_cast<double>(nowNs - from) / 1e6;
  // Spread over the buckets the segment spans, as evidence over an epoch's span is (spreadSpan):
  // a segment is a whole step when marks arrive in a batch once per epoch, and all of its prior
  // in the bucket of its midpoint gave a region in use all step a single mid-step spike.
  std::vector<double> shares;
  if (proc.clock.known() && proc.stepOpen) shares = bucketShares(proc.clock, from, nowNs - from);
  for (auto& [start, u] : m->second)
    if (u.regionId != 0 && kindActiveInPhase(u.kind, proc.phase))
      addPrior(u, mid, perPage * static_cast<double>(u.pages()), shares.empty() ? nullptr : &shares);
}

void HeatModel::updateClock(pid_t tgid, Process& proc, uint64_t nowNs) {
  (void)tgid;
  if (auto period = proc.marks.periodNs()) {
    // Steps, or epochs when those are longer (marks reach the model in a batch once per epoch),
    // or the usual time between marks when that is longer still (a client marking every k-th step).
    const uint64_t lastMark = *proc.marks.lastMarkNs();
    const uint64_t epochNs = started_ && nowNs > lastEpochNs_ ? nowNs - lastEpochNs_ : 0;
    const uint64_t unit = std::max({*period, epochNs, proc.marks.typicalGapNs()});
    if (nowNs <= lastMark || nowNs - lastMark <= kStaleMarkSteps * unit) {
      // The anchor is the step start as last corrected by a phase mark (see onMark).
      proc.clock = StepClock{*period, proc.stepOpen ? proc.stepStartNs : lastMark, PeriodSource::Marks, 1.0};
      return;
    }
    // The marks stopped: their period is dropped for what a hint or the sample stream say, which
    // are asked at once.
    proc.marks.clear();
    proc.sawStepBegin = false;
    proc.phasesThisStep.clear();
    proc.clock = StepClock{};
    proc.stepOpen = false;
    proc.epochsSinceEstimate = UINT64_MAX - 1;
  }
  if (config_.step_period_hint_ms() > 0) {
    const uint64_t period = uint64_t{config_.step_period_hint_ms()} * 1'000'000;
    const uint64_t anchor = proc.marks.lastMarkNs().value_or(proc.clock.known() ? proc.clock.anchorNs : nowNs);
    proc.clock = StepClock{period, anchor, PeriodSource::Hint, 1.0};
    return;
  }
  // The autocorrelation is the costly part: re-run it every 16 epochs until a period is found,
  // then every 64 to follow slow drift, and again after 16 when one found nothing.
  ++proc.epochsSinceEstimate;
  const uint64_t every = proc.clock.source == PeriodSource::Samples && proc.estimateMisses == 0 ? 64 : 16;
  if (proc.epochsSinceEstimate < every || !proc.sampled) return;
  proc.epochsSinceEstimate = 0;
  auto est = proc.samples.estimate();
  const auto period = est ? static_cast<uint64_t>(std::llround(est->periodNs)) : 0;
  if (period == 0) {
    // The stream stopped repeating (over the detector's whole history, twice in a row): the
    // period it had is dropped rather than kept for good.
    if (proc.clock.source == PeriodSource::Samples && ++proc.estimateMisses >= 2) {
      proc.clock = StepClock{};
      proc.stepOpen = false;
      proc.estimateMisses = 0;
    }
    return;
  }
  proc.estimateMisses = 0;
  StepClock next{period, nowNs, PeriodSource::Samples, est->confidence};
  if (proc.clock.source == PeriodSource::Samples && proc.clock.known()) {
    // Keep the phase continuous so the learned schedule stays aligned.
    const auto offset = static_cast<uint64_t>(proc.clock.phaseAt(nowNs) * static_cast<double>(period));
    next.anchorNs = nowNs - std::min(nowNs, offset);
  }
  proc.clock = next;
}

void HeatModel::learnWeights() {
  double maxY = 0;
  for (const auto& [tgid, map] : units_)
    for (const auto& [start, u] : map) maxY = std::max(maxY, u.epochAccesses / static_cast<double>(u.pages()));
  if (maxY <= 0) return;  // an epoch without evidence says nothing about the features
  FeatureVector loss{};
  size_t n = 0;
  for (const auto& [tgid, map] : units_)
    for (const auto& [start, u] : map) {
      if (!u.hasPrediction) continue;
      const double y = u.epochAccesses / static_cast<double>(u.pages()) / maxY;
      for (size_t k = 0; k < kFeatureCount; ++k) loss[k] += std::abs(u.predicted[k] - y);
      ++n;
    }
  if (n == 0) return;
  const double rate = config_.feature_learning_rate();
  double sum = 0;
  for (size_t k = 0; k < kFeatureCount; ++k) {
    weights_[k] *= std::exp(-rate * loss[k] / static_cast<double>(n));
    sum += weights_[k];
  }
  const double floor = config_.feature_weight_floor();
  for (double& w : weights_) w = std::max(w / sum, floor);
  sum = 0;
  for (double w : weights_) sum += w;
  for (double& w : weights_) w /= sum;
}

void HeatModel::advanceEpoch(uint64_t nowNs) {
  if (!started_) {
    started_ = true;
    lastEpochNs_ = nowNs;
  }
  for (auto& [tgid, proc] : processes_) {
    applyKindPrior(tgid, proc, nowNs);
    if (proc.lastPriorNs == 0) proc.lastPriorNs = nowNs;
    updateClock(tgid, proc, nowNs);
    proc.halfLifeNs = halfLifeFor(proc);
    rollSteps(proc, tgid, nowNs);
    if (proc.evidenceThisEpoch) ++proc.evidenceEpochs;
    proc.evidenceThisEpoch = false;
  }
  learnWeights();
  computeSnapshot(nowNs);
  for (auto& [tgid, map] : units_)
    for (auto it = map.begin(); it != map.end();) {
      Unit& u = it->second;
      u.epochAccesses = 0;
      const bool idleChunk = u.regionId == 0 && u.heat < 1e-3 &&
                             std::all_of(u.schedule.begin(), u.schedule.end(), [](double v) { return v < 1e-9; }) &&
                             std::all_of(u.stepAccum.begin(), u.stepAccum.end(), [](double v) { return v <= 0; });
      if (idleChunk) it = map.erase(it);
      else ++it;
    }
  lastEpochNs_ = nowNs;
  ++epoch_;
}

// The kind prior as a pseudo-count (the posterior mean under a conjugate prior worth
// kPriorPseudoEpochs epochs of evidence). Without evidence it is all there is (weight 1: only ratios
// between units matter). With evidence it is rescaled to the strongest measured value of the
// process and weighted kPriorPseudoEpochs / (kPriorPseudoEpochs + n) after n epochs with evidence:
// it still orders what the evidence has not reached and breaks ties, but never outweighs a measured
// difference, and fades as evidence accumulates. Heat and schedule are blended separately, each
// rescaled to its own measured counterpart.
std::vector<HeatModel::Blend> HeatModel::blendPrior(const Process& proc, UnitMap& map, uint64_t nowNs) {
  constexpr double kPriorPseudoEpochs = 1.0;
  auto sum = [](const std::vector<double>& v) {
    double total = 0;
    for (double x : v) total += x;
    return total;
  };
  double measuredDensity = 0, priorDensity = 0, measuredStep = 0, priorStep = 0;
  for (auto& [start, u] : map) {
    decayUnit(u, nowNs);
    const auto pages = static_cast<double>(u.pages());
    measuredDensity = std::max(measuredDensity, u.heat / pages);
    priorDensity = std::max(priorDensity, u.priorHeat / pages);
    if (u.scheduleValid) measuredStep = std::max(measuredStep, sum(u.schedule));
    if (u.priorScheduleValid) priorStep = std::max(priorStep, sum(u.priorSchedule));
  }
  const double share = kPriorPseudoEpochs / (kPriorPseudoEpochs + static_cast<double>(proc.evidenceEpochs));
  auto priorWeight = [&](double measured, double prior) {
    if (prior <= 0) return 0.0;
    return measured > 0 ? share * measured / prior : 1.0;
  };
  const double heatWeight = priorWeight(measuredDensity, priorDensity);
  // One scale per process, as for heat: a unit sampled once must not rank below one never sampled
  // (a scale per unit would put its prior at its own thin level).
  const double scheduleWeight = priorWeight(measuredStep, priorStep);
  std::vector<Blend> out;
  out.reserve(map.size());
  for (auto& [start, u] : map) {
    Blend b;
    b.heat = u.heat + heatWeight * u.priorHeat;
    b.scheduleValid = u.scheduleValid || (u.priorScheduleValid && scheduleWeight > 0);
    b.schedule.assign(buckets_, 0);
    for (uint32_t k = 0; k < buckets_; ++k) {
      if (u.scheduleValid) b.schedule[k] += u.schedule[k];
      if (u.priorScheduleValid && !u.priorSchedule.empty()) b.schedule[k] += scheduleWeight * u.priorSchedule[k];
    }
    out.push_back(std::move(b));
  }
  return out;
}

void HeatModel::computeSnapshot(uint64_t nowNs) {
  HeatSnapshot snap;
  snap.nowNs = nowNs;
  snap.epoch = epoch_;
  snap.weights = weights_;
  for (const auto& [key, c] : pageChunks_) snap.trackedPages += c.pages;

  struct Raw {
    Unit* unit;
    double stepNs;    // the step perStep is per: the period with a schedule, else 1.44 half-lives
    double gapNs;     // the gap that ends a run of steady use (steadyGapNs)
    double density;
    double heat;      // decayed accesses of the unit with the prior blended in
    double reuse;
    uint64_t nextUse;
    double perStep;
    double burst;     // next burst of use (Belady-like planning value); < 0 without a schedule
  };
  std::vector<Raw> raws;
  double maxDensity = 0, maxReuse = 0;
  double horizonSum = 0;
  size_t horizonCount = 0;
  for (auto& [tgid, map] : units_) {
    const Process& proc = process(tgid);
    const StepClock& clock = proc.clock;
    const bool scheduled = clock.known() && buckets_ > 1;
    const std::vector<Blend> blends = blendPrior(proc, map, nowNs);
    uint32_t b0 = 0;
    double bucketNs = 0, intoBucketNs = 0;
    uint32_t horizonBuckets = buckets_;
    if (scheduled) {
      bucketNs = static_cast<double>(clock.periodNs) / buckets_;
      const double phase = clock.phaseAt(nowNs) * buckets_;
      b0 = std::min(buckets_ - 1, static_cast<uint32_t>(phase));
      intoBucketNs = (phase - b0) * bucketNs;
      // Horizon: everything first needed beyond it can still wait, i.e. the bucket after the
      // last bucket j whose needs (all first needed in buckets 1..j) take longer to fetch at the
      // measured rates (swapNs), plus the configured slack and the time until the next plan, than
      // the time left until j. Not the first bucket that fits: a quiet next bucket would then
      // end the look-ahead before a large tensor needed later, which must start moving now. A
      // unit's first need is its first bucket above 5% of its peak, as for its burst below, in
      // its own measured schedule when it has one: the kind prior (scaled to the process's
      // strongest unit, so a unit sampled once does not rank below one never sampled) would
      // put a thinly sampled large tensor's first need in every bucket its kind is active in.
      std::vector<double> firstNeedBytes(buckets_, 0);
      size_t i = 0;
      for (auto& [start, u] : map) {
        const Blend& bl = blends[i++];
        if (!bl.scheduleValid) continue;
        const bool measured = u.scheduleValid && std::any_of(u.schedule.begin(), u.schedule.end(), [](double v) { return v > 0; });
        const std::vector<double>& need = measured ? u.schedule : bl.schedule;
        const double threshold = 0.05 * *std::max_element(need.begin(), need.end());
        for (uint32_t j = 0; j < buckets_; ++j)
          if (need[(b0 + j) % buckets_] > threshold) {
            firstNeedBytes[j] += static_cast<double>(u.length);
            break;
          }
      }
      // Fetching a unit copies it twice: into a full fast tier (the steady state the look-ahead is
      // for) each byte promoted displaces one demoted, each at its direction's rate, and the
      // planner sizes its plans by both (the burst cut below counts both moves too).
      double cumBytes = 0;
      uint32_t lastLate = 0;
      const double slackNs = config_.lookahead_step_fraction() * static_cast<double>(clock.periodNs) +
                             static_cast<double>(planIntervalNs_);
      for (uint32_t j = 1; j < buckets_; ++j) {
        cumBytes += firstNeedBytes[j];
        const double until = j * bucketNs - intoBucketNs;
        if (until < swapNs(cumBytes) + slackNs) lastLate = j;
      }
      horizonBuckets = std::min(buckets_ - 1, lastLate + 1);
      horizonSum += horizonBuckets * bucketNs;
      ++horizonCount;
    }
    ProcessClockInfo info;
    info.tgid = tgid;
    info.clock = clock;
    info.step = proc.step;
    info.phase = proc.phase;
    info.phaseFraction = clock.phaseAt(nowNs);
    if (scheduled) info.horizonNs = static_cast<uint64_t>(horizonBuckets * bucketNs);
    snap.processes.push_back(info);

    // Beyond the horizon a future burst halves in value every bucket: enough to rank evictions by
    // next use, too little to evict what is still in use for something not yet needed.
    const double tailBuckets = 1.0;
    size_t unitIndex = 0;
    for (auto& [start, u] : map) {
      const Blend& bl = blends[unitIndex++];
      const std::vector<double>& schedule = bl.schedule;
      Raw raw{&u, heatSpanNs(proc), steadyGapNs(proc),
              bl.heat / static_cast<double>(u.pages()), bl.heat, 0, UINT64_MAX, 0, -1};
      raw.perStep = raw.density;
      if (scheduled && bl.scheduleValid) {
        raw.stepNs = static_cast<double>(clock.periodNs);
        raw.perStep = 0;
        double peak = 0;
        for (double v : schedule) {
          raw.perStep += v;
          peak = std::max(peak, v);
        }
        // Belady-like: what matters is the unit's next burst of use (the consecutive buckets of
        // use from its next use on, what it would serve if fast now), counted fully when it starts
        // within the horizon and discounted by how far beyond it starts otherwise. A burst in
        // progress counts only its remainder.
        const double threshold = 0.05 * peak;
        uint32_t first = buckets_;
        for (uint32_t j = 0; j < buckets_; ++j)
          if (schedule[(b0 + j) % buckets_] > threshold) {
            first = j;
            break;
          }
        if (first < buckets_) {
          uint32_t gap = 0, last = first;  // the burst's last busy bucket
          for (uint32_t j = first; j < buckets_ && gap < 2; ++j) {
            if (schedule[(b0 + j) % buckets_] > threshold) {
              gap = 0;
              last = j;
            } else {
              ++gap;  // one quiet bucket (sampling noise) does not end a burst
            }
          }
          double cutoffNs = std::numeric_limits<double>::infinity();  // counted up to here, from now
          // A burst in progress that ends within the step is worth keeping fast only until its
          // successor must start moving in: the unit's own demotion and a successor's promotion
          // of its size at the measured rates, after the next plan. Its accesses after that
          // are served fast only if the successor arrives late, so they do not count; counted,
          // they hold the swap back until its copy cannot finish before the successor's burst
          // begins (a loaded host's slower copies made phase swaps land late). The cut is at
          // most hysteresis_margin / (1 + hysteresis_margin) of the whole burst: at its start the
          // unit, with its margin, is then worth at least what a successor with the same burst
          // is, so a unit too large to swap within its burst is not demoted as its use begins.
          // The value falls steadily to nothing at the cut: a cut that stopped part-way through
          // would raise it again after a swap, and could swap it back. A burst that runs on past
          // the step's end (a unit busy throughout) has no such end.
          if (first == 0 && gap >= 2) {
            uint32_t back = 0, quiet = 0;  // buckets the burst has run before this one
            for (uint32_t k = 1; k < buckets_ - last && quiet < 2; ++k) {
              if (schedule[(b0 + buckets_ - k) % buckets_] > threshold) {
                back = k;
                quiet = 0;
              } else {
                ++quiet;
              }
            }
            const double endNs = (last + 1) * bucketNs - intoBucketNs;
            const double lengthNs = endNs + intoBucketNs + back * bucketNs;
            const double margin = config_.hysteresis_margin();
            const double leadNs = swapNs(static_cast<double>(u.length)) +
                                  static_cast<double>(planIntervalNs_);
            cutoffNs = endNs - std::min(leadNs, lengthNs * margin / (1.0 + margin));
          }
          double burst = 0;
          for (uint32_t j = first; j <= last; ++j) {
            if (schedule[(b0 + j) % buckets_] <= threshold) continue;
            const double fromNs = j == 0 ? 0 : j * bucketNs - intoBucketNs;
            const double toNs = (j + 1) * bucketNs - intoBucketNs;
            const double before = std::clamp((cutoffNs - fromNs) / (toNs - fromNs), 0.0, 1.0);
            double v = schedule[(b0 + j) % buckets_];
            if (j == 0) v *= 1.0 - intoBucketNs / bucketNs;
            burst += v * before;
          }
          const double w = first <= horizonBuckets ? 1.0 : std::exp2(-static_cast<double>(first - horizonBuckets) / tailBuckets);
          raw.burst = burst * w;
          raw.nextUse = first == 0 ? 0 : static_cast<uint64_t>(first * bucketNs - intoBucketNs);
        } else {
          raw.burst = 0;
        }
        // The reuse feature: what the schedule predicts over the horizon from now (the quantity
        // the weight learning can check against the next epoch).
        for (uint32_t j = 0; j <= horizonBuckets && j < buckets_; ++j) {
          double v = schedule[(b0 + j) % buckets_];
          if (j == 0) v *= 1.0 - intoBucketNs / bucketNs;
          raw.reuse += v;
        }
      } else {
        raw.reuse = raw.density;
      }
      maxDensity = std::max(maxDensity, raw.density);
      maxReuse = std::max(maxReuse, raw.reuse);
      raws.push_back(raw);
    }
  }
  snap.horizonNs = horizonCount > 0 ? static_cast<uint64_t>(horizonSum / static_cast<double>(horizonCount)) : 0;

  snap.units.reserve(raws.size());
  for (const Raw& raw : raws) {
    Unit& u = *raw.unit;
    UnitHeat h;
    h.tgid = u.tgid;
    h.start = u.start;
    h.length = u.length;
    h.regionId = u.regionId;
    h.kind = u.kind;
    h.heat = raw.heat;
    h.features[kFrequency] = maxDensity > 0 ? raw.density / maxDensity : 0;
    h.features[kRecency] = u.accessed ? decayFactor(u.lastAccessNs, nowNs, halfLifeOf(u.tgid)) : 0;
    // Small tensors are worth more per byte (DeepTM), but only tensors something was seen to
    // touch: a never-touched region would otherwise take a share of the hottest unit's value
    // (maxReuse, across processes) through its size alone.
    h.features[kSize] =
        u.accessed ? 1.0 / (1.0 + std::log2(static_cast<double>(std::max<uint64_t>(1, u.pages())))) : 0.0;
    h.features[kReuse] = maxReuse > 0 ? raw.reuse / maxReuse : 0;
    double score = 0;
    for (size_t k = 0; k < kFeatureCount; ++k) score += weights_[k] * h.features[k];
    h.score = score;
    // With a learned step schedule the planner gets the schedule's own Belady-like value; without
    // one, the learned blend of the four features scaled to accesses.
    h.expectedAccessesPerPage = raw.burst >= 0 ? raw.burst : score * maxReuse;
    h.nextUseInNs = raw.nextUse;
    h.accessesPerPagePerStep = raw.perStep;
    if (u.runAccesses > 0 && nowNs >= u.runStartNs &&
        static_cast<double>(nowNs) <= static_cast<double>(u.runLastNs) + raw.gapNs) {
      const auto runNs = static_cast<double>(nowNs - u.runStartNs);
      h.steadySteps = runNs / raw.stepNs;
      // The run's accesses per observed step, as the schedule learns them (foldStep): a source read
      // once per epoch over many steps gives one step's worth per read, not a share of it per
      // step. Averaged over at least one: a run younger than a step has shown no level yet.
      const double observed = std::max(1.0, runNs / std::max(raw.stepNs, static_cast<double>(evidenceSpanNs_)));
      h.steadyAccessesPerPagePerStep = std::min(raw.perStep, u.runAccesses / static_cast<double>(u.pages()) / observed);
    }
    h.blockWeights = blockWeightsOf(u, nowNs);
    if (!h.blockWeights.empty()) h.blockWeightBytes = chunkBytes_;
    u.predicted = h.features;
    u.hasPrediction = true;
    snap.units.push_back(std::move(h));
  }
  snapshot_ = std::move(snap);
}

std::vector<float> HeatModel::blockWeightsOf(const Unit& unit, uint64_t nowNs) const {
  const uint64_t end = unit.start + unit.length;
  const size_t blocks = static_cast<size_t>((unit.length + chunkBytes_ - 1) / chunkBytes_);
  if (blocks < 2) return {};
  // Page heat summed per block: the mantissas of each per-page chunk the unit overlaps, split at
  // block boundaries, times the chunk's scale. One pass over the unit's pages with heat per epoch.
  std::vector<double> heat(blocks, 0.0);
  const uint64_t halfLife = halfLifeOf(unit.tgid);
  for (uint64_t base = unit.start - unit.start % kBlockBytes; base < end; base += kBlockBytes) {
    auto it = pageChunks_.find(chunkKey(unit.tgid, base));
    if (it == pageChunks_.end()) continue;
    uint64_t at = std::max(base, unit.start);
    const uint64_t stop = std::min(base + kBlockBytes, end);
    while (at < stop) {
      const uint64_t block = (at - unit.start) / chunkBytes_;
      const uint64_t segmentEnd = std::min(stop, unit.start + (block + 1) * chunkBytes_);
      heat[block] += rangeHeat(it->second, static_cast<uint32_t>((at - base) / kBasePageSize),
                               static_cast<uint32_t>((segmentEnd - base) / kBasePageSize), nowNs, halfLife);
      at = segmentEnd;
    }
  }
  double total = 0;
  for (double h : heat) total += h;
  if (!(total > 0)) return {};
  const double perPage = total / static_cast<double>(unit.pages());
  // The unit's observations as of nowNs (decayed like its heat), spread over its pages: what a
  // block would have seen at the unit's average.
  const double observationsPerPage =
      unit.observations * decayFactor(unit.heatNs, nowNs, halfLife) / static_cast<double>(unit.pages());
  std::vector<float> weights(blocks);
  for (size_t b = 0; b < blocks; ++b) {
    const uint64_t from = unit.start + b * chunkBytes_;
    const double pages = static_cast<double>((std::min(end, from + chunkBytes_) - from) / kBasePageSize);
    const double measured = heat[b] / pages / perPage;
    const double expected = observationsPerPage * pages;
    weights[b] = static_cast<float>((measured * expected + kBlockWeightPriorObservations) /
                                    (expected + kBlockWeightPriorObservations));
  }
  return weights;
}

double HeatModel::pageHeatIn(pid_t tgid, uint64_t start, uint64_t end, uint64_t nowNs) const {
  double sum = 0;
  const uint64_t halfLife = halfLifeOf(tgid);
  for (uint64_t base = start - start % kBlockBytes; base < end; base += kBlockBytes) {
    auto it = pageChunks_.find(chunkKey(tgid, base));
    if (it == pageChunks_.end()) continue;
    const uint64_t from = std::max(base, start), to = std::min(base + kBlockBytes, end);
    sum += rangeHeat(it->second, static_cast<uint32_t>((from - base) / kBasePageSize),
                     static_cast<uint32_t>((to - base) / kBasePageSize), nowNs, halfLife);
  }
  return sum;
}

double HeatModel::rangeHeat(const PageChunk& chunk, uint32_t first, uint32_t last, uint64_t nowNs, uint64_t halfLifeNs) {
  if (chunk.pages == 0 || !(chunk.stepsPerAccess > 0)) return 0;
  uint64_t steps = 0;
  for (uint32_t i = first; i < last; ++i) steps += chunk.mantissa[i];
  return static_cast<double>(steps) / chunk.stepsPerAccess * decayFactor(chunk.lastNs, nowNs, halfLifeNs);
}

double HeatModel::pageHeat(pid_t tgid, uint64_t page, uint64_t nowNs) const {
  auto it = pageChunks_.find(chunkKey(tgid, page));
  if (it == pageChunks_.end()) return 0;
  const PageChunk& c = it->second;
  const uint16_t m = c.mantissa[(page / kBasePageSize) % kBlockPages];
  return m == 0 ? 0 : static_cast<double>(m) / c.stepsPerAccess * decayFactor(c.lastNs, nowNs, halfLifeOf(tgid));
}

std::vector<PageHeat> HeatModel::hottestPages(size_t limit, uint64_t nowNs, pid_t onlyTgid) const {
  // The `limit` hottest so far as a heap, coldest on top: memory O(limit) per call, where a copy
  // of every tracked page cost 140 MiB at the default cap (heat_bench top).
  const auto hotter = [](const PageHeat& a, const PageHeat& b) { return a.heat > b.heat; };
  std::vector<PageHeat> top;
  if (limit == 0) return top;
  for (const auto& [key, c] : pageChunks_) {
    const pid_t tgid = tgidOfKey(key);
    if (onlyTgid != 0 && tgid != onlyTgid) continue;
    const double f = decayFactor(c.lastNs, nowNs, halfLifeOf(tgid));
    for (uint32_t i = 0; i < kBlockPages; ++i) {
      if (c.mantissa[i] == 0) continue;
      const PageHeat p{tgid, chunkBaseOfKey(key) + uint64_t{i} * kBasePageSize,
                       static_cast<double>(c.mantissa[i]) / c.stepsPerAccess * f};
      if (top.size() < limit) {
        top.push_back(p);
        std::push_heap(top.begin(), top.end(), hotter);
      } else if (p.heat > top.front().heat) {
        std::pop_heap(top.begin(), top.end(), hotter);
        top.back() = p;
        std::push_heap(top.begin(), top.end(), hotter);
      }
    }
  }
  std::sort_heap(top.begin(), top.end(), hotter);  // hottest first
  return top;
}

StepClock HeatModel::clockOf(pid_t tgid) const {
  auto it = processes_.find(tgid);
  return it == processes_.end() ? StepClock{} : it->second.clock;
}

}  // namespace tt::heat
