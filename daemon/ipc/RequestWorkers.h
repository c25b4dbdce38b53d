// Threads for the part of a client request that may wait on the client's own process.
//
// A registration probes the client's address space, and a placement query reads it with
// move_pages(2). The kernel makes both wait on the process: opening /proc/PID/maps waits out an
// exec in progress (its exec lock is held while the old address space is torn down, 0.66 s at
// 8 GiB here), and every read of the address space waits for the client's mmap lock (a long
// mprotect of its own). On the event loop, any client could stall every other client (and the
// loop's timers) that way, once per exec or as often as it likes. Those parts run here instead
// (ProtocolHandler::begin says which: a registration probed with one ioctl on an address space
// pinned before stays on the loop, waiting for the mmap lock at most), and the loop goes on; the
// connection that asked reads nothing more until its answer is back, so its requests keep their
// order.
//
// Fairness: one uid's work takes at most `perUid` threads at once, and the uids with work
// waiting take turns, so a uid whose processes keep the kernel waiting delays its own requests,
// not everybody's. What waits is bounded by the open connections (one request each at a time):
// a connection that closes cancels its work still queued.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace tt::ipc {

class RequestWorkers {
 public:
  // `threads` >= 1; `perUid` is clamped to 1..threads.
  RequestWorkers(unsigned threads, unsigned perUid);
  ~RequestWorkers();
  RequestWorkers(const RequestWorkers&) = delete;
  RequestWorkers& operator=(const RequestWorkers&) = delete;

  // Queues `work` for `uid`; it runs on one of the threads, after the uid's work queued before it
  // has started. Returns a ticket for cancel(), 0 once stopped (the work is not run).
  [[nodiscard]] uint64_t submit(uid_t uid, std::function<void()> work);
  // Drops `ticket`'s work if it has not started (what it owns goes now). Whether it was dropped.
  bool cancel(uid_t uid, uint64_t ticket);
  // Drops what has not started and waits for what has. Idempotent; a call made while another
  // runs returns only once the threads are joined. Not from a worker.
  void stop();

  // For tests and metrics: work queued, not started; work running now.
  [[nodiscard]] size_t queued() const;
  [[nodiscard]] size_t running() const;

 private:
  struct Queued {
    uint64_t ticket = 0;
    std::function<void()> work;
  };
  struct UidQueue {
    std::deque<Queued> work;
    unsigned running = 0;
    bool listed = false;  // in ready_: has work queued and fewer than perUid_ running
  };
  void serve();
  // Puts `uid` at the back of ready_ if it may start work now (called with mutex_ held).
  void listIfReady(uid_t uid, UidQueue& q);

  const unsigned perUid_;
  std::mutex stopMutex_;  // held through stop(): a second caller waits for the first's joins
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::unordered_map<uid_t, UidQueue> queues_;
  std::deque<uid_t> ready_;  // uids in turn
  size_t queued_ = 0;
  size_t running_ = 0;
  uint64_t tickets_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace tt::ipc
