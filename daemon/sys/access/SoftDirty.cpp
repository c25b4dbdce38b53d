#include "sys/access/SoftDirty.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sys/Pagemap.h"

namespace tt::sys {

ProcSoftDirtyTracker::~ProcSoftDirtyTracker() {
  for (const auto& [pid, fd] : dirs_) ::close(fd);
}

Result<void> ProcSoftDirtyTracker::track(pid_t pid) {
  if (dirs_.contains(pid)) return {};
  const std::string path = procfs_.resolve(std::to_string(pid));
  const int fd = ::open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errnoError("open " + path);
  dirs_[pid] = fd;
  return {};
}

void ProcSoftDirtyTracker::untrack(pid_t pid) {
  auto it = dirs_.find(pid);
  if (it == dirs_.end()) return;
  ::close(it->second);
  dirs_.erase(it);
}

Result<int> ProcSoftDirtyTracker::dirOf(pid_t pid) const {
  auto it = dirs_.find(pid);
  if (it == dirs_.end()) return systemError(ESRCH, "soft-dirty: pid " + std::to_string(pid) + " not tracked");
  return it->second;
}

Result<void> ProcSoftDirtyTracker::clear(pid_t pid) {
  auto dir = dirOf(pid);
  if (!dir) return dir.error();
  const int fd = ::openat(*dir, "clear_refs", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errnoError("open for write " + procfs_.resolve(std::to_string(pid) + "/clear_refs"));
  if (::write(fd, "4", 1) != 1) {
    const Error error = errnoError("write " + procfs_.resolve(std::to_string(pid) + "/clear_refs"));
    ::close(fd);
    return error;
  }
  ::close(fd);
  return {};
}

Result<void> ProcSoftDirtyTracker::dirtyPages(pid_t pid, uint64_t start, uint64_t pages, std::vector<uint64_t>& dirty) {
  constexpr uint64_t kChunk = 1U << 16;  // 512 KiB of pagemap per read
  auto dir = dirOf(pid);
  if (!dir) return dir.error();
  const WordFile pagemap(*dir, "pagemap");  // once per call: the chunks below read it in turn
  if (auto ok = pagemap.opened(); !ok) return withContext(ok.error(), std::to_string(pid) + "/pagemap");
  for (uint64_t done = 0; done < pages;) {
    const uint64_t n = std::min(kChunk, pages - done);
    const uint64_t first = start / 4096 + done;
    words_.resize(n);
    if (auto r = pagemap.words(first, words_.data(), n); !r) return withContext(r.error(), std::to_string(pid) + "/pagemap");
    for (uint64_t i = 0; i < words_.size(); ++i)
      if ((words_[i] & kPagemapSoftDirty) != 0 && (words_[i] & kPagemapPresent) != 0)
        dirty.push_back((first + i) * 4096);
    done += n;
  }
  return {};
}

Result<bool> probeSoftDirty() {
  const pid_t child = ::fork();
  if (child < 0) return errnoError("fork soft-dirty probe");
  if (child == 0) {
    // Child: only async-signal-safe calls. Exit 0 = supported, 1 = not, 2 = probe failed.
    auto* p = static_cast<volatile char*>(
        ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (p == MAP_FAILED) ::_exit(2);
    p[0] = 1;
    const int c = ::open("/proc/self/clear_refs", O_WRONLY);
    if (c < 0 || ::write(c, "4", 1) != 1) ::_exit(2);
    ::close(c);
    p[0] = 2;
    const int m = ::open("/proc/self/pagemap", O_RDONLY);
    uint64_t word = 0;
    const off_t off = static_cast<off_t>(reinterpret_cast<uintptr_t>(p) / 4096 * 8);
    if (m < 0 || ::pread(m, &word, sizeof word, off) != static_cast<ssize_t>(sizeof word)) ::_exit(2);
    ::_exit((word & kPagemapSoftDirty) != 0 ? 0 : 1);
  }
  int status = 0;
  if (::waitpid(child, &status, 0) != child) return errnoError("wait for soft-dirty probe");
  if (!WIFEXITED(status) || WEXITSTATUS(status) == 2) return logicError("soft-dirty probe failed (clear_refs or pagemap)");
  return WEXITSTATUS(status) == 0;
}

}  // namespace tt::sys
