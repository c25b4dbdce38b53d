// Kernel tiering settings: NUMA balancing (/proc/sys/kernel/numa_balancing; bit 0 = classic
// balancing: hint faults move pages towards the accessing CPU's node; bit 1 = memory tiering mode:
// hint faults promote hot slow-tier pages) and reclaim demotion
// (/sys/kernel/mm/numa/demotion_enabled). A daemon that places pages itself must see these and
// either cooperate with them or turn them off while it runs (KernelTieringGuard).
//
// Turning them off survives the daemon's death: the original values go to a state file (under
// the runtime directory, /run/tensortier) before anything is changed; a clean exit restores them
// and removes the file; a daemon that died (crash, SIGKILL) leaves the file, and the next start or
// `tensortierd --restore-kernel-tiering` (the unit's ExecStopPost) restores from it.
//
// Under the shipped unit its ExecStartPre (`--prepare-kernel-tiering`) and ExecStopPost run with
// full privileges and do the turning off and the restoring, so that the values come back after
// every stop, a killed daemon's too, and whatever capabilities an admin's drop-in takes from the
// daemon (writing kernel.numa_balancing needs CAP_SYS_ADMIN: sysctl_numa_balancing); their state
// file is marked as the unit's, and the daemon leaves it to them.
//
// A knob is restored only while it still holds what was written (0, false): a value the admin
// set while the daemon ran is theirs, not the daemon's to overwrite.
//
// One process at a time has the values in its care: whoever turns them off or restores them holds
// an flock(2) on the state file's ".lock" sibling (a daemon for as long as its guard lives). A
// second daemon (another socket, same config) would otherwise restore the first one's saved
// values at its start while the first still runs, and remove its record.
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
  // The kernel moves pages between nodes on its own: NUMA balancing in any mode (classic
  // balancing also pulls pages off CPU-less slow nodes towards the accessing CPU), or demotion.
  [[nodiscard]] bool movesPages() const { return numaBalancing.value_or(0) != 0 || demotion(); }
  // "numa_balancing=2 (tiering), demotion_enabled=true"
  [[nodiscard]] std::string describe() const;
  bool operator==(const KernelTiering&) const = default;
};

// `procfs` rooted at /proc, `sysfs` at /sys (fixture trees in tests).
[[nodiscard]] Result<KernelTiering> readKernelTiering(const Fs& procfs, const Fs& sysfs);
[[nodiscard]] Result<void> writeNumaBalancing(const Fs& procfs, int value);
[[nodiscard]] Result<void> writeDemotionEnabled(const Fs& sysfs, bool enabled);

// The state file: "numa_balancing=N" and "demotion_enabled=0|1" lines (absent knobs left out),
// and "owner=unit" when the unit's ExecStartPre wrote it. Written to a temporary file, synced and
// renamed over `path` (its directory is made if missing, mode 0755), so it is either complete or
// absent.
struct SavedKernelTiering {
  KernelTiering values;
  bool byUnit = false;  // turned off by the unit's ExecStartPre; its ExecStopPost restores
};
[[nodiscard]] Result<void> saveKernelTiering(const std::string& path, const KernelTiering& values, bool byUnit = false);
// std::nullopt when there is no file.
[[nodiscard]] Result<std::optional<SavedKernelTiering>> loadKernelTieringState(const std::string& path);
[[nodiscard]] Result<std::optional<KernelTiering>> loadKernelTiering(const std::string& path);
// The lock on a state file (its path + ".lock"), held while its values are changed or restored.
// Released by the kernel when its holder dies, so a crash leaves none behind.
class KernelTieringLock {
 public:
  // Fails (EWOULDBLOCK, naming the lock file) while another process holds it.
  [[nodiscard]] static Result<KernelTieringLock> acquire(const std::string& statePath);
  KernelTieringLock(KernelTieringLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  KernelTieringLock& operator=(KernelTieringLock&&) = delete;
  KernelTieringLock(const KernelTieringLock&) = delete;
  ~KernelTieringLock();

 private:
  explicit KernelTieringLock(int fd) : fd_(fd) {}
  int fd_;
};

// Writes the values saved in `statePath` back and removes the file; std::nullopt when there is no
// file (nothing to restore). An error, changing nothing, while another process holds the lock. A
// knob is written only while it holds what turning off wrote (numa_balancing 0, demotion false);
// one the admin changed since is left, and `leftAlone` (when given) names it. The file stays when
// a write fails, for a later try.
[[nodiscard]] Result<std::optional<KernelTiering>> restoreKernelTiering(const Fs& procfs, const Fs& sysfs,
                                                                        const std::string& statePath,
                                                                        std::string* leftAlone = nullptr);
// The same under a lock the caller already holds (a start that restores and then turns tiering
// off again holds it across both, so no other daemon can come in between).
[[nodiscard]] Result<std::optional<KernelTiering>> restoreKernelTiering(const Fs& procfs, const Fs& sysfs,
                                                                        const std::string& statePath,
                                                                        const KernelTieringLock& held,
                                                                        std::string* leftAlone = nullptr);

// While alive, the kernel moves no pages by itself: kernel.numa_balancing is 0 (classic balancing
// as well as tiering mode: either migrates pages the daemon placed) and demotion is off. The
// values found at construction are saved to `statePath` first and written back on destruction,
// whatever happened in between; the file is removed once they are.
class KernelTieringGuard {
 public:
  // `byUnit`: the unit's ExecStartPre, which hands the restoring to its ExecStopPost (release()).
  [[nodiscard]] static Result<KernelTieringGuard> disable(Fs procfs, Fs sysfs, std::string statePath,
                                                          bool byUnit = false);
  // The same under a lock the caller acquired, which the guard then keeps.
  [[nodiscard]] static Result<KernelTieringGuard> disable(Fs procfs, Fs sysfs, std::string statePath,
                                                          KernelTieringLock held, bool byUnit = false);
  KernelTieringGuard(KernelTieringGuard&& other) noexcept;
  KernelTieringGuard& operator=(KernelTieringGuard&&) = delete;
  KernelTieringGuard(const KernelTieringGuard&) = delete;
  ~KernelTieringGuard();
  [[nodiscard]] const KernelTiering& saved() const { return saved_; }
  // What disable() changed: "numa_balancing 3 -> 0, demotion_enabled true -> false".
  [[nodiscard]] std::string changes() const;
  // Leaves the values off and the state file in place: whoever reads it restores them.
  void release() { active_ = false; }

 private:
  KernelTieringGuard(Fs procfs, Fs sysfs, std::string statePath, KernelTiering saved, KernelTieringLock lock)
      : procfs_(std::move(procfs)), sysfs_(std::move(sysfs)), statePath_(std::move(statePath)), saved_(saved),
        lock_(std::move(lock)) {}
  Fs procfs_;
  Fs sysfs_;
  std::string statePath_;
  KernelTiering saved_;
  KernelTieringLock lock_;
  bool active_ = true;
};

}  // namespace tt::sys
