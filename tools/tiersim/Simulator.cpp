#include "Simulator.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <random>

namespace tt::tiersim {
namespace {

// Uniform double in [0, 1) from 53 random bits: identical on every platform, unlike
// std::uniform_real_distribution, whose algorithm is implementation-defined.
double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

struct StepAccumulator {
  double stallNs = 0;
  double migrationNs = 0;
  double hintFaultNs = 0;
  uint64_t migratedBytes = 0;
  uint64_t fastLines = 0;
  uint64_t totalLines = 0;
};

// One page copy accepted from a policy, waiting for or occupying the copy engine.
struct Copy {
  PageId page = 0;
  TierId from = 0;
  TierId to = 0;
  double copyNs = 0;      // the whole copy at the pair's rate
  double doneNs = 0;      // engine time spent on it so far
  bool started = false;   // its critical-path share has been charged
  bool cancelled = false; // replaced by a newer move of the page before it started
};

// A stretch of simulated time during which the engine copied from one tier to another: the
// bandwidth it stole is charged to the cost-model window(s) it falls in.
struct CopySpan {
  double startNs = 0;
  double endNs = 0;
  TierId from = 0;
  TierId to = 0;
  double bytesPerNs = 0;
};

constexpr uint64_t kNoCopy = 0;

class Replay {
 public:
  Replay(const Trace& trace, Policy& policy, const SimConfig& config)
      : trace_(trace), policy_(policy), config_(config), rng_(config.seed) {}

  SimResult run(bool offline);

 private:
  [[nodiscard]] double now(uint64_t traceTimeNs) const { return static_cast<double>(traceTimeNs) + extraNs_; }
  void closeWindow(double computeNs, double endSimNs);
  void runEpoch(double nowNs);
  // The copy engine: runs queued copies in order until simulated time `targetNs` (or, when
  // `traceBased`, until trace time `targetNs` + extraNs_, which moves as copies charge time).
  void advanceEngine(double targetNs, bool traceBased);
  void acceptMove(const PageMove& move);
  void completeCopy(const Copy& copy);
  [[nodiscard]] Copy* queuedCopy(PageId page);
  [[nodiscard]] uint64_t roomFor(TierId tier) const;
  void scanForHints(double nowNs);
  [[nodiscard]] uint64_t samplesOf(uint64_t lines);
  void onAccess(const SimAccess& access);
  void onMark(const IterationMark& mark);
  TierId placeFirstTouch(PageId page);

  const Trace& trace_;
  Policy& policy_;
  const SimConfig& config_;
  std::mt19937_64 rng_;

  std::vector<TierInfo> tiers_;   // usedPages: committed (resident + queued in - queued out)
  std::vector<uint64_t> resident_;  // pages whose tier this is now
  std::vector<uint64_t> incoming_;  // queued or in-flight copies into the tier
  std::vector<TierId> tierOf_;
  std::vector<uint8_t> present_;
  std::vector<uint8_t> accessed_;
  std::vector<double> hintArmedAt_;  // 0: not armed; else the scan time + 1
  std::vector<TierTraffic> traffic_;
  std::vector<PageMove> moves_;

  // The copy queue: FIFO, one copy at a time (a move_pages thread). copySeq_[page] is the
  // sequence number of the page's live entry (kNoCopy: none); queue_.front() has frontSeq_.
  std::deque<Copy> queue_;
  std::vector<uint64_t> copySeq_;
  uint64_t frontSeq_ = 1;
  uint64_t nextSeq_ = 1;
  uint64_t queuedPages_ = 0;       // live entries (in flight included)
  double engineNs_ = 0;            // simulated time the engine has run up to
  std::deque<CopySpan> spans_;     // engine activity not yet charged to a window

  double extraNs_ = 0;            // simulated time = trace time + extraNs_
  uint64_t windowStart_ = 0;
  uint64_t windowEnd_ = 0;
  double nextEpochNs_ = 0;
  uint64_t epoch_ = 0;
  PageId scanCursor_ = 0;
  double scanCarryPages_ = 0;
  uint64_t lastSampleLines_ = 0;   // the record size the two below are for
  double lastNoSample_ = 1;        // probability that a record of that many lines yields no sample
  double lastLogNoSample_ = 0;     // its log

