#include "support/TestSupport.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>

#include <fstream>
#include <sstream>

namespace tt::test {

std::string fixture(const std::string& relative) { return std::string(TT_FIXTURES_DIR) + "/" + relative; }
std::string sourcePath(const std::string& relative) { return std::string(TT_SOURCE_DIR) + "/" + relative; }

std::string readFileOrFail(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    ADD_FAILURE() << "cannot open " << path;
    return {};
  }
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

bool isRoot() { return geteuid() == 0; }

namespace {
std::atomic<LogCapture*> g_capture{nullptr};  // the live one; the sink is a plain function pointer
}

LogCapture::LogCapture(log::Level level, log::Level keepFrom) : saved_(log::level()), keepFrom_(keepFrom) {
  g_capture = this;
  log::setSink(&LogCapture::sink);
  log::setLevel(level);
}

LogCapture::~LogCapture() {
  log::setSink(nullptr);
  log::setLevel(saved_);
  g_capture = nullptr;
}

void LogCapture::sink(log::Level level, std::string_view line) {
  LogCapture* c = g_capture.load();
  if (c == nullptr || level < c->keepFrom_) return;
  std::lock_guard lock(c->mutex_);
  c->lines_.emplace_back(level, std::string(line));
}

std::vector<std::pair<log::Level, std::string>> LogCapture::lines() const {
  std::lock_guard lock(mutex_);
  return lines_;
}

std::vector<std::string> LogCapture::texts() const {
  std::vector<std::string> out;
  for (auto& entry : lines()) out.push_back(std::move(entry.second));
  return out;
}

std::optional<log::Level> LogCapture::levelOf(std::string_view text) const {
  for (const auto& [level, line] : lines())
    if (line.find(text) != std::string::npos) return level;
  return std::nullopt;
}

size_t LogCapture::count(log::Level level, std::string_view text) const {
  size_t n = 0;
  for (const auto& [l, line] : lines()) n += l == level && line.find(text) != std::string::npos ? 1 : 0;
  return n;
}

void LogCapture::clear() {
  std::lock_guard lock(mutex_);
  lines_.clear();
}

bool kernelAtLeast(int major, int minor) {
  utsname u{};
  int haveMajor = 0, haveMinor = 0;
  if (uname(&u) != 0 || std::sscanf(u.release, "%d.%d", &haveMajor, &haveMinor) != 2) {
    ADD_FAILURE() << "cannot read the kernel release";
    return false;
  }
  return haveMajor > major || (haveMajor == major && haveMinor >= minor);
}

}  // namespace tt::test
