#include "sys/service/ProcessMaps.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <string>

#include <linux/types.h>
#if __has_include(<linux/fs.h>)
#include <linux/fs.h>
#endif

// Debian 12's headers (6.1) predate PROCMAP_QUERY (6.11); its ABI is fixed (uapi/linux/fs.h), and
// the struct carries its own size so later kernels accept this one.
#ifndef PROCMAP_QUERY
struct procmap_query {
  __u64 size;
  __u64 query_flags;
  __u64 query_addr;
  __u64 vma_start;
  __u64 vma_end;
  __u64 vma_flags;
  __u64 vma_page_size;
  __u64 vma_offset;
  __u64 inode;
  __u32 dev_major;
  __u32 dev_minor;
  __u32 vma_name_size;
  __u32 build_id_size;
  __u64 vma_name_addr;
  __u64 build_id_addr;
};
#define PROCMAP_QUERY _IOWR('f', 17, struct procmap_query)
#define PROCMAP_QUERY_COVERING_OR_NEXT_VMA 0x10
static_assert(sizeof(procmap_query) == 104, "struct procmap_query as of Linux 6.11");
#endif

namespace tt::sys {
namespace {

bool parseHex(std::string_view text, uint64_t& out) {
  if (text.empty()) return false;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out, 16);
  return ec == std::errc() && ptr == text.data() + text.size();
}

// Next space-separated field; advances `line`.
std::string_view nextField(std::string_view& line) {
  while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
  const size_t end = line.find(' ');
  std::string_view field = line.substr(0, end);
  line.remove_prefix(end == std::string_view::npos ? line.size() : end);
  return field;
}

}  // namespace

Result<std::vector<Mapping>> parseMaps(std::string_view text) {
  std::vector<Mapping> maps;
  size_t lineNo = 0;
  while (!text.empty()) {
    ++lineNo;
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (line.empty()) continue;
    const std::string_view whole = line;
    auto bad = [&](const char* what) {
      return logicError("maps line " + std::to_string(lineNo) + " (" + std::string(whole.substr(0, 80)) + "): " + what);
    };
    const std::string_view range = nextField(line);
    const size_t dash = range.find('-');
    Mapping m;
    if (dash == std::string_view::npos || !parseHex(range.substr(0, dash), m.start) ||
        !parseHex(range.substr(dash + 1), m.end))
      return bad("bad address range");
    if (m.end <= m.start) return bad("empty or inverted range");
    const std::string_view perms = nextField(line);
    if (perms.size() != 4) return bad("bad permissions");
    m.readable = perms[0] == 'r';
    m.writable = perms[1] == 'w';
    m.shared = perms[3] == 's';
    const std::string_view offset = nextField(line), dev = nextField(line), inode = nextField(line);
    if (offset.empty() || dev.empty() || inode.empty()) return bad("missing offset/dev/inode");
    while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    m.path = std::string(line);
    if (!maps.empty() && m.start < maps.back().end) return bad("not sorted or overlapping");
    maps.push_back(std::move(m));
  }
  return maps;
}

Result<std::vector<Mapping>> readMaps(const Fs& procfs, pid_t pid) {
  auto text = procfs.readFile(std::to_string(pid) + "/maps");
  if (!text) return text.error();
  auto maps = parseMaps(*text);
  if (!maps) return withContext(maps.error(), procfs.resolve(std::to_string(pid) + "/maps"));
  return maps;
}

bool rangeMapped(const std::vector<Mapping>& maps, uint64_t start, uint64_t end) {
  if (end <= start) return false;
  // First mapping whose end is past start.
  size_t lo = 0, hi = maps.size();
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (maps[mid].end <= start) lo = mid + 1; else hi = mid;
  }
  uint64_t covered = start;
  for (size_t i = lo; i < maps.size() && covered < end; ++i) {
    if (maps[i].start > covered) return false;  // a gap
    covered = maps[i].end;
  }
  return covered >= end;
}

