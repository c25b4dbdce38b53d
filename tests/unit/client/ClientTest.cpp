// tensortier::Client (through libtensortier.so) against the in-process fake daemon.
#include <gtest/gtest.h>
#include <numaif.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "fakes/client/FakeDaemon.h"
#include "tensortier/client.hpp"

namespace {

using namespace std::chrono_literals;
using tensortier::Client;
using tensortier::ClientOptions;
using tensortier::RegionKind;
using tt::fake::FakeDaemon;

std::mutex g_logMutex;
std::vector<std::string> g_warnings;

size_t warningCount() {
  std::lock_guard lock(g_logMutex);
  return g_warnings.size();
}

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tt-client-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    socket_ = dir_ + "/tensortier.sock";
    {
      std::lock_guard lock(g_logMutex);
      g_warnings.clear();
    }
    tensortier::setLogHandler([](tensortier::LogLevel level, std::string_view line) {
      if (level < tensortier::LogLevel::Warn) return;
      std::lock_guard lock(g_logMutex);
      g_warnings.emplace_back(line);
    });
  }
  void TearDown() override {
    tensortier::setLogHandler(nullptr);
    std::filesystem::remove_all(dir_);
  }

  ClientOptions options() const {
    ClientOptions o;
    o.socketPath = socket_;
    o.clientName = "client-test";
    o.callTimeout = 2s;
    o.connectTimeout = 500ms;
    o.reconnectInitial = 10ms;
    o.reconnectMax = 50ms;
    return o;
  }

  // A page-aligned anonymous mapping, touched so its pages exist.
  void* mapPages(size_t pages) {
    const size_t bytes = pages * static_cast<size_t>(getpagesize());
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(p, MAP_FAILED);
    std::memset(p, 0x5a, bytes);
    maps_.emplace_back(p, bytes);
    return p;
  }

  ~ClientTest() override {
    for (auto& [p, n] : maps_) munmap(p, n);
  }

  std::string dir_, socket_;
  std::vector<std::pair<void*, size_t>> maps_;
};

TEST_F(ClientTest, HelloNegotiatesVersionOneAndOffersMbind) {
  FakeDaemon fake(socket_);
  ASSERT_TRUE(fake.start().ok());
  auto client = Client::create(options());
  EXPECT_TRUE(client->connected());
  EXPECT_EQ(client->protocolVersion(), 1u);
  const auto hellos = fake.hellos();
  ASSERT_EQ(hellos.size(), 1u);
  EXPECT_EQ(hellos[0].versions, std::vector<uint32_t>{1});
  EXPECT_EQ(hellos[0].clientName, "client-test");
  EXPECT_TRUE(hellos[0].acceptsMbind);
  EXPECT_EQ(warningCount(), 0u);
}

TEST_F(ClientTest, NoCommonVersionLeavesTheClientDisconnectedWithOneWarning) {
  FakeDaemon fake(socket_, {.versions = {2}, .daemonVersion = "future"});
  ASSERT_TRUE(fake.start().ok());
  auto client = Client::create(options());
  EXPECT_FALSE(client->connected());
  EXPECT_EQ(client->protocolVersion(), 0u);
  ASSERT_TRUE(fake.waitFor([](const FakeDaemon& f) { return f.hellos().empty() && f.framesReceived() >= 3; }));
  EXPECT_EQ(warningCount(), 1u);
}

TEST_F(ClientTest, RegisterAndUnregisterRoundTrip) {
  FakeDaemon fake(socket_);
  ASSERT_TRUE(fake.start().ok());
  auto client = Client::create(options());
  void* buf = mapPages(4);
  auto h = client->registerRegion(static_cast<char*>(buf) + 100, 3 * 4096, "fc1.weight", RegionKind::Weight,
                                  {.expectedLifetimeSteps = 12});
  ASSERT_TRUE(h.ok()) << h.status().message();
  auto regions = fake.regions();
  ASSERT_EQ(regions.size(), 1u);
  EXPECT_EQ(regions[0].address, reinterpret_cast<uintptr_t>(buf) + 100);
  EXPECT_EQ(regions[0].length, 3u * 4096);
  EXPECT_EQ(regions[0].name, "fc1.weight");
  EXPECT_EQ(regions[0].kind, 1);
  EXPECT_EQ(regions[0].expectedLifetimeSteps, 12u);
  EXPECT_EQ(regions[0].clientTag, *h);
  EXPECT_EQ(client->stats().regionsBound, 1u);

  EXPECT_TRUE(client->unregisterRegion(*h).ok());
  EXPECT_TRUE(fake.regions().empty());
  EXPECT_EQ(fake.unregisterCount(), 1u);
  EXPECT_EQ(client->unregisterRegion(*h).code(), TENSORTIER_ERR_NO_SUCH_HANDLE);
  EXPECT_EQ(client->stats().regionsLive, 0u);
}

