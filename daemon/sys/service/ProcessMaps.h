// /proc/PID/maps: which address ranges a process has mapped. The registry checks every region a
// client registers against it, so a client can only name memory that really is its own.
//
// maps (not smaps) because registration is on the client's critical path: maps is one short line
// per VMA, smaps is ~20.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/Result.h"
#include "sys/Fs.h"

namespace tt::sys {

struct Mapping {
  uint64_t start = 0;
  uint64_t end = 0;  // exclusive
  bool readable = false;
  bool writable = false;
  bool shared = false;  // 's' in the permissions (MAP_SHARED)
  std::string path;     // "" for anonymous, "[heap]", "[stack]", a file
};

// Parses maps text ("start-end perms offset dev inode [path]" per line), ascending by start as the
// kernel writes it. A malformed line is an error naming the line.
[[nodiscard]] Result<std::vector<Mapping>> parseMaps(std::string_view text);

// Reads `<pid>/maps` under `procfs`.
[[nodiscard]] Result<std::vector<Mapping>> readMaps(const Fs& procfs, pid_t pid);

// True when every byte of [start, end) lies in some mapping, with no gap (adjacent VMAs may split
// one allocation). `maps` must be sorted by start.
[[nodiscard]] bool rangeMapped(const std::vector<Mapping>& maps, uint64_t start, uint64_t end);

}  // namespace tt::sys
