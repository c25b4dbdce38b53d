#include "sys/bpf/LibbpfLog.h"

#include <bpf/libbpf.h>

#include <cstdarg>
#include <cstdio>
#include <mutex>
#include <string>

#include "core/Log.h"

namespace tt::sys::bpf {

namespace {

int printToLog(enum libbpf_print_level level, const char* format, va_list args) {
  // Verifier logs arrive as one message of many lines: size the buffer to the message.
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  if (n <= 0) return n;
  std::string line(static_cast<size_t>(n) + 1, '\0');
  std::vsnprintf(line.data(), line.size(), format, args);
  line.resize(static_cast<size_t>(n));
  while (!line.empty() && line.back() == '\n') line.pop_back();
  const log::Level at = level == LIBBPF_WARN   ? log::Level::Warn
                        : level == LIBBPF_INFO ? log::Level::Info
                                               : log::Level::Debug;
  if (!LibbpfLogHold::take(at, line) && log::enabled(at)) log::write(at, __FILE__, __LINE__, line);
  return n;
}

std::once_flag g_once;
thread_local LibbpfLogHold* t_hold = nullptr;  // the innermost hold of this thread

}  // namespace

void routeLibbpfLogs() {
  std::call_once(g_once, [] { libbpf_set_print(printToLog); });
}

LibbpfLogHold::LibbpfLogHold() : outer_(t_hold) {
  routeLibbpfLogs();
  t_hold = this;
}

LibbpfLogHold::~LibbpfLogHold() {
  t_hold = outer_;
  for (const auto& [level, line] : lines_)
    if (log::enabled(level)) log::write(level, __FILE__, __LINE__, line);
}

void LibbpfLogHold::emitAt(log::Level level) {
  if (log::enabled(level))
    for (const auto& entry : lines_) log::write(level, __FILE__, __LINE__, entry.second);
  lines_.clear();
}

bool LibbpfLogHold::take(log::Level level, std::string line) {
  if (t_hold == nullptr) return false;
  t_hold->lines_.emplace_back(level, std::move(line));
  return true;
}

}  // namespace tt::sys::bpf