TEST_F(ClientTest, DaemonRejectionIsReturnedAndTheRegionForgotten) {
  FakeDaemon fake(socket_);
  ASSERT_TRUE(fake.start().ok());
  auto client = Client::create(options());
  char* buf = static_cast<char*>(mapPages(4));
  ASSERT_TRUE(client->registerRegion(buf, 8192, "a", RegionKind::Weight).ok());
  auto overlap = client->registerRegion(buf + 4096, 8192, "b", RegionKind::Gradient);
  ASSERT_FALSE(overlap.ok());
  EXPECT_EQ(overlap.status().code(), TENSORTIER_ERR_DAEMON_REGION_OVERLAPS);
  EXPECT_NE(overlap.status().message().find("REGION_OVERLAPS"), std::string::npos) << overlap.status().message();
  EXPECT_EQ(client->stats().regionsLive, 1u);
}

TEST_F(ClientTest, BadArgumentsAreRejectedWithoutTalkingToTheDaemon) {
  FakeDaemon fake(socket_);
  ASSERT_TRUE(fake.start().ok());
  auto client = Client::create(options());
  const uint64_t framesAfterHello = fake.framesReceived();
  char byte = 0;
  EXPECT_EQ(client->registerRegion(nullptr, 10, "null", RegionKind::Weight).status().code(),
            TENSORTIER_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(client->registerRegion(&byte, 0, "empty", RegionKind::Weight).status().code(),
            TENSORTIER_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(client->registerRegion(&byte, 1, "kind", static_cast<RegionKind>(42)).status().code(),
            TENSORTIER_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(fake.framesReceived(), framesAfterHello);
}

TEST_F(ClientTest, IterationMarksArriveInOrder) {
  FakeDaemon fake(socket_);
  ASSERT_TRUE(fake.start().ok());
  auto client = Client::create(options());
  for (uint64_t step = 1; step <= 3; ++step) {
    EXPECT_TRUE(client->stepBegin(step));
    EXPECT_TRUE(client->phaseBegin(step, "forward"));
    EXPECT_TRUE(client->phaseBegin(step, "backward"));
    EXPECT_TRUE(client->phaseBegin(step, "optimizer"));
    EXPECT_TRUE(client->stepEnd(step));
  }
  ASSERT_TRUE(fake.waitFor([](const FakeDaemon& f) { return f.marks().size() == 15; }));
  const auto marks = fake.marks();
  EXPECT_EQ(marks[0].type, 1);
  EXPECT_EQ(marks[0].step, 1u);
  EXPECT_EQ(marks[1].type, 3);
  EXPECT_EQ(marks[1].phase, "forward");
  EXPECT_EQ(marks[2].phase, "backward");
  EXPECT_EQ(marks[3].phase, "optimizer");
  EXPECT_EQ(marks[4].type, 2);
  EXPECT_EQ(marks[14].type, 2);
  EXPECT_EQ(marks[14].step, 3u);
  EXPECT_EQ(client->stats().marksSent, 15u);
}

TEST_F(ClientTest, QueryPlacementReportsRegionsUnderTheirHandles) {
  FakeDaemon fake(socket_);
  ASSERT_TRUE(fake.start().ok());
  auto client = Client::create(options());
  char* buf = static_cast<char*>(mapPages(4));
  auto a = client->registerRegion(buf, 4096, "a", RegionKind::Weight);
  auto b = client->registerRegion(buf + 8192, 8192, "b", RegionKind::OptimizerState);
  ASSERT_TRUE(a.ok() && b.ok());
  auto all = client->queryPlacement();
  ASSERT_TRUE(all.ok()) << all.status().message();
  ASSERT_EQ(all->size(), 2u);
  for (const auto& p : *all) {
    const bool isA = p.name == "a";
    EXPECT_EQ(p.handle, isA ? *a : *b);
    EXPECT_EQ(p.kind, isA ? RegionKind::Weight : RegionKind::OptimizerState);
    EXPECT_EQ(p.length, isA ? 4096u : 8192u);
    ASSERT_EQ(p.bytesPerNode.size(), 1u);
    EXPECT_EQ(p.bytesPerNode[0].bytes, p.length);
  }
  const tensortier::RegionHandle only[] = {*b};
  auto one = client->queryPlacement(only);
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].handle, *b);
  const tensortier::RegionHandle bogus[] = {999};
  EXPECT_EQ(client->queryPlacement(bogus).status().code(), TENSORTIER_ERR_NO_SUCH_HANDLE);
}

TEST_F(ClientTest, MbindRequestBindsTheRegionToNode0) {
  FakeDaemon fake(socket_);
  ASSERT_TRUE(fake.start().ok());
  auto client = Client::create(options());
  const size_t pages = 16;
  char* buf = static_cast<char*>(mapPages(pages));
  auto h = client->registerRegion(buf, pages * 4096, "weights", RegionKind::Weight);
  ASSERT_TRUE(h.ok());
  const auto regions = fake.regions();
  ASSERT_EQ(regions.size(), 1u);
  const auto result = fake.mbind(regions[0].id, regions[0].address, regions[0].length, 0);
  ASSERT_TRUE(result.has_value()) << "no MbindResult from the client";
  EXPECT_EQ(*result, 0) << strerror(*result);

  // The kernel's view: the policy of the range is MPOL_BIND to node 0...
  int mode = -1;
  unsigned long mask[16] = {};
  ASSERT_EQ(get_mempolicy(&mode, mask, sizeof mask * 8, buf, MPOL_F_ADDR), 0) << strerror(errno);
  EXPECT_EQ(mode, MPOL_BIND);
  EXPECT_EQ(mask[0], 1ul);
  ASSERT_EQ(get_mempolicy(&mode, mask, sizeof mask * 8, buf + (pages - 1) * 4096, MPOL_F_ADDR), 0);
  EXPECT_EQ(mode, MPOL_BIND);
  // ... and every page is on node 0 (move_pages with nodes = NULL only queries).
  std::vector<void*> addrs(pages);
  std::vector<int> status(pages, -1);
  for (size_t i = 0; i < pages; ++i) addrs[i] = buf + i * 4096;
  ASSERT_EQ(move_pages(0, pages, addrs.data(), nullptr, status.data(), 0), 0) << strerror(errno);
  for (size_t i = 0; i < pages; ++i) EXPECT_EQ(status[i], 0) << "page " << i;
  EXPECT_EQ(client->stats().mbindDone, 1u);
}

TEST_F(ClientTest, MbindOutsideRegisteredRegionsIsRefused) {
  FakeDaemon fake(socket_);
  ASSERT_TRUE(fake.start().ok());
  auto client = Client::create(options());
  char* buf = static_cast<char*>(mapPages(8));
  ASSERT_TRUE(client->registerRegion(buf, 4 * 4096, "w", RegionKind::Weight).ok());
  const auto r = fake.regions().at(0);
  // Beyond the region's pages: the daemon may not move memory the process did not register.
  EXPECT_EQ(fake.mbind(r.id, r.address, 8 * 4096, 0), std::optional<int32_t>(EFAULT));
  // An id this client does not have.
  EXPECT_EQ(fake.mbind(r.id + 100, r.address, 4096, 0), std::optional<int32_t>(ENOENT));
  // A node that does not exist: the kernel's answer is passed back.
  const auto noNode = fake.mbind(r.id, r.address, 4096, 1000);
  ASSERT_TRUE(noNode.has_value());
  EXPECT_NE(*noNode, 0);
  int mode = -1;
  ASSERT_EQ(get_mempolicy(&mode, nullptr, 0, buf + 4 * 4096, MPOL_F_ADDR), 0);
  EXPECT_EQ(mode, MPOL_DEFAULT);
  EXPECT_EQ(client->stats().mbindFailed, 3u);
}

TEST_F(ClientTest, DaemonAbsentMakesCallsNoOpsWithOneWarning) {
  auto client = Client::create(options());  // nothing listens on socket_
  EXPECT_FALSE(client->connected());
  char* buf = static_cast<char*>(mapPages(4));
  std::vector<tensortier::RegionHandle> handles;
  for (int i = 0; i < 100; ++i) {
    auto h = client->registerRegion(buf + i, 10, "r" + std::to_string(i), RegionKind::Activation);
    ASSERT_TRUE(h.ok()) << h.status().message();
    handles.push_back(*h);
    EXPECT_FALSE(client->stepBegin(static_cast<uint64_t>(i)));
    EXPECT_FALSE(client->phaseBegin(static_cast<uint64_t>(i), "forward"));
  }
  EXPECT_EQ(client->queryPlacement().status().code(), TENSORTIER_ERR_UNAVAILABLE);
  EXPECT_TRUE(client->unregisterRegion(handles[0]).ok());
  // Several reconnect attempts (10-50 ms apart) happen meanwhile; none logs again.
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(warningCount(), 1u);
  const auto s = client->stats();
  EXPECT_EQ(s.regionsLive, 99u);
  EXPECT_EQ(s.regionsBound, 0u);
  EXPECT_EQ(s.marksDropped, 200u);
  EXPECT_EQ(s.connects, 0u);
}

TEST_F(ClientTest, RegionsQueuedWhileAbsentAreRegisteredWhenTheDaemonComesUp) {
  auto client = Client::create(options());
  char* buf = static_cast<char*>(mapPages(4));
  ASSERT_TRUE(client->registerRegion(buf, 4096, "early.a", RegionKind::Weight).ok());
  auto b = client->registerRegion(buf + 4096, 4096, "early.b", RegionKind::Gradient);
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(client->registerRegion(buf + 8192, 4096, "early.c", RegionKind::Other).ok());
  EXPECT_TRUE(client->unregisterRegion(*b).ok());  // never reaches the daemon
  FakeDaemon fake(socket_);
  ASSERT_TRUE(fake.start().ok());
  ASSERT_TRUE(fake.waitFor([](const FakeDaemon& f) { return f.regions().size() == 2; }));
  std::vector<std::string> names;
  for (const auto& r : fake.regions()) names.push_back(r.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"early.a", "early.c"}));
  ASSERT_TRUE(fake.waitFor([&](const FakeDaemon&) { return client->stats().regionsBound == 2; }));
  EXPECT_TRUE(client->connected());
}

