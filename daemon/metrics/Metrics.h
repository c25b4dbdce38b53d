// A small metrics registry in the Prometheus data model: families of counters, gauges and
// histograms, each series identified by its labels.
//
//   auto& promoted = metrics.counter("tensortier_promoted_bytes_total", "Bytes moved to a fast node");
//   promoted.add(bytes);   // lock-free; any thread
//
// Series are created once (under a mutex) and updated with atomics, so the hot paths of other
// roles never lock. References stay valid until removeSeries() or the registry's destruction.
// render() writes the text exposition format 0.0.4.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace tt::metrics {

using Labels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  void add(double delta);  // delta >= 0; negative deltas are ignored (counters only grow)
  void inc() { add(1); }
  [[nodiscard]] double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void add(double delta);
  [[nodiscard]] double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> upperBounds);  // sorted ascending; +Inf is implicit
  void observe(double v);
  [[nodiscard]] const std::vector<double>& upperBounds() const { return bounds_; }
  // Cumulative count of observations <= upperBounds()[i]; i == size() gives the total count.
  [[nodiscard]] uint64_t cumulativeCount(size_t i) const;
  [[nodiscard]] double sum() const { return sum_.load(std::memory_order_relaxed); }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // per bucket (non-cumulative), +Inf last
  std::atomic<double> sum_{0};
};

class Registry {
 public:
  Counter& counter(const std::string& name, const std::string& help, const Labels& labels = {});
  Gauge& gauge(const std::string& name, const std::string& help, const Labels& labels = {});
  Histogram& histogram(const std::string& name, const std::string& help, const std::vector<double>& upperBounds,
                       const Labels& labels = {});
  // Drops one series (e.g. a per-process gauge when the process exits).
  void removeSeries(const std::string& name, const Labels& labels);

  // Runs `collect` at the start of every render(), outside the registry's lock, so that it may
  // set series itself: for values another role keeps behind its own lock, read when scraped
  // rather than copied in on a timer (the request workers' queue). What it captures must outlive
  // the renders; collectors are not removed.
  void addCollector(std::function<void()> collect);

  // The Prometheus text exposition of every family, sorted by name, series sorted by labels,
  // after the collectors ran.
  [[nodiscard]] std::string render() const;

 private:
  enum class Type { Counter, Gauge, Histogram };
  struct Series {
    Labels labels;
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
  };
  struct Family {
    Type type;
    std::string help;
    std::map<std::string, Series> series;  // key: rendered label set
  };
  Series& series(const std::string& name, const std::string& help, Type type, const Labels& labels);

  mutable std::mutex mutex_;
  std::map<std::string, Family> families_;
  std::vector<std::function<void()>> collectors_;  // under mutex_; run without it
};

// "a=\"x\",b=\"y\"" with the exposition format's escaping (backslash, quote, newline).
[[nodiscard]] std::string formatLabels(const Labels& labels);

}  // namespace tt::metrics
