// Recorded perf ring-buffer streams for the decoder tests (tests/fixtures/perf/*.hex).
//
// Format: text, one record per line as hex bytes exactly as they sit in the perf mmap ring (little
// endian, struct perf_event_header first). Lines starting with '#' are comments; a line
// "sample_type 0x..." states the attr.sample_type the stream was recorded with.
//
// PEBS and IBS cannot run on the project's machines (no PMU is exposed), so those streams are
// written by PerfFixtureGenerator (PerfFixtureTest.cpp, test "FixturesMatchGenerator"), which lays
// each record out field by field in the order of include/uapi/linux/perf_event.h; regenerate with
//   TT_WRITE_PERF_FIXTURES=1 ./sources_test --gtest_filter='*FixturesMatchGenerator*'
// The software page-fault stream (sw_page_faults.hex) was recorded from a real kernel by
//   tools/bench/sources/sources_bench --record-fixture tests/fixtures/perf/sw_page_faults.hex
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tt::test {

struct PerfStream {
  uint64_t sampleType = 0;
  std::vector<std::vector<uint8_t>> records;
};

// Parses a .hex stream; adds a test failure on malformed input.
[[nodiscard]] PerfStream readPerfStream(const std::string& path);
[[nodiscard]] std::string formatPerfStream(const PerfStream& stream, const std::string& comment);

}  // namespace tt::test
