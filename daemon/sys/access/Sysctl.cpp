#include "sys/access/Sysctl.h"

#include <fcntl.h>
#include <sys/file.h>
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

Result<void> saveKernelTiering(const std::string& path, const KernelTiering& values, bool byUnit) {
  std::string text;
  if (values.numaBalancing) text += "numa_balancing=" + std::to_string(*values.numaBalancing) + "\n";
  if (values.demotionEnabled) text += std::string("demotion_enabled=") + (*values.demotionEnabled ? "1" : "0") + "\n";
  if (byUnit) text += "owner=unit\n";
  return replaceFile(path, text);
}

Result<std::optional<SavedKernelTiering>> loadKernelTieringState(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return std::optional<SavedKernelTiering>();
    return errnoError("stat " + path);
  }
  std::ifstream in(path);
  if (!in) return systemError(EIO, "open " + path);
  SavedKernelTiering saved;
  KernelTiering& t = saved.values;
  std::string line;
  while (std::getline(in, line)) {
    const std::string_view l = trim(line);
    if (l.empty()) continue;
    if (l == "owner=unit") {
      saved.byUnit = true;
      continue;
    }
    const size_t eq = l.find('=');
    auto value = eq == std::string_view::npos ? Result<uint64_t>(logicError("no '='")) : parseUint(l.substr(eq + 1));
    const std::string_view key = eq == std::string_view::npos ? l : l.substr(0, eq);
    if (!value || (key != "numa_balancing" && key != "demotion_enabled") ||
        (key == "demotion_enabled" && *value > 1) || (key == "numa_balancing" && *value > 1000))
      return logicError(path + ": unexpected line '" + std::string(l) + "'");
    if (key == "numa_balancing") t.numaBalancing = static_cast<int>(*value);
    else t.demotionEnabled = *value == 1;
  }
  return std::optional<SavedKernelTiering>(saved);
}

Result<std::optional<KernelTiering>> loadKernelTiering(const std::string& path) {
  auto saved = loadKernelTieringState(path);
  if (!saved) return saved.error();
  return *saved ? std::optional<KernelTiering>((*saved)->values) : std::nullopt;
}

namespace {

// Writes `saved` back where the knobs still hold what turning off wrote; appends the others to
// `leftAlone`. Each knob is tried whatever happened to the other; false (and the first error in
// `error`) when a write failed.
bool writeBackUnchanged(const Fs& procfs, const Fs& sysfs, const KernelTiering& saved, std::string& leftAlone,
                        Error* error) {
  auto now = readKernelTiering(procfs, sysfs);
  if (!now) {
    if (error) *error = now.error();
    return false;
  }
  bool ok = true;
  auto fail = [&](const Error& e) {
    if (ok && error) *error = e;
    ok = false;
  };
  auto note = [&](const std::string& what) { leftAlone += (leftAlone.empty() ? "" : ", ") + what; };
  if (saved.numaBalancing.value_or(0) != 0 && now->numaBalancing) {
    if (*now->numaBalancing != 0) {
      note("numa_balancing (now " + std::to_string(*now->numaBalancing) + ")");
    } else if (auto w = writeNumaBalancing(procfs, *saved.numaBalancing); !w) {
      fail(w.error());
    }
  }
  if (saved.demotion() && now->demotionEnabled) {
    if (*now->demotionEnabled) {
      note("demotion_enabled (now true)");
    } else if (auto w = writeDemotionEnabled(sysfs, true); !w) {
      fail(w.error());
    }
  }
  return ok;
}

}  // namespace

Result<KernelTieringLock> KernelTieringLock::acquire(const std::string& statePath) {
  if (auto d = ensureParentDirectory(statePath); !d) return d.error();
  const std::string path = statePath + ".lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return errnoError("open " + path);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    return systemError(err, err == EWOULDBLOCK ? "another tensortierd has the kernel's tiering in its care (it holds " +
                                                     path + ")"
                                               : "flock " + path);
  }
  return KernelTieringLock(fd);
}

