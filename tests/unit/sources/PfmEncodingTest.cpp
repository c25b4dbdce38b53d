// libpfm4 encoding of the precise-sampling events for PMU models that are not on this machine,
// and the PMU event plan built from them. libpfm4 only activates detected PMUs; LIBPFM_FORCE_PMU
// activates a named model, and is read once by pfm_initialize(), so each case runs in a forked
// child that forces its model before the first libpfm4 call.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <string>

#include "sources/PmuEvents.h"
#include "support/ChildProcess.h"
#include "sources/SamplingSource.h"
#include "sys/perf/PfmEncoder.h"

namespace tt::sources {
namespace {

// Runs `fn` in a child with LIBPFM_FORCE_PMU=pmu; returns what it wrote (or "child failed").
std::string inChildWithPmu(const std::string& pmu, const std::function<std::string()>& fn) {
  return test::outputOfChild([&] {
    ::setenv("LIBPFM_FORCE_PMU", pmu.c_str(), 1);
    return fn();
  });
}

// The Intel plan libpfm4 gives for skx at period 5003 (call in inChildWithPmu("skx", ...)).
Result<PmuPlan> skxPlan() {
  PmuPlanInput in;
  in.corePmu = "skx";
  in.period = 5003;
  return planPmuEvents(in);
}

std::string encode(const std::string& event) {
  auto a = sys::perf::pfmEncode(event);
  if (!a) return "error: " + a.error().message();
  char buf[128];
  std::snprintf(buf, sizeof buf, "type=%u config=0x%llx config1=0x%llx", a->type,
                static_cast<unsigned long long>(a->config), static_cast<unsigned long long>(a->config1));
  return buf;
}

struct EncodingCase {
  std::string pmu;
  std::string event;
  std::string expected;  // from the Intel SDM event tables: event | umask << 8, ldlat in config1
};

class PfmEncoding : public ::testing::TestWithParam<EncodingCase> {};

TEST_P(PfmEncoding, EncodesForForcedPmu) {
  const auto& c = GetParam();
  EXPECT_EQ(inChildWithPmu(c.pmu, [&] { return encode(c.event); }), c.expected);
}

// MEM_TRANS_RETIRED.LOAD_LATENCY is event 0xCD umask 0x01, MEM_INST_RETIRED.ALL_STORES (and
// MEM_UOPS_RETIRED.ALL_STORES on Haswell) event 0xD0 umask 0x82; PERF_TYPE_RAW is 4.
INSTANTIATE_TEST_SUITE_P(
    IntelModels, PfmEncoding,
    ::testing::Values(
        EncodingCase{"skx", "skx::MEM_TRANS_RETIRED:LOAD_LATENCY:ldlat=64", "type=4 config=0x1cd config1=0x40"},
        EncodingCase{"skx", "skx::MEM_INST_RETIRED:ALL_STORES", "type=4 config=0x82d0 config1=0x0"},
        EncodingCase{"icl", "icl::MEM_TRANS_RETIRED:LOAD_LATENCY:ldlat=128", "type=4 config=0x1cd config1=0x80"},
        EncodingCase{"icl", "icl::MEM_INST_RETIRED:ALL_STORES", "type=4 config=0x82d0 config1=0x0"},
        EncodingCase{"spr", "spr::MEM_TRANS_RETIRED:LOAD_LATENCY:ldlat=64", "type=4 config=0x1cd config1=0x40"},
        EncodingCase{"hsw", "hsw::MEM_UOPS_RETIRED:ALL_STORES", "type=4 config=0x82d0 config1=0x0"},
        EncodingCase{"amd64_fam17h_zen2", "amd64_fam17h_zen2::RETIRED_INSTRUCTIONS", "type=4 config=0xc0 config1=0x0"}));

TEST(PfmEncoding, UnknownEventIsAClearError) {
  const std::string out = inChildWithPmu("skx", [] { return encode("skx::NO_SUCH_EVENT"); });
  EXPECT_EQ(out.rfind("error: libpfm4 encoding of skx::NO_SUCH_EVENT", 0), 0U) << out;
}

// Intel's large PEBS would hand the program one record per PEBS buffer drain and write the rest
// into the ring (intel_pmu_hw_config turns it on for a precise event with a fixed period and no
// per-sample wakeup): the in-kernel path asks for a wakeup per sample, which keeps it off. The
// ring path reads every record from the ring either way and keeps the plan's attributes.
TEST(PmuPlan, InKernelIntelEventsAskForAWakeupPerSampleSoLargePebsStaysOff) {
  const std::string out = inChildWithPmu("skx", [] {
    auto plan = skxPlan();
    if (!plan) return "error: " + plan.error().message();
    // The kernel's condition for auto-reload, and with it large PEBS.
    auto largePebs = [](const perf_event_attr& a) { return a.precise_ip > 0 && !(a.freq || (a.wakeup_events > 0 && !a.watermark)); };
    std::string s;
    for (const perf_event_attr& configured : plan->events) {
      const perf_event_attr a = aggregatedAttr(configured);
      s += std::string(largePebs(configured) ? "ring:large" : "ring:-") + (largePebs(a) ? ",in-kernel:large" : ",in-kernel:-");
      if (a.sample_type != aggregatedSampleType(configured.sample_type) || a.sample_period != configured.sample_period ||
          a.precise_ip != configured.precise_ip || a.config != configured.config || a.config1 != configured.config1)
        s += ",changed";
      s += "|";
    }
    return s;
  });
  // Two events (loads, stores), each with large PEBS on the ring path only.
  EXPECT_EQ(out, "ring:large,in-kernel:-|ring:large,in-kernel:-|");
}

TEST(PmuPlan, IntelPlanHasPebsLoadsAndStores) {
  const std::string out = inChildWithPmu("skx", [] {
    auto plan = skxPlan();
    if (!plan) return "error: " + plan.error().message();
    std::string s = plan->description;
    if (plan->kinds.size() != plan->events.size()) return std::string("kinds not parallel to events");
    for (size_t i = 0; i < plan->events.size(); ++i) {
      const auto& a = plan->events[i];
      s += "|" + std::to_string(a.precise_ip) + ":" + std::to_string(a.sample_period) + ":" +
           std::to_string(a.sample_type) + ":" + std::to_string(a.config1) + ":" +
           (plan->kinds[i] == AccessKind::Load ? "load" : plan->kinds[i] == AccessKind::Store ? "store" : "other");
    }
    return s;
  });
  const uint64_t st = PERF_SAMPLE_TID | PERF_SAMPLE_ADDR | PERF_SAMPLE_WEIGHT | PERF_SAMPLE_DATA_SRC;
  EXPECT_EQ(out, "Intel PEBS on skx: skx::MEM_TRANS_RETIRED:LOAD_LATENCY:ldlat=64, skx::MEM_INST_RETIRED:ALL_STORES|2:5003:" +
                     std::to_string(st) + ":64:load|2:5003:" + std::to_string(st) + ":0:store");
}

// Load-latency sampling on PMUs with PMU_FL_MEM_LOADS_AUX (the kernel lists cpu/events/
// mem-loads-aux) needs a group led by mem-loads-aux, or perf_event_open fails with ENODATA
// (intel_pmu_hw_config). The leader is planned for the load event only, from what sysfs says.
struct AuxCase {
  std::string pmu;
  bool sysfsListsAux;
  std::string expected;  // per event: "lead" + type:config:period:sample_type, or "-"
};

class MemLoadsAuxPlan : public ::testing::TestWithParam<AuxCase> {};

TEST_P(MemLoadsAuxPlan, LeaderOnlyWhereTheKernelRequiresIt) {
  const auto& c = GetParam();
  const std::string out = inChildWithPmu(c.pmu, [&] {
    PmuPlanInput in;
    in.corePmu = c.pmu;
    in.memLoadsAux = c.sysfsListsAux;
    auto plan = planPmuEvents(in);
    if (!plan) return "error: " + plan.error().message();
    if (plan->groupLeaders.size() != plan->events.size()) return std::string("leaders not parallel to events");
    std::string s;
    for (size_t i = 0; i < plan->events.size(); ++i) {
      const auto& lead = plan->groupLeaders[i];
      char buf[96];
      if (lead)
        std::snprintf(buf, sizeof buf, "lead %u:0x%llx:%llu:%llu:%s;", lead->type, static_cast<unsigned long long>(lead->config),
                      static_cast<unsigned long long>(lead->sample_period), static_cast<unsigned long long>(lead->sample_type),
                      plan->kinds[i] == AccessKind::Load ? "for-load" : "for-other");
      else
        std::snprintf(buf, sizeof buf, "-;");
      s += buf;
    }
    return s;
  });
  EXPECT_EQ(out, c.expected);
}

// The aux event is event 0x03 umask 0x82 (config 0x8203, perf's MEM_LOADS_AUX), counting only.
INSTANTIATE_TEST_SUITE_P(
    IntelModels, MemLoadsAuxPlan,
    ::testing::Values(AuxCase{"spr", true, "lead 4:0x8203:0:0:for-load;-;"},
                      AuxCase{"spr", false, "-;-;"},  // sysfs decides, as perf does
                      AuxCase{"skx", false, "-;-;"},
                      AuxCase{"icl", false, "-;-;"}));

TEST(PmuPlan, AmdUsesIbsOpTypeFromSysfs) {
  PmuPlanInput in;
  in.corePmu = "amd64_fam19h_zen3";
  in.ibsOpType = 11;
  in.period = 10007;
  in.physicalAddresses = true;
  auto plan = planPmuEvents(in);
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  ASSERT_EQ(plan->events.size(), 1U);
  ASSERT_EQ(plan->kinds.size(), 1U);
  EXPECT_EQ(plan->kinds[0], AccessKind::Access);  // IBS ops are loads or stores; data_src says which
  EXPECT_EQ(plan->events[0].type, 11U);
  EXPECT_EQ(plan->events[0].sample_period % 16, 0U);  // IBS counts in units of 16
  EXPECT_NE(plan->events[0].sample_type & PERF_SAMPLE_PHYS_ADDR, 0U);
}

TEST(PmuPlan, AmdWithoutIbsSaysWhy) {
  PmuPlanInput in;
  in.corePmu = "amd64_fam19h_zen3";
  auto plan = planPmuEvents(in);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.error().context.find("no ibs_op PMU"), std::string::npos) << plan.error().context;
}

TEST(PmuPlan, NoPmuAtAll) {
  EXPECT_FALSE(planPmuEvents(PmuPlanInput{}).ok());
}

}  // namespace
}  // namespace tt::sources
