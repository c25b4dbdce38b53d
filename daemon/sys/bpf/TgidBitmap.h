// The tracked-tgid filter the BPF programs share: a BPF array of u64 words, bit (tgid % 64) of
// word (tgid / 64), sized for every tgid the kernel can hand out (kPidMaxLimit). An array lookup
// is inlined by the verifier, so the per-event filter costs a load, not a hash lookup
// (perf_sample_agg: 236 -> 142 ns per sample), and it has no entry limit. Only one daemon thread
// writes it (read-modify-write of one word).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "core/Result.h"

namespace tt::sys::bpf {

// The kernel's PID_MAX_LIMIT on 64-bit: the most kernel.pid_max can ever be raised to. The daemon
// sizes its bitmaps for it (512 KiB each), not for the pid_max it finds at start: an admin or a
// sysctl.d reload may raise pid_max later (systemd's default is this value), and a bitmap cannot
// grow without reloading the program, so a process given a larger pid could never be tracked.
inline constexpr uint32_t kPidMaxLimit = 1U << 22;

// Words of a bitmap covering tgids below `pidMax`.
[[nodiscard]] inline uint32_t tgidBitmapWords(uint32_t pidMax) { return (pidMax + 63) / 64; }

// Sets or clears `tgid`'s bit in the bitmap map `mapFd` (`program` names it in errors).
[[nodiscard]] Result<void> setTgidBit(int mapFd, uint32_t pidMax, pid_t tgid, bool on, const char* program);

}  // namespace tt::sys::bpf