KernelTieringLock::~KernelTieringLock() {
  if (fd_ >= 0) ::close(fd_);  // the lock goes with the descriptor
}

Result<std::optional<KernelTiering>> restoreKernelTiering(const Fs& procfs, const Fs& sysfs,
                                                          const std::string& statePath, std::string* leftAlone) {
  if (auto saved = loadKernelTiering(statePath); !saved || !*saved) return saved;
  auto lock = KernelTieringLock::acquire(statePath);
  if (!lock) return lock.error();
  return restoreKernelTiering(procfs, sysfs, statePath, *lock, leftAlone);
}

Result<std::optional<KernelTiering>> restoreKernelTiering(const Fs& procfs, const Fs& sysfs,
                                                          const std::string& statePath,
                                                          const KernelTieringLock& /*held*/, std::string* leftAlone) {
  // Read (again) under the lock: a holder before it may have restored and removed it.
  auto saved = loadKernelTiering(statePath);
  if (!saved) return saved.error();
  if (!*saved) return saved;
  std::string left;
  Error error = logicError("");
  if (!writeBackUnchanged(procfs, sysfs, **saved, left, &error)) return error;
  if (leftAlone) *leftAlone = left;
  if (::unlink(statePath.c_str()) != 0 && errno != ENOENT) return errnoError("remove " + statePath);
  return saved;
}

Result<KernelTieringGuard> KernelTieringGuard::disable(Fs procfs, Fs sysfs, std::string statePath, bool byUnit) {
  auto lock = KernelTieringLock::acquire(statePath);
  if (!lock) return withContext(lock.error(), "nothing changed");
  return disable(std::move(procfs), std::move(sysfs), std::move(statePath), std::move(*lock), byUnit);
}

Result<KernelTieringGuard> KernelTieringGuard::disable(Fs procfs, Fs sysfs, std::string statePath,
                                                       KernelTieringLock held, bool byUnit) {
  auto saved = readKernelTiering(procfs, sysfs);
  if (!saved) return saved.error();
  // Nothing is changed that could not be restored after a crash.
  if (auto s = saveKernelTiering(statePath, *saved, byUnit); !s)
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
  return KernelTieringGuard(std::move(procfs), std::move(sysfs), std::move(statePath), *saved, std::move(held));
}

std::string KernelTieringGuard::changes() const {
  std::string s;
  if (saved_.numaBalancing.value_or(0) != 0) s = "numa_balancing " + std::to_string(*saved_.numaBalancing) + " -> 0";
  if (saved_.demotion()) s += std::string(s.empty() ? "" : ", ") + "demotion_enabled true -> false";
  return s.empty() ? "nothing" : s;
}

KernelTieringGuard::KernelTieringGuard(KernelTieringGuard&& other) noexcept
    : procfs_(other.procfs_), sysfs_(other.sysfs_), statePath_(other.statePath_), saved_(other.saved_),
      lock_(std::move(other.lock_)) {
  other.active_ = false;
}

KernelTieringGuard::~KernelTieringGuard() {
  if (!active_) return;
  std::string left;
  Error error = logicError("");
  const bool restored = writeBackUnchanged(procfs_, sysfs_, saved_, left, &error);
  if (!restored) {
    TT_LOG(Error) << "kernel-tiering: restoring " << saved_.describe() << ": " << error.message();
  } else if (!left.empty()) {
    TT_LOG(Warn) << "kernel-tiering: not restored, changed while the daemon ran: " << left;
  }
  // Kept when a write failed: the unit's ExecStopPost (or the next start) tries again from it.
  if (restored && ::unlink(statePath_.c_str()) != 0 && errno != ENOENT) {
    TT_LOG(Warn) << "removing " << statePath_ << ": " << std::strerror(errno);
  }
}

}  // namespace tt::sys
