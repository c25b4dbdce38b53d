#include "heat/StepClock.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tt::heat {

const char* periodSourceName(PeriodSource source) {
  switch (source) {
    case PeriodSource::None: return "none";
    case PeriodSource::Hint: return "hint";
    case PeriodSource::Marks: return "marks";
    case PeriodSource::Samples: return "samples";
  }
  return "?";
}

double StepClock::phaseAt(uint64_t timeNs) const {
  if (periodNs == 0) return 0;
  const double p = static_cast<double>(periodNs);
  const double offset = static_cast<double>(timeNs) - static_cast<double>(anchorNs);
  double phase = std::fmod(offset, p) / p;
  if (phase < 0) phase += 1;
  return phase >= 1 ? 0 : phase;
}

uint32_t StepClock::bucketAt(uint64_t timeNs, uint32_t buckets) const {
  if (buckets == 0) return 0;
  const auto b = static_cast<uint32_t>(phaseAt(timeNs) * buckets);
  return std::min(b, buckets - 1);
}

// ---- marks ----------------------------------------------------------------------------------------

bool MarkPeriodEstimator::add(uint64_t step, uint64_t timestampNs) {
  if (!marks_.empty()) {
    const Mark& last = marks_.back();
    if (timestampNs < last.timeNs) {
      // A mark out of order (or a restarted client clock): start over rather than learn nonsense.
      marks_.clear();
    } else {
      if (timestampNs - last.timeNs < kMinStepNs) return false;
      const bool numbered = marks_.size() >= 2 && last.step > marks_[marks_.size() - 2].step;
      if (numbered && step == last.step) return false;
    }
  }
  marks_.push_back({step, timestampNs});
  while (marks_.size() > window_) marks_.pop_front();
  return true;
}

std::optional<uint64_t> MarkPeriodEstimator::periodNs() const {
  if (marks_.size() < 2) return std::nullopt;
  // Per-step intervals where the step numbers say how many steps a gap spans; the other gaps
  // (numbers that repeat, restart at 0 with a new epoch of the data, or are not sent) by their
  // ratio to a reference interval.
  std::vector<double> perStep;
  std::vector<double> unnumbered;
  for (size_t i = 1; i < marks_.size(); ++i) {
    const auto gap = static_cast<double>(marks_[i].timeNs - marks_[i - 1].timeNs);
    if (marks_[i].step > marks_[i - 1].step)
      perStep.push_back(gap / static_cast<double>(marks_[i].step - marks_[i - 1].step));
    else
      unnumbered.push_back(gap);
  }
  if (!unnumbered.empty()) {
    // The reference: the median numbered interval; without any, the smallest common gaps are
    // single steps (missing marks only make gaps longer), so the lower quartile of the gaps.
    std::vector<double> sorted = perStep.empty() ? unnumbered : perStep;
    std::sort(sorted.begin(), sorted.end());
    const double reference = perStep.empty() ? sorted[(sorted.size() - 1) / 4] : sorted[sorted.size() / 2];
    for (double gap : unnumbered) {
      const double k = std::round(gap / reference);
      if (k >= 1) perStep.push_back(gap / k);  // k 0: a stray mark within a step, no interval
    }
  }
  if (perStep.empty()) return std::nullopt;
  std::sort(perStep.begin(), perStep.end());
  const double median = perStep[perStep.size() / 2];
  // Mean of the intervals near the median: jitter averages out, outliers do not pull it.
  double sum = 0;
  size_t n = 0;
  for (double v : perStep)
    if (std::abs(v - median) <= 0.2 * median) {
      sum += v;
      ++n;
    }
  const double period = n > 0 ? sum / static_cast<double>(n) : median;
  if (period < 1) return std::nullopt;
  return static_cast<uint64_t>(std::llround(period));
}

uint64_t MarkPeriodEstimator::typicalGapNs() const {
  if (marks_.size() < 2) return 0;
  std::vector<uint64_t> gaps;
  for (size_t i = 1; i < marks_.size(); ++i) gaps.push_back(marks_[i].timeNs - marks_[i - 1].timeNs);
  std::nth_element(gaps.begin(), gaps.begin() + static_cast<std::ptrdiff_t>(gaps.size() / 2), gaps.end());
  return gaps[gaps.size() / 2];
}

