// Pure decoding of perf ring-buffer records (no kernel calls): the layout is perf's ABI
// (include/uapi/linux/perf_event.h), fixed by the sample_type the event was opened with.
// Unit-tested from recorded streams in tests/fixtures/perf.
#pragma once

#include <cstdint>
#include <span>

#include "core/Result.h"
#include "core/Types.h"

namespace tt::sources {

struct PerfSample {
  uint32_t pid = 0;  // tgid (PERF_SAMPLE_TID)
  uint32_t tid = 0;
  uint64_t ip = 0;
  uint64_t time = 0;
  uint64_t addr = 0;      // data virtual address (PERF_SAMPLE_ADDR)
  uint32_t cpu = 0;
  uint64_t period = 0;
  uint64_t weight = 0;    // PEBS: load latency in cycles; IBS: total latency; WEIGHT_STRUCT: var1
  uint64_t dataSrc = 0;   // union perf_mem_data_src
  uint64_t physAddr = 0;
};

enum class RecordType { Sample, Lost, Throttle, Unthrottle, Other };

struct PerfRecord {
  RecordType type = RecordType::Other;
  PerfSample sample;     // type == Sample
  uint64_t lost = 0;     // type == Lost: records the kernel dropped (ring full)
  uint64_t time = 0;     // Throttle/Unthrottle
};

// Decodes one whole record (header included). `sampleType` is the event's attr.sample_type; the
// sample_id trailer of non-sample records (sample_id_all) is not needed and ignored. Sample types
// with variable-size parts that tensortier never asks for (callchain, raw, branch stack, regs,
// user stack, read) are rejected.
[[nodiscard]] Result<PerfRecord> decodeRecord(std::span<const uint8_t> record, uint64_t sampleType);

// Which memory served the access, from perf_mem_data_src: caches, local DRAM (fast), another
// node's DRAM (remote: the mem_remote bit with RAM, or the legacy REM_RAM levels), PMEM and CXL
// (slow). Unknown when the PMU left the level unset (N/A).
[[nodiscard]] ServedBy servedByFromDataSrc(uint64_t dataSrc);
// Load/store from mem_op; nullopt-like: Access when neither bit is set.
[[nodiscard]] AccessKind accessKindFromDataSrc(uint64_t dataSrc);

// perf_mem_data_src fields and values (uapi; defined here so the decoder does not depend on the
// version of the installed kernel headers: CXL appeared in 6.2's headers, Debian 12 ships 6.1).
namespace datasrc {
inline constexpr int kOpShift = 0, kLvlShift = 5, kSnoopShift = 19, kLockShift = 24, kDtlbShift = 26,
                     kLvlNumShift = 33, kRemoteShift = 37;
inline constexpr uint64_t kOpLoad = 0x02, kOpStore = 0x04;
inline constexpr uint64_t kLvlNa = 0x01, kLvlHit = 0x02, kLvlMiss = 0x04, kLvlL1 = 0x08, kLvlLfb = 0x10,
                          kLvlL2 = 0x20, kLvlL3 = 0x40, kLvlLocRam = 0x80, kLvlRemRam1 = 0x100,
                          kLvlRemRam2 = 0x200, kLvlRemCce1 = 0x400, kLvlRemCce2 = 0x800, kLvlIo = 0x1000,
                          kLvlUnc = 0x2000;
inline constexpr uint64_t kLvlNumL1 = 0x01, kLvlNumL2 = 0x02, kLvlNumL3 = 0x03, kLvlNumL4 = 0x04,
                          kLvlNumCxl = 0x09, kLvlNumIo = 0x0a, kLvlNumAnyCache = 0x0b, kLvlNumLfb = 0x0c,
                          kLvlNumRam = 0x0d, kLvlNumPmem = 0x0e, kLvlNumNa = 0x0f;
// Builds a data_src value (fixtures and tests use it to state what they encode).
[[nodiscard]] constexpr uint64_t make(uint64_t op, uint64_t lvl, uint64_t lvlNum, bool remote) {
  return (op << kOpShift) | (lvl << kLvlShift) | (lvlNum << kLvlNumShift) | (uint64_t{remote} << kRemoteShift);
}
}  // namespace datasrc

}  // namespace tt::sources
