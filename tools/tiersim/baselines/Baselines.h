// Re-implementations of the peers' placement policies, the bar tensortier is judged against.
// Each follows its paper's published mechanism and parameters (cited next to each parameter);
// what a 4 KiB-page simulator cannot reproduce is said in the .cpp.
//
// Time and sample-count parameters are given at the paper's scale; `scaleDivisor` is the trace's
// scale divisor (Trace::scaleDivisor): a trace whose tensors and FLOPs were divided by S runs S
// times faster and yields S times fewer samples, so periods are divided by S too, keeping the same
// number of policy decisions per training step. Rates (bytes/s) need no scaling.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "Policy.h"
#include "Trace.h"

namespace tt::tiersim {

// Room below the fast tier for one epoch's demotions: the next slower tier with free capacity,
// in tier order (the kernel's demotion target order), tracked through the epoch's moves.
class DemotionRoom {
 public:
  explicit DemotionRoom(const EpochContext& context) {
    for (size_t t = 1; t < context.tiers.size(); ++t) {
      const auto& tier = context.tiers[t];
      free_.push_back(tier.capacityPages > tier.usedPages ? tier.capacityPages - tier.usedPages : 0);
    }
  }
  // The tier to demote one page to, or 0 when every slower tier is full.
  // The tier take() would return, without taking it.
  [[nodiscard]] TierId peek() const {
    for (size_t i = 0; i < free_.size(); ++i) {
      if (free_[i] > 0) return static_cast<TierId>(i + 1);
    }
    return 0;
  }
  [[nodiscard]] TierId take() {
    for (size_t i = 0; i < free_.size(); ++i) {
      if (free_[i] > 0) {
        --free_[i];
        return static_cast<TierId>(i + 1);
      }
    }
    return 0;
  }
  [[nodiscard]] uint64_t total() const {
    uint64_t sum = 0;
    for (uint64_t f : free_) sum += f;
    return sum;
  }

 private:
  std::vector<uint64_t> free_;
};

// The bound: first-touch on an unbounded fast tier (run with SimConfig::unboundedFastTier).
[[nodiscard]] std::unique_ptr<Policy> makeAllDramPolicy();

// The kernel's default without tiering: first touch, fast while it has room, never migrate.
[[nodiscard]] std::unique_ptr<Policy> makeFirstTouchPolicy();

// TPP (Al Maruf et al., "TPP: Transparent Page Placement for CXL-Enabled Tiered-Memory",
// ASPLOS'23) plus the upstream Linux memory-tiering promotion rate limit.
struct TppParams {
  // Promote a slow page on a NUMA hint fault only if it is already on the active LRU, i.e. it
  // faulted before (TPP "active LRU-based hot page detection", against ping-pong).
  bool requireActive = true;
  // numa_balancing_promote_rate_limit_MBps (Linux 6.0, default 65536 MB/s), per 1 s window.
  double promoteRateLimitBytesPerSec = 65536.0 * 1024 * 1024;
  // Demotion starts when fast free memory falls under this share of the fast tier and runs until
  // it is back above it (TPP: decoupled allocation and reclamation watermarks).
  double demoteWatermark = 0.02;
  uint32_t scaleDivisor = 1;
};
[[nodiscard]] std::unique_ptr<Policy> makeTppPolicy(const TppParams& params);

// HeMem (Raybuck et al., "HeMem: Scalable Tiered Memory Management for Big Data Applications and
// Real NVM", SOSP'21), PEBS-sample driven.
struct HeMemParams {
  uint32_t hotReadThreshold = 8;    // paper: a page is hot at 8 read samples ...
  uint32_t hotWriteThreshold = 4;   // ... or 4 write samples
  uint32_t coolingThreshold = 18;   // when a page's count reaches this, every count is halved
  double intervalNs = 10e6;         // policy thread period, PEBS_KSWAPD_INTERVAL = 10 ms
  double migrateBytesPerInterval = 10.0 * 1024 * 1024 * 1024;  // PEBS_KSWAPD_MIGRATE_RATE
  uint64_t hugePageBytes = 2ULL << 20;  // HeMem tracks and moves 2 MiB pages (divided by S)
  uint32_t samplePeriod = 19997;        // SAMPLE_PERIOD in hemem src/pebs.h (divided by S)
  uint32_t scaleDivisor = 1;
};
[[nodiscard]] std::unique_ptr<Policy> makeHeMemPolicy(const HeMemParams& params);

// Memtis (Lee et al., "MEMTIS: Efficient Memory Tiering with Dynamic Page Classification and Page
// Size Determination", SOSP'23), base pages only (no huge-page split decisions).
struct MemtisParams {
  uint64_t coolingPeriodSamples = 2'000'000;   // htmm_cooling_period
  uint64_t adaptationPeriodSamples = 100'000;  // htmm_adaptation_period
  double migrationIntervalNs = 500e6;          // htmm_promotion/demotion_period_in_ms = 500
  uint64_t minFreeBytes = 10ULL << 20;         // HTMM_MIN_FREE_PAGES (10 MB)
  bool warmSet = true;                         // htmm_nowarm = 0
  uint32_t scaleDivisor = 1;
};
[[nodiscard]] std::unique_ptr<Policy> makeMemtisPolicy(const MemtisParams& params);
// Memtis' histogram bin of an access count: floor(log2(count + 1)), at most 15 (get_idx()).
[[nodiscard]] unsigned memtisBin(uint64_t count);
// The current hot threshold (a bin) of a Memtis-like policy; -1 for any other policy.
[[nodiscard]] int memtisHotThreshold(const Policy& policy);

// What serving one cache-line access from the fast tier instead of tier 1 saves, per direction:
// the per-line form of the simulator's roofline, max(latency / memory parallelism, 64 B /
// bandwidth), slow minus fast. The offline policies' unit of value.
struct LineSaving {
  double readNs = 0;
  double writeNs = 0;
};
[[nodiscard]] LineSaving perLineSaving(const std::vector<TierInfo>& tiers, double memoryParallelism);

// AutoTM-like static optimum (Hildebrand et al., "AutoTM: Automatic Tensor Movement in
// Heterogeneous Memory Systems using Integer Linear Programming", ASPLOS'20), the static variant:
// offline, over the whole trace, place in the fast tier the pages whose modelled stall saving per
// byte is highest, for the whole run, never migrate. See AutoTm.cpp for what exactly is optimised.
[[nodiscard]] std::unique_ptr<Policy> makeAutoTmStaticPolicy(double memoryParallelism);

// What the offline oracles share: they start from the static optimum's placement (first touch as
// AutoTm.cpp plans it) and learn the step length in trace time from the spacing of the trace's own
// StepBegin marks as the replay reaches them.
class StaticStartOracle : public Policy {
 public:
  explicit StaticStartOracle(double memoryParallelism) : initial_(makeAutoTmStaticPolicy(memoryParallelism)) {}
  [[nodiscard]] TierId firstTouchTier(PageId page, const std::vector<TierInfo>& tiers) const override {
    return initial_->firstTouchTier(page, tiers);
  }
  void onSample(const SimAccess&) override {}
  void onMark(const IterationMark& mark) override {
    if (mark.type == MarkType::StepBegin) ++stepsBegun_;
  }