// ---- samples --------------------------------------------------------------------------------------

SamplePeriodDetector::SamplePeriodDetector(const SamplePeriodParams& params)
    : params_(params) {
  if (params_.binNs == 0) params_.binNs = 1;
}

bool SamplePeriodDetector::setParams(const SamplePeriodParams& params) {
  SamplePeriodParams next = params;
  if (next.binNs == 0) next.binNs = 1;
  const bool keep = next.binNs == params_.binNs && next.historyBins == params_.historyBins;
  if (!keep) *this = SamplePeriodDetector(next);
  params_ = next;
  return keep;
}

size_t SamplePeriodDetector::dimOf(uint64_t unitKey) {
  // Mix the key so that neighbouring units spread over dimensions.
  uint64_t h = unitKey * 0x9E3779B97F4A7C15ULL;
  h ^= h >> 29;
  return h % kDims;
}

SamplePeriodDetector::Signature* SamplePeriodDetector::binAt(uint64_t timeNs) {
  const uint64_t bin = timeNs / params_.binNs;
  if (!started_) {
    // The history (historyBins x kDims doubles: 512 KiB at the defaults) is allocated with the
    // first sample: a process that only sends marks, or is never sampled, does not pay for it.
    ring_.assign(std::max<size_t>(params_.historyBins, 16), {});
    started_ = true;
    currentBin_ = bin;
    ring_[bin % ring_.size()].fill(0);
    filled_ = 1;
  }
  if (bin + ring_.size() <= currentBin_) return nullptr;  // older than the history
  while (currentBin_ < bin) {
    ++currentBin_;
    ring_[currentBin_ % ring_.size()].fill(0);
    filled_ = std::min(filled_ + 1, ring_.size());
  }
  return &ring_[bin % ring_.size()];
}

void SamplePeriodDetector::add(uint64_t timeNs, uint64_t unitKey, double weight) {
  if (Signature* b = binAt(timeNs)) (*b)[dimOf(unitKey)] += weight;
}

void SamplePeriodDetector::addOver(uint64_t fromNs, uint64_t toNs, uint64_t unitKey, double weight) {
  Signature w{};
  w[dimOf(unitKey)] = weight;
  addOver(fromNs, toNs, w);
}

void SamplePeriodDetector::addOver(uint64_t fromNs, uint64_t toNs, const Signature& weights) {
  if (toNs <= fromNs) {
    if (Signature* b = binAt(toNs))
      for (size_t d = 0; d < kDims; ++d) (*b)[d] += weights[d];
    return;
  }
  // The spans of the history only: one slow epoch must not blind the detector for good.
  const uint64_t historyNs = std::max<uint64_t>(params_.historyBins, 16) * params_.binNs;
  if (spans_.empty() || spans_.back() != std::pair{toNs, toNs - fromNs}) spans_.emplace_back(toNs, toNs - fromNs);
  while (!spans_.empty() && spans_.front().first + historyNs < toNs) spans_.pop_front();
  const auto span = static_cast<double>(toNs - fromNs);
  for (uint64_t t = fromNs; t < toNs;) {
    const uint64_t end = std::min(toNs, (t / params_.binNs + 1) * params_.binNs);
    if (Signature* b = binAt(t)) {
      const double share = static_cast<double>(end - t) / span;
      for (size_t d = 0; d < kDims; ++d) (*b)[d] += weights[d] * share;
    }
    t = end;
  }
}

uint64_t SamplePeriodDetector::longestSpanNs() const {
  uint64_t longest = 0;
  for (const auto& [to, span] : spans_) longest = std::max(longest, span);
  return longest;
}

double SamplePeriodDetector::correlation(const std::vector<std::array<double, kDims>>& x, size_t lag) {
  const size_t n = x.size();
  if (lag == 0 || lag >= n) return 0;
  double dot = 0, a = 0, b = 0;
  for (size_t t = lag; t < n; ++t)
    for (size_t d = 0; d < kDims; ++d) {
      dot += x[t][d] * x[t - lag][d];
      a += x[t][d] * x[t][d];
      b += x[t - lag][d] * x[t - lag][d];
    }
  return (a > 0 && b > 0) ? dot / std::sqrt(a * b) : 0;
}

