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
  switch (level) {
    case LIBBPF_WARN: TT_LOG(Warn) << line; break;
    case LIBBPF_INFO: TT_LOG(Info) << line; break;
    default: TT_LOG(Debug) << line; break;
  }
  return n;
}

std::once_flag g_once;

}  // namespace

void routeLibbpfLogs() {
  std::call_once(g_once, [] { libbpf_set_print(printToLog); });
}

}  // namespace tt::sys::bpf
