// The ring path's record handling (sources/RingRecords) fed the checked-in PEBS and IBS streams:
// what evidence and counters each record becomes, and which samples are dropped.
#include "sources/RingRecords.h"

#include <gtest/gtest.h>
#include <linux/perf_event.h>

#include <cstring>

#include "PerfStreamFixtures.h"
#include "sources/SamplingSource.h"
#include "support/TestSupport.h"

namespace tt::sources {
namespace {

std::vector<AccessEvidence> feed(RingRecords& ring, const test::PerfStream& s, AccessKind eventKind, uint64_t period,
                                 SourceCounters& counters) {
  for (const auto& r : s.records) ring.handle(r, s.sampleType, eventKind, period, counters);
  std::vector<AccessEvidence> out;
  (void)ring.flush(out);
  return out;
}

TEST(RingRecords, PebsSamplesBecomeWeightedEvidenceWithTierAndLatency) {
  const auto stream = test::readPerfStream(test::fixture("perf/pebs_ldlat.hex"));
  RingRecords ring("pmu");
  ring.track(4242);  // not 4343: its CXL sample must not appear
  SourceCounters c;
  const auto ev = feed(ring, stream, AccessKind::Load, 100, c);
  ASSERT_EQ(ev.size(), 4U);
  EXPECT_EQ(c.samples, 4U);
  EXPECT_EQ(c.lost, 13U);
  EXPECT_EQ(c.throttled, 1U);
  for (const auto& e : ev) {
    EXPECT_EQ(e.tgid, 4242);
    EXPECT_EQ(e.weight, 100U) << "one sample stands for a period of events";
  }
  EXPECT_EQ(ev[0].page, 0x7f0000001000U);
  EXPECT_EQ(ev[0].servedBy, ServedBy::SlowTier);
  EXPECT_EQ(ev[0].latencyCycles, 320U);
  EXPECT_EQ(ev[1].servedBy, ServedBy::FastTier);
  EXPECT_EQ(ev[2].servedBy, ServedBy::Cache);
  EXPECT_EQ(ev[3].page, 0x7f0000004000U);
  EXPECT_EQ(ev[3].kind, AccessKind::Store) << "data_src's op names the store";
}

// On the in-kernel path an event's ring carries only the kernel's throttle and lost records: a
// sample there went past the program (Intel's large PEBS writes all but the last record of a
// drain straight into the ring) and, without a TID, belongs to nobody. It counts as lost.
TEST(RingRecords, ASampleOnAnInKernelEventsRingCountsAsLost) {
  const auto stream = test::readPerfStream(test::fixture("perf/pebs_ldlat.hex"));
  const uint64_t trimmed = aggregatedSampleType(stream.sampleType);
  ASSERT_EQ(trimmed & PERF_SAMPLE_TID, 0U);
  // A sample as the in-kernel event records it: header, addr, data_src.
  RingRecords ring("pmu");
  ring.track(4242);
  std::vector<uint8_t> record(sizeof(perf_event_header) + 16, 0);
  perf_event_header h{PERF_RECORD_SAMPLE, 0, static_cast<uint16_t>(record.size())};
  std::memcpy(record.data(), &h, sizeof h);
  const uint64_t addr = 0x7f0000001000ULL;
  std::memcpy(record.data() + sizeof h, &addr, sizeof addr);
  SourceCounters c;
  ring.handle(record, trimmed, AccessKind::Load, 100, c);
  std::vector<AccessEvidence> out;
  (void)ring.flush(out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(c.samples, 0U);
  EXPECT_EQ(c.lost, 1U);
}

// An in-kernel path event's control ring is one page, and what fills it is the kernel's THROTTLE
// and UNTHROTTLE records, two per tick while throttled: the LOST record that follows counts lost
// throttle records, not samples (the program took every sample), half of them throttles, and
// tells the period controller the events are throttled. Samples the PMU driver dropped (LOST_SAMPLES) never reached the
// program: lost on either path. On the ring path a LOST record counts lost samples.
TEST(RingRecords, LostRecordsOnAnInKernelEventsRingAreThrottlingNotLostSamples) {
  const auto stream = test::readPerfStream(test::fixture("perf/pebs_ldlat.hex"));
  const uint64_t trimmed = aggregatedSampleType(stream.sampleType);
  auto record = [](uint32_t type, uint64_t first, uint64_t second) {
    std::vector<uint8_t> r(sizeof(perf_event_header) + 16, 0);
    perf_event_header h{type, 0, static_cast<uint16_t>(r.size())};
    std::memcpy(r.data(), &h, sizeof h);
    std::memcpy(r.data() + sizeof h, &first, sizeof first);
    std::memcpy(r.data() + sizeof h + 8, &second, sizeof second);
    return r;
  };
  const auto lost = record(PERF_RECORD_LOST, /*id=*/7, /*lost=*/1800);
  const auto lostSamples = record(PERF_RECORD_LOST_SAMPLES, /*lost=*/42, /*sample_id=*/7);
  RingRecords ring("pmu");
  SourceCounters inKernel;
  ring.handle(lost, trimmed, AccessKind::Load, 100, inKernel);
  EXPECT_EQ(inKernel.lost, 0U);
  EXPECT_EQ(inKernel.throttled, 900U) << "1800 lost THROTTLE/UNTHROTTLE records are 900 throttles";
  ring.handle(record(PERF_RECORD_LOST, 7, 1), trimmed, AccessKind::Load, 100, inKernel);
  EXPECT_EQ(inKernel.throttled, 901U) << "a single lost record still says the event was throttled";
  ring.handle(lostSamples, trimmed, AccessKind::Load, 100, inKernel);
  EXPECT_EQ(inKernel.lost, 42U);
  SourceCounters ringPath;
  ring.handle(lost, stream.sampleType, AccessKind::Load, 100, ringPath);
  ring.handle(lostSamples, stream.sampleType, AccessKind::Load, 100, ringPath);
  EXPECT_EQ(ringPath.lost, 1842U);
  EXPECT_EQ(ringPath.throttled, 0U);
}

// IBS samples loads and stores alike: the op in data_src decides; a sample without a data address
// is dropped. Without swfilt the ibs_op PMU also samples kernel mode, and a kernel address is
// never a page of a tracked process: it is dropped before it is counted.
TEST(RingRecords, DropsSamplesWithoutAddressOrWithAKernelAddress) {
  auto stream = test::readPerfStream(test::fixture("perf/ibs_op.hex"));
  ASSERT_GE(stream.records.size(), 1U);
  // The first sample again with a kernel (direct-map) address: header, pid, tid, then addr.
  std::vector<uint8_t> kernel = stream.records[0];
  const uint64_t kernelAddr = 0xffff888012345040ULL;
  ASSERT_GE(kernel.size(), 24U);
  std::memcpy(kernel.data() + 16, &kernelAddr, sizeof kernelAddr);
  stream.records.push_back(kernel);

  RingRecords ring("pmu");
  ring.track(777);
  SourceCounters c;
  const auto ev = feed(ring, stream, AccessKind::Access, 1, c);
  EXPECT_EQ(c.samples, 3U) << "neither the address-less nor the kernel-address sample counts";
  EXPECT_EQ(c.lost, 2U);
  ASSERT_EQ(ev.size(), 3U);
  for (const auto& e : ev) EXPECT_LT(e.page, 0x800000000000ULL) << std::hex << e.page;
  EXPECT_EQ(ev[0].page, 0x555500000000U);
  EXPECT_EQ(ev[0].kind, AccessKind::Load);
  EXPECT_EQ(ev[0].servedBy, ServedBy::RemoteRam);
  EXPECT_EQ(ev[2].kind, AccessKind::Store);
}

TEST(RingRecords, UntrackedProcessesAndUndecodableRecordsLeaveNothing) {
  const auto stream = test::readPerfStream(test::fixture("perf/ibs_op.hex"));
  RingRecords ring("pmu");
  ring.track(777);
  ring.untrack(777);
  SourceCounters c;
  EXPECT_TRUE(feed(ring, stream, AccessKind::Access, 1, c).empty());
  EXPECT_EQ(c.samples, 0U);
  EXPECT_EQ(c.lost, 2U) << "lost records count whoever was tracked";
  ring.track(777);
  std::vector<uint8_t> truncated = stream.records[0];
  truncated.resize(truncated.size() - 4);
  SourceCounters d;
  ring.handle(truncated, stream.sampleType, AccessKind::Access, 1, d);
  std::vector<AccessEvidence> out;
  EXPECT_EQ(ring.flush(out), 0U);
  EXPECT_EQ(d.samples, 0U);
}

}  // namespace
}  // namespace tt::sources
