#include "sys/access/Sysctl.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

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
                       : (*numaBalancing != 0 ? " (classic NUMA balancing: moves pages towards the accessing CPU's node)"
                                              : " (off)");
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

Result<void> saveKernelTiering(const std::string& path, const KernelTiering& values) {
  std::string text;
  if (values.numaBalancing) text += "numa_balancing=" + std::to_string(*values.numaBalancing) + "\n";
  if (values.demotionEnabled) text += std::string("demotion_enabled=") + (*values.demotionEnabled ? "1" : "0") + "\n";
  const size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash != 0) {
    const std::string dir = path.substr(0, slash);
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return errnoError("mkdir " + dir);
  }
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return errnoError("create " + tmp);
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!written) {
    ::unlink(tmp.c_str());
    return systemError(err, "write " + tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const Error e = errnoError("rename " + tmp + " to " + path);
    ::unlink(tmp.c_str());
    return e;
  }
  return {};
}

Result<std::optional<KernelTiering>> loadKernelTiering(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return std::optional<KernelTiering>();
    return errnoError("stat " + path);
  }
  std::ifstream in(path);
  if (!in) return systemError(EIO, "open " + path);
  KernelTiering t;
  std::string line;
  while (std::getline(in, line)) {
    const std::string_view l = trim(line);
    if (l.empty()) continue;
    const size_t eq = l.find('=');
    auto value = eq == std::string_view::npos ? Result<uint64_t>(logicError("no '='")) : parseUint(l.substr(eq + 1));
    const std::string_view key = eq == std::string_view::npos ? l : l.substr(0, eq);
    if (!value || (key != "numa_balancing" && key != "demotion_enabled") ||
        (key == "demotion_enabled" && *value > 1) || (key == "numa_balancing" && *value > 1000))
      return logicError(path + ": unexpected line '" + std::string(l) + "'");
    if (key == "numa_balancing") t.numaBalancing = static_cast<int>(*value);
    else t.demotionEnabled = *value == 1;
  }
  return std::optional<KernelTiering>(t);
}

Result<std::optional<KernelTiering>> restoreKernelTiering(const Fs& procfs, const Fs& sysfs,
                                                          const std::string& statePath) {
  auto saved = loadKernelTiering(statePath);
  if (!saved) return saved.error();
  if (!*saved) return saved;
  const KernelTiering& t = **saved;
  if (t.numaBalancing)
    if (auto w = writeNumaBalancing(procfs, *t.numaBalancing); !w) return w.error();
  if (t.demotionEnabled)
    if (auto w = writeDemotionEnabled(sysfs, *t.demotionEnabled); !w) return w.error();
  if (::unlink(statePath.c_str()) != 0 && errno != ENOENT) return errnoError("remove " + statePath);
  return saved;
}

Result<KernelTieringGuard> KernelTieringGuard::disable(Fs procfs, Fs sysfs, std::string statePath) {
  auto saved = readKernelTiering(procfs, sysfs);
  if (!saved) return saved.error();
  // Nothing is changed that could not be restored after a crash.
  if (auto s = saveKernelTiering(statePath, *saved); !s)
    return withContext(s.error(), "saving the original values (nothing changed)");
  auto undo = [&] {
    if (saved->numaBalancing) (void)writeNumaBalancing(procfs, *saved->numaBalancing);
    ::unlink(statePath.c_str());
  };
  if (saved->numaBalancing.value_or(0) != 0) {
    if (auto w = writeNumaBalancing(procfs, 0); !w) {
      undo();
      return w.error();
    }
  }
  if (saved->demotion()) {
    if (auto w = writeDemotionEnabled(sysfs, false); !w) {
      undo();
      return w.error();
    }
  }
  return KernelTieringGuard(std::move(procfs), std::move(sysfs), std::move(statePath), *saved);
}

std::string KernelTieringGuard::changes() const {
  std::string s;
  if (saved_.numaBalancing.value_or(0) != 0) s = "numa_balancing " + std::to_string(*saved_.numaBalancing) + " -> 0";
  if (saved_.demotion()) s += std::string(s.empty() ? "" : ", ") + "demotion_enabled true -> false";
  return s.empty() ? "nothing" : s;
}

KernelTieringGuard::KernelTieringGuard(KernelTieringGuard&& other) noexcept
    : procfs_(other.procfs_), sysfs_(other.sysfs_), statePath_(other.statePath_), saved_(other.saved_) {
  other.active_ = false;
}

KernelTieringGuard::~KernelTieringGuard() {
  if (!active_) return;
  bool restored = true;
  if (saved_.numaBalancing.value_or(0) != 0) {
    if (auto w = writeNumaBalancing(procfs_, *saved_.numaBalancing); !w) {
      TT_LOG(Error) << "restoring kernel.numa_balancing=" << *saved_.numaBalancing << ": " << w.error().message();
      restored = false;
    }
  }
  if (saved_.demotion()) {
    if (auto w = writeDemotionEnabled(sysfs_, true); !w) {
      TT_LOG(Error) << "restoring demotion_enabled=true: " << w.error().message();
      restored = false;
    }
  }
  // Kept when a write failed: the unit's ExecStopPost (or the next start) tries again from it.
  if (restored && ::unlink(statePath_.c_str()) != 0 && errno != ENOENT) {
    TT_LOG(Warn) << "removing " << statePath_ << ": " << std::strerror(errno);
  }
}

}  // namespace tt::sys
