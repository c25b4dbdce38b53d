// The tracked-tgid filter the BPF programs share: a BPF array of u64 words, bit (tgid % 64) of
// word (tgid / 64), sized from kernel.pid_max. An array lookup is inlined by the verifier, so the
// per-event filter costs a load, not a hash lookup (perf_sample_agg: 236 -> 142 ns per sample),
// and it has no entry limit. Only one daemon thread writes it (read-modify-write of one word).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "core/Result.h"

namespace tt::sys::bpf {

// kernel.pid_max from procfs (`procRoot` normally "/proc").
[[nodiscard]] Result<uint32_t> readPidMax(const std::string& procRoot);

// Words of a bitmap covering tgids below `pidMax`.
[[nodiscard]] inline uint32_t tgidBitmapWords(uint32_t pidMax) { return (pidMax + 63) / 64; }

// Sets or clears `tgid`'s bit in the bitmap map `mapFd` (`program` names it in errors).
[[nodiscard]] Result<void> setTgidBit(int mapFd, uint32_t pidMax, pid_t tgid, bool on, const char* program);

}  // namespace tt::sys::bpf
