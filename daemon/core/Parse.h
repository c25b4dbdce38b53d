// Parsers for the small text formats of kernel pseudo-files.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/Result.h"

namespace tt {

// "0-3,8,10-11" -> {0,1,2,3,8,10,11}; empty or whitespace -> {} (a CPU-less node's cpulist).
[[nodiscard]] Result<std::vector<int>> parseIdList(std::string_view text);

// Whole-string unsigned decimal, surrounding whitespace allowed.
[[nodiscard]] Result<uint64_t> parseUint(std::string_view text);

// Whitespace-separated signed integers ("10 21 17").
[[nodiscard]] Result<std::vector<int>> parseIntList(std::string_view text);

// "12K", "64M", "2G", "4096" (bytes; binary units). Used by tools' --size flags.
[[nodiscard]] Result<uint64_t> parseSize(std::string_view text);

[[nodiscard]] std::string_view trim(std::string_view text);

}  // namespace tt
