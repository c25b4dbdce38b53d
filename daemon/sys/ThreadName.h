// Names for the daemon's threads, as `top -H`, `ps -L` and /proc/PID/task/TID/comm show them.
#pragma once

#include <string_view>

namespace tt::sys {

// Names the calling thread (at most 15 bytes are kept: the kernel's TASK_COMM_LEN). Best effort:
// a thread that cannot be named keeps its process's name.
void nameThisThread(std::string_view name);

}  // namespace tt::sys
