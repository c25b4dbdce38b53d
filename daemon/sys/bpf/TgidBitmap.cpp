#include "sys/bpf/TgidBitmap.h"

#include <bpf/bpf.h>

namespace tt::sys::bpf {

Result<void> setTgidBit(int mapFd, uint32_t pidMax, pid_t tgid, bool on, const char* program) {
  if (tgid <= 0 || static_cast<uint32_t>(tgid) >= pidMax)
    return logicError("tgid " + std::to_string(tgid) + " outside the tgid bitmap (tgids below " + std::to_string(pidMax) + ")");
  const uint32_t word = static_cast<uint32_t>(tgid) / 64;
  uint64_t bits = 0;
  if (bpf_map_lookup_elem(mapFd, &word, &bits) != 0) return errnoError(std::string("read ") + program + " tgid bitmap");
  const uint64_t mask = 1ULL << (static_cast<uint32_t>(tgid) % 64);
  bits = on ? (bits | mask) : (bits & ~mask);
  if (bpf_map_update_elem(mapFd, &word, &bits, BPF_ANY) != 0)
    return errnoError(std::string(on ? "track" : "untrack") + " tgid " + std::to_string(tgid) + " in " + program);
  return {};
}

}  // namespace tt::sys::bpf
