// Whether a range is mapped, asked of the kernel VMA by VMA (PROCMAP_QUERY) instead of read from the
// whole maps file, on this process's own address space; and the registry's inspector built on it:
// a client registering unmapped ranges over and over no longer has its maps file read each time.
// Needs Linux 6.11+ (the ioctl); the maps-file path that older kernels take is covered by the unit
// tests on fixture trees (tests/unit/registry/ProcessMapsTest.cpp), where the ioctl fails the same way.
// MapsHandleTest (a maps file kept open across an exec) runs on any kernel.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <signal.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <thread>

#include "registry/AddressSpace.h"
#include "sys/service/ProcessMaps.h"

namespace {

using tt::sys::RangeQuery;

const long kPage = ::sysconf(_SC_PAGESIZE);

// `vmas` pages, every other one read-only, so the kernel keeps them as `vmas` VMAs.
class SplitMapping {
 public:
  explicit SplitMapping(size_t vmas) : bytes_(vmas * kPage) {
    void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return;
    base_ = static_cast<char*>(p);
    for (size_t i = 1; i < vmas; i += 2) ::mprotect(base_ + i * kPage, kPage, PROT_READ);
  }
  ~SplitMapping() {
    if (base_) ::munmap(base_, bytes_);
  }
  SplitMapping(const SplitMapping&) = delete;
  SplitMapping& operator=(const SplitMapping&) = delete;
  bool ok() const { return base_ != nullptr; }
  uint64_t start() const { return reinterpret_cast<uint64_t>(base_); }
  uint64_t end() const { return start() + bytes_; }
  uint64_t page(size_t i) const { return start() + i * kPage; }
  void unmapPage(size_t i) { ::munmap(base_ + i * kPage, kPage); }

 private:
  size_t bytes_ = 0;
  char* base_ = nullptr;
};

// Bytes this process has read through read(2) and friends (/proc/self/io rchar).
uint64_t bytesRead() {
  std::ifstream io("/proc/self/io");
  std::string key;
  uint64_t value = 0;
  while (io >> key >> value)
    if (key == "rchar:") return value;
  return 0;
}

class ProcessMapsQueryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SplitMapping probe(1);
    ASSERT_TRUE(probe.ok());
    auto asked = tt::sys::queryRangeMapped(procfs_, ::getpid(), probe.start(), probe.end(), 1);
    if (!asked && asked.error().code == ENOTTY)
      GTEST_SKIP() << "this kernel has no PROCMAP_QUERY (Linux 6.11+): the inspector reads the maps file "
                      "here, which the unit tests on fixture trees cover";
    ASSERT_TRUE(asked.ok()) << asked.error().message();
  }
  tt::sys::Fs procfs_{"/proc"};
};

TEST_F(ProcessMapsQueryTest, AnswersMappedGapsAndTooManyVmas) {
  SplitMapping m(64);
  ASSERT_TRUE(m.ok());
  const pid_t self = ::getpid();
  auto ask = [&](uint64_t start, uint64_t end, uint64_t maxVmas) {
    auto asked = tt::sys::queryRangeMapped(procfs_, self, start, end, maxVmas);
    EXPECT_TRUE(asked.ok()) << asked.error().message();
    return asked ? asked->answer : RangeQuery::kUndecided;
  };
  EXPECT_EQ(ask(m.start(), m.end(), 64), RangeQuery::kMapped);
  auto walked = tt::sys::queryRangeMapped(procfs_, self, m.start(), m.end(), 64);
  ASSERT_TRUE(walked.ok());
  EXPECT_EQ(walked->vmas, 64u);
  EXPECT_EQ(ask(m.page(3) + 17, m.page(5) - 1, 3), RangeQuery::kMapped);
  EXPECT_EQ(ask(m.start(), m.end(), 63), RangeQuery::kUndecided);
  m.unmapPage(40);
  EXPECT_EQ(ask(m.start(), m.end(), 64), RangeQuery::kNotMapped);
  EXPECT_EQ(ask(m.page(40), m.page(41), 1), RangeQuery::kNotMapped);
  EXPECT_EQ(ask(m.page(41), m.end(), 64), RangeQuery::kMapped);
  // A gap past the VMAs allowed is not looked for: the answer is undecided, not "mapped".
  EXPECT_EQ(ask(m.start(), m.end(), 10), RangeQuery::kUndecided);
  EXPECT_EQ(ask(m.start(), m.start(), 1), RangeQuery::kNotMapped);
}

