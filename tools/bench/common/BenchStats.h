// What the benchmarks share: the calling thread's CPU time, and medians of per-round figures.
#pragma once

#include <time.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace tt::bench {

// CLOCK_THREAD_CPUTIME_ID, ns: what the measured code cost this thread, whatever else runs.
inline uint64_t threadCpuNs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

// The median (the mean of the middle two for an even count); 0 for none.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace tt::bench
