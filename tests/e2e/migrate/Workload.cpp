#include "Workload.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "sys/MemPolicy.h"

namespace tt::e2e {
namespace {

constexpr uint64_t kHuge = 2ULL << 20;

// The value of word `i` after pass `p`: distinct for every word and pass, so a lost or stale write
// (or a page copied at the wrong moment) shows as a mismatch.
inline uint64_t pattern(uint64_t i, uint64_t p) { return i * 0x9E3779B97F4A7C15ULL + p * 0xD1B54A32D192ED03ULL + 1; }

struct Slice {
  uint64_t* words = nullptr;
  uint64_t first = 0;  // global index of words[0] (the pattern depends on it)
  uint64_t count = 0;
  // Progress when stopped: words [0, pos) hold pass `pass`, [pos, count) hold pass - 1.
  uint64_t pass = 0, pos = 0;
};

bool readAll(int fd, void* p, size_t n) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = ::read(fd, c, n);
    if (r <= 0) {
      if (r < 0 && errno == EINTR) continue;
      return false;
    }
    c += r, n -= static_cast<size_t>(r);
  }
  return true;
}

[[noreturn]] void childMain(const WorkloadSpec& spec, int in, int out) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  uint64_t addrs[2] = {0, 0};
  void* base = nullptr;
  void* huge = nullptr;
  if (spec.baseBytes > 0) {
    base = mmap(nullptr, spec.baseBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) _exit(10);
    madvise(base, spec.baseBytes, MADV_NOHUGEPAGE);
  }
  if (spec.hugeBytes > 0) {
    void* raw = mmap(nullptr, spec.hugeBytes + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) _exit(11);
    huge = reinterpret_cast<void*>((reinterpret_cast<uint64_t>(raw) + kHuge - 1) & ~(kHuge - 1));
    if (madvise(huge, spec.hugeBytes, MADV_HUGEPAGE) != 0) _exit(12);
  }
  if (spec.initialNode >= 0) {
    if (base && !sys::bindToNode(base, spec.baseBytes, spec.initialNode, sys::BindMove::FutureOnly)) _exit(13);
    if (huge && !sys::bindToNode(huge, spec.hugeBytes, spec.initialNode, sys::BindMove::FutureOnly)) _exit(13);
  }
  // Two buffers, one index space: base words first, then huge words.
  std::vector<Slice> slices;
  const uint64_t baseWords = spec.baseBytes / 8, hugeWords = spec.hugeBytes / 8;
  const int writers = std::max(1, spec.writers);
  auto addSlices = [&](void* mem, uint64_t words, uint64_t firstIndex) {
    for (int w = 0; w < writers; ++w) {
      const uint64_t lo = words * w / writers, hi = words * (w + 1) / writers;
      slices.push_back({static_cast<uint64_t*>(mem) + lo, firstIndex + lo, hi - lo, 0, hi - lo});
    }
  };
  if (base) addSlices(base, baseWords, 0);
  if (huge) addSlices(huge, hugeWords, baseWords);
  for (auto& s : slices)
    for (uint64_t i = 0; i < s.count; ++i) s.words[i] = pattern(s.first + i, 0);
  addrs[0] = reinterpret_cast<uint64_t>(base);
  addrs[1] = reinterpret_cast<uint64_t>(huge);
  if (write(out, addrs, sizeof addrs) != sizeof addrs) _exit(14);

  // Writer w rewrites its slice of each buffer, pass after pass.
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int w = 0; w < spec.writers; ++w) {
    threads.emplace_back([&, w] {
      std::vector<Slice*> mine;
      for (size_t k = w; k < slices.size(); k += writers) mine.push_back(&slices[k]);
      for (uint64_t pass = 1;; ++pass) {
        for (Slice* s : mine) {
          s->pass = pass;
          for (s->pos = 0; s->pos < s->count; ++s->pos) {
            if ((s->pos & 1023) == 0 && stop.load(std::memory_order_relaxed)) return;
            s->words[s->pos] = pattern(s->first + s->pos, pass);
          }
        }
      }
    });
  }
  char cmd = 0;
  if (!readAll(in, &cmd, 1)) _exit(15);
  stop = true;
  for (auto& t : threads) t.join();
  uint64_t verdict[3] = {0, UINT64_MAX, 0};
  uint64_t minPass = UINT64_MAX;
  for (const Slice& s : slices) {
    // A writer stopped inside slice s, or finished it (pos == count), or never reached it this
    // pass (pos == count of the previous pass: its pass is still the previous one).
    for (uint64_t i = 0; i < s.count; ++i) {
      const uint64_t p = i < s.pos ? s.pass : (s.pass == 0 ? 0 : s.pass - 1);
      if (s.words[i] != pattern(s.first + i, p)) {
        if (verdict[0]++ == 0) verdict[1] = s.first + i;
      }
    }
    minPass = std::min(minPass, s.pass);
  }
  verdict[2] = spec.writers > 0 && minPass > 0 ? minPass - 1 : 0;
  if (write(out, verdict, sizeof verdict) != sizeof verdict) _exit(16);
  _exit(0);
}

}  // namespace

Workload::Workload(const WorkloadSpec& spec) : spec_(spec) {
  int down[2], up[2];
  if (pipe(down) != 0 || pipe(up) != 0) {
    error_ = std::string("pipe: ") + std::strerror(errno);
    return;
  }
  pid_ = fork();
  if (pid_ < 0) {
    error_ = std::string("fork: ") + std::strerror(errno);
    return;
  }
  if (pid_ == 0) {
    close(down[1]);
    close(up[0]);
    childMain(spec, down[0], up[1]);
  }
  close(down[0]);
  close(up[1]);
  toChild_ = down[1];
  fromChild_ = up[0];
  uint64_t addrs[2];
  if (!readAll(fromChild_, addrs, sizeof addrs)) {
    int status = 0;
    waitpid(pid_, &status, 0);
    error_ = "workload child died during set-up, exit status " + std::to_string(WEXITSTATUS(status));
    pid_ = -1;
    return;
  }
  baseAddr_ = addrs[0];
  hugeAddr_ = addrs[1];
}

WorkloadVerdict Workload::stopAndVerify() {
  WorkloadVerdict v;
  if (pid_ <= 0) return v;
  const char cmd = 'v';
  uint64_t verdict[3];
  if (write(toChild_, &cmd, 1) == 1 && readAll(fromChild_, verdict, sizeof verdict)) {
    v.wrongWords = verdict[0];
    v.firstWrongIndex = verdict[1];
    v.passes = verdict[2];
    v.ok = true;
  }
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
  return v;
}

void Workload::kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

Workload::~Workload() {
  kill();
  if (toChild_ >= 0) close(toChild_);
  if (fromChild_ >= 0) close(fromChild_);
}

}  // namespace tt::e2e