TEST_F(ClientTest, DaemonRestartReRegistersEveryLiveRegion) {
  FakeDaemon fake(socket_);
  ASSERT_TRUE(fake.start().ok());
  auto client = Client::create(options());
  char* buf = static_cast<char*>(mapPages(8));
  std::vector<tensortier::RegionHandle> h;
  for (int i = 0; i < 4; ++i) {
    auto r = client->registerRegion(buf + i * 4096, 4096, "r" + std::to_string(i), RegionKind::Weight);
    ASSERT_TRUE(r.ok());
    h.push_back(*r);
  }
  ASSERT_TRUE(client->unregisterRegion(h[3]).ok());
  ASSERT_EQ(fake.regions().size(), 3u);

  fake.stop();
  ASSERT_TRUE(fake.waitFor([&](const FakeDaemon&) { return !client->connected(); }));
  // Registered while the daemon is down: queued.
  auto late = client->registerRegion(buf + 5 * 4096, 4096, "late", RegionKind::Activation);
  ASSERT_TRUE(late.ok());
  EXPECT_FALSE(client->stepBegin(1));
  ASSERT_TRUE(fake.start().ok());
  ASSERT_TRUE(fake.waitFor([](const FakeDaemon& f) { return f.regions().size() == 4; }));
  ASSERT_TRUE(fake.waitFor([&](const FakeDaemon&) { return client->stats().regionsBound == 4; }));
  std::vector<std::string> names;
  for (const auto& r : fake.regions()) names.push_back(r.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"late", "r0", "r1", "r2"}));
  EXPECT_EQ(fake.hellos().size(), 2u);

  // The handles map to the new daemon ids: unregister and query act on the right regions.
  EXPECT_TRUE(client->unregisterRegion(h[1]).ok());
  ASSERT_EQ(fake.regions().size(), 3u);
  for (const auto& r : fake.regions()) EXPECT_NE(r.name, "r1");
  const tensortier::RegionHandle q[] = {*late};
  auto p = client->queryPlacement(q);
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->size(), 1u);
  EXPECT_EQ((*p)[0].name, "late");
  EXPECT_EQ((*p)[0].handle, *late);
  const auto s = client->stats();
  EXPECT_EQ(s.connects, 2u);
  EXPECT_EQ(s.disconnects, 1u);
  // One warning for the lost connection, none for each failed retry while it was down.
  EXPECT_EQ(warningCount(), 1u);
}

