#include "metrics/Metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>

namespace tt::metrics {
namespace {

void atomicAdd(std::atomic<double>& a, double delta) {
  double cur = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(cur, cur + delta, std::memory_order_relaxed)) {
  }
}

std::string escape(const std::string& s, bool quotes) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '"' && quotes) out += "\\\"";
    else out += c;
  }
  return out;
}

std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  // Shortest text that reads back as the same double: "0.005", not "0.0050000000000000001".
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : std::string("NaN");
}

std::string withLabel(const std::string& labels, const std::string& extra) {
  if (labels.empty()) return "{" + extra + "}";
  return "{" + labels + "," + extra + "}";
}

}  // namespace

void Counter::add(double delta) {
  if (delta > 0) atomicAdd(value_, delta);
}

void Gauge::add(double delta) { atomicAdd(value_, delta); }

Histogram::Histogram(std::vector<double> upperBounds) : bounds_(std::move(upperBounds)) {
  std::sort(bounds_.begin(), bounds_.end());
  buckets_ = std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1);
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0);
}

void Histogram::observe(double v) {
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  atomicAdd(sum_, v);
}

uint64_t Histogram::cumulativeCount(size_t i) const {
  uint64_t total = 0;
  for (size_t k = 0; k <= std::min(i, bounds_.size()); ++k) total += buckets_[k].load(std::memory_order_relaxed);
  return total;
}

std::string formatLabels(const Labels& labels) {
  std::string out;
  for (const auto& [k, v] : labels) {
    if (!out.empty()) out += ',';
    out += k + "=\"" + escape(v, true) + "\"";
  }
  return out;
}

Registry::Series& Registry::series(const std::string& name, const std::string& help, Type type, const Labels& labels) {
  std::lock_guard lock(mutex_);
  auto [fit, fnew] = families_.try_emplace(name, Family{type, help, {}});
  (void)fnew;
  Family& family = fit->second;
  auto [sit, snew] = family.series.try_emplace(formatLabels(labels));
  if (snew) sit->second.labels = labels;
  return sit->second;
}

Counter& Registry::counter(const std::string& name, const std::string& help, const Labels& labels) {
  Series& s = series(name, help, Type::Counter, labels);
  std::lock_guard lock(mutex_);
  if (!s.counter) s.counter = std::make_unique<Counter>();
  return *s.counter;
}

Gauge& Registry::gauge(const std::string& name, const std::string& help, const Labels& labels) {
  Series& s = series(name, help, Type::Gauge, labels);
  std::lock_guard lock(mutex_);
  if (!s.gauge) s.gauge = std::make_unique<Gauge>();
  return *s.gauge;
}

Histogram& Registry::histogram(const std::string& name, const std::string& help,
                               const std::vector<double>& upperBounds, const Labels& labels) {
  Series& s = series(name, help, Type::Histogram, labels);
  std::lock_guard lock(mutex_);
  if (!s.histogram) s.histogram = std::make_unique<Histogram>(upperBounds);
  return *s.histogram;
}

void Registry::removeSeries(const std::string& name, const Labels& labels) {
  std::lock_guard lock(mutex_);
  auto f = families_.find(name);
  if (f != families_.end()) f->second.series.erase(formatLabels(labels));
}

void Registry::addCollector(std::function<void()> collect) {
  std::lock_guard lock(mutex_);
  collectors_.push_back(std::move(collect));
}

std::string Registry::render() const {
  std::vector<std::function<void()>> collectors;
  {
    std::lock_guard lock(mutex_);
    collectors = collectors_;
  }
  for (const auto& collect : collectors) collect();
  std::lock_guard lock(mutex_);
  std::ostringstream out;
  for (const auto& [name, family] : families_) {
    if (family.series.empty()) continue;
    const char* type = family.type == Type::Counter ? "counter" : family.type == Type::Gauge ? "gauge" : "histogram";
    out << "# HELP " << name << ' ' << escape(family.help, false) << '\n';
    out << "# TYPE " << name << ' ' << type << '\n';
    for (const auto& [labels, s] : family.series) {
      const std::string braces = labels.empty() ? "" : "{" + labels + "}";
      if (s.counter) out << name << braces << ' ' << number(s.counter->value()) << '\n';
      if (s.gauge) out << name << braces << ' ' << number(s.gauge->value()) << '\n';
      if (s.histogram) {
        const Histogram& h = *s.histogram;
        for (size_t i = 0; i < h.upperBounds().size(); ++i)
          out << name << "_bucket" << withLabel(labels, "le=\"" + number(h.upperBounds()[i]) + "\"") << ' '
              << h.cumulativeCount(i) << '\n';
        const uint64_t count = h.cumulativeCount(h.upperBounds().size());
        out << name << "_bucket" << withLabel(labels, "le=\"+Inf\"") << ' ' << count << '\n';
        out << name << "_sum" << braces << ' ' << number(h.sum()) << '\n';
        out << name << "_count" << braces << ' ' << count << '\n';
      }
    }
  }
  return out.str();
}

}  // namespace tt::metrics
