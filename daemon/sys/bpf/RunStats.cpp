#include "sys/bpf/RunStats.h"

#include <bpf/bpf.h>

#include <cstring>

namespace tt::sys::bpf {

Result<int> enableBpfRunTimeStats() {
  const int fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
  if (fd < 0) return errnoError("bpf_enable_stats(BPF_STATS_RUN_TIME)");
  return fd;
}

Result<std::pair<uint64_t, uint64_t>> programRunTime(int programFd, const std::string& what) {
  bpf_prog_info info;
  std::memset(&info, 0, sizeof info);
  uint32_t len = sizeof info;
  if (bpf_obj_get_info_by_fd(programFd, &info, &len) != 0) return errnoError("bpf_obj_get_info_by_fd " + what);
  return std::pair<uint64_t, uint64_t>{info.run_time_ns, info.run_cnt};
}

}  // namespace tt::sys::bpf
