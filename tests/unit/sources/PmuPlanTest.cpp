// What the PMU plan and the sampling source do with what the kernel accepts, checked without a
// PMU (this machine has none): the AMD IBS Op plan against fake sysfs trees (swfilt or not), the
// period granularity the source keeps, the open order of a group led by mem-loads-aux and the
// PERF_SAMPLE_PHYS_ADDR fallback against a fake opener, and the kernel-address filter.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <functional>
#include <optional>
#include <fstream>
#include <string>
#include <vector>

#include "sources/EventOpen.h"
#include "sources/PmuEvents.h"
#include "sources/SamplingSource.h"
#include "sys/perf/PerfEvent.h"

namespace tt::sources {
namespace {

namespace fs = std::filesystem;

class FakeSysfs : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("tt-pmu-" + std::to_string(::getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  void write(const std::string& rel, const std::string& text) {
    fs::create_directories((root_ / rel).parent_path());
    std::ofstream(root_ / rel) << text;
  }
  PmuPlanInput amdInput() {
    PmuPlanInput in;
    in.corePmu = "amd64_fam19h_zen3";
    readPmuSysfs(sys::Fs(root_.string()), in);
    return in;
  }
  fs::path root_;
};

TEST_F(FakeSysfs, IbsWithSwfiltSetsItsBitAndKeepsExcludeKernel) {
  write("bus/event_source/devices/ibs_op/type", "11\n");
  write("bus/event_source/devices/ibs_op/format/swfilt", "config2:0\n");
  const PmuPlanInput in = amdInput();
  ASSERT_TRUE(in.ibsSwfilt.has_value());
  auto plan = planPmuEvents(in);
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  ASSERT_EQ(plan->events.size(), 1U);
  const perf_event_attr& a = plan->events[0];
  EXPECT_EQ(a.type, 11U);
  EXPECT_EQ(a.config2, 1U);  // config2:0, as the format file says
  EXPECT_EQ(a.exclude_kernel, 1U);
  EXPECT_EQ(a.exclude_hv, 1U);
  EXPECT_NE(plan->description.find("swfilt"), std::string::npos) << plan->description;
}

TEST_F(FakeSysfs, IbsSwfiltBitIsTakenFromTheFormatFile) {
  write("bus/event_source/devices/ibs_op/type", "11\n");
  write("bus/event_source/devices/ibs_op/format/swfilt", "config1:5\n");
  auto plan = planPmuEvents(amdInput());
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  EXPECT_EQ(plan->events[0].config1, uint64_t{1} << 5);
  EXPECT_EQ(plan->events[0].config2, 0U);
  EXPECT_EQ(plan->events[0].exclude_kernel, 1U);
}

// Before 6.14 ibs_op has PERF_PMU_CAP_NO_EXCLUDE and no swfilt: any exclude flag is EINVAL.
TEST_F(FakeSysfs, IbsWithoutSwfiltSetsNoExcludeFlag) {
  write("bus/event_source/devices/ibs_op/type", "11\n");
  const PmuPlanInput in = amdInput();
  ASSERT_TRUE(in.ibsOpType.has_value());
  EXPECT_EQ(*in.ibsOpType, 11U);
  EXPECT_FALSE(in.ibsSwfilt.has_value());
  auto plan = planPmuEvents(in);
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  const perf_event_attr& a = plan->events[0];
  EXPECT_EQ(a.exclude_kernel, 0U);
  EXPECT_EQ(a.exclude_hv, 0U);
  EXPECT_EQ(a.exclude_user, 0U);
  EXPECT_EQ(a.exclude_idle, 0U);
  EXPECT_EQ(a.exclude_host, 0U);
  EXPECT_EQ(a.exclude_guest, 0U);
  EXPECT_EQ(a.config2, 0U);
  EXPECT_EQ(a.config1, 0U);
}

TEST_F(FakeSysfs, UnreadableSwfiltCountsAsAbsent) {
  write("bus/event_source/devices/ibs_op/type", "11\n");
  write("bus/event_source/devices/ibs_op/format/swfilt", "config2:0-3\n");  // not one bit
  auto plan = planPmuEvents(amdInput());
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  EXPECT_EQ(plan->events[0].exclude_kernel, 0U);
  EXPECT_EQ(plan->events[0].config2, 0U);
}

TEST_F(FakeSysfs, MemLoadsAuxFromTheCpuOrCpuCorePmu) {
  PmuPlanInput in;
  readPmuSysfs(sys::Fs(root_.string()), in);
  EXPECT_FALSE(in.memLoadsAux);
  EXPECT_FALSE(in.ibsOpType.has_value());
  write("bus/event_source/devices/cpu_core/events/mem-loads-aux", "event=0x03,umask=0x82\n");
  readPmuSysfs(sys::Fs(root_.string()), in);
  EXPECT_TRUE(in.memLoadsAux);
  fs::remove_all(root_ / "bus");
  write("bus/event_source/devices/cpu/events/mem-loads-aux", "event=0x03,umask=0x82\n");
  PmuPlanInput again;
  readPmuSysfs(sys::Fs(root_.string()), again);
  EXPECT_TRUE(again.memLoadsAux);
}

TEST(PmuFormatBit, ParsesOneBitFields) {
  auto b = sys::perf::parsePmuFormatBit("config2:0");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->word, 2U);
  EXPECT_EQ(b->bit, 0U);
  b = sys::perf::parsePmuFormatBit("config:19");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->word, 0U);
  EXPECT_EQ(b->bit, 19U);
  for (const char* bad : {"config:0-7", "config3:0", "config2:64", "event:1", "config2", ""})
    EXPECT_FALSE(sys::perf::parsePmuFormatBit(bad).ok()) << bad;
}

// A refused perf_event_open says why when kernel.perf_event_paranoid does: Debian's kernels
// default to 3, where only CAP_SYS_ADMIN may open events (CAP_PERFMON is not enough).
TEST_F(FakeSysfs, APermissionErrorNamesAParanoidLevelOfThreeOrMore) {
  const sys::Fs procfs(root_.string());
  write("self/status", "Name:\ttensortierd\nCapInh:\t0000000000000000\nCapEff:\t000000c000880003\n");
  write("sys/kernel/perf_event_paranoid", "3\n");
  EXPECT_NE(sys::perf::paranoidHint(procfs, EACCES).find("kernel.perf_event_paranoid=3"), std::string::npos);
  EXPECT_NE(sys::perf::paranoidHint(procfs, EPERM).find("CAP_SYS_ADMIN"), std::string::npos);
  EXPECT_EQ(sys::perf::paranoidHint(procfs, ENOENT), "");  // not a permission error
  write("sys/kernel/perf_event_paranoid", "4\n");          // Ubuntu's level
  EXPECT_NE(sys::perf::paranoidHint(procfs, EACCES).find("=4"), std::string::npos);
  for (const char* level : {"2\n", "-1\n"}) {  // upstream's levels: CAP_PERFMON would do
    write("sys/kernel/perf_event_paranoid", level);
    EXPECT_EQ(sys::perf::paranoidHint(procfs, EACCES), "") << level;
  }
  write("sys/kernel/perf_event_paranoid", "3\n");
  write("self/status", "Name:\ttensortierd\nCapEff:\t000000c000880003\nCapBnd:\t0000000000200000\n");
  EXPECT_NE(sys::perf::paranoidHint(procfs, EACCES), "");  // CAP_SYS_ADMIN bounded, not effective
  write("self/status", "Name:\ttensortierd\nCapEff:\t000001ffffffffff\n");
  EXPECT_EQ(sys::perf::paranoidHint(procfs, EACCES), "");  // has it: refused for another reason
  fs::remove(root_ / "sys/kernel/perf_event_paranoid");
  EXPECT_EQ(sys::perf::paranoidHint(procfs, EACCES), "");
}

// IBS counts in units of 16 ops; perf_ibs_check_period refuses any other period (and under
// ibs_op's min_period 0x90) on PERF_EVENT_IOC_PERIOD.
TEST(PmuPlan, IbsPlanStatesItsPeriodGranularity) {
  PmuPlanInput in;
  in.corePmu = "amd64_fam19h_zen3";
  in.ibsOpType = 11;
  in.period = 100;  // the configured floor of initial_period
  auto plan = planPmuEvents(in);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->periodGranularity, 16U);
  EXPECT_EQ(plan->minPeriod, 0x90U);
  EXPECT_EQ(plan->events[0].sample_period, 0x90U);
  in.period = 10007;
  plan = planPmuEvents(in);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->events[0].sample_period, 10000U);
}

