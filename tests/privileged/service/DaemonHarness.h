// Runs the real tensortierd on a socket in a fresh temp directory, for the service's privileged
// tests: start with a config, wait until it accepts connections, stop with a signal and collect
// the exit status; its log is kept for failure messages.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>

namespace tt::test {

class DaemonHarness {
 public:
  DaemonHarness();
  ~DaemonHarness();  // SIGKILLs a daemon still running, removes the temp directory

  [[nodiscard]] const std::string& dir() const { return dir_; }
  [[nodiscard]] std::string socket() const { return dir_ + "/tt.sock"; }
  [[nodiscard]] std::string configPath() const { return dir_ + "/tensortierd.conf"; }
  void writeConfig(const std::string& text) const;

  // Starts `tensortierd --config <configPath> --socket <socket> --foreground`; true once it has
  // logged that it is ready (within `timeout`): launch() and waitReady().
  [[nodiscard]] bool start(std::chrono::milliseconds timeout = std::chrono::seconds(20));
  // Forks and execs the daemon without waiting for anything.
  void launch();
  // True once this start has logged " ready: serving " (within `timeout`); false if it exits first.
  [[nodiscard]] bool waitReady(std::chrono::milliseconds timeout = std::chrono::seconds(20));
  void signal(int sig) const;
  // Waits for exit; the exit code, or nullopt on timeout / death by signal.
  [[nodiscard]] std::optional<int> wait(std::chrono::milliseconds timeout = std::chrono::seconds(15));
  [[nodiscard]] bool running() const;
  [[nodiscard]] pid_t pid() const { return pid_; }
  [[nodiscard]] std::string log() const;

 private:
  std::string dir_;
  pid_t pid_ = -1;
  int starts_ = 0;
  // Lines of `logPath` saying the daemon is ready (one per start: the log is appended to).
  static int readyLines(const std::string& logPath);
};

// Runs a command, returns (exit code, stdout).
struct CommandResult {
  int exitCode = -1;
  std::string out;
};
[[nodiscard]] CommandResult runCommand(const std::string& command);

}  // namespace tt::test
