// The kernel's BPF run-time statistics (BPF_STATS_RUN_TIME): how long a loaded program ran, for
// the sources' cost accounting and the benchmarks. The kernel counts run time only while some
// process holds the fd enableBpfRunTimeStats() returns (two clock reads around every program run).
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "core/Result.h"

namespace tt::sys::bpf {

// Turns the statistics on while the returned fd is open; an error when not permitted.
[[nodiscard]] Result<int> enableBpfRunTimeStats();

// Total run time (ns) and run count of the program behind `programFd` (run time 0 while the
// statistics are off). `what` names the program in errors.
[[nodiscard]] Result<std::pair<uint64_t, uint64_t>> programRunTime(int programFd, const std::string& what);

}  // namespace tt::sys::bpf
