// Token bucket in bytes per second, one per migration direction.
//
// reserve() takes the tokens at once and says how long to wait before spending them; the bucket may
// go into debt, so a batch larger than the burst still passes (after its wait) and the long-run
// rate is exact. A rate of 0 means unlimited.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>

#include "migrate/Clock.h"

namespace tt::migrate {

class TokenBucket {
 public:
  explicit TokenBucket(const Clock& clock) : clock_(clock) {}

  // Live reconfiguration: tokens already saved are kept, capped at the new burst.
  void configure(uint64_t bytesPerSecond, uint64_t burstBytes);

  // Takes `bytes` tokens; returns how long the caller must wait before using them (zero if they
  // were available).
  [[nodiscard]] std::chrono::nanoseconds reserve(uint64_t bytes);

  // Gives back tokens reserved for work that did not happen (a failed in-process bind that
  // then goes through move_pages and pays again).
  void refund(uint64_t bytes);

  [[nodiscard]] uint64_t bytesPerSecond() const;

 private:
  void refillLocked(std::chrono::nanoseconds now);

  const Clock& clock_;
  mutable std::mutex mutex_;
  uint64_t rate_ = 0;  // bytes/s; 0 = unlimited
  double burst_ = 0;
  double tokens_ = 0;
  std::chrono::nanoseconds last_{0};
  bool started_ = false;
};

}  // namespace tt::migrate
