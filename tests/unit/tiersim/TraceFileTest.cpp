// The trace file format (proto/tensortier/v1/trace.proto): round trip and bad input.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include <google/protobuf/io/coded_stream.h>

#include "Trace.h"
#include "trace/TraceFile.h"
#include "traces/ModelTraces.h"

namespace tt::tiersim {
namespace {

class TempFile {
 public:
  TempFile() {
    char name[] = "/tmp/tiersim-test-XXXXXX";
    const int fd = mkstemp(name);
    EXPECT_GE(fd, 0);
    if (fd >= 0) close(fd);
    path_ = name;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The whole file.
std::string readBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  std::string bytes(static_cast<size_t>(in.tellg()), '\0');
  in.seekg(0);
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return bytes;
}

TEST(TiersimTraceFile, GeneratedTraceRoundTrips) {
  ModelTraceOptions options;
  options.steps = 2;
  options.scaleDivisor = 64;
  auto trace = generateModelTrace("bert-base", options);
  ASSERT_TRUE(trace.ok());
  TempFile file;
  auto written = writeTraceFile(*trace, file.path());
  ASSERT_TRUE(written.ok()) << written.error().message();
  ReadTraceStats stats;
  auto read = readTraceFile(file.path(), &stats);
  ASSERT_TRUE(read.ok()) << read.error().message();
  EXPECT_EQ(stats.droppedAccesses, 0U);
  EXPECT_EQ(read->name, trace->name);
  EXPECT_EQ(read->description, trace->description);
  EXPECT_EQ(read->scaleDivisor, trace->scaleDivisor);
  EXPECT_EQ(read->samplePeriod, trace->samplePeriod);
  EXPECT_EQ(read->computeOnlyTime, trace->computeOnlyTime);
  EXPECT_EQ(read->totalPages, trace->totalPages);
  ASSERT_EQ(read->regions.size(), trace->regions.size());
  for (size_t i = 0; i < trace->regions.size(); ++i) {
    EXPECT_EQ(read->regions[i].id, trace->regions[i].id);
    EXPECT_EQ(read->regions[i].firstPage, trace->regions[i].firstPage);
    EXPECT_EQ(read->regions[i].pages, trace->regions[i].pages);
    EXPECT_EQ(read->regions[i].kind, trace->regions[i].kind);
    EXPECT_EQ(read->regions[i].name, trace->regions[i].name);
  }
  ASSERT_EQ(read->accesses.size(), trace->accesses.size());
  for (size_t i = 0; i < trace->accesses.size(); ++i) {
    const auto& a = read->accesses[i];
    const auto& b = trace->accesses[i];
    ASSERT_TRUE(a.timeNs == b.timeNs && a.page == b.page && a.count == b.count && a.write == b.write)
        << "access " << i;
  }
  ASSERT_EQ(read->marks.size(), trace->marks.size());
  for (size_t i = 0; i < trace->marks.size(); ++i) {
    EXPECT_EQ(read->marks[i].type, trace->marks[i].type);
    EXPECT_EQ(read->marks[i].step, trace->marks[i].step);
    EXPECT_EQ(read->marks[i].phase, trace->marks[i].phase);
    EXPECT_EQ(read->marks[i].timestampNs, trace->marks[i].timestampNs);
  }
  // Compact: a few bytes per record.
  std::ifstream in(file.path(), std::ios::binary | std::ios::ate);
  EXPECT_LT(static_cast<double>(in.tellg()), 6.0 * static_cast<double>(trace->accesses.size()));
}

// What the daemon records: virtual addresses of registered regions, a sampled access outside them.
TEST(TiersimTraceFile, LiveRecordingMapsAddressesToRegions) {
  TempFile file;
  {
    TraceWriter writer;
    TraceWriter::Header header;
    header.name = "live";
    header.tgid = 1234;
    header.samplePeriod = 100;
    RegionInfo high{7, 1234, 0x7f0000200000, 2 * 4096, RegionKind::Activation, "act", 0};
    RegionInfo low{3, 1234, 0x7f0000000000, 3 * 4096, RegionKind::Weight, "w", 0};
    header.regions = {high, low};
    ASSERT_TRUE(writer.open(file.path(), header).ok());
    ASSERT_TRUE(writer.addMark(IterationMark{1234, MarkType::StepBegin, 0, "", 5}).ok());
    ASSERT_TRUE(writer.addAccess(10, 0x7f0000201010, 1, true).ok());   // act page 1
    ASSERT_TRUE(writer.addAccess(11, 0x7f0000000000, 2, false).ok());  // w page 0
    ASSERT_TRUE(writer.addAccess(12, 0x7f0000100000, 1, false).ok());  // no region
    ASSERT_TRUE(writer.addAccess(13, 0x7f0000002fff, 4, false).ok());  // w page 2
    ASSERT_TRUE(writer.flush().ok());
    // Registered later: a new region, and one overlapping "act" (an allocator reusing addresses).
    RegionInfo later{9, 1234, 0x7f0000400000, 4096, RegionKind::Gradient, "g", 0};
    RegionInfo overlap{10, 1234, 0x7f0000201000, 2 * 4096, RegionKind::Activation, "act2", 0};
    ASSERT_TRUE(writer.addRegion(later).ok());
    ASSERT_TRUE(writer.addRegion(overlap).ok());
    ASSERT_TRUE(writer.addAccess(20, 0x7f0000400008, 1, true).ok());   // g page 0
    ASSERT_TRUE(writer.addAccess(21, 0x7f0000202000, 1, false).ok());  // merged act, page 2
    ASSERT_TRUE(writer.close().ok());
  }
  ReadTraceStats stats;
  auto trace = readTraceFile(file.path(), &stats);
  ASSERT_TRUE(trace.ok()) << trace.error().message();
  EXPECT_EQ(stats.droppedAccesses, 1U);
  EXPECT_EQ(stats.mergedRegions, 1U);
  EXPECT_EQ(trace->samplePeriod, 100U);
  ASSERT_EQ(trace->regions.size(), 3U);
  EXPECT_EQ(trace->regions[0].name, "w");  // address order
  EXPECT_EQ(trace->regions[1].name, "act");
  EXPECT_EQ(trace->regions[1].firstPage, 3U);
  EXPECT_EQ(trace->regions[1].pages, 3U) << "act [0x200000, 0x202000) merged with act2 up to 0x203000";
  EXPECT_EQ(trace->regions[2].name, "g");
  EXPECT_EQ(trace->regions[2].firstPage, 6U);
  EXPECT_EQ(trace->totalPages, 7U);
  ASSERT_EQ(trace->accesses.size(), 5U);
  EXPECT_EQ(trace->accesses[3].page, 6U);
  EXPECT_EQ(trace->accesses[4].page, 5U);
  EXPECT_EQ(trace->accesses[0].page, 4U);
  EXPECT_TRUE(trace->accesses[0].write);
  EXPECT_EQ(trace->accesses[1].page, 0U);
  EXPECT_EQ(trace->accesses[1].count, 2U);
  EXPECT_EQ(trace->accesses[2].page, 2U);
  // A recording's times are time since boot: shifted to start at 0 (the first event, the mark at 5).
  EXPECT_EQ(stats.shiftedByNs, 5U);
  ASSERT_EQ(trace->marks.size(), 1U);
  EXPECT_EQ(trace->marks[0].timestampNs, 0U);
  EXPECT_EQ(trace->accesses[0].timeNs, 5U);
  EXPECT_EQ(trace->accesses[4].timeNs, 16U);
  EXPECT_FALSE(stats.incompleteLastChunk);
}

TEST(TiersimTraceFile, BadFilesGetAnErrorNotACrash) {
  TempFile file;
  {
    std::ofstream out(file.path(), std::ios::binary);
    out << "not a trace at all";
  }
  auto bad = readTraceFile(file.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("bad magic"), std::string::npos) << bad.error().message();

  // A valid file cut in the middle of a chunk.
  ModelTraceOptions options;
  options.steps = 1;
  options.scaleDivisor = 256;
  auto trace = generateModelTrace("resnet50", options);
  ASSERT_TRUE(trace.ok());
  ASSERT_TRUE(writeTraceFile(*trace, file.path()).ok());
  std::string bytes = readBytes(file.path());
  ASSERT_GT(bytes.size(), 1000U);
  {
    std::ofstream out(file.path(), std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size() - 100));
  }
  // The chunks before the cut are read, as from a recording still being written; the cut one is not.
  ReadTraceStats cutStats;
  auto cut = readTraceFile(file.path(), &cutStats);
  ASSERT_TRUE(cut.ok()) << cut.error().message();
  EXPECT_TRUE(cutStats.incompleteLastChunk);
  EXPECT_LT(cut->accesses.size(), trace->accesses.size());
  EXPECT_EQ(cutStats.shiftedByNs, 0U) << "a generated trace's times are compute time from 0";
  // Cut inside the header: no trace at all.
  {
    std::ofstream out(file.path(), std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), 12);
  }
  EXPECT_FALSE(readTraceFile(file.path()).ok());

