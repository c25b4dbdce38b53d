// Fakes for the migration engine's other dependencies: a clock that only advances when the engine
// sleeps, a free-memory reader fed from the FakePageMover's page counts, a huge-page probe with
// configured ranges, and an in-process mover that "binds" through the FakePageMover.
#pragma once

#include <errno.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "fakes/migrate/FakePageMover.h"
#include "migrate/Clock.h"
#include "migrate/FreeMemory.h"
#include "migrate/InProcessMover.h"
#include "sys/Pagemap.h"

namespace tt::fakes {

class FakeClock final : public migrate::Clock {
 public:
  std::chrono::nanoseconds now() const override { return std::chrono::nanoseconds(now_.load()); }
  void sleepFor(std::chrono::nanoseconds d) override {
    if (d.count() > 0) {
      now_ += d.count();
      slept_ += d.count();
    }
  }
  void advance(std::chrono::nanoseconds d) { now_ += d.count(); }
  [[nodiscard]] std::chrono::nanoseconds slept() const { return std::chrono::nanoseconds(slept_.load()); }

 private:
  std::atomic<int64_t> now_{1'000'000'000};
  std::atomic<int64_t> slept_{0};
};

// free = total - baseUsed - (pages the FakePageMover has on the node); records the lowest free
// value it ever reported, so tests can check the guard's promise.
class FakeFreeMemory final : public migrate::FreeMemoryReader {
 public:
  explicit FakeFreeMemory(const FakePageMover& mover) : mover_(mover) {}
  void setNode(int node, uint64_t totalBytes, uint64_t baseUsedBytes) {
    std::lock_guard l(mutex_);
    nodes_[node] = {totalBytes, baseUsedBytes};
  }
  void failReads(int err) { std::lock_guard l(mutex_); fail_ = err; }
  // Runs at the start of every read, outside the lock, with the read's index (0 first).
  void onRead(std::function<void(size_t readIndex)> hook) { std::lock_guard l(mutex_); hook_ = std::move(hook); }
  Result<topology::NodeMemory> read(int node) override {
    std::function<void(size_t)> hook;
    size_t index = 0;
    {
      std::lock_guard l(mutex_);
      hook = hook_;
      index = reads_;
    }
    if (hook) hook(index);
    std::lock_guard l(mutex_);
    ++reads_;
    if (fail_ != 0) return systemError(fail_, "fake meminfo of node " + std::to_string(node));
    auto it = nodes_.find(node);
    if (it == nodes_.end()) return systemError(ENOENT, "fake meminfo of node " + std::to_string(node));
    const uint64_t used = it->second.second + mover_.pagesOn(node) * kBasePageSize;
    topology::NodeMemory m{it->second.first, used >= it->second.first ? 0 : it->second.first - used};
    lowestFree_[node] = lowestFree_.count(node) ? std::min(lowestFree_[node], m.freeBytes) : m.freeBytes;
    return m;
  }
  [[nodiscard]] uint64_t lowestFree(int node) const { std::lock_guard l(mutex_); return lowestFree_.at(node); }
  [[nodiscard]] size_t reads() const { std::lock_guard l(mutex_); return reads_; }

 private:
  const FakePageMover& mover_;
  mutable std::mutex mutex_;
  std::map<int, std::pair<uint64_t, uint64_t>> nodes_;
  std::map<int, uint64_t> lowestFree_;
  size_t reads_ = 0;
  int fail_ = 0;
  std::function<void(size_t)> hook_;
};

class FakeHugePageProbe final : public sys::HugePageProbe {
 public:
  void add(pid_t pid, sys::HugeRange range) { std::lock_guard l(mutex_); ranges_[pid].push_back(range); }
  void failWith(int err) { std::lock_guard l(mutex_); fail_ = err; }
  Result<std::vector<sys::HugeRange>> hugeRanges(pid_t pid, uint64_t start, uint64_t length) override {
    std::lock_guard l(mutex_);
    ++calls_;
    if (fail_ != 0) return systemError(fail_, "fake smaps of pid " + std::to_string(pid));
    std::vector<sys::HugeRange> out;
    for (const auto& r : ranges_[pid]) {
      const uint64_t lo = std::max(r.start, start), hi = std::min(r.start + r.length, start + length);
      if (lo < hi) out.push_back({lo, hi - lo});
    }
    return out;
  }

 private:
  std::mutex mutex_;
  std::map<pid_t, std::vector<sys::HugeRange>> ranges_;
  int fail_ = 0;
  size_t calls_ = 0;

 public:
  [[nodiscard]] size_t calls() { std::lock_guard l(mutex_); return calls_; }
};

class FakeInProcessMover final : public migrate::InProcessMover {
 public:
  struct Request {
    pid_t tgid;
    uint64_t regionId, start, length;
    int node;
  };
  explicit FakeInProcessMover(FakePageMover& mover) : mover_(mover) {}
  void accept(pid_t tgid) { std::lock_guard l(mutex_); accepting_.insert(tgid); }
  void failWith(int err) { std::lock_guard l(mutex_); fail_ = err; }
  bool acceptsMbind(pid_t tgid) const override { std::lock_guard l(mutex_); return accepting_.count(tgid) != 0; }
  Result<void> requestBind(pid_t tgid, uint64_t regionId, uint64_t start, uint64_t length, int node) override {
    {
      std::lock_guard l(mutex_);
      requests_.push_back({tgid, regionId, start, length, node});
      if (fail_ != 0) return systemError(fail_, "fake mbind of region " + std::to_string(regionId));
    }
    // The client's mbind(MPOL_MF_MOVE) moves the pages it has, but not pinned ones: simulate
    // through the page table.
    for (uint64_t a = start; a < start + length; a += kBasePageSize)
      if (mover_.nodeOf(tgid, a) >= 0 && !mover_.isPinned(tgid, a)) mover_.map(tgid, a, kBasePageSize, node);
    return {};
  }
  [[nodiscard]] std::vector<Request> requests() const { std::lock_guard l(mutex_); return requests_; }

 private:
  FakePageMover& mover_;
  mutable std::mutex mutex_;
  std::set<pid_t> accepting_;
  std::vector<Request> requests_;
  int fail_ = 0;
};

}  // namespace tt::fakes
