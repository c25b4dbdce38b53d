// The heat model: what is hot now, and what the training step will touch next.
//
// Units. Heat is kept per 4 KiB page and per unit. A unit is a registered region (a tensor,
// tt::RegionInfo) or, for pages no region covers, an aligned chunk of `chunk_pages` pages: the
// model works with region hints alone, with page samples alone, or with both.
//
// Features (after DeepTM). Each unit has four features in [0, 1]:
//   frequency  decayed accesses per page, relative to the hottest unit
//   recency    0.5^(time since last access / half-life)
//   size       smaller units score higher (cheaper to move, less capacity)
//   reuse      accesses per page the learned step schedule predicts over the coming horizon,
//              relative to the highest; without a known step period it falls back to frequency
// and a score = sum(w_k * feature_k). The weights adapt online by multiplicative weights (Hedge):
// at each epoch close, every feature's prediction made one epoch earlier is compared with the
// accesses the epoch really saw (normalised per page), and w_k *= exp(-rate * mean |error_k|),
// renormalised, floored. A feature that predicts the next epoch well gains weight.
//
// Iteration awareness (Sentinel, AppObMem). Per process a StepClock (period + anchor) is learned
// from StepBegin/StepEnd marks, or a configured hint, or the autocorrelation of the sample stream.
// Each unit keeps a schedule: accesses per page in each of `schedule_buckets` time-offset buckets
// of the step, a moving average over steps. The horizon is long enough to migrate what the coming
// buckets need at the measured migration rates (setMigrationRates) plus
// `lookahead_step_fraction` of the step. Phase marks re-anchor the step on each phase's usual
// offset, so stalls that vary with placement do not smear the schedule.
//
// What the planner gets (UnitHeat::expectedAccessesPerPage): with a schedule, the unit's next
// burst of use (the accesses of its next run of busy buckets; the remainder of a burst in
// progress), in full when the burst starts within the horizon and halving per bucket beyond it,
// so the planner promotes what is needed next just in time and evicts what is needed last
// (Belady-like); without a schedule, score x the highest reuse value (the learned blend). A burst
// in progress that ends within the step counts only until a successor of the unit's size must
// start moving in (the unit's demotion and the successor's promotion, each at its measured rate,
// after the next plan): its accesses after that are fast only if the successor arrives late.
// Counted, they held a phase's swap back until its copy could no longer finish in time. The cut is
// at most hysteresis_margin / (1 + hysteresis_margin) of the burst, so that at its start a unit
// is worth, with its margin, at least a successor with the same burst (a unit too large to swap
// within its burst is not demoted as its use begins); within a burst the value only falls.
//
// A process's phase marks ("forward", "backward", "optimizer") give a prior by region kind
// (weights in every phase; activations in forward and backward; gradients in backward and
// optimizer; optimizer state in optimizer). It is kept apart from the evidence and blended in with
// a pseudo-count weight: all there is without evidence, at most 1/(1 + n) of the strongest
// measured value after n epochs with evidence, never learned from as if it were an access.
//
// Within a unit, accesses need not be even: a workspace reused by tensors of many sizes has a hot
// head and a tail only the largest touches; an embedding table has hot rows. The unit's figures are
// per page on average, and UnitHeat::blockWeights says, from the per-page heat, how each of its
// blocks compares, so the planner keeps the hot part of a large unit rather than any part of it.
//
// Threading: not thread-safe; the daemon's epoch loop owns it.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/Result.h"
#include "core/Types.h"
#include "heat/StepClock.h"
#include "tensortier/v1/policy_config.pb.h"

