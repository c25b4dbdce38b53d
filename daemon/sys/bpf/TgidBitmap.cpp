#include "sys/bpf/TgidBitmap.h"

#include <bpf/bpf.h>

#include <fstream>

namespace tt::sys::bpf {

Result<uint32_t> readPidMax(const std::string& procRoot) {
  const std::string path = procRoot + "/sys/kernel/pid_max";
  std::ifstream in(path);
  uint64_t v = 0;
  if (!(in >> v)) return errnoError("read " + path);
  if (v == 0 || v > (1U << 22)) return logicError(path + ": unexpected value " + std::to_string(v));
  return static_cast<uint32_t>(v);
}

Result<void> setTgidBit(int mapFd, uint32_t pidMax, pid_t tgid, bool on, const char* program) {
  if (tgid <= 0 || static_cast<uint32_t>(tgid) >= pidMax)
    return logicError("tgid " + std::to_string(tgid) + " outside kernel.pid_max " + std::to_string(pidMax));
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
