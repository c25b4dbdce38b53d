// One counter of /proc/vmstat ("pgfault 123456"): machine-wide event counts the kernel keeps
// anyway, so reading them costs nothing on the paths they count.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/Result.h"
#include "sys/Fs.h"

namespace tt::sys {

// The value of `key` in `proc`'s vmstat; ENOENT when the file has no such line, EINVAL when the
// value is not a number.
[[nodiscard]] Result<uint64_t> readVmstat(const Fs& proc, std::string_view key);

}  // namespace tt::sys