  // The step being accumulated: from the previous StepEnd (the first step: its StepBegin) on.
  StepAccumulator step_;
  bool inStep_ = false;
  bool stepsBegun_ = false;
  uint64_t stepNumber_ = 0;
  double stepStartSimNs_ = 0;
  uint64_t stepStartTraceNs_ = 0;
  uint64_t currentTraceNs_ = 0;

  SimResult result_;
};

TierId Replay::placeFirstTouch(PageId page) {
  TierId tier = policy_.firstTouchTier(page, tiers_);
  if (tier >= tiers_.size()) tier = static_cast<TierId>(tiers_.size() - 1);
  // The kernel falls back to the next node in the tier order when the preferred one is full.
  // A page is allocated now, so queued demotions out of a tier give it no room yet (see roomFor).
  auto full = [&](size_t t) { return resident_[t] + incoming_[t] >= tiers_[t].capacityPages; };
  while (full(tier) && tier + 1U < tiers_.size()) ++tier;
  if (full(tier)) {
    for (size_t t = 0; t < tiers_.size(); ++t) {
      if (!full(t)) {
        tier = static_cast<TierId>(t);
        break;
      }
    }
  }
  return tier;
}

void Replay::closeWindow(double computeNs, double endSimNs) {
  // The copy engine's stolen bandwidth up to the window's end, at the engine's rate. Copying done
  // while this window's own stall is paid falls in the next window: that stall is known only once
  // the window's bytes are.
  const double overlap = std::clamp(config_.migrationOverlap, 0.0, 1.0);
  while (!spans_.empty() && spans_.front().startNs < endSimNs) {
    CopySpan& span = spans_.front();
    const double end = std::min(span.endNs, endSimNs);
    const double bytes = overlap * (end - span.startNs) * span.bytesPerNs;
    traffic_[span.from].extraReadBytes += bytes;
    traffic_[span.to].extraWriteBytes += bytes;
    if (end < span.endNs) {
      span.startNs = end;
      break;
    }
    spans_.pop_front();
  }
  double stall = 0;
  bool any = false;
  for (size_t t = 0; t < traffic_.size(); ++t) {
    const auto& traffic = traffic_[t];
    if (traffic.readLines == 0 && traffic.writeLines == 0 && traffic.extraReadBytes == 0 &&
        traffic.extraWriteBytes == 0) {
      continue;
    }
    any = true;
    stall += tierStallNs(config_.tiers[t].spec, traffic, config_.memoryParallelism);
  }
  if (!any) return;
  const double compute = std::max(0.0, computeNs);
  const double added = windowTimeNs(compute, stall, config_.computeOverlap) - compute;
  extraNs_ += added;
  step_.stallNs += added;
  for (auto& traffic : traffic_) traffic = TierTraffic{};
}

void Replay::scanForHints(double nowNs) {
  if (config_.hintScanBytesPerSec <= 0 || trace_.totalPages == 0) return;
  scanCarryPages_ += config_.hintScanBytesPerSec * static_cast<double>(config_.epochNs) / 1e9 / kPageBytes;
  auto pages = static_cast<uint64_t>(scanCarryPages_);
  scanCarryPages_ -= static_cast<double>(pages);
  pages = std::min<uint64_t>(pages, trace_.totalPages);
  for (uint64_t i = 0; i < pages; ++i) {
    const PageId page = scanCursor_;
    scanCursor_ = scanCursor_ + 1 == trace_.totalPages ? 0 : scanCursor_ + 1;
    // Memory-tiering NUMA balancing (Linux >= 5.18, NUMA_BALANCING_MEMORY_TIERING) skips pages
    // already on a top-tier node: only slow-tier pages are made to hint-fault.
    if (present_[page] != 0 && tierOf_[page] != 0) hintArmedAt_[page] = nowNs + 1;
  }
}

void Replay::runEpoch(double nowNs) {
  ++epoch_;
  scanForHints(nowNs);
  EpochContext context;
  context.nowNs = static_cast<uint64_t>(nowNs);
  context.epoch = epoch_;
  context.tiers = tiers_;
  context.tierOf = &tierOf_;
  context.present = &present_;
  context.accessedBits = &accessed_;
  context.traceNowNs = currentTraceNs_;
  context.linesPerCount = trace_.samplePeriod;
  context.promoteBytesPerNs = copyBytesPerNs(config_.tiers[1].spec, config_.tiers[0].spec,
                                             config_.migrationCopyBytesPerNs);
  context.demoteBytesPerNs = copyBytesPerNs(config_.tiers[0].spec, config_.tiers[1].spec,
                                            config_.migrationCopyBytesPerNs);
  context.queuedPages = queuedPages_;
  moves_.clear();
  policy_.onEpoch(context, moves_);
  for (const auto& move : moves_) acceptMove(move);
}

uint64_t Replay::roomFor(TierId tier) const {
  // Where every page will be once the queue has drained. The engine copies in order, so the
  // queued moves out of a tier complete before any move queued after them into it starts: a
  // demotion listed before a promotion makes its room, as move_pages does for a swap.
  const uint64_t committed = tiers_[tier].usedPages;
  return tiers_[tier].capacityPages > committed ? tiers_[tier].capacityPages - committed : 0;
}

Copy* Replay::queuedCopy(PageId page) {
  const uint64_t seq = copySeq_[page];
  if (seq == kNoCopy) return nullptr;
  return &queue_[seq - frontSeq_];
}

void Replay::acceptMove(const PageMove& move) {
  if (move.page >= trace_.totalPages || present_[move.page] == 0 || move.to >= tiers_.size()) {
    ++result_.refusedMoves;
    return;
  }
  const PageId page = move.page;
  if (Copy* queued = queuedCopy(page); queued != nullptr) {
    if (queued->to == move.to) return;  // already on its way there
    // A page whose copy has started cannot be re-targeted (move_pages holds the page until the
    // copy ends); the policy sees it in its old tier and may ask again once it has landed.
    if (queued->started) {
      ++result_.refusedMoves;
      return;
    }
    // The newer move replaces the queued one. Taking it out keeps the page in its old tier for
    // good, and moves queued after it may already count on the room it was to free: refused like
    // a move to a full tier unless the old tier holds the page whatever the queue does. That is
    // so when its resident pages plus every copy into it fit: before this copy the page occupies
    // the tier anyway, and after it at least this copy has left it.
    const TierId from = queued->from;
    if (resident_[from] + incoming_[from] > tiers_[from].capacityPages) {
      ++result_.refusedMoves;
      return;
    }
    queued->cancelled = true;
    copySeq_[page] = kNoCopy;
    --queuedPages_;
    --incoming_[queued->to];
    --tiers_[queued->to].usedPages;
    ++tiers_[from].usedPages;
    ++result_.cancelledMoves;
    if (move.to == from) return;
  }
  const TierId from = tierOf_[page];
  if (from == move.to) return;
  if (roomFor(move.to) == 0) {
    ++result_.refusedMoves;
    return;
  }
  Copy copy;
  copy.page = page;
  copy.from = from;
  copy.to = move.to;
  copy.copyNs = kPageBytes / copyBytesPerNs(config_.tiers[from].spec, config_.tiers[move.to].spec,
                                            config_.migrationCopyBytesPerNs);
  queue_.push_back(copy);
  copySeq_[page] = nextSeq_++;
  ++queuedPages_;
  ++incoming_[move.to];
  ++tiers_[move.to].usedPages;
  --tiers_[from].usedPages;
}

void Replay::completeCopy(const Copy& copy) {
  // The destination was reserved on acceptance; the source is freed now.
  --resident_[copy.from];
  ++resident_[copy.to];
  --incoming_[copy.to];
  --queuedPages_;
  copySeq_[copy.page] = kNoCopy;
  tierOf_[copy.page] = copy.to;
  if (copy.to < copy.from) {
    ++result_.promotedPages;
  } else {
    ++result_.demotedPages;
    if (!hintArmedAt_.empty()) hintArmedAt_[copy.page] = 0;
  }
  step_.migratedBytes += static_cast<uint64_t>(kPageBytes);
}

void Replay::advanceEngine(double targetNs, bool traceBased) {
  const double overlap = std::clamp(config_.migrationOverlap, 0.0, 1.0);
  auto target = [&] { return traceBased ? targetNs + extraNs_ : targetNs; };
  while (!queue_.empty()) {
    Copy& copy = queue_.front();
    if (copy.cancelled) {
      queue_.pop_front();
      ++frontSeq_;
      continue;
    }
    if (engineNs_ >= target()) break;
    if (!copy.started) {
      // The share of the copy on the application's critical path (the thread's CPU time, page
      // locks, TLB shootdowns) is charged as time when the copy starts: simulated time moves on
      // while the trace does not, and the engine copies meanwhile.
      copy.started = true;
      const double charged = (1.0 - overlap) * copy.copyNs;
      extraNs_ += charged;
      step_.migrationNs += charged;
    }
    const double remaining = copy.copyNs - copy.doneNs;
    const double available = target() - engineNs_;
    const bool finishes = remaining <= available;
    const double end = finishes ? engineNs_ + remaining : target();
    if (!spans_.empty() && spans_.back().endNs == engineNs_ && spans_.back().from == copy.from &&
        spans_.back().to == copy.to) {
      spans_.back().endNs = end;
    } else {
      spans_.push_back(CopySpan{engineNs_, end, copy.from, copy.to, kPageBytes / copy.copyNs});
    }
    engineNs_ = end;
    if (!finishes) {  // the target came first
      copy.doneNs += available;
      break;
    }
    const Copy done = copy;
    queue_.pop_front();
    ++frontSeq_;
    completeCopy(done);
  }
  // An idle engine starts the next copy when it is accepted, not in the past.
  if (queuedPages_ == 0) engineNs_ = std::max(engineNs_, target());
}

void Replay::onMark(const IterationMark& traceMark) {
  IterationMark mark = traceMark;
  mark.tgid = kSimTgid;
  const double simNow = now(traceMark.timestampNs);
  mark.timestampNs = static_cast<uint64_t>(simNow);
  if (mark.type == MarkType::StepBegin) {
    // A step runs from the previous step's end to its own: what happens between a StepEnd and
    // the next StepBegin (epochs due there and the copies they start, or a recording's gap
    // between steps) belongs to the step it leads into, so every simulated ns and migrated byte
    // from the first StepBegin to the last StepEnd is in exactly one step. Before the first step
    // nothing is counted; a step that began and never ended is not reported (its time is dropped
    // when the next one begins).
    if (!stepsBegun_ || inStep_) {
      stepStartSimNs_ = simNow;
      stepStartTraceNs_ = traceMark.timestampNs;
      step_ = StepAccumulator{};
    }
    stepsBegun_ = true;
    inStep_ = true;
    stepNumber_ = mark.step;
  }
  policy_.onMark(mark);
  if (mark.type == MarkType::StepEnd && inStep_) {
    StepStats stats;
    stats.step = stepNumber_;
    stats.timeNs = simNow - stepStartSimNs_;
    stats.computeNs = static_cast<double>(traceMark.timestampNs - stepStartTraceNs_);
    stats.stallNs = step_.stallNs;
    stats.migrationNs = step_.migrationNs;
    stats.hintFaultNs = step_.hintFaultNs;
    stats.migratedBytes = step_.migratedBytes;
    stats.fastLines = step_.fastLines;
    stats.totalLines = step_.totalLines;
    result_.steps.push_back(stats);
    inStep_ = false;
    stepStartSimNs_ = simNow;
    stepStartTraceNs_ = traceMark.timestampNs;
    step_ = StepAccumulator{};
  }
}

uint64_t Replay::samplesOf(uint64_t lines) {
  // Each of the record's lines is a sample with probability p = 1/period, so the record yields
  // Binomial(lines, p) samples, drawn by inversion from one uniform: one draw per record whatever it
  // yields, so the same seed gives the same samples. The draw gives a record no sample exactly when
  // it gave none when a record yielded one sample at most (uniform >= 1 - (1-p)^lines).
  const double u = 1.0 - uniform01(rng_);  // (0, 1]
  const uint32_t period = config_.samplePeriod;
  if (lines == 0) return 0;
  if (period == 1) return lines;
  const double p = 1.0 / period;
  if (lines != lastSampleLines_) {
    lastSampleLines_ = lines;
    lastLogNoSample_ = static_cast<double>(lines) * std::log1p(-p);
    lastNoSample_ = std::exp(lastLogNoSample_);
  }
  if (u <= lastNoSample_) return 0;
  // Up the distribution from 0 in the log domain (the probability of 0 underflows for a record of
  // millions of lines): as many steps as samples, so the cost is that of delivering them.
  const double n = static_cast<double>(lines);
  const double mean = n * p;
  const double logOdds = std::log(p / (1.0 - p));
  double logTerm = lastLogNoSample_;
  double cumulative = lastNoSample_;
  uint64_t k = 0;
  while (cumulative < u && k < lines) {
    logTerm += std::log((n - static_cast<double>(k)) / static_cast<double>(k + 1)) + logOdds;
    ++k;
    const double term = std::exp(logTerm);
    cumulative += term;
    // Rounding can leave the sum a hair under 1: past the mean, a vanishing term ends the walk.
    if (static_cast<double>(k) > mean && term < 1e-17) break;
  }
  return k;
}

void Replay::onAccess(const SimAccess& access) {
  const PageId page = access.page;
  if (present_[page] == 0) {
    const TierId tier = placeFirstTouch(page);
    present_[page] = 1;
    tierOf_[page] = tier;
    ++tiers_[tier].usedPages;
    ++resident_[tier];
  }
  const TierId tier = tierOf_[page];
  const uint64_t lines = static_cast<uint64_t>(access.count) * trace_.samplePeriod;
  if (access.write) {
    traffic_[tier].writeLines += lines;
  } else {
    traffic_[tier].readLines += lines;
  }
  step_.totalLines += lines;
  if (tier == 0) step_.fastLines += lines;
  accessed_[page] = 1;

  if (config_.samplePeriod > 0) {
    // The record stands for `lines` accesses (count x the trace's own period), as the cost model
    // charges them: a sampler sees each of them, not the record.
    const uint64_t samples = samplesOf(lines);
    if (samples > 0) {
      SimAccess sample = access;
      sample.timeNs = static_cast<uint64_t>(now(access.timeNs));
      result_.samples += samples;
      for (uint64_t i = 0; i < samples; ++i) policy_.onSample(sample);
    }
  }
  if (!hintArmedAt_.empty() && hintArmedAt_[page] != 0) {
    hintArmedAt_[page] = 0;
    if (tier != 0) {
      SimAccess fault = access;
      fault.timeNs = static_cast<uint64_t>(now(access.timeNs));
      ++result_.hintFaults;
      extraNs_ += config_.hintFaultNs;
      step_.hintFaultNs += config_.hintFaultNs;
      policy_.onHintFault(fault);
    }
  }
}

SimResult Replay::run(bool offline) {
  const uint64_t total = trace_.totalPages;
  const size_t tierCount = config_.tiers.size();
  tiers_.resize(tierCount);
  for (size_t t = 0; t < tierCount; ++t) {
    const auto& spec = config_.tiers[t].spec;
    auto& info = tiers_[t];
    info.capacityPages = config_.tiers[t].capacityPages;
    if (t + 1 == tierCount || (t == 0 && config_.unboundedFastTier)) {
      info.capacityPages = std::max(info.capacityPages, total);
    }
    info.readLatencyNs = spec.readLatencyNs;
    info.writeLatencyNs = spec.writeLatencyNs;
    info.readBandwidthBytesPerNs = spec.readBandwidthBytesPerNs;
    info.writeBandwidthBytesPerNs = spec.writeBandwidthBytesPerNs;
  }
  resident_.assign(tierCount, 0);
  incoming_.assign(tierCount, 0);
  copySeq_.assign(total, kNoCopy);
  tierOf_.assign(total, 0);
  present_.assign(total, 0);
  accessed_.assign(total, 0);
  if (config_.hintScanBytesPerSec > 0) hintArmedAt_.assign(total, 0);
  traffic_.assign(tierCount, TierTraffic{});
  result_.policy = policy_.name();
  result_.trace = trace_.name;

  policy_.init(trace_.regions, total, tiers_, offline ? &trace_.accesses : nullptr);

  const uint64_t window = std::max<uint64_t>(1, config_.windowNs);
  const double epochNs = static_cast<double>(std::max<uint64_t>(1, config_.epochNs));
  nextEpochNs_ = epochNs;
  const auto& accesses = trace_.accesses;
  const auto& marks = trace_.marks;
  size_t a = 0;
  size_t m = 0;
  windowStart_ = 0;
  windowEnd_ = window;
  while (a < accesses.size() || m < marks.size()) {
    const bool takeMark = m < marks.size() && (a >= accesses.size() || marks[m].timestampNs <= accesses[a].timeNs);
    const uint64_t t = takeMark ? marks[m].timestampNs : accesses[a].timeNs;
    currentTraceNs_ = t;
    // Epochs due by now run first (as before the copy queue), the engine running up to each.
    while (now(t) >= nextEpochNs_) {
      advanceEngine(nextEpochNs_, false);
      runEpoch(nextEpochNs_);
      nextEpochNs_ += epochNs;
    }
    if (t >= windowEnd_) {
      advanceEngine(static_cast<double>(windowEnd_), true);
      closeWindow(static_cast<double>(windowEnd_ - windowStart_), now(windowEnd_));
      // A stretch without accesses is a window of its own: only the engine's copies use memory
      // in it, at the engine's rate (before the copy queue they all landed in the next window).
      if (t > windowEnd_) {
        advanceEngine(static_cast<double>(t), true);
        closeWindow(static_cast<double>(t - windowEnd_), now(t));
      }
      windowStart_ = t;
      windowEnd_ = t + window;
    }
    // Copies that complete by now change their page's tier before this access is served.
    advanceEngine(static_cast<double>(t), true);
    if (takeMark) {
      // A step's last window closes with the step, so its stall is charged to that step.
      if (marks[m].type == MarkType::StepEnd) {
        closeWindow(static_cast<double>(t - windowStart_), now(t));
        windowStart_ = t;
        windowEnd_ = t + window;
      }
      onMark(marks[m++]);
    } else {
      onAccess(accesses[a++]);
    }
  }
  closeWindow(static_cast<double>(currentTraceNs_ - windowStart_), now(currentTraceNs_));
  result_.epochs = epoch_;
  result_.queuedPagesAtEnd = queuedPages_;
  result_.totalTimeNs = now(currentTraceNs_);

  const auto& steps = result_.steps;
  const size_t first = steps.size() > config_.warmupSteps ? config_.warmupSteps : 0;
  double time = 0;
  double bytes = 0;
  double fast = 0;
  double lines = 0;
  for (size_t i = first; i < steps.size(); ++i) {
    time += steps[i].timeNs;
    bytes += static_cast<double>(steps[i].migratedBytes);
    fast += static_cast<double>(steps[i].fastLines);
    lines += static_cast<double>(steps[i].totalLines);
  }
  const double n = static_cast<double>(steps.size() - first);
  if (n > 0) {
    result_.meanStepNs = time / n;
    result_.meanMigratedBytesPerStep = bytes / n;
  }
  result_.fastHitFraction = lines > 0 ? fast / lines : 0;
  return result_;
}

}  // namespace

Result<SimResult> simulate(const Trace& trace, Policy& policy, const SimConfig& config, bool offline) {
  if (config.tiers.size() < 2 || config.tiers.size() > 3) {
    return logicError("tiersim: " + std::to_string(config.tiers.size()) + " tiers configured (2 or 3 supported)");
  }
  for (const auto& tier : config.tiers) {
    if (tier.spec.readBandwidthBytesPerNs <= 0 || tier.spec.writeBandwidthBytesPerNs <= 0) {
      return logicError("tiersim: tier '" + tier.spec.name + "' has no bandwidth");
    }
  }
  // A copy at no (or no number of) bytes per ns never completes: the replay would charge it for
  // ever. An infinite rate is bounded by the tiers' bandwidth, but is no engine either.
  if (!(config.migrationCopyBytesPerNs > 0) || !std::isfinite(config.migrationCopyBytesPerNs)) {
    return logicError("tiersim: migration copy bandwidth " + std::to_string(config.migrationCopyBytesPerNs) +
                      " bytes/ns (--copy-gbps) must be positive and finite");
  }
  if (auto valid = validateTrace(trace); !valid) return valid.error();
  Replay replay(trace, policy, config);
  return replay.run(offline);
}

}  // namespace tt::tiersim
