// /proc/PID/stat and /proc/PID/status as tensortier needs them: the CPUs a process may run on and
// the CPU its main thread last ran on, from which the planner takes the process's home node (the
// fast node its promotions go to first).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "core/Result.h"
#include "sys/Fs.h"

namespace tt::sys {

// Field 39 ("processor") of a stat line. The command name (field 2) may hold spaces and
// parentheses, so fields are counted from its last ')'.
[[nodiscard]] Result<int> parseStatProcessor(std::string_view stat);

// Reads `<pid>/stat` under `procfs` (rooted at /proc, or a fixture tree).
[[nodiscard]] Result<int> readLastCpu(const Fs& procfs, pid_t pid);

// The value of a status file's "KEY:" line, trimmed; nullopt when it has none.
[[nodiscard]] std::optional<std::string_view> statusField(std::string_view status, std::string_view key);

// The effective capabilities of a status file's "CapEff:" line (a hex mask, bit N = capability N).
[[nodiscard]] Result<uint64_t> parseStatusEffectiveCaps(std::string_view status);

// The CPUs of the "Cpus_allowed_list:" line of a status file (the main thread's affinity: what
// numactl --cpunodebind, taskset or a cpuset cgroup allow it).
[[nodiscard]] Result<std::vector<int>> parseStatusAllowedCpus(std::string_view status);

// Reads `<pid>/status` under `procfs`.
[[nodiscard]] Result<std::vector<int>> readAllowedCpus(const Fs& procfs, pid_t pid);

// Whether this process is in the initial pid namespace (`self/ns/pid` under `procfs` names the
// kernel's PROC_PID_INIT_INO). BPF programs see the pids of that namespace; a daemon in a
// namespace of its own sees others.
[[nodiscard]] Result<bool> inInitialPidNamespace(const Fs& procfs);

}  // namespace tt::sys
