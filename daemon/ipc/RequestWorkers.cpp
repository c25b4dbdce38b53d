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

uint64_t RequestWorkers::submit(uid_t uid, std::function<void()> work) {
  uint64_t ticket = 0;
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return 0;
    ticket = ++tickets_;
    UidQueue& q = queues_[uid];
    q.work.push_back({ticket, std::move(work)});
    ++queued_;
    listIfReady(uid, q);
  }
  wake_.notify_one();
  return ticket;
}

bool RequestWorkers::cancel(uid_t uid, uint64_t ticket) {
  std::function<void()> dropped;  // destroyed outside the lock
  {
    std::lock_guard lock(mutex_);
    auto it = queues_.find(uid);
    if (it == queues_.end()) return false;
    UidQueue& q = it->second;
    auto entry = std::find_if(q.work.begin(), q.work.end(), [ticket](const Queued& e) { return e.ticket == ticket; });
    if (entry == q.work.end()) return false;
    dropped = std::move(entry->work);
    q.work.erase(entry);
    --queued_;
    if (q.work.empty() && q.listed) {  // ready_ lists only uids with work queued
      ready_.erase(std::find(ready_.begin(), ready_.end(), uid));
      q.listed = false;
    }
    if (q.work.empty() && q.running == 0) queues_.erase(it);
  }
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
    std::function<void()> work = std::move(q.work.front().work);
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
  std::lock_guard stopping(stopMutex_);
  std::vector<std::function<void()>> dropped;  // destroyed outside the lock: they own connections
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    for (auto& [uid, q] : queues_) {
      for (auto& e : q.work) dropped.push_back(std::move(e.work));
      q.work.clear();
      q.listed = false;
    }
    queued_ = 0;
    ready_.clear();
    threads.swap(threads_);  // a later stop() finds none to join
  }
  dropped.clear();
  wake_.notify_all();
  for (auto& t : threads) t.join();
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
