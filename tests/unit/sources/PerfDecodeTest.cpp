// Decoding perf records (sources/PerfDecode) from recorded streams, and data_src -> tier.
#include <gtest/gtest.h>
#include <linux/perf_event.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>

#include "PerfStreamFixtures.h"
#include "sources/PerfDecode.h"
#include "support/TestSupport.h"

namespace tt::sources {
namespace {

using namespace datasrc;

// ---- The generator of the PMU streams (see PerfStreamFixtures.h) --------------------------------

class RecordWriter {
 public:
  explicit RecordWriter(uint32_t type, uint16_t misc = PERF_RECORD_MISC_USER) : type_(type), misc_(misc) {}
  RecordWriter& u64(uint64_t v) { return put(&v, 8); }
  RecordWriter& u32(uint32_t v) { return put(&v, 4); }
  std::vector<uint8_t> done() const {
    perf_event_header h{type_, misc_, static_cast<uint16_t>(sizeof(perf_event_header) + body_.size())};
    std::vector<uint8_t> out(sizeof h);
    std::memcpy(out.data(), &h, sizeof h);
    out.insert(out.end(), body_.begin(), body_.end());
    return out;
  }

 private:
  RecordWriter& put(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    body_.insert(body_.end(), b, b + n);
    return *this;
  }
  uint32_t type_;
  uint16_t misc_;
  std::vector<uint8_t> body_;
};

// Intel PEBS load-latency + store samples as `perf record -e <ldlat event> -d -W --data-src`
// lays them out: sample_type IP|TID|TIME|ADDR|CPU|PERIOD|WEIGHT|DATA_SRC, sample_id_all trailer
// (TID|TIME|CPU) on non-sample records. Lost and throttle records included.
test::PerfStream pebsStream() {
  test::PerfStream s;
  s.sampleType = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_ADDR | PERF_SAMPLE_CPU |
                 PERF_SAMPLE_PERIOD | PERF_SAMPLE_WEIGHT | PERF_SAMPLE_DATA_SRC;
  auto sample = [&](uint32_t pid, uint64_t addr, uint64_t weight, uint64_t src) {
    s.records.push_back(RecordWriter(PERF_RECORD_SAMPLE)
                            .u64(0x401234).u32(pid).u32(pid + 1).u64(1000 + s.records.size()).u64(addr)
                            .u32(1).u32(0).u64(10007).u64(weight).u64(src)
                            .done());
  };
  sample(4242, 0x7f0000001010, 320, make(kOpLoad, kLvlHit | kLvlLocRam, kLvlNumPmem, false));  // Optane
  sample(4242, 0x7f0000002020, 95, make(kOpLoad, kLvlHit | kLvlLocRam, kLvlNumRam, false));    // DRAM
  sample(4242, 0x7f0000003030, 12, make(kOpLoad, kLvlHit | kLvlL2, kLvlNumL2, false));          // L2
  sample(4242, 0x7f0000004000, 0, make(kOpStore, kLvlNa, kLvlNumNa, false));                    // store
  sample(4343, 0x7f0000005000, 610, make(kOpLoad, kLvlMiss | kLvlRemRam1, kLvlNumCxl, true));   // CXL
  // sample_id_all trailer: pid, tid, time, cpu, res
  s.records.push_back(RecordWriter(PERF_RECORD_LOST, 0).u64(7).u64(13).u32(0).u32(0).u64(2000).u32(1).u32(0).done());
  s.records.push_back(RecordWriter(PERF_RECORD_THROTTLE, 0).u64(3000).u64(7).u64(7).u32(0).u32(0).u64(3000).u32(1).u32(0).done());
  s.records.push_back(RecordWriter(PERF_RECORD_UNTHROTTLE, 0).u64(4000).u64(7).u64(7).u32(0).u32(0).u64(4000).u32(1).u32(0).done());
  return s;
}

// AMD IBS Op samples as the ibs_op PMU delivers them to tensortier (TID|ADDR|WEIGHT|DATA_SRC|
// PHYS_ADDR); legacy mem_lvl only (no mem_lvl_num), as older kernels' IBS decoding sets.
test::PerfStream ibsStream() {
  test::PerfStream s;
  s.sampleType = PERF_SAMPLE_TID | PERF_SAMPLE_ADDR | PERF_SAMPLE_WEIGHT | PERF_SAMPLE_DATA_SRC | PERF_SAMPLE_PHYS_ADDR;
  auto sample = [&](uint64_t addr, uint64_t weight, uint64_t src, uint64_t phys) {
    s.records.push_back(RecordWriter(PERF_RECORD_SAMPLE).u32(777).u32(778).u64(addr).u64(weight).u64(src).u64(phys).done());
  };
  sample(0x555500000040, 210, make(kOpLoad, kLvlHit | kLvlRemRam1, 0, false), 0x1234567040);
  sample(0x555500001080, 4, make(kOpLoad, kLvlHit | kLvlL1, 0, false), 0x1234568080);
  sample(0x555500002000, 0, make(kOpStore, kLvlNa, 0, false), 0x1234569000);
  sample(0, 0, make(kOpLoad, kLvlNa, 0, false), 0);  // an op without a data address
  s.records.push_back(RecordWriter(PERF_RECORD_LOST, 0).u64(9).u64(2).done());
  return s;
}

void checkOrWrite(const test::PerfStream& s, const std::string& name, const std::string& comment) {
  const std::string path = test::fixture("perf/" + name);
  const std::string text = test::formatPerfStream(s, comment);
  if (const char* w = std::getenv("TT_WRITE_PERF_FIXTURES"); w != nullptr && std::string(w) == "1") {
    std::ofstream(path) << text;
  }
  EXPECT_EQ(test::readFileOrFail(path), text) << path << " differs from its generator; regenerate (see PerfStreamFixtures.h)";
}

TEST(PerfFixtures, FixturesMatchGenerator) {
  checkOrWrite(pebsStream(), "pebs_ldlat.hex",
               "Intel PEBS load-latency/store stream, written by PerfDecodeTest.cpp pebsStream()\n"
               "5 samples (PMEM, DRAM, L2, store, remote CXL), 1 LOST (13), THROTTLE, UNTHROTTLE");
  checkOrWrite(ibsStream(), "ibs_op.hex",
               "AMD IBS Op stream, written by PerfDecodeTest.cpp ibsStream()\n"
               "4 samples (remote RAM, L1, store, no address), 1 LOST (2)");
}

// ---- Decoding the checked-in streams -----------------------------------------------------------

std::vector<PerfRecord> decodeAll(const test::PerfStream& s) {
  std::vector<PerfRecord> out;
  for (const auto& r : s.records) {
    auto rec = decodeRecord(r, s.sampleType);
    EXPECT_TRUE(rec.ok()) << rec.error().message();
    if (rec) out.push_back(*rec);
  }
  return out;
}

TEST(PerfDecode, PebsStreamFromFixture) {
  const auto recs = decodeAll(test::readPerfStream(test::fixture("perf/pebs_ldlat.hex")));
  ASSERT_EQ(recs.size(), 8U);
  EXPECT_EQ(recs[0].type, RecordType::Sample);
  EXPECT_EQ(recs[0].sample.pid, 4242U);
  EXPECT_EQ(recs[0].sample.tid, 4243U);
  EXPECT_EQ(recs[0].sample.addr, 0x7f0000001010U);
  EXPECT_EQ(recs[0].sample.weight, 320U);
  EXPECT_EQ(recs[0].sample.period, 10007U);
  EXPECT_EQ(recs[0].sample.cpu, 1U);
  EXPECT_EQ(servedByFromDataSrc(recs[0].sample.dataSrc), ServedBy::SlowTier);
  EXPECT_EQ(servedByFromDataSrc(recs[1].sample.dataSrc), ServedBy::FastTier);
  EXPECT_EQ(servedByFromDataSrc(recs[2].sample.dataSrc), ServedBy::Cache);
  EXPECT_EQ(accessKindFromDataSrc(recs[2].sample.dataSrc), AccessKind::Load);
  EXPECT_EQ(accessKindFromDataSrc(recs[3].sample.dataSrc), AccessKind::Store);
  EXPECT_EQ(servedByFromDataSrc(recs[3].sample.dataSrc), ServedBy::Unknown);
  EXPECT_EQ(servedByFromDataSrc(recs[4].sample.dataSrc), ServedBy::SlowTier);
  EXPECT_EQ(recs[4].sample.pid, 4343U);
  EXPECT_EQ(recs[5].type, RecordType::Lost);
  EXPECT_EQ(recs[5].lost, 13U);
  EXPECT_EQ(recs[6].type, RecordType::Throttle);
  EXPECT_EQ(recs[6].time, 3000U);
  EXPECT_EQ(recs[7].type, RecordType::Unthrottle);
}

TEST(PerfDecode, IbsStreamFromFixture) {
  const auto recs = decodeAll(test::readPerfStream(test::fixture("perf/ibs_op.hex")));
  ASSERT_EQ(recs.size(), 5U);
  EXPECT_EQ(recs[0].sample.pid, 777U);
  EXPECT_EQ(recs[0].sample.addr, 0x555500000040U);
  EXPECT_EQ(recs[0].sample.physAddr, 0x1234567040U);
  EXPECT_EQ(servedByFromDataSrc(recs[0].sample.dataSrc), ServedBy::RemoteRam);  // legacy REM_RAM1
  EXPECT_EQ(servedByFromDataSrc(recs[1].sample.dataSrc), ServedBy::Cache);
  EXPECT_EQ(accessKindFromDataSrc(recs[2].sample.dataSrc), AccessKind::Store);
  EXPECT_EQ(recs[3].sample.addr, 0U);
  EXPECT_EQ(recs[4].type, RecordType::Lost);
  EXPECT_EQ(recs[4].lost, 2U);
}

TEST(PerfDecode, RecordedSoftwareFaultStream) {
  const auto stream = test::readPerfStream(test::fixture("perf/sw_page_faults.hex"));
  EXPECT_EQ(stream.sampleType, uint64_t{PERF_SAMPLE_TID | PERF_SAMPLE_ADDR});
  const auto recs = decodeAll(stream);
  size_t samples = 0;
  std::set<uint64_t> pages;
  for (const auto& r : recs) {
    if (r.type != RecordType::Sample) continue;
    ++samples;
    EXPECT_NE(r.sample.pid, 0U);
    EXPECT_NE(r.sample.addr, 0U);
    pages.insert(r.sample.addr >> 12);
  }
  EXPECT_GT(samples, 0U);
  // The recorded child touched 16 fresh consecutive pages: they must appear as a run.
  size_t run = 0, longest = 0;
  uint64_t prev = 0;
  for (uint64_t p : pages) {
    run = (run > 0 && p == prev + 1) ? run + 1 : 1;
    longest = std::max(longest, run);
    prev = p;
  }
  EXPECT_GE(longest, 16U);
}

TEST(PerfDecode, RejectsTruncatedAndMismatchedRecords) {
  auto s = pebsStream();
  auto rec = s.records[0];
  rec.resize(rec.size() - 8);  // header says more than there is
  EXPECT_FALSE(decodeRecord(rec, s.sampleType).ok());
  // Header consistent but body shorter than the sample_type needs.
  std::vector<uint8_t> shortRec = RecordWriter(PERF_RECORD_SAMPLE).u64(1).done();
  auto r = decodeRecord(shortRec, s.sampleType);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().context.find("truncated"), std::string::npos);
  EXPECT_FALSE(decodeRecord(std::vector<uint8_t>(4), s.sampleType).ok());
  EXPECT_FALSE(decodeRecord(s.records[0], s.sampleType | PERF_SAMPLE_CALLCHAIN).ok());
}

// PEBS drivers report samples they had to drop in PERF_RECORD_LOST_SAMPLES (lost, then sample_id
// fields when sample_id_all is set): lost samples, told apart from a full ring's lost records
// (which on an in-kernel path event's control ring are throttle records, RingRecordsTest).
TEST(PerfDecode, LostSamplesRecordsCountAsLost) {
  // Header, lost = 42, then a sample_id field (7).
  std::vector<uint8_t> whole(24, 0);
  const perf_event_header head{PERF_RECORD_LOST_SAMPLES, 0, 24};
  const uint64_t fields[2] = {42, 7};
  std::memcpy(whole.data(), &head, sizeof head);
  std::memcpy(whole.data() + sizeof head, fields, sizeof fields);
  auto rec = decodeRecord(whole, PERF_SAMPLE_ADDR);
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->type, RecordType::LostSamples);
  EXPECT_EQ(rec->lost, 42U);
  // Its header cut to 4 bytes of body: too short for the count.
  std::vector<uint8_t> cut(whole.begin(), whole.begin() + 12);
  perf_event_header h{PERF_RECORD_LOST_SAMPLES, 0, 12};
  std::memcpy(cut.data(), &h, sizeof h);
  EXPECT_FALSE(decodeRecord(cut, PERF_SAMPLE_ADDR).ok());
}