// Before Linux 6.1 the IBS driver gives its samples no data address, though the event opens: the
// plan is refused with the reason instead of a source that looks available and never sees a page.
// An unknown or newer kernel plans as before.
TEST(PmuPlan, IbsIsRefusedOnKernelsWhoseIbsSamplesCarryNoAddress) {
  PmuPlanInput in;
  in.corePmu = "amd64_fam19h_zen3";
  in.ibsOpType = 11;
  in.kernelRelease = "5.15.0-91-generic";
  auto old = planPmuEvents(in);
  ASSERT_FALSE(old.ok());
  EXPECT_NE(old.error().message().find("6.1"), std::string::npos) << old.error().message();
  for (const char* release : {"6.1.0-13-amd64", "6.12.9", "", "unknown"}) {
    in.kernelRelease = release;
    EXPECT_TRUE(planPmuEvents(in).ok()) << release;
  }
  EXPECT_EQ(kernelVersionOf("6.10.0-rc1"), (std::pair{6, 10}));
  EXPECT_FALSE(kernelVersionOf("six").has_value());
}

// The in-kernel path opens its events with only the fields its program reads: the address, and
// data_src where the plan records it. The TID, weight and physical address the ring path decodes
// would be prepared by the kernel for every sample and never read.
TEST(AggregatedSampleType, KeepsOnlyTheFieldsTheProgramReads) {
  PmuPlanInput in;
  in.corePmu = "amd64_fam19h_zen3";
  in.ibsOpType = 11;
  in.period = 0x1000;
  in.physicalAddresses = true;
  auto plan = planPmuEvents(in);
  ASSERT_TRUE(plan.ok());
  const uint64_t configured = plan->events[0].sample_type;
  ASSERT_NE(configured & PERF_SAMPLE_TID, 0U);
  ASSERT_NE(configured & PERF_SAMPLE_PHYS_ADDR, 0U);
  EXPECT_EQ(aggregatedSampleType(configured), uint64_t{PERF_SAMPLE_ADDR | PERF_SAMPLE_DATA_SRC});

  const SamplingOptions sw = softwareFaultOptions(1, Aggregation::InKernel);
  ASSERT_EQ(sw.events.size(), 1U);
  ASSERT_NE(sw.events[0].sample_type & PERF_SAMPLE_TID, 0U);  // the ring path attributes by TID
  EXPECT_EQ(aggregatedSampleType(sw.events[0].sample_type), uint64_t{PERF_SAMPLE_ADDR});
  // Nothing the event did not ask for is added.
  EXPECT_EQ(aggregatedSampleType(PERF_SAMPLE_TID | PERF_SAMPLE_TIME), 0U);
}

