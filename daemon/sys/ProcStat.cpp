#include "sys/ProcStat.h"

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
  const std::string path = std::to_string(pid) + "/stat";
  auto text = procfs.readLine(path);
  if (!text) return text.error();
  auto cpu = parseStatProcessor(*text);
  if (!cpu) return withContext(cpu.error(), procfs.resolve(path));
  return cpu;
}

}  // namespace tt::sys