TEST(PerfDecode, WeightStructUsesVar1) {
  const uint64_t st = PERF_SAMPLE_ADDR | PERF_SAMPLE_WEIGHT_STRUCT;
  const uint64_t weight = (uint64_t{0xbeef} << 32) | 77;  // var2/var3 in the high half
  auto rec = decodeRecord(RecordWriter(PERF_RECORD_SAMPLE).u64(0x1000).u64(weight).done(), st);
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->sample.weight, 77U);
}

struct DataSrcCase {
  uint64_t src;
  ServedBy expected;
};

class DataSrcTier : public ::testing::TestWithParam<DataSrcCase> {};

TEST_P(DataSrcTier, Decodes) { EXPECT_EQ(servedByFromDataSrc(GetParam().src), GetParam().expected); }

INSTANTIATE_TEST_SUITE_P(
    Levels, DataSrcTier,
    ::testing::Values(DataSrcCase{make(kOpLoad, kLvlHit, kLvlNumPmem, false), ServedBy::SlowTier},
                      DataSrcCase{make(kOpLoad, kLvlHit, kLvlNumCxl, false), ServedBy::SlowTier},
                      DataSrcCase{make(kOpLoad, kLvlHit, kLvlNumRam, false), ServedBy::FastTier},
                      DataSrcCase{make(kOpLoad, kLvlHit, kLvlNumRam, true), ServedBy::RemoteRam},
                      DataSrcCase{make(kOpLoad, kLvlHit | kLvlLocRam, 0, false), ServedBy::FastTier},
                      DataSrcCase{make(kOpLoad, kLvlHit | kLvlRemRam2, 0, false), ServedBy::RemoteRam},
                      DataSrcCase{make(kOpLoad, kLvlHit | kLvlRemRam1, 0, false), ServedBy::RemoteRam},
                      DataSrcCase{make(kOpLoad, kLvlHit | kLvlLfb, kLvlNumLfb, false), ServedBy::Cache},
                      DataSrcCase{make(kOpLoad, kLvlHit, kLvlNumAnyCache, false), ServedBy::Cache},
                      DataSrcCase{make(kOpLoad, kLvlHit | kLvlRemCce1, 0, false), ServedBy::Cache},
                      DataSrcCase{make(kOpLoad, kLvlNa, kLvlNumNa, false), ServedBy::Unknown},
                      // The kernel's PEBS encodings (arch/x86/events/intel/ds.c): pre-Skylake 0x0b,
                      // a remote-DRAM load, is REM_RAM1 with level number L3; 0x00, "L3 miss,
                      // unknown source", is MISS with L3; precise_datala_hsw's stores are L1 with
                      // HIT or MISS and no level number.
                      DataSrcCase{make(kOpLoad, kLvlHit | kLvlRemRam1, kLvlNumL3, true), ServedBy::RemoteRam},
                      DataSrcCase{make(kOpLoad, kLvlHit | kLvlMiss, kLvlNumL3, false), ServedBy::Unknown},
                      DataSrcCase{make(kOpStore, kLvlL1 | kLvlMiss, 0, false), ServedBy::Unknown},
                      DataSrcCase{make(kOpStore, kLvlL1 | kLvlHit, 0, false), ServedBy::Cache},
                      DataSrcCase{make(kOpLoad, kLvlHit | kLvlL3, kLvlNumL3, false), ServedBy::Cache},
                      DataSrcCase{make(kOpLoad, kLvlIo, kLvlNumIo, false), ServedBy::Unknown}));