perf_event_attr sampledAttr(uint64_t period) {
  perf_event_attr a{};
  a.size = sizeof a;
  a.type = 11;
  a.sample_period = period;
  a.sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_ADDR;
  return a;
}

// The source's bounds and every period it sets are multiples of the granularity. Not opened:
// the recorded period is what PERF_EVENT_IOC_PERIOD would be given.
TEST(SamplingSourcePeriod, BoundsAndLiveLimitsKeepTheGranularity) {
  SamplingOptions o;
  o.name = "pmu";
  o.events = {sampledAttr(10000)};
  o.minPeriod = 1009;  // the default pmu.min_period: not a multiple of 16
  o.maxPeriod = 1000003;
  o.periodGranularity = 16;
  o.periodMinimum = 0x90;
  SamplingSource s(o, sys::Fs("/nonexistent"));
  EXPECT_EQ(s.period(), 10000U);
  EXPECT_EQ(s.lowestPeriod(), 1024U);
  SamplingLimits l;
  l.minPeriod = 20001;  // pushes the period up to a bound that is not a multiple
  l.maxPeriod = 1000003;
  ASSERT_TRUE(s.setSamplingLimits(l).ok());
  EXPECT_EQ(s.period(), 20016U);
  l.minPeriod = 1;  // under the PMU's minimum
  l.maxPeriod = 3001;
  ASSERT_TRUE(s.setSamplingLimits(l).ok());
  EXPECT_EQ(s.period(), 2992U);  // the maximum rounded down
  EXPECT_EQ(s.lowestPeriod(), 0x90U);
  EXPECT_EQ(s.counters().period, s.period());
}

