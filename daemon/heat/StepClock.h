// The training step period of one process and where its steps start: learned from client iteration
// marks (MarkPeriodEstimator) or, without a client, from the periodicity of the sample stream
// (SamplePeriodDetector: autocorrelation of per-bin access signatures).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

namespace tt::heat {

enum class PeriodSource { None, Hint, Marks, Samples };
[[nodiscard]] const char* periodSourceName(PeriodSource source);

struct StepClock {
  uint64_t periodNs = 0;   // 0: unknown
  uint64_t anchorNs = 0;   // a time at which a step started (phase 0)
  PeriodSource source = PeriodSource::None;
  double confidence = 0;   // 1 for marks and hints; the autocorrelation peak for samples

  [[nodiscard]] bool known() const { return periodNs > 0; }
  // Position in the step at `timeNs`, in [0, 1). Times before the anchor wrap backwards.
  [[nodiscard]] double phaseAt(uint64_t timeNs) const;
  // Time-offset bucket of `timeNs` among `buckets` equal slices of the step.
  [[nodiscard]] uint32_t bucketAt(uint64_t timeNs, uint32_t buckets) const;
};

// Step period from StepBegin (or StepEnd) timestamps. Robust to jitter (median of per-step
// intervals), to missing marks (a gap spanning k steps counts as k intervals, by the marks' step
// numbers where they increase, else by the gap's ratio to a reference interval) and to a boundary
// marked twice (two connections of one process, or StepEnd(s) then StepBegin(s + 1)): such a mark
// is not a step, and counted as one it would make the period the gap between the two copies.
class MarkPeriodEstimator {
 public:
  // Marks closer together than this are one boundary (no training step is this short, and the
  // heat model's schedule buckets could not resolve one).
  static constexpr uint64_t kMinStepNs = 1'000'000;

  explicit MarkPeriodEstimator(size_t window = 32) : window_(window) {}
  // `step`: the step number the boundary begins. A repeat of the last mark's number, while the
  // numbers have been increasing, is the same boundary again and ignored.
  // Returns false for a mark ignored as a repeat of the last one.
  bool add(uint64_t step, uint64_t timestampNs);
  // Forgets the marks (the client stopped sending them).
  void clear() { marks_.clear(); }
  [[nodiscard]] std::optional<uint64_t> periodNs() const;
  [[nodiscard]] std::optional<uint64_t> lastMarkNs() const {
    return marks_.empty() ? std::nullopt : std::optional<uint64_t>(marks_.back().timeNs);
  }
  [[nodiscard]] size_t marks() const { return marks_.size(); }
  // The median time between two marks kept (a client may mark every k-th step only); 0 with
  // fewer than two.
  [[nodiscard]] uint64_t typicalGapNs() const;

 private:
  struct Mark {
    uint64_t step;
    uint64_t timeNs;
  };
  size_t window_;
  std::deque<Mark> marks_;
};

struct SamplePeriodParams {
  uint64_t binNs = 5'000'000;
  size_t historyBins = 2048;
  uint64_t minPeriodNs = 10'000'000;
  uint64_t maxPeriodNs = 5'000'000'000;
  double minConfidence = 0.5;
};

// Period of an access stream without marks. Each access is hashed by its unit into one of kDims
// signature dimensions of its time bin; the period is the smallest lag whose autocorrelation of
// the (mean-removed) signature sequence is close to the best, refined to sub-bin precision by
// parabolic interpolation and by fitting the peaks at its multiples.
class SamplePeriodDetector {
 public:
  static constexpr size_t kDims = 16;
  explicit SamplePeriodDetector(const SamplePeriodParams& params);
  // New parameters for a running detector (a live config change). The history is kept when its
  // layout (bin width, number of bins) stays; otherwise it restarts empty. Returns whether it was
  // kept.
  bool setParams(const SamplePeriodParams& params);

  void add(uint64_t timeNs, uint64_t unitKey, double weight);
  // Weights per signature dimension (dimOf a unit's key).
  using Signature = std::array<double, kDims>;
  [[nodiscard]] static size_t dimOf(uint64_t unitKey);
  // `weights` gathered over (fromNs, toNs] without the time of each access (a source read once per
  // epoch), spread evenly over the bins of that span. A stream delivered in spans shows no period
  // shorter than two spans (the span itself would look like one), so estimate() then looks only
  // for periods of at least twice the longest span added within the history.
  void addOver(uint64_t fromNs, uint64_t toNs, const Signature& weights);
  void addOver(uint64_t fromNs, uint64_t toNs, uint64_t unitKey, double weight);
  struct Estimate {
    double periodNs = 0;
    double confidence = 0;
  };
  // Recomputes the estimate from the history (cost: lags x bins x kDims); nullopt when the history
  // is too short or no lag reaches the minimum confidence.
  [[nodiscard]] std::optional<Estimate> estimate() const;
  [[nodiscard]] size_t filledBins() const { return filled_; }

 private:
  [[nodiscard]] static double correlation(const std::vector<std::array<double, kDims>>& x, size_t lag);
  SamplePeriodParams params_;
  std::vector<std::array<double, kDims>> ring_;
  uint64_t currentBin_ = 0;
  bool started_ = false;
  size_t filled_ = 0;
  // The bin for `timeNs`, the history advanced to it; nullptr when it is older than the history.
  Signature* binAt(uint64_t timeNs);
  [[nodiscard]] uint64_t longestSpanNs() const;
  std::deque<std::pair<uint64_t, uint64_t>> spans_;  // addOver's (toNs, span) within the history
};

}  // namespace tt::heat