// What the kernel records as data_src for a sample its PMU did not classify (PERF_MEM_NA: op, level,
// snoop, lock and TLB "not available"; kernels since 5.x add level number N/A): the in-kernel
// program counts these apart (tt_data_src_na) and they carry no tier.
TEST(PerfDecode, NotAvailableDataSrcIsRecognisedAndHasNoTier) {
  const uint64_t na = 0x05080021;                      // PERF_MEM_NA of 6.1's include/linux/perf_event.h
  const uint64_t naWithLvlNum = na | (kLvlNumNa << kLvlNumShift);  // as 6.18 fills it (read on this host)
  for (uint64_t src : {na, naWithLvlNum}) {
    EXPECT_TRUE(tt_data_src_na(src)) << std::hex << src;
    EXPECT_EQ(servedByFromDataSrc(src), ServedBy::Unknown);
    EXPECT_EQ(accessKindFromDataSrc(src), AccessKind::Access);
  }
  EXPECT_FALSE(tt_data_src_na(make(kOpLoad, kLvlHit | kLvlLocRam, kLvlNumPmem, false)));
  EXPECT_FALSE(tt_data_src_na(make(kOpLoad, kLvlNa, kLvlNumNa, false)));  // a load of unknown level
  EXPECT_FALSE(tt_data_src_na(0));
}

}  // namespace
}  // namespace tt::sources
