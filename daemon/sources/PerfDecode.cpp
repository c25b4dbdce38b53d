#include "sources/PerfDecode.h"

#include <linux/perf_event.h>

#include <cstring>

namespace tt::sources {

namespace {

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  bool u64(uint64_t& v) { return copy(&v, 8); }
  bool u32(uint32_t& v) { return copy(&v, 4); }
  bool skip(size_t n) {
    if (pos_ + n > bytes_.size()) return false;
    pos_ += n;
    return true;
  }

 private:
  bool copy(void* dst, size_t n) {
    if (pos_ + n > bytes_.size()) return false;
    std::memcpy(dst, bytes_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
};

constexpr uint64_t kUnsupported = PERF_SAMPLE_READ | PERF_SAMPLE_CALLCHAIN | PERF_SAMPLE_RAW |
                                  PERF_SAMPLE_BRANCH_STACK | PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER |
                                  PERF_SAMPLE_REGS_INTR | PERF_SAMPLE_AUX;

Error truncated(const char* what) { return logicError(std::string("perf record truncated in ") + what); }

}  // namespace

Result<PerfRecord> decodeRecord(std::span<const uint8_t> bytes, uint64_t sampleType) {
  perf_event_header h;
  if (bytes.size() < sizeof h) return truncated("header");
  std::memcpy(&h, bytes.data(), sizeof h);
  if (h.size != bytes.size())
    return logicError("perf record size " + std::to_string(h.size) + " does not match " + std::to_string(bytes.size()) + " bytes");
  Reader r(bytes.subspan(sizeof h));
  PerfRecord rec;
  switch (h.type) {
    case PERF_RECORD_SAMPLE: {
      if ((sampleType & kUnsupported) != 0) return logicError("perf sample_type has unsupported variable-size fields");
      rec.type = RecordType::Sample;
      PerfSample& s = rec.sample;
      uint64_t skip64 = 0;
      if ((sampleType & PERF_SAMPLE_IDENTIFIER) && !r.u64(skip64)) return truncated("identifier");
      if ((sampleType & PERF_SAMPLE_IP) && !r.u64(s.ip)) return truncated("ip");
      if ((sampleType & PERF_SAMPLE_TID) && !(r.u32(s.pid) && r.u32(s.tid))) return truncated("tid");
      if ((sampleType & PERF_SAMPLE_TIME) && !r.u64(s.time)) return truncated("time");
      if ((sampleType & PERF_SAMPLE_ADDR) && !r.u64(s.addr)) return truncated("addr");
      if ((sampleType & PERF_SAMPLE_ID) && !r.u64(skip64)) return truncated("id");
      if ((sampleType & PERF_SAMPLE_STREAM_ID) && !r.u64(skip64)) return truncated("stream_id");
      if (sampleType & PERF_SAMPLE_CPU) {
        uint32_t res = 0;
        if (!(r.u32(s.cpu) && r.u32(res))) return truncated("cpu");
      }
      if ((sampleType & PERF_SAMPLE_PERIOD) && !r.u64(s.period)) return truncated("period");
      if (sampleType & PERF_SAMPLE_WEIGHT_STRUCT) {
        // { u32 var1_dw; u16 var2_w; u16 var3_w; } little-endian: var1 is the low 32 bits.
        uint64_t w = 0;
        if (!r.u64(w)) return truncated("weight_struct");
        s.weight = w & 0xffffffffULL;
      } else if ((sampleType & PERF_SAMPLE_WEIGHT) && !r.u64(s.weight)) {
        return truncated("weight");
      }
      if ((sampleType & PERF_SAMPLE_DATA_SRC) && !r.u64(s.dataSrc)) return truncated("data_src");
      if ((sampleType & PERF_SAMPLE_TRANSACTION) && !r.u64(skip64)) return truncated("transaction");
      if ((sampleType & PERF_SAMPLE_PHYS_ADDR) && !r.u64(s.physAddr)) return truncated("phys_addr");
      if ((sampleType & PERF_SAMPLE_CGROUP) && !r.u64(skip64)) return truncated("cgroup");
      if ((sampleType & PERF_SAMPLE_DATA_PAGE_SIZE) && !r.u64(skip64)) return truncated("data_page_size");
      if ((sampleType & PERF_SAMPLE_CODE_PAGE_SIZE) && !r.u64(skip64)) return truncated("code_page_size");
      return rec;
    }
    case PERF_RECORD_LOST: {
      uint64_t id = 0;
      rec.type = RecordType::Lost;
      if (!(r.u64(id) && r.u64(rec.lost))) return truncated("lost");
      return rec;
    }
    case PERF_RECORD_LOST_SAMPLES: {
      // Samples the PMU driver could not deliver (PEBS records it dropped), not ring space: lost
      // evidence all the same, on either path (they never reached the program).
      rec.type = RecordType::LostSamples;
      if (!r.u64(rec.lost)) return truncated("lost_samples");
      return rec;
    }
    case PERF_RECORD_THROTTLE:
    case PERF_RECORD_UNTHROTTLE: {
      rec.type = h.type == PERF_RECORD_THROTTLE ? RecordType::Throttle : RecordType::Unthrottle;
      uint64_t id = 0, stream = 0;
      if (!(r.u64(rec.time) && r.u64(id) && r.u64(stream))) return truncated("throttle");
      return rec;
    }
    default:
      rec.type = RecordType::Other;
      return rec;
  }
}

uint32_t sampleKindCode(AccessKind kind) {
  switch (kind) {
    case AccessKind::Load: return TT_KIND_LOAD;
    case AccessKind::Store: return TT_KIND_STORE;
    case AccessKind::Access: return TT_KIND_ACCESS;
    default: return TT_KIND_DEFAULT;
  }
}

AccessKind sampleKindOf(uint32_t code, AccessKind defaultKind) {
  switch (code) {
    case TT_KIND_LOAD: return AccessKind::Load;
    case TT_KIND_STORE: return AccessKind::Store;
    case TT_KIND_ACCESS: return AccessKind::Access;
    default: return defaultKind;
  }
}

ServedBy servedByOfTier(uint32_t tier) {
  switch (tier) {
    case TT_TIER_CACHE: return ServedBy::Cache;
    case TT_TIER_FAST: return ServedBy::FastTier;
    case TT_TIER_REMOTE_RAM: return ServedBy::RemoteRam;
    case TT_TIER_SLOW: return ServedBy::SlowTier;
    default: return ServedBy::Unknown;
  }
}

ServedBy servedByFromDataSrc(uint64_t dataSrc) {
  // The decoding itself is shared with the in-kernel path (bpf/tt_data_src.h).
  return servedByOfTier(tt_tier_of_data_src(dataSrc));
}

AccessKind accessKindFromDataSrc(uint64_t dataSrc) {
  return sampleKindOf(tt_kind_of_data_src(dataSrc), AccessKind::Access);
}

}  // namespace tt::sources
