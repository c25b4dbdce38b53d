// Pure decoding of perf ring-buffer records (no kernel calls): the layout is perf's ABI
// (include/uapi/linux/perf_event.h), fixed by the sample_type the event was opened with.
// Unit-tested from recorded streams in tests/fixtures/perf.
#pragma once

#include <cstdint>
#include <span>

#include "core/Result.h"
#include "core/Types.h"
#include "tt_data_src.h"

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

// Lost: records a full ring dropped (PERF_RECORD_LOST: samples, or on a control ring mostly
// throttle records); LostSamples: samples the PMU driver dropped (PERF_RECORD_LOST_SAMPLES).
enum class RecordType { Sample, Lost, LostSamples, Throttle, Unthrottle, Other };

struct PerfRecord {
  RecordType type = RecordType::Other;
  PerfSample sample;     // type == Sample
  uint64_t lost = 0;     // type == Lost / LostSamples: how many
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
// The memory an enum tt_sample_tier code names (the decoder's output, and the in-kernel path's
// count blocks).
[[nodiscard]] ServedBy servedByOfTier(uint32_t tier);
// enum tt_sample_kind code of an evidence kind (the in-kernel path's attach cookie), and back;
// TT_KIND_DEFAULT (and unknown codes) map back to `defaultKind`.
[[nodiscard]] uint32_t sampleKindCode(AccessKind kind);
[[nodiscard]] AccessKind sampleKindOf(uint32_t code, AccessKind defaultKind);
// Load/store from mem_op; nullopt-like: Access when neither bit is set.
[[nodiscard]] AccessKind accessKindFromDataSrc(uint64_t dataSrc);

// perf_mem_data_src fields and values, as the shared decoder (bpf/tt_data_src.h) defines them.
namespace datasrc {
inline constexpr int kOpShift = TT_DS_OP_SHIFT, kLvlShift = TT_DS_LVL_SHIFT, kLvlNumShift = TT_DS_LVL_NUM_SHIFT,
                     kRemoteShift = TT_DS_REMOTE_SHIFT;
inline constexpr uint64_t kOpLoad = TT_DS_OP_LOAD, kOpStore = TT_DS_OP_STORE;
inline constexpr uint64_t kLvlNa = TT_DS_LVL_NA, kLvlHit = TT_DS_LVL_HIT, kLvlMiss = TT_DS_LVL_MISS,
                          kLvlL1 = TT_DS_LVL_L1, kLvlLfb = TT_DS_LVL_LFB, kLvlL2 = TT_DS_LVL_L2, kLvlL3 = TT_DS_LVL_L3,
                          kLvlLocRam = TT_DS_LVL_LOC_RAM, kLvlRemRam1 = TT_DS_LVL_REM_RAM1,
                          kLvlRemRam2 = TT_DS_LVL_REM_RAM2, kLvlRemCce1 = TT_DS_LVL_REM_CCE1,
                          kLvlRemCce2 = TT_DS_LVL_REM_CCE2, kLvlIo = TT_DS_LVL_IO, kLvlUnc = TT_DS_LVL_UNC;
inline constexpr uint64_t kLvlNumL1 = TT_DS_LVL_NUM_L1, kLvlNumL2 = TT_DS_LVL_NUM_L2, kLvlNumL3 = TT_DS_LVL_NUM_L3,
                          kLvlNumL4 = TT_DS_LVL_NUM_L4, kLvlNumCxl = TT_DS_LVL_NUM_CXL, kLvlNumIo = TT_DS_LVL_NUM_IO,
                          kLvlNumAnyCache = TT_DS_LVL_NUM_ANY_CACHE, kLvlNumLfb = TT_DS_LVL_NUM_LFB,
                          kLvlNumRam = TT_DS_LVL_NUM_RAM, kLvlNumPmem = TT_DS_LVL_NUM_PMEM,
                          kLvlNumNa = TT_DS_LVL_NUM_NA;
// Builds a data_src value (fixtures and tests use it to state what they encode).
[[nodiscard]] constexpr uint64_t make(uint64_t op, uint64_t lvl, uint64_t lvlNum, bool remote) {
  return (op << kOpShift) | (lvl << kLvlShift) | (lvlNum << kLvlNumShift) | (uint64_t{remote} << kRemoteShift);
}
}  // namespace datasrc

}  // namespace tt::sources