TEST_F(ClientTest, ACallToASilentDaemonTimesOutAndEndsTheSession) {
  FakeDaemon fake(socket_);
  ASSERT_TRUE(fake.start().ok());
  auto o = options();
  o.callTimeout = 100ms;
  o.reconnectInitial = 5s;  // keep the client disconnected for the rest of the test
  o.reconnectMax = 5s;
  auto client = Client::create(o);
  ASSERT_TRUE(client->connected());
  char* buf = static_cast<char*>(mapPages(2));
  ASSERT_TRUE(client->registerRegion(buf, 4096, "before", RegionKind::Weight).ok());
  fake.setSilent(true);
  const auto q = client->queryPlacement();
  EXPECT_EQ(q.status().code(), TENSORTIER_ERR_TIMEOUT);
  EXPECT_NE(q.status().message().find("no reply"), std::string::npos) << q.status().message();
  // The unresponsive daemon is treated as gone: later calls do not wait again, they queue.
  ASSERT_TRUE(fake.waitFor([&](const FakeDaemon&) { return client->stats().disconnects == 1; }))
      << "connects " << client->stats().connects << ", connected " << client->connected();
  EXPECT_FALSE(client->connected());
  auto h = client->registerRegion(buf + 4096, 4096, "after", RegionKind::Weight);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(client->stats().regionsLive, 2u);
  EXPECT_EQ(client->stats().regionsBound, 0u);
  EXPECT_FALSE(client->stepEnd(1));
  ASSERT_EQ(warningCount(), 1u);
  std::lock_guard lock(g_logMutex);
  EXPECT_NE(g_warnings[0].find("no reply from tensortierd"), std::string::npos) << g_warnings[0];
}

