#include "ipc/RequestWorkers.h"

#include <algorithm>
#include <exception>

#include "core/Log.h"

namespace tt::ipc {

RequestWorkers::RequestWorkers(unsigned threads, unsigned perUid)
    : perUid_(std::clamp(perUid, 1u, std::max(threads, 1u))) {
  threads = std::max(threads, 1u);
  threads_.reserve(threads);
  for (unsigned i = 0; i < threads; ++i) threads_.emplace_back([this] { serve(); });
}

RequestWorkers::~RequestWorkers() { stop(); }

bool RequestWorkers::submit(uid_t uid, std::function<void()> work) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return false;
    UidQueue& q = queues_[uid];
    q.work.push_back(std::move(work));
    ++queued_;
    listIfReady(uid, q);
  }
  wake_.notify_one();
  return true;
}

void RequestWorkers::listIfReady(uid_t uid, UidQueue& q) {
  if (q.listed || q.work.empty() || q.running >= perUid_) return;
  ready_.push_back(uid);
  q.listed = true;
}

void RequestWorkers::serve() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || !ready_.empty(); });
    if (stopping_) return;
    const uid_t uid = ready_.front();
    ready_.pop_front();
    UidQueue& q = queues_.at(uid);
    q.listed = false;
    std::function<void()> work = std::move(q.work.front());
    q.work.pop_front();
    --queued_;
    ++q.running;
    ++running_;
    listIfReady(uid, q);  // to the back: the other uids waiting go first
    if (!ready_.empty()) wake_.notify_one();
    lock.unlock();
    try {
      work();
    } catch (const std::exception& e) {  // nothing here throws by design; a bug must not end the thread
      TT_LOG(Error) << "request work for uid " << uid << " threw: " << e.what();
    } catch (...) {
      TT_LOG(Error) << "request work for uid " << uid << " threw";
    }
    work = nullptr;  // what it captured goes before the lock is taken again
    lock.lock();
    UidQueue& after = queues_.at(uid);  // the map may have rehashed: look it up again
    --after.running;
    --running_;
    listIfReady(uid, after);
    if (after.work.empty() && after.running == 0) queues_.erase(uid);
    if (!ready_.empty()) wake_.notify_one();
  }
}

void RequestWorkers::stop() {
  std::vector<std::function<void()>> dropped;  // destroyed outside the lock: they own connections
  {
    std::lock_guard lock(mutex_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
    for (auto& [uid, q] : queues_) {
      for (auto& w : q.work) dropped.push_back(std::move(w));
      q.work.clear();
    }
    queued_ = 0;
    ready_.clear();
  }
  dropped.clear();
  wake_.notify_all();
  for (auto& t : threads_)
    if (t.joinable() && t.get_id() != std::this_thread::get_id()) t.join();
  std::lock_guard lock(mutex_);
  threads_.clear();
}

size_t RequestWorkers::queued() const {
  std::lock_guard lock(mutex_);
  return queued_;
}

size_t RequestWorkers::running() const {
  std::lock_guard lock(mutex_);
  return running_;
}

}  // namespace tt::ipc