namespace tt::heat {

enum Feature : size_t { kFrequency = 0, kRecency = 1, kSize = 2, kReuse = 3 };
inline constexpr size_t kFeatureCount = 4;
[[nodiscard]] const char* featureName(size_t feature);

// The keys of PolicyConfig the heat model reads whose values differ between `before` and `after`,
// in field order. The planner reads the others, and chunk_pages and initial_migration_bandwidth
// too, at every plan.
[[nodiscard]] std::vector<std::string> heatModelKeysChanged(const tensortier::v1::PolicyConfig& before,
                                                            const tensortier::v1::PolicyConfig& after);
// What a live change from `before` to `after` does to the heat model (HeatModel::reconfigure), one
// line per changed heat-model key, for the log and `tensortierctl tune`'s reply: every key applies
// from the next epoch; the lines of the keys that reshape learned state say what becomes of it.
[[nodiscard]] std::vector<std::string> heatModelChangeNotes(const tensortier::v1::PolicyConfig& before,
                                                            const tensortier::v1::PolicyConfig& after);
using FeatureVector = std::array<double, kFeatureCount>;

struct UnitHeat {
  pid_t tgid = 0;
  uint64_t start = 0;   // page aligned
  uint64_t length = 0;  // bytes
  uint64_t regionId = 0;  // 0 for a chunk of unregistered pages
  RegionKind kind = RegionKind::Other;
  double heat = 0;      // decayed accesses of the whole unit
  FeatureVector features{};
  double score = 0;     // weights . features, in [0, 1]
  // Expected accesses per page over the planning horizon: what being fast is worth per page soon.
  double expectedAccessesPerPage = 0;
  // Accesses per page in a whole step by the learned schedule; without a step clock, the decayed
  // heat per page (accesses over about 1.44 half-lives). What staying fast is worth in the long run.
  double accessesPerPagePerStep = 0;
  // Time until the schedule predicts the next access, ns; 0 = in use now; UINT64_MAX = unknown.
  uint64_t nextUseInNs = UINT64_MAX;
  // How long the unit has been in use without a break, in steps (the unit of accessesPerPagePerStep:
  // the step period, or 1.44 half-lives without a learned schedule): the time since its current
  // run of evidence began, a run ending after a gap without evidence (kSteadyGapSteps). 0 without
  // evidence (the kind prior alone is no run). A pattern is expected to last about as long as it
  // has lasted, so the planner also values the steps beyond amortization_steps the unit has been
  // steady (tenure, capped at two moves; max_amortization_steps).
  double steadySteps = 0;
  // Accesses per page per observed step averaged over that run, at most accessesPerPagePerStep:
  // the level the unit has held for steadySteps (a burst that just began, or a unit that has just
  // cooled, is held at the lower of the two).
  double steadyAccessesPerPagePerStep = 0;
  // How the unit's accesses spread over its blocks of blockWeightBytes (the heat model's
  // chunk_pages; block i starts i x blockWeightBytes after `start`: the planner's blocks when both
  // use the same chunk_pages), from the per-page heat: block i's page heat per page over the unit's.
  // A block at 2 gets twice the unit's per-page accesses, and the weights over the unit's pages
  // average 1 (nearly, when the last block is shorter). Empty when the unit is one block or has no
  // page heat (hints alone): every block is then worth the unit's per-page figures. Sparse evidence
  // is no proof of a difference: each weight is shrunk towards 1 as if kBlockWeightPriorObservations
  // more observations had found the block at the unit's average, so a block that expects few
  // observations stays near 1 whatever it got, and one that expects many keeps its measured weight
  // (0 when it got none). Blocks whose per-page heat was forgotten over max_tracked_pages count as
  // blocks without heat (the coldest chunks go first).
  std::vector<float> blockWeights;
  uint64_t blockWeightBytes = 0;
};

struct ProcessClockInfo {
  pid_t tgid = 0;
  StepClock clock;
  uint64_t step = 0;
  std::string phase;
  double phaseFraction = 0;  // position in the current step, [0, 1)
  uint64_t horizonNs = 0;    // how far its reuse feature looks ahead; 0 = no step schedule yet
};

struct HeatSnapshot {
  uint64_t nowNs = 0;
  uint64_t epoch = 0;
  uint64_t horizonNs = 0;       // how far the reuse feature looks ahead (mean over processes)
  FeatureVector weights{};
  std::vector<UnitHeat> units;  // ascending (tgid, start)
  std::vector<ProcessClockInfo> processes;
  uint64_t trackedPages = 0;
};

// Phase names per process whose offsets in the step the model learns (forward, backward, optimizer
// and a few more; names beyond these are not re-anchored on).
inline constexpr size_t kMaxPhasesPerStep = 16;

// Steps (or epochs, or the usual gap between marks, when longer) without a mark after which a
// period learned from marks is dropped: the client stopped
// marking (an evaluation loop without marks, a finished training loop), and the period it left
// would otherwise be kept for good, over what a hint or the sample stream now say.
inline constexpr uint64_t kStaleMarkSteps = 16;

// Steps without evidence that end a unit's run of steady use (UnitHeat::steadySteps), or planning
// intervals when those are longer. Sampled evidence misses a lightly used unit for a step or two;
// a unit idle for longer has changed.
inline constexpr double kSteadyGapSteps = 4;

// The pseudo-observations that pull a block's weight towards its unit's average (blockWeights).
inline constexpr double kBlockWeightPriorObservations = 8;

struct PageHeat {
  pid_t tgid = 0;
  uint64_t page = 0;
  double heat = 0;
};

class HeatModel {
 public:
  explicit HeatModel(const tensortier::v1::PolicyConfig& config);