Result<ProcessOwner> processOwner(const Fs& procfs, pid_t pid, bool afterExec) {
  const std::string path = procfs.resolve(std::to_string(pid));
  if (afterExec) {
    const int fd = ::open((path + "/maps").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return systemError(errno == ENOENT ? ESRCH : errno, "open " + path + "/maps");
    ::close(fd);
  }
  struct stat dir{};
  if (::stat(path.c_str(), &dir) != 0) return systemError(errno == ENOENT ? ESRCH : errno, "stat " + path);
  struct stat file{};
  if (::stat((path + "/status").c_str(), &file) != 0)
    return systemError(errno == ENOENT ? ESRCH : errno, "stat " + path + "/status");
  const auto sameOwner = [&](const struct stat& st) { return st.st_uid == dir.st_uid && st.st_gid == dir.st_gid; };
  if (sameOwner(file)) return ProcessOwner{dir.st_uid, dir.st_gid, true};
  // The files of a thread-group leader that exited while other threads run are root's too (it
  // has no mm left): another thread's tell. Only here, on the way to a refusal, is the list read.
  bool dumpable = false;
  if (DIR* tasks = ::opendir((path + "/task").c_str())) {
    while (const dirent* entry = ::readdir(tasks)) {
      if (entry->d_name[0] == '.' || std::to_string(pid) == entry->d_name) continue;
      // Threads share the mm, so one live thread tells (the next only if this one has gone).
      struct stat thread{};
      if (::stat((path + "/task/" + entry->d_name + "/status").c_str(), &thread) == 0) {
        dumpable = sameOwner(thread);
        break;
      }
    }
    ::closedir(tasks);
  }
  return ProcessOwner{dir.st_uid, dir.st_gid, dumpable};
}

namespace {

// The walk of queryRangeMapped on an open maps file; `path` names it in errors.
Result<RangeQueryResult> walkRange(int fd, const std::string& path, uint64_t start, uint64_t end, uint64_t maxVmas) {
  if (end <= start) return RangeQueryResult{RangeQuery::kNotMapped, 0};
  uint64_t covered = start;
  RangeQueryResult result{RangeQuery::kMapped, 0};
  while (covered < end) {
    if (result.vmas == maxVmas) {
      result.answer = RangeQuery::kUndecided;
      break;
    }
    // No flags: the VMA that covers query_addr, or ENOENT when none does (a gap).
    procmap_query query{};
    query.size = sizeof(query);
    query.query_addr = covered;
    if (::ioctl(fd, PROCMAP_QUERY, &query) != 0) {
      if (errno == ENOENT) {
        result.answer = RangeQuery::kNotMapped;
        break;
      }
      return errnoError("PROCMAP_QUERY " + path);
    }
    ++result.vmas;
    // Cannot happen for a covering VMA; never loop on it.
    if (query.vma_end <= covered) return logicError("PROCMAP_QUERY " + path + ": VMA ending at or before the address asked");
    covered = query.vma_end;
  }
  return result;
}

}  // namespace

Result<RangeQueryResult> queryRangeMapped(const Fs& procfs, pid_t pid, uint64_t start, uint64_t end,
                                          uint64_t maxVmas) {
  if (end <= start) return RangeQueryResult{RangeQuery::kNotMapped, 0};
  auto handle = MapsHandle::open(procfs, pid);
  if (!handle) return handle.error();
  return handle->queryRange(start, end, maxVmas);
}

Result<MapsHandle> MapsHandle::open(const Fs& procfs, pid_t pid) {
  std::string path = procfs.resolve(std::to_string(pid) + "/maps");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return systemError(errno == ENOENT ? ESRCH : errno, "open " + path);
  return MapsHandle(fd, std::move(path));
}

MapsHandle& MapsHandle::operator=(MapsHandle&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

MapsHandle::~MapsHandle() {
  if (fd_ >= 0) ::close(fd_);
}

Result<RangeQueryResult> MapsHandle::queryRange(uint64_t start, uint64_t end, uint64_t maxVmas) const {
  return walkRange(fd_, path_, start, end, maxVmas);
}

Result<std::vector<Mapping>> MapsHandle::read() const {
  // pread from 0 each time: the kernel's seq_file walks the VMAs again from the start.
  std::string text;
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::pread(fd_, buffer, sizeof buffer, static_cast<off_t>(text.size()));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errnoError("read " + path_);
    }
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  auto maps = parseMaps(text);
  if (!maps) return withContext(maps.error(), path_);
  return maps;
}

Result<bool> MapsHandle::alive() const {
  procmap_query query{};
  query.size = sizeof(query);
  query.query_flags = PROCMAP_QUERY_COVERING_OR_NEXT_VMA;
  query.query_addr = 0;
  if (::ioctl(fd_, PROCMAP_QUERY, &query) == 0 || errno == ENOENT) return true;
  if (errno == ESRCH) return false;
  if (errno != ENOTTY) return errnoError("PROCMAP_QUERY " + path_);
  char first = 0;
  const ssize_t n = ::pread(fd_, &first, 1, 0);
  if (n > 0) return true;
  if (n == 0 || errno == ESRCH) return false;
  return errnoError("read " + path_);
}

}  // namespace tt::sys
