// Kernel tiering settings: NUMA balancing (/proc/sys/kernel/numa_balancing; 2 = memory tiering
// mode: hint faults promote slow-tier pages) and reclaim demotion
// (/sys/kernel/mm/numa/demotion_enabled). A daemon that places pages itself must see these and
// either cooperate with them or turn them off while it runs (KernelTieringGuard).
#pragma once

#include <optional>
#include <string>

#include "core/Result.h"
#include "sys/Fs.h"

namespace tt::sys {

struct KernelTiering {
  std::optional<int> numaBalancing;     // absent: kernel without CONFIG_NUMA_BALANCING
  std::optional<bool> demotionEnabled;  // absent: kernel without demotion (< 5.15)
  [[nodiscard]] bool tieringMode() const { return numaBalancing && (*numaBalancing & 2) != 0; }
  [[nodiscard]] bool demotion() const { return demotionEnabled.value_or(false); }
  // "numa_balancing=2 (tiering), demotion_enabled=true"
  [[nodiscard]] std::string describe() const;
};

// `procfs` rooted at /proc, `sysfs` at /sys (fixture trees in tests).
[[nodiscard]] Result<KernelTiering> readKernelTiering(const Fs& procfs, const Fs& sysfs);
[[nodiscard]] Result<void> writeNumaBalancing(const Fs& procfs, int value);
[[nodiscard]] Result<void> writeDemotionEnabled(const Fs& sysfs, bool enabled);

// While alive, kernel tiering is off (NUMA-balancing tiering bit cleared, demotion off); the
// values found at construction are written back on destruction, whatever happened in between.
class KernelTieringGuard {
 public:
  [[nodiscard]] static Result<KernelTieringGuard> disable(Fs procfs, Fs sysfs);
  KernelTieringGuard(KernelTieringGuard&& other) noexcept;
  KernelTieringGuard& operator=(KernelTieringGuard&&) = delete;
  KernelTieringGuard(const KernelTieringGuard&) = delete;
  ~KernelTieringGuard();
  [[nodiscard]] const KernelTiering& saved() const { return saved_; }

 private:
  KernelTieringGuard(Fs procfs, Fs sysfs, KernelTiering saved) : procfs_(std::move(procfs)), sysfs_(std::move(sysfs)), saved_(saved) {}
  Fs procfs_;
  Fs sysfs_;
  KernelTiering saved_;
  bool active_ = true;
};

}  // namespace tt::sys
