#include "sys/access/Sysctl.h"

#include "core/Log.h"
#include "core/Parse.h"

namespace tt::sys {

namespace {
constexpr const char* kNumaBalancing = "sys/kernel/numa_balancing";
constexpr const char* kDemotion = "kernel/mm/numa/demotion_enabled";
}  // namespace

std::string KernelTiering::describe() const {
  std::string s = "numa_balancing=";
  if (!numaBalancing) {
    s += "absent";
  } else {
    s += std::to_string(*numaBalancing);
    s += tieringMode() ? " (tiering: the kernel promotes hot slow-tier pages)"
                       : (*numaBalancing != 0 ? " (NUMA balancing, no tiering)" : " (off)");
  }
  s += ", demotion_enabled=";
  s += demotionEnabled ? (*demotionEnabled ? "true (reclaim demotes to the slow tier)" : "false") : "absent";
  return s;
}

Result<KernelTiering> readKernelTiering(const Fs& procfs, const Fs& sysfs) {
  KernelTiering t;
  if (procfs.exists(kNumaBalancing)) {
    auto line = procfs.readLine(kNumaBalancing);
    if (!line) return line.error();
    auto v = parseUint(*line);
    if (!v) return withContext(v.error(), procfs.resolve(kNumaBalancing));
    t.numaBalancing = static_cast<int>(*v);
  }
  if (sysfs.exists(kDemotion)) {
    auto line = sysfs.readLine(kDemotion);
    if (!line) return line.error();
    const std::string_view v = trim(*line);
    if (v == "true" || v == "1") {
      t.demotionEnabled = true;
    } else if (v == "false" || v == "0") {
      t.demotionEnabled = false;
    } else {
      return logicError(sysfs.resolve(kDemotion) + ": unexpected value '" + std::string(v) + "'");
    }
  }
  return t;
}

Result<void> writeNumaBalancing(const Fs& procfs, int value) {
  return procfs.writeFile(kNumaBalancing, std::to_string(value));
}

Result<void> writeDemotionEnabled(const Fs& sysfs, bool enabled) {
  // kstrtobool accepts 1/0 as well as true/false.
  return sysfs.writeFile(kDemotion, enabled ? "1" : "0");
}

Result<KernelTieringGuard> KernelTieringGuard::disable(Fs procfs, Fs sysfs) {
  auto saved = readKernelTiering(procfs, sysfs);
  if (!saved) return saved.error();
  if (saved->tieringMode()) {
    if (auto w = writeNumaBalancing(procfs, *saved->numaBalancing & ~2); !w) return w.error();
  }
  if (saved->demotion()) {
    if (auto w = writeDemotionEnabled(sysfs, false); !w) {
      if (saved->tieringMode()) (void)writeNumaBalancing(procfs, *saved->numaBalancing);
      return w.error();
    }
  }
  return KernelTieringGuard(std::move(procfs), std::move(sysfs), *saved);
}

KernelTieringGuard::KernelTieringGuard(KernelTieringGuard&& other) noexcept
    : procfs_(other.procfs_), sysfs_(other.sysfs_), saved_(other.saved_) {
  other.active_ = false;
}

KernelTieringGuard::~KernelTieringGuard() {
  if (!active_) return;
  if (saved_.tieringMode()) {
    if (auto w = writeNumaBalancing(procfs_, *saved_.numaBalancing); !w) {
      TT_LOG(Error) << "restoring kernel.numa_balancing=" << *saved_.numaBalancing << ": " << w.error().message();
    }
  }
  if (saved_.demotion()) {
    if (auto w = writeDemotionEnabled(sysfs_, true); !w) {
      TT_LOG(Error) << "restoring demotion_enabled=true: " << w.error().message();
    }
  }
}

}  // namespace tt::sys
