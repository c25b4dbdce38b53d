#include "sys/ProcStat.h"

#include <unistd.h>

#include <charconv>
#include <string>

#include "core/Parse.h"

namespace tt::sys {

Result<int> parseStatProcessor(std::string_view stat) {
  const size_t close = stat.rfind(')');
  if (close == std::string_view::npos) return logicError("stat: no ')' after the command name");
  std::string_view rest = stat.substr(close + 1);
  // After the ')' come field 3 (state) onwards: field 39 is the 37th of them.
  constexpr int kProcessorAfterComm = 37;
  std::string_view field;
  for (int i = 0; i < kProcessorAfterComm; ++i) {
    rest = trim(rest);
    if (rest.empty()) return logicError("stat: " + std::to_string(i + 2) + " fields, no processor field (39)");
    const size_t space = rest.find(' ');
    field = rest.substr(0, space);
    rest = space == std::string_view::npos ? std::string_view{} : rest.substr(space);
  }
  auto cpu = parseUint(field);
  if (!cpu || *cpu > 1u << 20) return logicError("stat: processor field '" + std::string(field) + "' is not a CPU number");
  return static_cast<int>(*cpu);
}

Result<int> readLastCpu(const Fs& procfs, pid_t pid) {
  return procfs.readParsed(std::to_string(pid) + "/stat", parseStatProcessor);
}

std::optional<std::string_view> statusField(std::string_view status, std::string_view key) {
  for (size_t at = 0; at < status.size();) {
    const size_t end = std::min(status.find('\n', at), status.size());
    const std::string_view line = status.substr(at, end - at);
    if (line.size() > key.size() && line.substr(0, key.size()) == key && line[key.size()] == ':')
      return trim(line.substr(key.size() + 1));
    at = end + 1;
  }
  return std::nullopt;
}

Result<uint64_t> parseStatusEffectiveCaps(std::string_view status) {
  const auto mask = statusField(status, "CapEff");
  if (!mask) return logicError("status: no CapEff line");
  uint64_t caps = 0;
  const auto [end, ec] = std::from_chars(mask->data(), mask->data() + mask->size(), caps, 16);
  if (ec != std::errc() || end != mask->data() + mask->size() || mask->empty())
    return logicError("status: CapEff '" + std::string(*mask) + "' is not a hex mask");
  return caps;
}

Result<std::vector<int>> parseStatusAllowedCpus(std::string_view status) {
  const auto list = statusField(status, "Cpus_allowed_list");
  if (!list) return logicError("status: no Cpus_allowed_list line");
  auto cpus = parseIdList(*list);
  if (!cpus) return withContext(cpus.error(), "status: Cpus_allowed_list");
  return cpus;
}

Result<std::vector<int>> readAllowedCpus(const Fs& procfs, pid_t pid) {
  return procfs.readParsed(std::to_string(pid) + "/status", parseStatusAllowedCpus);
}

Result<bool> inInitialPidNamespace(const Fs& procfs) {
  const std::string path = procfs.resolve("self/ns/pid");
  char target[64];
  const ssize_t n = ::readlink(path.c_str(), target, sizeof target - 1);
  if (n < 0) return errnoError("readlink " + path);
  target[n] = '\0';
  // PROC_PID_INIT_INO (include/linux/proc_ns.h): the inode of the initial pid namespace.
  return std::string_view(target, static_cast<size_t>(n)) == "pid:[4026531836]";
}

}  // namespace tt::sys