TEST_F(ProcessMapsQueryTest, AgreesWithTheMapsFileOnRandomRanges) {
  SplitMapping m(256);
  ASSERT_TRUE(m.ok());
  for (size_t hole : {17u, 18u, 100u, 201u}) m.unmapPage(hole);
  auto maps = tt::sys::readMaps(procfs_, ::getpid());
  ASSERT_TRUE(maps.ok()) << maps.error().message();
  std::mt19937_64 rng(7);
  // From a page before the mapping to a page after it: ranges inside, across holes and across ends.
  std::uniform_int_distribution<uint64_t> at(m.start() - kPage, m.end() + kPage);
  size_t mapped = 0, notMapped = 0;
  for (int i = 0; i < 2000; ++i) {
    uint64_t a = at(rng), b = at(rng);
    if (a > b) std::swap(a, b);
    if (a == b) continue;
    auto asked = tt::sys::queryRangeMapped(procfs_, ::getpid(), a, b, 1000);
    ASSERT_TRUE(asked.ok()) << asked.error().message();
    ASSERT_NE(asked->answer, RangeQuery::kUndecided);
    const bool expected = tt::sys::rangeMapped(*maps, a, b);
    ASSERT_EQ(asked->answer == RangeQuery::kMapped, expected) << std::hex << a << "-" << b;
    ++(expected ? mapped : notMapped);
  }
  EXPECT_GT(mapped, 100u);  // both answers were exercised
  EXPECT_GT(notMapped, 100u);
}

TEST_F(ProcessMapsQueryTest, AProcessThatIsGoneIsAnError) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  auto asked = tt::sys::queryRangeMapped(procfs_, child, 0x10000, 0x20000, 1);
  ASSERT_FALSE(asked.ok());
  EXPECT_EQ(asked.error().code, ESRCH) << asked.error().message();
}

TEST_F(ProcessMapsQueryTest, InspectorDoesNotReadTheMapsFileForAMiss) {
  // Enough VMAs that reading the maps file once shows plainly in rchar (~50 bytes a line).
  SplitMapping many(4000);
  ASSERT_TRUE(many.ok());
  SplitMapping small(2);
  ASSERT_TRUE(small.ok());
  small.unmapPage(1);
  tt::registry::ProcMapsInspector inspector("/proc");
  const pid_t self = ::getpid();
  const uint64_t before = bytesRead();
  for (int i = 0; i < 50; ++i) {
    auto mapped = inspector.rangeMapped(self, 1000, small.page(1), small.page(1) + kPage);
    ASSERT_TRUE(mapped.ok()) << mapped.error().message();
    EXPECT_FALSE(*mapped);
    mapped = inspector.rangeMapped(self, 1000, small.page(0), small.page(0) + kPage);
    ASSERT_TRUE(mapped.ok()) << mapped.error().message();
    EXPECT_TRUE(*mapped);
  }
  const uint64_t read = bytesRead() - before;
  // One read of the maps file is over 150 KB here; 100 answers read none.
  EXPECT_LT(read, 4096u) << "the inspector read " << read << " bytes for 100 answers";
}

// A range of many VMAs is walked, never read from the maps file, and the VMAs looked up are charged
// to the uid that asked, within its budget per second: past it, LIMIT (EDQUOT) until it refills.
// Other uids have their own.
TEST_F(ProcessMapsQueryTest, InspectorWalksWideRangesWithinABudgetPerUid) {
  using tt::registry::ProcMapsInspector;
  SplitMapping first(300), second(300);
  ASSERT_TRUE(first.ok() && second.ok());
  ProcMapsInspector inspector("/proc", 500);
  const pid_t self = ::getpid();
  const uint64_t before = bytesRead();
  const auto start = std::chrono::steady_clock::now();
  auto mapped = inspector.rangeMapped(self, 1000, first.start(), first.end());
  ASSERT_TRUE(mapped.ok()) << mapped.error().message();
  EXPECT_TRUE(*mapped);
  EXPECT_LT(bytesRead() - before, 4096u) << "the maps file was read";
  // 300 of 500 used: the second 300 do not fit.
  mapped = inspector.rangeMapped(self, 1000, second.start(), second.end());
  if (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(100)) {  // refilled ~50 a 100 ms
    ASSERT_FALSE(mapped.ok());
    EXPECT_EQ(mapped.error().code, EDQUOT) << mapped.error().message();
  }
  // (The refused walk spent the rest of uid 1000's budget: it did that work.) Another uid's
  // budget is its own.
  mapped = inspector.rangeMapped(self, 1001, second.start(), second.end());
  ASSERT_TRUE(mapped.ok()) << mapped.error().message();
  EXPECT_TRUE(*mapped);
  // Refilled after a second.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  mapped = inspector.rangeMapped(self, 1000, second.start(), second.end());
  ASSERT_TRUE(mapped.ok()) << mapped.error().message();
  EXPECT_TRUE(*mapped);
  // A wide range with a gap near its end (after 299 VMAs) is not taken for mapped.
  second.unmapPage(299);
  mapped = inspector.rangeMapped(self, 1001, second.start(), second.end());
  ASSERT_TRUE(mapped.ok()) << mapped.error().message();
  EXPECT_FALSE(*mapped);
}