std::optional<SamplePeriodDetector::Estimate> SamplePeriodDetector::estimate() const {
  if (!started_) return std::nullopt;
  const uint64_t minPeriodNs = std::max(params_.minPeriodNs, 2 * longestSpanNs());
  const size_t minLag = std::max<size_t>(1, static_cast<size_t>(minPeriodNs / params_.binNs));
  // The bin in progress is incomplete: leave it out.
  const size_t n = filled_ > 1 ? filled_ - 1 : 0;
  // At least three repetitions of a period are needed to trust it.
  const size_t maxLag = std::min<size_t>(params_.maxPeriodNs / params_.binNs + 1, n / 3);
  if (maxLag < minLag + 1) return std::nullopt;
  std::vector<std::array<double, kDims>> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = ring_[(currentBin_ - n + i) % ring_.size()];
  std::array<double, kDims> mean{};
  for (const auto& v : x)
    for (size_t d = 0; d < kDims; ++d) mean[d] += v[d] / static_cast<double>(n);
  double energy = 0, varying = 0;
  for (auto& v : x)
    for (size_t d = 0; d < kDims; ++d) {
      energy += v[d] * v[d];
      v[d] -= mean[d];
      varying += v[d] * v[d];
    }
  // A steady stream (evidence spread evenly over the spans it was read in) leaves only rounding
  // after the mean is removed, and rounding can correlate at any lag.
  if (!(varying > 1e-12 * energy)) return std::nullopt;
  // Correlations are computed on demand: the lag range, then small windows around multiples.
  const size_t fitLag = n - 1;
  std::vector<double> r(fitLag + 2, std::numeric_limits<double>::quiet_NaN());
  auto at = [&](size_t lag) {
    if (lag >= r.size()) return 0.0;
    if (std::isnan(r[lag])) r[lag] = correlation(x, lag);
    return r[lag];
  };

  double best = 0;
  for (size_t lag = minLag; lag <= maxLag; ++lag) best = std::max(best, at(lag));
  if (best < params_.minConfidence) return std::nullopt;
  auto isPeak = [&](size_t lag) { return at(lag) >= at(lag - 1) && at(lag) >= at(lag + 1); };
  size_t lag0 = 0;
  for (size_t lag = std::max<size_t>(minLag, 1); lag <= maxLag; ++lag)
    if (at(lag) >= 0.85 * best && isPeak(lag)) {
      lag0 = lag;
      break;
    }
  if (lag0 == 0) return std::nullopt;
  auto refine = [&](size_t lag) {
    if (lag == 0 || lag + 1 >= r.size()) return static_cast<double>(lag);
    const double y0 = at(lag - 1), y1 = at(lag), y2 = at(lag + 1);
    const double denom = y0 - 2 * y1 + y2;
    double shift = denom != 0 ? 0.5 * (y0 - y2) / denom : 0;
    shift = std::clamp(shift, -0.5, 0.5);
    return static_cast<double>(lag) + shift;
  };
  // Least-squares period through the peaks at lag0, 2*lag0, ...: each multiple adds precision.
  double num = 0, den = 0;
  for (size_t k = 1; k <= 8 && (k == 1 || k * lag0 <= n / 2); ++k) {
    const size_t centre = k * lag0;
    size_t peak = centre;
    for (size_t l = centre > 2 ? centre - 2 : 1; l <= centre + 2 && l + 1 < r.size(); ++l)
      if (at(l) > at(peak)) peak = l;
    if (at(peak) < 0.5 * at(lag0)) break;
    const double kk = static_cast<double>(k);
    num += kk * refine(peak);
    den += kk * kk;
  }
  const double lag = den > 0 ? num / den : refine(lag0);
  return Estimate{lag * static_cast<double>(params_.binNs), at(lag0)};
}

}  // namespace tt::heat