 protected:
  // Call once per epoch; stepTraceNs_ stays 0 until two steps began.
  void learnStepLength(uint64_t traceNowNs) {
    if (stepsBegun_ == lastSteps_) return;
    lastSteps_ = stepsBegun_;
    if (stepsBegun_ == 1) firstStepTraceNs_ = traceNowNs;
    if (stepsBegun_ >= 2)
      stepTraceNs_ = static_cast<double>(traceNowNs - firstStepTraceNs_) / static_cast<double>(stepsBegun_ - 1);
  }

  std::unique_ptr<Policy> initial_;  // the static optimum: where pages start
  double stepTraceNs_ = 0;

 private:
  uint64_t stepsBegun_ = 0, lastSteps_ = 0;
  uint64_t firstStepTraceNs_ = 0;
};

// Look-ahead oracle (not a peer: a yardstick): offline, migrating, valuing each page by the stall
// its accesses in the next `horizonSteps` steps would save, moving a page when that beats
// `copyWeight` x its copy time. What migration with perfect knowledge adds over the static
// optimum; a heuristic, not a proven optimum. See Oracle.cpp.
[[nodiscard]] std::unique_ptr<Policy> makeLookaheadOraclePolicy(double memoryParallelism, double horizonSteps,
                                                                double copyWeight);

// Prefetching oracle (a yardstick, not a peer): offline, knows the trace and the cost model, and
// schedules copies into windows whose memory bandwidth is idle (Sentinel-like, HPCA'21): promotes
// the slow page needed soonest by a memory-bound window, demoting the fast page needed latest, when
// the saving beats what the copies add to the window they land in. See OraclePrefetch.cpp.
struct PrefetchOracleParams {
  double memoryParallelism = 64;
  double computeOverlap = 0;      // SimConfig::computeOverlap
  double migrationOverlap = 0.5;  // SimConfig::migrationOverlap
  uint64_t windowNs = 20'000;     // SimConfig::windowNs
  double horizonSteps = 1.0;      // how far ahead it looks, in steps
};
[[nodiscard]] std::unique_ptr<Policy> makePrefetchOraclePolicy(const PrefetchOracleParams& params);

}  // namespace tt::tiersim