  auto missing = readTraceFile("/nonexistent/trace.tt");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ENOENT);
}

// A chunk's length prefix damaged in the middle of a file claims more bytes than are left, as a
// chunk the file was cut inside does; but no writer makes a chunk that large, so it is corruption:
// an error, not a silent end of the trace at that chunk.
TEST(TiersimTraceFile, ACorruptLengthInTheMiddleIsAnErrorNotACut) {
  TempFile file;
  ModelTraceOptions options;
  options.steps = 2;
  options.scaleDivisor = 64;
  auto trace = generateModelTrace("resnet50", options);
  ASSERT_TRUE(trace.ok());
  ASSERT_GT(trace->accesses.size(), 2U * 65536U) << "needs at least three chunks";
  ASSERT_TRUE(writeTraceFile(*trace, file.path()).ok());
  std::string bytes = readBytes(file.path());
  // Skip the magic, the header and the first chunk: `at` is the second chunk's length prefix.
  size_t at = sizeof tt::trace::kTraceMagic;
  for (int message = 0; message < 2; ++message) {
    google::protobuf::io::CodedInputStream coded(reinterpret_cast<const uint8_t*>(bytes.data()) + at,
                                                 static_cast<int>(bytes.size() - at));
    uint32_t length = 0;
    ASSERT_TRUE(coded.ReadVarint32(&length));
    at += static_cast<size_t>(coded.CurrentPosition()) + length;
  }
  ASSERT_LT(at + 5, bytes.size());
  const char huge[5] = {'\xff', '\xff', '\xff', '\xff', '\x0f'};  // 2^32 - 1
  bytes.replace(at, 5, huge, 5);
  {
    std::ofstream out(file.path(), std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  ReadTraceStats stats;
  auto damaged = readTraceFile(file.path(), &stats);
  ASSERT_FALSE(damaged.ok()) << "read as a trace of " << damaged->accesses.size() << " accesses";
  EXPECT_NE(damaged.error().message().find("above the largest chunk"), std::string::npos) << damaged.error().message();
}

// A file that asks for more than a replay can hold (a region of 2^50 bytes: per-page state that
// cannot be allocated; a scale divisor of 10^6: policy periods of a nanosecond) is an error that
// names the field when it is read, not a crash or a hang when it is replayed.
TEST(TiersimTraceFile, RejectsWhatAReplayCannotHold) {
  TempFile file;
  auto readWith = [&](const std::vector<RegionInfo>& regions, uint32_t scaleDivisor, uint32_t samplePeriod) {
    TraceWriter writer;
    TraceWriter::Header header;
    header.name = "bounds";
    header.tgid = 1234;
    header.computeOnlyTime = true;
    header.scaleDivisor = scaleDivisor;
    header.samplePeriod = samplePeriod;
    header.regions = regions;
    EXPECT_TRUE(writer.open(file.path(), header).ok());
    EXPECT_TRUE(writer.addAccess(0, 0x7f0000000000, 1, false).ok());
    EXPECT_TRUE(writer.close().ok());
    return readTraceFile(file.path());
  };
  auto expectError = [](const Result<Trace>& read, const std::string& what) {
    ASSERT_FALSE(read.ok()) << what;
    EXPECT_NE(read.error().message().find(what), std::string::npos) << read.error().message();
  };
  const uint64_t base = 0x7f0000000000;
  const RegionInfo small{1, 1234, base, 4096, RegionKind::Weight, "w", 0};
  expectError(readWith({RegionInfo{2, 1234, base, uint64_t{1} << 50, RegionKind::Activation, "huge", 0}}, 1, 1),
              "region 'huge' length 1125899906842624 bytes");
  // Each region within the bound, together above it.
  const uint64_t half = (kMaxTracePages / 2 + 1) * 4096;
  expectError(readWith({RegionInfo{2, 1234, base, half, RegionKind::Activation, "a", 0},
                        RegionInfo{3, 1234, base + half, half, RegionKind::Activation, "b", 0}},
                       1, 1),
              "lengths add up to " + std::to_string(kMaxTracePages + 2) + " pages");
  expectError(readWith({small}, 1'000'000, 1), "scale_divisor 1000000");
  expectError(readWith({small}, 1, 1U << 30), "sample_period 1073741824");
  // At the bounds: read (replaying 1 TiB of address space is another matter, but a file may say so).
  auto atBounds = readWith({RegionInfo{2, 1234, base, kMaxTracePages * 4096, RegionKind::Activation, "max", 0}},
                           kMaxScaleDivisor, kMaxTraceSamplePeriod);
  ASSERT_TRUE(atBounds.ok()) << atBounds.error().message();
  EXPECT_EQ(atBounds->totalPages, kMaxTracePages);
  EXPECT_EQ(atBounds->scaleDivisor, kMaxScaleDivisor);
  EXPECT_EQ(atBounds->samplePeriod, kMaxTraceSamplePeriod);
  // The generator keeps to the same scale bound.
  ModelTraceOptions options;
  options.steps = 1;
  options.scaleDivisor = kMaxScaleDivisor + 1;
  auto generated = generateModelTrace("resnet50", options);
  ASSERT_FALSE(generated.ok());
  EXPECT_NE(generated.error().message().find("scale divisor"), std::string::npos) << generated.error().message();
}

// Marks close a chunk as accesses do, so no chunk outgrows what readers accept: 250000 marks of
// about 80 bytes (20 MB) would be one chunk above kMaxChunkBytes otherwise.
TEST(TiersimTraceFile, ManyMarksWithoutAccessesStayReadable) {
  TempFile file;
  tt::trace::TraceWriter writer;
  ASSERT_TRUE(writer.open(file.path(), tt::trace::TraceWriter::Header{}).ok());
  for (uint64_t i = 0; i < 250000; ++i) {
    IterationMark mark;
    mark.type = MarkType::PhaseBegin;
    mark.step = i;
    mark.phase = std::string(64, 'p');
    mark.timestampNs = i;
    ASSERT_TRUE(writer.addMark(mark).ok());
  }
  ASSERT_TRUE(writer.close().ok());
  ReadTraceStats stats;
  auto read = readTraceFile(file.path(), &stats);
  ASSERT_TRUE(read.ok()) << read.error().message();
  EXPECT_EQ(read->marks.size(), 250000U);
  EXPECT_FALSE(stats.incompleteLastChunk);
}

}  // namespace
}  // namespace tt::tiersim