// A fake kernel: records every open; refuses what `refuse` says.
struct FakeKernel {
  struct Call {
    perf_event_attr attr;
    int cpu;
    int groupFd;
    bool isLeader;
  };
  std::vector<Call> calls;
  std::function<std::optional<Error>(const perf_event_attr&, int groupFd)> refuse;
  int nextFd = 100;

  EventOpener<int> opener() {
    return {[this](const perf_event_attr& a, int cpu, int groupFd, bool isLeader) -> Result<int> {
              calls.push_back({a, cpu, groupFd, isLeader});
              if (refuse)
                if (auto e = refuse(a, groupFd)) return *e;
              return nextFd++;
            },
            [](const int& fd) { return fd; }};
  }
};

perf_event_attr loadAttr(bool phys) {
  perf_event_attr a{};
  a.size = sizeof a;
  a.type = PERF_TYPE_RAW;
  a.config = 0x1cd;
  a.sample_period = 10007;
  a.sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_ADDR | PERF_SAMPLE_DATA_SRC | (phys ? PERF_SAMPLE_PHYS_ADDR : 0);
  return a;
}

TEST(EventOpen, LeaderIsOpenedFirstAndLeadsTheSamplingEvent) {
  FakeKernel k;
  // As intel_pmu_hw_config: the load event without a leader is ENODATA.
  k.refuse = [](const perf_event_attr& a, int groupFd) -> std::optional<Error> {
    if (a.config == 0x1cd && groupFd < 0) return systemError(ENODATA, "perf_event_open");
    return std::nullopt;
  };
  perf_event_attr lead{};
  lead.type = PERF_TYPE_RAW;
  lead.config = 0x8203;
  perf_event_attr a = loadAttr(false);
  std::optional<Error> refused;
  auto r = openOnCpu<int>(a, &lead, 3, k.opener(), refused);
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_EQ(k.calls.size(), 2U);
  EXPECT_EQ(k.calls[0].attr.config, 0x8203U);
  EXPECT_TRUE(k.calls[0].isLeader);
  EXPECT_EQ(k.calls[0].groupFd, -1);
  EXPECT_EQ(k.calls[0].cpu, 3);
  EXPECT_EQ(k.calls[1].attr.config, 0x1cdU);
  EXPECT_FALSE(k.calls[1].isLeader);
  EXPECT_EQ(k.calls[1].groupFd, 100);  // the leader's fd
  EXPECT_EQ(k.calls[1].cpu, 3);
  ASSERT_TRUE(r->leader.has_value());
  EXPECT_EQ(*r->leader, 100);
  EXPECT_EQ(r->event, 101);
  EXPECT_FALSE(refused.has_value());

  // Without the leader the fake kernel refuses, as the real one does on those CPUs.
  perf_event_attr alone = loadAttr(false);
  EXPECT_FALSE(openOnCpu<int>(alone, nullptr, 3, k.opener(), refused).ok());
}

TEST(EventOpen, LeaderFailureOpensNothingElse) {
  FakeKernel k;
  k.refuse = [](const perf_event_attr& a, int) -> std::optional<Error> {
    if (a.config == 0x8203) return systemError(ENOENT, "perf_event_open");
    return std::nullopt;
  };
  perf_event_attr lead{};
  lead.config = 0x8203;
  perf_event_attr a = loadAttr(false);
  std::optional<Error> refused;
  auto r = openOnCpu<int>(a, &lead, 0, k.opener(), refused);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("group leader"), std::string::npos) << r.error().message();
  EXPECT_EQ(k.calls.size(), 1U);
}

TEST(EventOpen, PhysAddrRefusedIsRetriedWithoutIt) {
  FakeKernel k;
  k.refuse = [](const perf_event_attr& a, int) -> std::optional<Error> {
    if (a.sample_type & PERF_SAMPLE_PHYS_ADDR) return systemError(EACCES, "perf_event_open");
    return std::nullopt;
  };
  perf_event_attr a = loadAttr(true);
  std::optional<Error> refused;
  auto r = openOnCpu<int>(a, nullptr, 0, k.opener(), refused);
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_EQ(k.calls.size(), 2U);
  EXPECT_NE(k.calls[0].attr.sample_type & PERF_SAMPLE_PHYS_ADDR, 0U);
  EXPECT_EQ(k.calls[1].attr.sample_type & PERF_SAMPLE_PHYS_ADDR, 0U);
  EXPECT_EQ(k.calls[1].attr.sample_type, loadAttr(false).sample_type);  // nothing else dropped
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->code, EACCES);
  // The caller's attr no longer asks for it: the next CPU opens at once.
  EXPECT_EQ(a.sample_type & PERF_SAMPLE_PHYS_ADDR, 0U);
  refused.reset();
  ASSERT_TRUE(openOnCpu<int>(a, nullptr, 1, k.opener(), refused).ok());
  EXPECT_EQ(k.calls.size(), 3U);
  EXPECT_FALSE(refused.has_value());
}