TEST_F(ClientTest, WritesToAVanishedDaemonDoNotRaiseSigpipe) {
  struct sigaction old {};
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  ASSERT_EQ(sigaction(SIGPIPE, &dfl, &old), 0);  // SIGPIPE would kill this process
  FakeDaemon fake(socket_);
  ASSERT_TRUE(fake.start().ok());
  auto client = Client::create(options());
  char* buf = static_cast<char*>(mapPages(1));
  fake.stop();
  for (int i = 0; i < 2000; ++i) {
    (void)client->stepBegin(static_cast<uint64_t>(i));
    if (i % 100 == 0) (void)client->registerRegion(buf + i / 100, 1, "x", RegionKind::Other);
  }
  ASSERT_TRUE(fake.waitFor([&](const FakeDaemon&) { return !client->connected(); }));
  sigaction(SIGPIPE, &old, nullptr);
  EXPECT_EQ(client->stats().regionsLive, 20u);
}

TEST_F(ClientTest, ConcurrentCallersAreAllServedAndEveryMarkIsAccountedFor) {
  FakeDaemon fake(socket_);
  ASSERT_TRUE(fake.start().ok());
  auto client = Client::create(options());
  constexpr int kThreads = 8, kPerThread = 100;
  char* buf = static_cast<char*>(mapPages(kThreads * kPerThread));
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const int n = t * kPerThread + i;
        auto h = client->registerRegion(buf + n * 4096, 4096, "t" + std::to_string(n), RegionKind::Activation);
        if (!h.ok()) ++failures;
        (void)client->phaseBegin(static_cast<uint64_t>(n), "forward");
        if (i % 2 == 0 && h.ok() && !client->unregisterRegion(*h).ok()) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(fake.regions().size(), static_cast<size_t>(kThreads * kPerThread / 2));
  const auto s = client->stats();
  EXPECT_EQ(s.regionsLive, static_cast<uint64_t>(kThreads * kPerThread / 2));
  EXPECT_EQ(s.marksSent + s.marksDropped, static_cast<uint64_t>(kThreads * kPerThread));
  ASSERT_TRUE(fake.waitFor([&](const FakeDaemon& f) { return f.marks().size() == s.marksSent; }));
}

TEST_F(ClientTest, ForkedChildCallsAreNoOpsAndLeaveTheParentSessionAlone) {
  FakeDaemon fake(socket_);
  ASSERT_TRUE(fake.start().ok());
  auto client = Client::create(options());
  char* buf = static_cast<char*>(mapPages(2));
  auto h = client->registerRegion(buf, 4096, "parent", RegionKind::Weight);
  ASSERT_TRUE(h.ok());
  const uint64_t frames = fake.framesReceived();
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // e.g. a DataLoader worker: it shares the parent's socket and must not write to it
    int bad = 0;
    bad |= client->registerRegion(buf + 4096, 4096, "child", RegionKind::Weight).status().code() ==
                   TENSORTIER_ERR_UNAVAILABLE
               ? 0
               : 1;
    bad |= client->stepBegin(1) ? 2 : 0;
    bad |= client->unregisterRegion(*h).code() == TENSORTIER_ERR_UNAVAILABLE ? 0 : 4;
    bad |= client->queryPlacement().status().code() == TENSORTIER_ERR_UNAVAILABLE ? 0 : 8;
    client.reset();  // must not join the parent's threads or close its session
    _exit(bad);
  }
  int status = -1;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "bit mask of the child's failed checks";
  EXPECT_EQ(fake.framesReceived(), frames);
  EXPECT_TRUE(client->connected());
  ASSERT_EQ(fake.regions().size(), 1u);
  EXPECT_TRUE(client->unregisterRegion(*h).ok());
  EXPECT_TRUE(fake.regions().empty());
}

}  // namespace
