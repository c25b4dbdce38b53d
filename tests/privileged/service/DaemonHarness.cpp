#include "DaemonHarness.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace tt::test {

DaemonHarness::DaemonHarness() {
  char tmpl[] = "/tmp/tt-service-XXXXXX";
  const char* d = ::mkdtemp(tmpl);
  dir_ = d ? d : "/tmp/tt-service-fallback";
  ::chmod(dir_.c_str(), 0755);  // the nobody client must reach the socket inside
}

DaemonHarness::~DaemonHarness() {
  if (running()) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

void DaemonHarness::writeConfig(const std::string& text) const {
  std::ofstream(configPath()) << text;
}

bool DaemonHarness::start(std::chrono::milliseconds timeout) {
  launch();
  return waitReady(timeout);
}

void DaemonHarness::launch() {
  const std::string logPath = dir_ + "/daemon.log";
  ++starts_;
  pid_ = ::fork();
  if (pid_ == 0) {
    const int fd = ::open(logPath.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    const std::string config = configPath(), sock = socket();
    ::execl(TT_TENSORTIERD, "tensortierd", "--config", config.c_str(), "--socket", sock.c_str(), "--foreground",
            static_cast<char*>(nullptr));
    std::_Exit(127);
  }
}

bool DaemonHarness::waitReady(std::chrono::milliseconds timeout) {
  const std::string logPath = dir_ + "/daemon.log";
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!running()) return false;
    // Not the socket: it answers before the sources are open, and the tests expect them open.
    if (readyLines(logPath) >= starts_) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

int DaemonHarness::readyLines(const std::string& logPath) {
  std::ifstream in(logPath);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) n += line.find(" ready: serving ") != std::string::npos ? 1 : 0;
  return n;
}

void DaemonHarness::signal(int sig) const {
  if (pid_ > 0) ::kill(pid_, sig);
}

bool DaemonHarness::running() const {
  if (pid_ <= 0) return false;
  siginfo_t info{};
  // WNOWAIT: look without reaping, so wait() still gets the exit status.
  if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0) return false;
  return info.si_pid == 0;
}

std::optional<int> DaemonHarness::wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return std::nullopt;
}

std::string DaemonHarness::log() const {
  std::ifstream in(dir_ + "/daemon.log");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

CommandResult runCommand(const std::string& command) {
  CommandResult r;
  FILE* p = ::popen(command.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace tt::test