// Kills and reaps a child at the end of a test, unless it was reaped already (pid set to -1:
// kill(-1) would signal every process).
struct Reaper {
  pid_t pid;
  ~Reaper() {
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
};

// An open maps file pins the address space the process had when it was opened: an exec (same
// ids) leaves it answering nothing, which is how the daemon learns of the exec, and no answer of
// it describes the new program. Kernels without PROCMAP_QUERY take the read path, so this runs on
// every kernel.
TEST(MapsHandleTest, PinsTheAddressSpaceOfTheOpenAcrossAnExec) {
  int report[2], go[2];
  ASSERT_EQ(::pipe(report), 0);
  ASSERT_EQ(::pipe(go), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    void* buffer = ::mmap(nullptr, 4 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    const auto address = reinterpret_cast<uint64_t>(buffer);
    if (buffer == MAP_FAILED || ::write(report[1], &address, sizeof address) != sizeof address) ::_exit(1);
    char b;
    if (::read(go[0], &b, 1) != 1) ::_exit(2);
    ::execl("/bin/sleep", "sleep", "30", static_cast<char*>(nullptr));
    ::_exit(3);
  }
  Reaper reap{child};
  uint64_t buffer = 0;
  ASSERT_EQ(::read(report[0], &buffer, sizeof buffer), static_cast<ssize_t>(sizeof buffer));
  const tt::sys::Fs procfs("/proc");
  auto handle = tt::sys::MapsHandle::open(procfs, child);
  ASSERT_TRUE(handle.ok()) << handle.error().message();
  auto alive = handle->alive();
  ASSERT_TRUE(alive.ok()) << alive.error().message();
  EXPECT_TRUE(*alive);
  auto maps = handle->read();
  ASSERT_TRUE(maps.ok()) << maps.error().message();
  EXPECT_TRUE(tt::sys::rangeMapped(*maps, buffer, buffer + 4 * kPage));
  auto asked = handle->queryRange(buffer, buffer + 4 * kPage, 4);
  const bool hasQuery = asked.ok() || asked.error().code != ENOTTY;
  if (hasQuery) {
    ASSERT_TRUE(asked.ok()) << asked.error().message();
    EXPECT_EQ(asked->answer, RangeQuery::kMapped);
  } else {
    std::cout << "no PROCMAP_QUERY on this kernel: the read path alone is checked\n";
  }
  tt::registry::ProcMapsInspector sweeper("/proc"), prober("/proc");
  for (auto* inspector : {&sweeper, &prober}) {
    auto mapped = inspector->rangeMapped(child, 1000, buffer, buffer + kPage);
    ASSERT_TRUE(mapped.ok()) << mapped.error().message();
    EXPECT_TRUE(*mapped);
    EXPECT_TRUE(inspector->pinsAddressSpace(child));
  }
  auto replaced = sweeper.replacedAddressSpace(child);
  ASSERT_TRUE(replaced.ok()) << replaced.error().message();
  EXPECT_FALSE(*replaced);

  ASSERT_EQ(::write(go[1], "x", 1), 1);
  bool gone = false;
  for (int i = 0; i < 250 && !gone; ++i) {
    alive = handle->alive();
    ASSERT_TRUE(alive.ok()) << alive.error().message();
    gone = !*alive;
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(gone) << "the address space of the open outlived the exec by 5 s";
  maps = handle->read();
  ASSERT_TRUE(maps.ok()) << maps.error().message();
  EXPECT_TRUE(maps->empty()) << maps->size() << " VMAs read after the exec";
  if (hasQuery) {
    asked = handle->queryRange(buffer, buffer + 4 * kPage, 4);
    ASSERT_FALSE(asked.ok());
    EXPECT_EQ(asked.error().code, ESRCH) << asked.error().message();
  }
  replaced = sweeper.replacedAddressSpace(child);
  ASSERT_TRUE(replaced.ok()) << replaced.error().message();
  EXPECT_TRUE(*replaced);
  EXPECT_FALSE(sweeper.pinsAddressSpace(child)) << "the gone address space stayed pinned";
  auto stale = prober.rangeMapped(child, 1000, buffer, buffer + kPage);
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.error().code, ESTALE) << stale.error().message();
  // Asked afresh, the answer is the new program's (sleep has nothing at the old buffer).
  auto fresh = prober.rangeMapped(child, 1000, buffer, buffer + kPage);
  ASSERT_TRUE(fresh.ok()) << fresh.error().message();
  EXPECT_FALSE(*fresh);
  // An exit is not an exec.
  ::kill(child, SIGKILL);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  reap.pid = -1;
  auto exited = prober.rangeMapped(child, 1000, buffer, buffer + kPage);
  ASSERT_FALSE(exited.ok());
  EXPECT_EQ(exited.error().code, ESRCH) << exited.error().message();
  for (int fd : {report[0], report[1], go[0], go[1]}) ::close(fd);
}

}  // namespace
