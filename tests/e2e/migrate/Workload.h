// The target process of the migration e2e tests and benchmark: a forked child that maps a 4 KiB
// page buffer and/or a THP buffer, fills them with a pattern every byte of which is known, and on
// request keeps writing that pattern from two threads while the parent moves its pages by pid.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace tt::e2e {

struct WorkloadSpec {
  size_t baseBytes = 0;    // 4 KiB pages (MADV_NOHUGEPAGE)
  size_t hugeBytes = 0;    // 2 MiB aligned, MADV_HUGEPAGE
  int writers = 0;         // threads rewriting the pattern until stop()
  int initialNode = -1;    // >= 0: mbind the buffers there before first touch
};

struct WorkloadVerdict {
  uint64_t wrongWords = 0;     // words whose value is not what the writers' progress implies
  uint64_t firstWrongIndex = UINT64_MAX;
  uint64_t passes = 0;         // complete rewrite passes the writers finished
  bool ok = false;             // the child answered at all
};

class Workload {
 public:
  explicit Workload(const WorkloadSpec& spec);
  ~Workload();
  Workload(const Workload&) = delete;
  Workload& operator=(const Workload&) = delete;

  [[nodiscard]] bool started() const { return pid_ > 0 && baseAddr_ + hugeAddr_ != 0; }
  [[nodiscard]] pid_t pid() const { return pid_; }
  [[nodiscard]] uint64_t baseAddr() const { return baseAddr_; }
  [[nodiscard]] uint64_t hugeAddr() const { return hugeAddr_; }
  [[nodiscard]] const WorkloadSpec& spec() const { return spec_; }
  [[nodiscard]] const std::string& error() const { return error_; }

  // Stops the writers, verifies every word of both buffers in the child and returns the verdict.
  WorkloadVerdict stopAndVerify();
  // SIGKILL and reap.
  void kill();

 private:
  WorkloadSpec spec_;
  pid_t pid_ = -1;
  int toChild_ = -1, fromChild_ = -1;
  uint64_t baseAddr_ = 0, hugeAddr_ = 0;
  std::string error_;
};

}  // namespace tt::e2e