  // A live config change (SIGHUP, `tensortierctl tune`). The learned state is worth more than a
  // fresh start, so it is carried over into the new parameters rather than dropped: step schedules
  // are resampled to a new schedule_buckets, and chunks of unregistered pages are regrouped into
  // chunks of a new chunk_pages with their heat, schedules and runs of steady use (page heat is
  // kept per 2 MiB whatever chunk_pages is). A new half-life applies from the model's time on
  // (the last advanceEpoch); learned periods stay until the next estimate, except one that came
  // from a step hint now cleared. Only the sample-stream period history restarts, and only when
  // its bin width or length changes. initial_migration_bandwidth applies only until
  // setMigrationRates has given measured rates. Call it between epochs.
  void reconfigure(const tensortier::v1::PolicyConfig& config);

  // Regions: page-aligned, non-empty, not overlapping another region of the same process.
  [[nodiscard]] Result<void> addRegion(const RegionInfo& region);
  void removeRegion(uint64_t regionId);
  void removeProcess(pid_t tgid);

  // A batch of evidence observed at `nowNs` (CLOCK_MONOTONIC). Fault and Hint evidence counts like
  // an access. `scale` multiplies every weight (a sampler that delivers 1 in N sets N).
  void ingest(std::span<const AccessEvidence> batch, uint64_t nowNs, double scale = 1.0);
  // An epoch's records and blocks (a block page counts as the record it stands for).
  void ingest(const EvidenceBatch& batch, uint64_t nowNs, double scale = 1.0);
  // The same for evidence gathered over (sinceNs, nowNs] without the time of each access (sources
  // read once per epoch): the step schedules and the period detector get each unit's accesses
  // spread evenly over that span, not all at nowNs. A span longer than the step still counts
  // whole in the step in progress, spread over all its buckets (see spreadSpan).
  void ingest(const EvidenceBatch& batch, uint64_t sinceNs, uint64_t nowNs, double scale);
  void onMark(const IterationMark& mark);
  // What the migration engine copies per second each way, recently; sizes the look-ahead horizon
  // (a fetch is a promotion and, into a full fast tier, the demotion that makes its room). Rates
  // not both known (MigrationRates::known) are ignored.
  void setMigrationRates(const MigrationRates& rates);
  // Time between the planner's runs (the daemon's epoch): a burst that enters the look-ahead just
  // after a plan is seen only at the next one, so the horizon reaches that much further.
  void setPlanInterval(uint64_t intervalNs) { planIntervalNs_ = intervalNs; }

  // Closes the epoch ending at `nowNs`: learns the feature weights from what the epoch saw, folds
  // finished steps into the schedules, re-estimates periods, and recomputes the snapshot.
  void advanceEpoch(uint64_t nowNs);

