// tensortierd's serving part: builds every role from the config, runs the Boost.Asio event loop
// (IPC, pidfds, signals, metrics HTTP, timers) on the calling thread and the epoch loop on its
// own, and handles SIGHUP (validated reload, live parts applied) and SIGTERM/SIGINT (clean exit).
//
// Threads of the daemon:
//   main         Asio event loop: client and admin requests, pidfd exits, signals, metrics HTTP
//   epoch        EpochLoop: sources.collect -> heat -> planner -> engine.submit, keep-alives
//   migrate      migrate::Engine's coordinator and `migration.workers` worker threads
//   waiter       short-lived, only during SIGTERM (waits for the in-flight plan, bounded)
#pragma once

#include <optional>
#include <string>

#include "config/Config.h"

namespace tt::service {

struct DaemonOptions {
  std::string configPath;  // reloaded on SIGHUP; empty = built-in defaults (SIGHUP keeps them)
  std::optional<std::string> socketPath;  // --socket: overrides config and socket activation
  std::string version;
};

// Runs until SIGTERM/SIGINT; returns the process exit code (0 after a clean shutdown).
[[nodiscard]] int runDaemon(const DaemonOptions& options, config::DaemonConfig config);

// `tensortierd --restore-kernel-tiering` (the unit's ExecStopPost): writes back the kernel tiering
// values saved in sources.kernel_tiering_state_file by a daemon that did not restore them (killed,
// crashed) and removes the file; logs what it did. False when the file is there but could not be
// applied.
[[nodiscard]] bool restoreKernelTiering(const tensortier::v1::SourcesConfig& sources);
// `tensortierd --prepare-kernel-tiering` (the unit's ExecStartPre, with full privileges): see
// sources::SourceSet::prepareKernelTiering. False when it could not do what the config asks.
[[nodiscard]] bool prepareKernelTiering(const tensortier::v1::SourcesConfig& sources);

}  // namespace tt::service
