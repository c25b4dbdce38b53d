// The threads that run the parts of client requests that may wait on the client's process: order
// per uid, a uid's share of the threads, and stopping.
#include "ipc/RequestWorkers.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using tt::ipc::RequestWorkers;

// Polls `condition` for up to 10 s (the workers are other threads).
template <typename F>
bool eventually(F condition) {
  for (int i = 0; i < 1000; ++i) {
    if (condition()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return condition();
}

// Work that blocks until the test releases it.
class Gate {
 public:
  void open() { release_.set_value(); }
  std::function<void()> work(std::atomic<int>& started, std::atomic<int>& done) {
    return [this, &started, &done] {
      ++started;
      opened_.wait();
      ++done;
    };
  }

 private:
  std::promise<void> release_;
  std::shared_future<void> opened_ = release_.get_future().share();
};

TEST(RequestWorkers, RunsOneUidsWorkInTheOrderItWasQueued) {
  RequestWorkers workers(4, 1);
  std::mutex m;
  std::vector<int> order;
  std::atomic<int> done{0};
  for (int i = 0; i < 50; ++i)
    ASSERT_NE(workers.submit(1000,
                             [&, i] {
                               std::lock_guard lock(m);
                               order.push_back(i);
                               ++done;
                             }),
              0u);
  ASSERT_TRUE(eventually([&] { return done == 50; }));
  std::lock_guard lock(m);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[i], i);
}

// A uid whose work keeps waiting (its process execs, holds its mmap lock) holds at most its share
// of the threads; another uid's work runs meanwhile.
TEST(RequestWorkers, AUidWhoseWorkWaitsHoldsOnlyItsShareOfTheThreads) {
  RequestWorkers workers(3, 2);
  Gate gate;
  std::atomic<int> started{0}, done{0};
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(workers.submit(1000, gate.work(started, done)));
  ASSERT_TRUE(eventually([&] { return started == 2; }));
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(started, 2) << "uid 1000 has more than its 2 threads";
  EXPECT_EQ(workers.running(), 2u);
  EXPECT_EQ(workers.queued(), 2u);

  std::atomic<bool> otherRan{false};
  ASSERT_TRUE(workers.submit(2000, [&] { otherRan = true; }));
  EXPECT_TRUE(eventually([&] { return otherRan.load(); })) << "uid 2000 waited for uid 1000's work";
  EXPECT_EQ(done, 0);

  gate.open();
  EXPECT_TRUE(eventually([&] { return done == 4; }));
  EXPECT_TRUE(eventually([&] { return workers.running() == 0 && workers.queued() == 0; }));
}

// Uids with work waiting take turns: one that queued much first does not make a later one wait
// for all of it.
TEST(RequestWorkers, UidsTakeTurns) {
  RequestWorkers workers(1, 1);
  Gate gate;
  std::atomic<int> started{0}, done{0};
  ASSERT_TRUE(workers.submit(1000, gate.work(started, done)));  // holds the one thread
  ASSERT_TRUE(eventually([&] { return started == 1; }));
  std::mutex m;
  std::vector<uid_t> order;
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(workers.submit(1000, [&] {
      std::lock_guard lock(m);
      order.push_back(1000);
    }));
  ASSERT_TRUE(workers.submit(2000, [&] {
    std::lock_guard lock(m);
    order.push_back(2000);
  }));
  gate.open();
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lock(m);
    return order.size() == 6;
  }));
  std::lock_guard lock(m);
  // uid 1000 had just had its turn (the gate): uid 2000 is next, before 1000's queue.
  EXPECT_EQ(order.front(), 2000u);
}

