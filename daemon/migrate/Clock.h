// Time as the migration engine sees it: the rate limiter and the busy-page backoff read and sleep
// through this, so unit tests drive them with a fake clock and never wait for real.
#pragma once

#include <chrono>

namespace tt::migrate {

class Clock {
 public:
  virtual ~Clock() = default;
  [[nodiscard]] virtual std::chrono::nanoseconds now() const = 0;
  virtual void sleepFor(std::chrono::nanoseconds duration) = 0;
};

class SteadyClock final : public Clock {
 public:
  [[nodiscard]] std::chrono::nanoseconds now() const override;
  void sleepFor(std::chrono::nanoseconds duration) override;
};

}  // namespace tt::migrate
