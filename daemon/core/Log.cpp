#include "core/Log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>

namespace tt::log {
namespace {

std::atomic<Level> g_level{Level::Info};
std::atomic<Sink> g_sink{nullptr};
std::mutex g_writeMutex;

// journald understands sd-daemon(3) priority prefixes on stderr lines.
int syslogPriority(Level level) {
  switch (level) {
    case Level::Debug: return 7;
    case Level::Info: return 6;
    case Level::Warn: return 4;
    case Level::Error: return 3;
  }
  return 6;
}

void stderrSink(Level level, std::string_view line) {
  static const bool underJournal = std::getenv("JOURNAL_STREAM") != nullptr;
  std::lock_guard lock(g_writeMutex);
  if (underJournal) {
    std::fprintf(stderr, "<%d>%.*s\n", syslogPriority(level), static_cast<int>(line.size()), line.data());
  } else {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    tm local{};
    localtime_r(&ts.tv_sec, &local);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%H:%M:%S", &local);
    std::fprintf(stderr, "%s.%03ld %.*s\n", stamp, ts.tv_nsec / 1000000, static_cast<int>(line.size()),
                 line.data());
  }
  std::fflush(stderr);
}

std::string_view baseName(const char* path) {
  std::string_view p(path);
  auto slash = p.find_last_of('/');
  return slash == std::string_view::npos ? p : p.substr(slash + 1);
}

}  // namespace

void setLevel(Level level) { g_level.store(level, std::memory_order_relaxed); }
Level level() { return g_level.load(std::memory_order_relaxed); }
bool enabled(Level l) { return static_cast<int>(l) >= static_cast<int>(level()); }

std::optional<Level> parseLevel(std::string_view name) {
  if (name == "debug") return Level::Debug;
  if (name == "info") return Level::Info;
  if (name == "warn" || name == "warning") return Level::Warn;
  if (name == "error") return Level::Error;
  return std::nullopt;
}

std::string_view levelName(Level l) {
  switch (l) {
    case Level::Debug: return "debug";
    case Level::Info: return "info";
    case Level::Warn: return "warn";
    case Level::Error: return "error";
  }
  return "info";
}

void setSink(Sink sink) { g_sink.store(sink); }

void write(Level l, const char* file, int line, std::string_view message) {
  std::string text;
  text.reserve(message.size() + 48);
  text.append(levelName(l)).append(" ").append(baseName(file)).append(":").append(std::to_string(line));
  text.append("] ").append(message);
  Sink sink = g_sink.load();
  (sink ? sink : stderrSink)(l, text);
}

}  // namespace tt::log