// A connection that closes cancels its queued work: it is dropped (with what it owns) and never
// runs; work that has started cannot be cancelled.
TEST(RequestWorkers, CancelDropsQueuedWorkOnly) {
  RequestWorkers workers(1, 1);
  Gate gate;
  std::atomic<int> started{0}, done{0};
  const uint64_t running = workers.submit(1000, gate.work(started, done));
  ASSERT_NE(running, 0u);
  ASSERT_TRUE(eventually([&] { return started == 1; }));
  auto owned = std::make_shared<int>(7);
  std::atomic<bool> ran{false};
  const uint64_t queued = workers.submit(1000, [owned, &ran] { ran = true; });
  std::atomic<bool> otherRan{false};
  ASSERT_NE(workers.submit(1000, [&] { otherRan = true; }), 0u);
  EXPECT_EQ(owned.use_count(), 2);
  EXPECT_TRUE(workers.cancel(1000, queued));
  EXPECT_EQ(owned.use_count(), 1) << "the cancelled work still holds what it owns";
  EXPECT_FALSE(workers.cancel(1000, queued)) << "cancelled twice";
  EXPECT_FALSE(workers.cancel(1000, running)) << "running work was cancelled";
  EXPECT_EQ(workers.queued(), 1u);
  gate.open();
  EXPECT_TRUE(eventually([&] { return otherRan.load(); }));
  EXPECT_FALSE(ran);
  EXPECT_TRUE(eventually([&] { return workers.running() == 0 && workers.queued() == 0; }));
}

// The uid's only queued work is cancelled while the uid waits its turn: the turn is given up.
TEST(RequestWorkers, CancellingAUidsLastQueuedWorkGivesUpItsTurn) {
  RequestWorkers workers(1, 1);
  Gate gate;
  std::atomic<int> started{0}, done{0};
  ASSERT_NE(workers.submit(1000, gate.work(started, done)), 0u);
  ASSERT_TRUE(eventually([&] { return started == 1; }));
  const uint64_t waiting = workers.submit(2000, [] {});  // uid 2000 is in line for the thread
  ASSERT_TRUE(workers.cancel(2000, waiting));
  std::atomic<bool> ran{false};
  ASSERT_NE(workers.submit(3000, [&] { ran = true; }), 0u);
  gate.open();
  EXPECT_TRUE(eventually([&] { return ran.load(); })) << "the thread took a turn for a uid with nothing queued";
}

TEST(RequestWorkers, StopDropsWhatHasNotStartedAndWaitsForWhatHas) {
  RequestWorkers workers(1, 1);
  Gate gate;
  std::atomic<int> started{0}, done{0};
  ASSERT_TRUE(workers.submit(1000, gate.work(started, done)));
  ASSERT_TRUE(eventually([&] { return started == 1; }));
  std::atomic<bool> dropped{true};
  ASSERT_TRUE(workers.submit(1000, [&] { dropped = false; }));

  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    workers.stop();
    stopped = true;
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(stopped) << "stop() did not wait for the running work";
  gate.open();
  stopper.join();
  EXPECT_EQ(done, 1);
  EXPECT_TRUE(dropped) << "work queued behind the running one ran after stop()";
  EXPECT_EQ(workers.submit(1000, [] {}), 0u) << "work accepted after stop()";
  workers.stop();  // again: nothing left to join
}

// The daemon's shutdown and the destructor may both stop the workers; whichever comes second must
// not return (and let what the work uses be destroyed) while the first is still joining.
TEST(RequestWorkers, AStopWhileAnotherIsJoiningWaitsForTheJoins) {
  RequestWorkers workers(1, 1);
  Gate gate;
  std::atomic<int> started{0}, done{0};
  ASSERT_TRUE(workers.submit(1000, gate.work(started, done)));
  ASSERT_TRUE(eventually([&] { return started == 1; }));
  std::atomic<bool> firstStopped{false}, secondStopped{false};
  std::thread first([&] {
    workers.stop();
    firstStopped = true;
  });
  // The first stop has swapped the threads out once submit() is refused.
  ASSERT_TRUE(eventually([&] { return workers.submit(1000, [] {}) == 0; }));
  std::thread second([&] {
    workers.stop();
    secondStopped = true;
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(secondStopped) << "a second stop() returned while the work was still running";
  EXPECT_FALSE(firstStopped);
  gate.open();
  first.join();
  second.join();
  EXPECT_EQ(done, 1);
}

}  // namespace
