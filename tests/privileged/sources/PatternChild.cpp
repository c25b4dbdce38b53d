#include "PatternChild.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

namespace tt::test {

namespace {
bool readAll(int fd, void* buf, size_t n) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}
}  // namespace

PatternChild::PatternChild(uint64_t pages, bool hugePages) : pages_(pages) {
  int down[2], up[2];
  if (::pipe(down) != 0 || ::pipe(up) != 0) {
    ADD_FAILURE() << "pipe failed";
    return;
  }
  pid_ = ::fork();
  if (pid_ == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::close(down[1]);
    ::close(up[0]);
    constexpr uint64_t kHuge = 2ULL << 20;
    const uint64_t extra = hugePages ? kHuge : 0;  // room to start on a huge-page boundary
    auto* mapped = static_cast<char*>(::mmap(nullptr, pages * 4096 + extra, PROT_READ | PROT_WRITE,
                                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (mapped == MAP_FAILED) ::_exit(1);
    const uint64_t start = reinterpret_cast<uint64_t>(mapped);
    const uint64_t at = hugePages ? (start + kHuge - 1) & ~(kHuge - 1) : start;
    auto* buf = reinterpret_cast<volatile char*>(at);
    ::madvise(const_cast<char*>(buf), pages * 4096, hugePages ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    const uint64_t addr = reinterpret_cast<uint64_t>(buf);
    if (::write(up[1], &addr, sizeof addr) != sizeof addr) ::_exit(1);
    uint64_t cmd[4];  // op, a, b, c
    while (readAll(down[0], cmd, sizeof cmd)) {
      if (cmd[0] == 0) {  // write pages i % a == b
        for (uint64_t i = cmd[2]; i < pages; i += cmd[1]) buf[i * 4096] = 1;
      } else if (cmd[0] == 1) {  // write pages [a, b)
        for (uint64_t i = cmd[1]; i < cmd[2] && i < pages; ++i) buf[i * 4096] = 2;
      } else if (cmd[0] == 3) {  // c times: write pages [a, b), discard them
        const uint64_t end = cmd[2] < pages ? cmd[2] : pages;
        for (uint64_t t = 0; t < cmd[3]; ++t) {
          for (uint64_t i = cmd[1]; i < end; ++i) buf[i * 4096] = 3;
          if (end > cmd[1]) ::madvise(const_cast<char*>(buf) + cmd[1] * 4096, (end - cmd[1]) * 4096, MADV_DONTNEED);
        }
      } else if (cmd[0] == 4) {  // write pages [a, b) while a forked copy shares them
        int ready[2];
        if (::pipe(ready) != 0) ::_exit(1);
        const pid_t sharer = ::fork();
        if (sharer == 0) {
          const char r = 'r';
          if (::write(ready[1], &r, 1) != 1) ::_exit(1);
          ::pause();
          ::_exit(0);
        }
        char r = 0;
        if (sharer < 0 || ::read(ready[0], &r, 1) != 1) ::_exit(1);
        for (uint64_t i = cmd[1]; i < cmd[2] && i < pages; ++i) buf[i * 4096] = 4;
        ::kill(sharer, SIGKILL);
        ::waitpid(sharer, nullptr, 0);
        ::close(ready[0]);
        ::close(ready[1]);
      } else if (cmd[0] == 5) {  // map the huge pages of pages [a, b) by PTEs (their folios stay whole)
        for (uint64_t i = cmd[1]; i < cmd[2] && i < pages; ++i) {
          if ((reinterpret_cast<uint64_t>(buf) / 4096 + i) % 512 != 0) continue;
          // A protection change on part of a PMD mapping splits the mapping, not the page.
          char* page = const_cast<char*>(buf) + i * 4096;
          if (::mprotect(page, 4096, PROT_READ) != 0 || ::mprotect(page, 4096, PROT_READ | PROT_WRITE) != 0) ::_exit(1);
        }
      } else {  // read pages [a, b) for c ms
        timespec t0{}, t{};
        ::clock_gettime(CLOCK_MONOTONIC, &t0);
        uint64_t sum = 0;
        do {
          for (uint64_t i = cmd[1]; i < cmd[2] && i < pages; ++i) sum += static_cast<uint64_t>(buf[i * 4096]);
          ::clock_gettime(CLOCK_MONOTONIC, &t);
        } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < static_cast<long>(cmd[3]));
        if (sum == 0xffffffffffff) buf[0] = 0;  // keeps the reads
      }
      const char done = 'd';
      if (::write(up[1], &done, 1) != 1) ::_exit(1);
    }
    ::_exit(0);
  }
  ::close(down[0]);
  ::close(up[1]);
  toChild_ = down[1];
  fromChild_ = up[0];
  if (!readAll(fromChild_, &base_, sizeof base_)) ADD_FAILURE() << "child did not report its buffer";
}

PatternChild::~PatternChild() {
  if (toChild_ >= 0) ::close(toChild_);
  if (fromChild_ >= 0) ::close(fromChild_);
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

std::set<uint64_t> PatternChild::command(uint64_t op, uint64_t a, uint64_t b, uint64_t c) {
  const uint64_t cmd[4] = {op, a, b, c};
  std::set<uint64_t> touched;
  if (::write(toChild_, cmd, sizeof cmd) != sizeof cmd) {
    ADD_FAILURE() << "command to child failed";
    return touched;
  }
  char done = 0;
  if (!readAll(fromChild_, &done, 1)) ADD_FAILURE() << "child did not finish its command";
  return touched;
}

std::set<uint64_t> PatternChild::touch(uint32_t stride, uint32_t offset) {
  std::set<uint64_t> touched = command(0, stride, offset, 0);
  for (uint64_t i = offset; i < pages_; i += stride) touched.insert(base_ + i * 4096);
  return touched;
}

std::set<uint64_t> PatternChild::writeRange(uint64_t first, uint64_t end) {
  std::set<uint64_t> touched = command(1, first, end, 0);
  for (uint64_t i = first; i < end && i < pages_; ++i) touched.insert(base_ + i * 4096);
  return touched;
}

std::set<uint64_t> PatternChild::refaultRange(uint64_t first, uint64_t end, uint32_t times) {
  std::set<uint64_t> touched = command(3, first, end, times);
  for (uint64_t i = first; i < end && i < pages_; ++i) touched.insert(base_ + i * 4096);
  return touched;
}

std::set<uint64_t> PatternChild::cowWriteRange(uint64_t first, uint64_t end) {
  std::set<uint64_t> touched = command(4, first, end, 0);
  for (uint64_t i = first; i < end && i < pages_; ++i) touched.insert(base_ + i * 4096);
  return touched;
}

void PatternChild::splitHugeMappings(uint64_t first, uint64_t end) { (void)command(5, first, end, 0); }

std::set<uint64_t> PatternChild::readRangeFor(uint64_t first, uint64_t end, uint32_t ms) {
  std::set<uint64_t> touched = command(2, first, end, ms);
  for (uint64_t i = first; i < end && i < pages_; ++i) touched.insert(base_ + i * 4096);
  return touched;
}

}  // namespace tt::test
