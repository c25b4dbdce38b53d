// The one logging facility of tensortier: daemon, tools and libraries all write through it.
//
//   TT_LOG(Info) << "attached " << n << " sources";
//
// A line carries level and file:line. Under systemd (JOURNAL_STREAM is set) lines are prefixed
// with the sd-daemon "<N>" priority so journald keeps the levels; otherwise a timestamp is added.
// libbpf's own messages are routed here by sys/bpf/LibbpfLog.
#pragma once

#include <optional>
#include <sstream>
#include <string>
#include <string_view>

namespace tt::log {

enum class Level { Debug = 0, Info = 1, Warn = 2, Error = 3 };

void setLevel(Level level);
[[nodiscard]] Level level();
[[nodiscard]] bool enabled(Level level);
[[nodiscard]] std::optional<Level> parseLevel(std::string_view name);
[[nodiscard]] std::string_view levelName(Level level);

// Where lines go. The default sink writes to stderr; tests install a capturing sink.
using Sink = void (*)(Level level, std::string_view line);
void setSink(Sink sink);  // nullptr restores the default
void write(Level level, const char* file, int line, std::string_view message);

class Line {
 public:
  Line(Level level, const char* file, int line) : level_(level), file_(file), line_(line) {}
  Line(const Line&) = delete;
  Line& operator=(const Line&) = delete;
  ~Line() { write(level_, file_, line_, stream_.str()); }
  template <class T>
  Line& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }

 private:
  Level level_;
  const char* file_;
  int line_;
  std::ostringstream stream_;
};

}  // namespace tt::log

#define TT_LOG(LEVEL)                                          \
  if (!::tt::log::enabled(::tt::log::Level::LEVEL)) {          \
  } else                                                       \
    ::tt::log::Line(::tt::log::Level::LEVEL, __FILE__, __LINE__)