  // The state as of the last advanceEpoch (for the planner and the CLI).
  [[nodiscard]] const HeatSnapshot& snapshot() const { return snapshot_; }
  [[nodiscard]] const FeatureVector& weights() const { return weights_; }
  // Decayed heat of one page at `nowNs` (0 if untracked), and the hottest pages (CLI).
  [[nodiscard]] double pageHeat(pid_t tgid, uint64_t page, uint64_t nowNs) const;
  [[nodiscard]] std::vector<PageHeat> hottestPages(size_t limit, uint64_t nowNs) const {
    return hottestPages(limit, nowNs, 0);
  }
  // The same, of process `tgid` only (0: every process); other processes' chunks are skipped whole.
  [[nodiscard]] std::vector<PageHeat> hottestPages(size_t limit, uint64_t nowNs, pid_t tgid) const;
  [[nodiscard]] StepClock clockOf(pid_t tgid) const;

 private:
  struct Unit {
    pid_t tgid = 0;
    uint64_t start = 0;
    uint64_t length = 0;
    uint64_t regionId = 0;
    RegionKind kind = RegionKind::Other;
    double heat = 0;
    // Decayed like heat: evidence records, unweighted (a block page counts as the record it
    // stands for, whatever its count: the ring path merges a page's samples into one record too).
    double observations = 0;
    uint64_t heatNs = 0;
    uint64_t lastAccessNs = 0;
    bool accessed = false;
    double epochAccesses = 0;
    std::vector<double> schedule;  // accesses per page per step, per bucket (moving average)
    std::vector<double> stepAccum; // accesses per page in the step in progress, per bucket
    bool scheduleValid = false;
    double spanAccesses = 0;       // this batch's accesses, to spread over its span (ingest)
    FeatureVector predicted{};     // features at the last epoch close
    // The current run of steady use (UnitHeat::steadySteps): its first and last evidence, and the
    // accesses it has seen (not decayed); runAccesses 0 = no run.
    uint64_t runStartNs = 0;
    uint64_t runLastNs = 0;
    double runAccesses = 0;
    bool hasPrediction = false;
    // The kind prior, kept apart from the evidence: its own decayed heat and step schedule, in
    // "one access per page per millisecond of an active phase". computeSnapshot blends it in with
    // a weight that shrinks as the process's evidence accumulates (see applyKindPrior).
    // The prior's vectors stay empty (all zeros) until the unit gets a prior in a step: a chunk
    // of unregistered pages never does, and two vectors of schedule_buckets doubles were a third
    // of a chunk unit's memory.
    double priorHeat = 0;
    uint64_t priorHeatNs = 0;
    std::vector<double> priorSchedule;   // empty or schedule_buckets entries
    std::vector<double> priorStepAccum;  // empty or schedule_buckets entries
    bool priorScheduleValid = false;
    [[nodiscard]] uint64_t pages() const { return length / kBasePageSize; }
  };
  struct Process {
    MarkPeriodEstimator marks;
    bool sawStepBegin = false;
    SamplePeriodDetector samples;
    StepClock clock;
    uint64_t stepStartNs = 0;     // start of the step in progress (schedule accumulation)
    bool stepOpen = false;
    uint64_t step = 0;
    std::string phase;
    bool sampled = false;
    uint64_t lastPriorNs = 0;
    bool evidenceThisEpoch = false;
    bool evidenceInStep = false;  // evidence arrived during the step in progress
    uint64_t evidenceEpochs = 0;  // epochs in which evidence (not the prior) reached this process
    uint64_t epochsSinceEstimate = 0;
    uint64_t halfLifeNs = 0;       // heat half-life of this process's pages and units
    // Typical start of each phase within the step, for at most kMaxPhasesPerStep phase names.
    std::map<std::string, double> phaseOffsetNs;
    // The phases begun in the step in progress (at most kMaxPhasesPerStep): only a phase's first
    // mark in a step says where the step is. With gradient accumulation a step runs forward and
    // backward once per micro-batch, and re-anchoring on every repeat moved the step's start by
    // tens of ms within each step.
    std::vector<std::string> phasesThisStep;
    // Sample-period estimates in a row that found no period (the stream stopped repeating).
    uint32_t estimateMisses = 0;
    Process(const SamplePeriodParams& p, uint64_t halfLife) : samples(p), halfLifeNs(halfLife) {}
  };
  using UnitMap = std::map<uint64_t, Unit>;  // by start
  // A unit's evidence with the kind prior blended in (computeSnapshot's inputs).
  struct Blend {
    double heat = 0;
    std::vector<double> schedule;
    bool scheduleValid = false;
  };