TEST(EventOpen, RefusalForAnotherReasonIsNotBlamedOnPhysAddr) {
  FakeKernel k;
  k.refuse = [](const perf_event_attr&, int) -> std::optional<Error> { return systemError(ENOENT, "no such PMU"); };
  perf_event_attr a = loadAttr(true);
  std::optional<Error> refused;
  auto r = openOnCpu<int>(a, nullptr, 0, k.opener(), refused);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ENOENT);
  EXPECT_FALSE(refused.has_value());
  EXPECT_NE(a.sample_type & PERF_SAMPLE_PHYS_ADDR, 0U);  // still asked for
  // An event without PHYS_ADDR is not retried.
  perf_event_attr plain = loadAttr(false);
  k.calls.clear();
  EXPECT_FALSE(openOnCpu<int>(plain, nullptr, 0, k.opener(), refused).ok());
  EXPECT_EQ(k.calls.size(), 1U);
}

// IBS without swfilt samples kernel mode; the user-ring reader drops kernel data addresses.
TEST(KernelAddress, TopBitMarksTheKernelHalf) {
  EXPECT_TRUE(isKernelAddress(0xffff888000001000ULL));  // direct map
  EXPECT_TRUE(isKernelAddress(0xffffffff81000000ULL));  // kernel text
  EXPECT_TRUE(isKernelAddress(0x8000000000000000ULL));
  EXPECT_FALSE(isKernelAddress(0x00007fffffffe000ULL));  // top of the user stack
  EXPECT_FALSE(isKernelAddress(0x0000555555554000ULL));
  EXPECT_FALSE(isKernelAddress(0x7fffffffffffffffULL));
}

// On hybrid Intel parts the P-core PMU's events are refused on the E-cores (ENOENT: the CPU is not
// in the PMU's supported_cpus): the event opens on the CPUs its PMU covers, the others are listed,
// and only a refusal of another kind, or of every CPU, fails the open.
TEST(EventOpen, CpusTheEventsPmuDoesNotCoverAreSkippedAndListed) {
  std::vector<int> asked;
  int nextFd = 100;
  auto refusing = [&](std::function<std::optional<Error>(int cpu)> refuse) {
    return EventOpener<int>{[&, refuse](const perf_event_attr&, int cpu, int, bool) -> Result<int> {
                              asked.push_back(cpu);
                              if (auto e = refuse(cpu)) return *e;
                              return nextFd++;
                            },
                            [](const int& fd) { return fd; }};
  };
  const std::vector<int> cpus = {0, 1, 2, 3, 4, 5, 6, 7};
  perf_event_attr a = loadAttr(false);
  std::optional<Error> refused;
  auto eCoresRefused = refusing([](int cpu) -> std::optional<Error> {
    if (cpu >= 4) return systemError(ENOENT, "perf_event_open");
    return std::nullopt;
  });
  auto r = openOnCpus<int>(a, nullptr, cpus, eCoresRefused, refused);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->cpus, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(r->opened.size(), 4U);
  EXPECT_EQ(r->skipped, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(asked, cpus) << "every CPU is tried";

  auto otherRefusal = refusing([](int cpu) -> std::optional<Error> {
    if (cpu == 5) return systemError(EBUSY, "perf_event_open");
    return std::nullopt;
  });
  auto busy = openOnCpus<int>(a, nullptr, cpus, otherRefusal, refused);
  ASSERT_FALSE(busy.ok());
  EXPECT_EQ(busy.error().code, EBUSY);
  EXPECT_NE(busy.error().message().find("cpu 5"), std::string::npos) << busy.error().message();

  auto noneCovered = refusing([](int) -> std::optional<Error> { return systemError(ENODEV, "perf_event_open"); });
  auto none = openOnCpus<int>(a, nullptr, cpus, noneCovered, refused);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().code, ENODEV);
}

}  // namespace
}  // namespace tt::sources
