// Routes libbpf's own messages (load failures, verifier logs, CO-RE relocation notes) into TT_LOG.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/Log.h"

namespace tt::sys::bpf {

// Installs the libbpf print callback once per process; idempotent. libbpf's debug messages go to
// TT_LOG(Debug), warnings to Warn, info to Info.
void routeLibbpfLogs();

// Holds back what libbpf logs on the calling thread while it lives, for a load whose failure has a
// fallback: libbpf explains a refused program at warning level (and on EPERM suggests raising
// `ulimit -l`, whatever the cause), which reads as a fault when the fallback works. The owner
// logs the held lines at the level the outcome deserves with emitAt(); what is still held when
// it ends goes out at the levels libbpf gave. Holds nest (the innermost holds).
class LibbpfLogHold {
 public:
  LibbpfLogHold();
  ~LibbpfLogHold();
  LibbpfLogHold(const LibbpfLogHold&) = delete;
  LibbpfLogHold& operator=(const LibbpfLogHold&) = delete;

  // Logs every held line at `level` and forgets them.
  void emitAt(log::Level level);
  [[nodiscard]] size_t held() const { return lines_.size(); }

  // The libbpf print callback's part: true when a hold on this thread took the line.
  static bool take(log::Level level, std::string line);

 private:
  std::vector<std::pair<log::Level, std::string>> lines_;
  LibbpfLogHold* outer_;
};

}  // namespace tt::sys::bpf