  Process& process(pid_t tgid);
  void startAt(uint64_t nowNs);
  void ingestRecords(std::span<const AccessEvidence> batch, uint64_t nowNs, double scale);
  void ingestBlock(const EvidenceBlock& block, uint64_t nowNs, double scale);
  void trimPages(uint64_t nowNs);
  // Drops the per-page heat of [start, end) of a process (a removed region's).
  void forgetPageHeat(pid_t tgid, uint64_t start, uint64_t end);
  // Spreads the batch's accesses of the units in spanUnits_ over (spanSinceNs_, nowNs].
  void spreadSpan(uint64_t nowNs);
  // The share of [since, since + span) each schedule bucket of `clock`'s step gets.
  [[nodiscard]] std::vector<double> bucketShares(const StepClock& clock, uint64_t since, uint64_t span) const;
  Unit* unitFor(pid_t tgid, uint64_t page);
  void addAccess(Unit& unit, Process& proc, uint64_t nowNs, double accesses, double observations);
  // `shares`: how the accesses spread over the step's schedule buckets (bucketShares), nullptr
  // without a known step.
  void addPrior(Unit& unit, uint64_t nowNs, double accesses, const std::vector<double>* shares);
  void decayUnit(Unit& unit, uint64_t nowNs);
  [[nodiscard]] uint64_t halfLifeOf(pid_t tgid) const;
  // The half-life of a process's heat: heat_half_life_ms, or fewer steps of its known period.
  [[nodiscard]] uint64_t halfLifeFor(const Process& proc) const;
  // 1.44 half-lives of a process's heat: the span the decayed heat of a steady rate integrates,
  // the step of a unit without a learned schedule (UnitHeat::accessesPerPagePerStep).
  [[nodiscard]] static double heatSpanNs(const Process& proc);
  // The length of a process's step in ns: its period when known, else heatSpanNs.
  [[nodiscard]] static double stepNsOf(const Process& proc);
  // The time without evidence that ends a unit's run of steady use: kSteadyGapSteps steps, or as
  // many planning intervals when those are longer (evidence arrives once per epoch).
  [[nodiscard]] double steadyGapNs(const Process& proc) const;
  void rollSteps(Process& proc, pid_t tgid, uint64_t nowNs);
  // reconfigure's parts: the schedules of every unit resampled to `buckets`, and the chunk units of
  // unregistered pages regrouped by chunkBytes_.
  void resampleSchedules(uint32_t buckets);
  void regroupChunks(pid_t tgid, UnitMap& map);
  void foldStep(pid_t tgid);
  void applyKindPrior(pid_t tgid, Process& proc, uint64_t nowNs);
  void updateClock(pid_t tgid, Process& proc, uint64_t nowNs);
  [[nodiscard]] std::vector<Blend> blendPrior(const Process& proc, UnitMap& map, uint64_t nowNs);
  void learnWeights();
  void computeSnapshot(uint64_t nowNs);
  [[nodiscard]] std::vector<float> blockWeightsOf(const Unit& unit, uint64_t nowNs) const;
  // The page heat of [start, end) of a process at `nowNs` (its per-page chunks' sum).
  [[nodiscard]] double pageHeatIn(pid_t tgid, uint64_t start, uint64_t end, uint64_t nowNs) const;
  [[nodiscard]] static double decayFactor(uint64_t fromNs, uint64_t toNs, uint64_t halfLifeNs);

