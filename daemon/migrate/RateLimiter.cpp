#include "migrate/RateLimiter.h"

#include <algorithm>
#include <thread>

namespace tt::migrate {

std::chrono::nanoseconds SteadyClock::now() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch());
}

void SteadyClock::sleepFor(std::chrono::nanoseconds duration) {
  if (duration.count() > 0) std::this_thread::sleep_for(duration);
}

void TokenBucket::configure(uint64_t bytesPerSecond, uint64_t burstBytes) {
  std::lock_guard lock(mutex_);
  if (started_) refillLocked(clock_.now());
  rate_ = bytesPerSecond;
  burst_ = static_cast<double>(burstBytes);
  if (!started_) {
    // A fresh bucket starts full: the first batch of an idle engine goes at once.
    tokens_ = burst_;
    last_ = clock_.now();
    started_ = true;
  }
  tokens_ = std::min(tokens_, burst_);
}

void TokenBucket::refillLocked(std::chrono::nanoseconds now) {
  if (now > last_) {
    const double seconds = std::chrono::duration<double>(now - last_).count();
    tokens_ = std::min(burst_, tokens_ + seconds * static_cast<double>(rate_));
    last_ = now;
  }
}

std::chrono::nanoseconds TokenBucket::reserve(uint64_t bytes) {
  std::lock_guard lock(mutex_);
  if (rate_ == 0) return std::chrono::nanoseconds{0};
  refillLocked(clock_.now());
  tokens_ -= static_cast<double>(bytes);
  if (tokens_ >= 0) return std::chrono::nanoseconds{0};
  const double seconds = -tokens_ / static_cast<double>(rate_);
  return std::chrono::nanoseconds{static_cast<int64_t>(seconds * 1e9) + 1};
}

void TokenBucket::refund(uint64_t bytes) {
  std::lock_guard lock(mutex_);
  if (rate_ == 0) return;
  tokens_ = std::min(burst_, tokens_ + static_cast<double>(bytes));
}

uint64_t TokenBucket::bytesPerSecond() const {
  std::lock_guard lock(mutex_);
  return rate_;
}

}  // namespace tt::migrate
