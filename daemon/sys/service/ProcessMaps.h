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
#include <utility>
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

// The effective uid and gid a process runs as now, and whether it is dumpable: the owner of its
// `<pid>` directory under `procfs`, which the kernel keeps at the effective ids whether or not the
// process is dumpable, and the owner of `<pid>/status`, which the kernel gives to the root of the
// process's user namespace instead when it is not. Not dumpable means the kernel keeps the
// process's memory map from other processes of its uid (ptrace access mode read): it ran a
// file-capability program (commit_creds makes a process that gains capabilities non-dumpable,
// fs.suid_dumpable 0), a setid one, or said PR_SET_DUMPABLE 0. A process that runs as its
// namespace's root shows as dumpable either way (the kernel would still want a capability in
// that namespace of a reader). A thread-group leader that exited while other threads run shows
// its files as root's too: another thread's are asked then. Two stat(2)s, ~1.6 us each here,
// where reading `<pid>/status` is ~13 us. ESRCH when the process is gone.
// With `afterExec`, first opens `<pid>/maps`: the kernel takes the process's exec lock for that
// open, so an exec in progress has installed its credentials (and with them its dumpability) by
// the time of the stats. An exec replaces the address space before it commits the new ids, so a
// reader that saw the new address space and then checks the ids this way sees the new ids.
struct ProcessOwner {
  uid_t uid = 0;
  gid_t gid = 0;
  bool dumpable = true;
  friend bool operator==(const ProcessOwner&, const ProcessOwner&) = default;
};
[[nodiscard]] Result<ProcessOwner> processOwner(const Fs& procfs, pid_t pid, bool afterExec = false);

// What the kernel said about a range, asked one VMA at a time.
enum class RangeQuery {
  kMapped,
  kNotMapped,
  kUndecided,  // the range spans more than the VMAs the caller allowed; no gap among those
};

// Asks the kernel whether [start, end) is mapped in `pid` without reading the whole maps file:
// PROCMAP_QUERY (Linux 6.11+) on `<pid>/maps` under `procfs`, one ioctl per VMA from `start` on,
// stopping at the first gap or after `maxVmas` VMAs. Why: one ioctl costs a few microseconds
// whatever the process's VMA count, where the maps text of a process with 60k VMAs is ~3 MB and
// ~30 ms to read; the walk costs ~0.8 us per VMA, so the caller bounds it.
// An error with ENOTTY when the kernel has no such ioctl (or `procfs` is not procfs).
struct RangeQueryResult {
  RangeQuery answer = RangeQuery::kUndecided;
  uint64_t vmas = 0;  // VMAs looked up (ioctls that found one)
};
[[nodiscard]] Result<RangeQueryResult> queryRangeMapped(const Fs& procfs, pid_t pid, uint64_t start, uint64_t end,
                                                        uint64_t maxVmas);

// An open `<pid>/maps`, which pins the address space the process had when it was opened: the
// kernel takes the process's mm at open (after waiting out an exec in progress: the exec lock),
// and every later query or read of the open file describes that mm, or nothing once the mm is
// gone (the process exec'd a new program or exited). Why keep one open: a query of it does not
// wait on the process's exec lock (an open does, for as long as an exec tears the old address
// space down: 0.66 s at 8 GiB), and says when the address space is gone. After an exec it never
// describes the new program; it goes on describing the old address space if another process
// shares it (clone with CLONE_VM) and keeps it alive.
class MapsHandle {
 public:
  // ESRCH when the process is gone.
  [[nodiscard]] static Result<MapsHandle> open(const Fs& procfs, pid_t pid);
  MapsHandle(MapsHandle&& other) noexcept : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}
  MapsHandle& operator=(MapsHandle&& other) noexcept;
  MapsHandle(const MapsHandle&) = delete;
  MapsHandle& operator=(const MapsHandle&) = delete;
  ~MapsHandle();

  // As queryRangeMapped, in the pinned address space. ESRCH when it is gone; ENOTTY when the
  // kernel has no PROCMAP_QUERY (or this is not procfs).
  [[nodiscard]] Result<RangeQueryResult> queryRange(uint64_t start, uint64_t end, uint64_t maxVmas) const;
  // The whole maps text of the pinned address space, parsed; empty once it is gone (a live
  // address space always has a stack).
  [[nodiscard]] Result<std::vector<Mapping>> read() const;
  // Whether the pinned address space still exists: one PROCMAP_QUERY, or where there is none a
  // read of the first byte.
  [[nodiscard]] Result<bool> alive() const;

 private:
  MapsHandle(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
};

}  // namespace tt::sys