  tensortier::v1::PolicyConfig config_;
  SamplePeriodParams sampleParams_;
  uint64_t halfLifeNs_;
  uint64_t chunkBytes_;
  uint32_t buckets_;
  // Bytes per ns each way, the initial bandwidth until setMigrationRates has given measured rates.
  double promoteBytesPerNs_;
  double demoteBytesPerNs_;
  bool ratesMeasured_ = false;
  // ns to copy `bytes` in and as many out.
  [[nodiscard]] double swapNs(double bytes) const { return bytes / promoteBytesPerNs_ + bytes / demoteBytesPerNs_; }
  uint64_t planIntervalNs_ = 0;
  FeatureVector weights_;
  std::map<pid_t, UnitMap> units_;
  std::map<pid_t, Process> processes_;
  std::unordered_map<uint64_t, std::pair<pid_t, uint64_t>> regionIndex_;  // id -> (tgid, start)
  // Per-page heat: one block per aligned 2 MiB chunk of a process that has evidence, as of the
  // chunk's lastNs. Block floating point: a page's heat is mantissa * scale, a 16-bit mantissa per
  // page and one scale per chunk, kept as its inverse (stepsPerAccess: ingest multiplies where it
  // would divide). Decay is a factor common to the chunk, so it is one operation on the scale when
  // the chunk is next touched (once per epoch), and no page is rounded by it. Resolution: the
  // hottest page of a chunk holds 32768 to 65535 steps of the scale (an addition that would pass
  // 65535 raises the scale by the least power of two that fits it and rounds every mantissa to the
  // nearest step of the new one), so a page's heat is known to about 1/65535 (at worst 1/32768)
  // of its chunk's hottest page; smaller values, and smaller additions, round to 0, and a page at
  // 0 does not count as a page with heat. About 1 KiB per 2 MiB of address space with evidence
  // (0.05%), where a float per page had cost twice that, and a hash entry per page 1.24% of the
  // memory it tracked (heat_bench memory).
  static constexpr uint32_t kMantissaMax = 65535;
  struct PageChunk {
    uint64_t lastNs = 0;
    double stepsPerAccess = 0;  // 1 / scale: mantissa steps per access at lastNs
    uint32_t pages = 0;         // pages with heat (non-zero mantissa)
    uint16_t top = 0;           // the largest mantissa
    std::array<uint16_t, kBlockPages> mantissa{};
  };
  // The chunk of `page`, decayed to nowNs (created empty if new).
  PageChunk& pageChunk(pid_t tgid, uint64_t page, uint64_t nowNs, uint64_t halfLifeNs);
  static void decayChunk(PageChunk& chunk, uint64_t nowNs, uint64_t halfLifeNs);
  static void addPageAccess(PageChunk& chunk, uint64_t page, double accesses);
  [[gnu::noinline]] static void addPageAccessSlow(PageChunk& chunk, uint32_t index, double accesses);
  // Heat of the chunk's pages [first, last) at `nowNs`: their mantissas times the chunk's scale,
  // decayed. 0 for a chunk without pages with heat (it has no scale: stepsPerAccess 0).
  [[nodiscard]] static double rangeHeat(const PageChunk& chunk, uint32_t first, uint32_t last, uint64_t nowNs,
                                        uint64_t halfLifeNs);
  std::unordered_map<uint64_t, PageChunk> pageChunks_;  // key: tgid << 42 | chunk number
  // The span of the batch being ingested: spanSinceNs_ < its nowNs when its accesses are to be
  // spread (ingest with sinceNs), and the units that got some.
  uint64_t spanSinceNs_ = UINT64_MAX;
  // The span of the last batch ingested with one (0: stamped at an instant); what one observation
  // of a source read once per epoch covers.
  uint64_t evidenceSpanNs_ = 0;
  std::vector<Unit*> spanUnits_;
  uint64_t lastEpochNs_ = 0;
  bool started_ = false;
  uint64_t epoch_ = 0;
  HeatSnapshot snapshot_;
};

}  // namespace tt::heat
