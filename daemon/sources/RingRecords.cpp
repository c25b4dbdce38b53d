#include "sources/RingRecords.h"

#include <linux/perf_event.h>

#include <algorithm>

#include "core/Log.h"
#include "sources/PerfDecode.h"
#include "sources/SamplingSource.h"

namespace tt::sources {

void RingRecords::handle(std::span<const uint8_t> record, uint64_t sampleType, AccessKind eventKind, uint64_t period,
                         SourceCounters& counters) {
  auto rec = decodeRecord(record, sampleType);
  if (!rec) {
    TT_LOG(Debug) << name_ << ": undecodable perf record: " << rec.error().message();
    return;
  }
  switch (rec->type) {
    case RecordType::Sample: {
      // A sample on the control ring of an in-kernel path event (no TID: aggregatedSampleType)
      // went past the program, as Intel's large PEBS would send it (aggregatedAttr). Nobody can
      // say whose it was, and it is not counted in kernel: lost, not silently dropped.
      if ((sampleType & PERF_SAMPLE_TID) == 0) {
        ++counters.lost;
        return;
      }
      const PerfSample& s = rec->sample;
      // Kernel data addresses: IBS without swfilt samples kernel mode (see PmuEvents.h).
      if (s.addr == 0 || isKernelAddress(s.addr) || !tracked_.contains(static_cast<pid_t>(s.pid))) return;
      ++counters.samples;
      const bool hasSrc = (sampleType & PERF_SAMPLE_DATA_SRC) != 0;
      // data_src's op where it names one (IBS ops), else the event's kind. (The in-kernel path keeps
      // the event's kind: a kind per op would change its staging key on almost every sample.)
      const AccessKind fromSrc = hasSrc ? accessKindFromDataSrc(s.dataSrc) : AccessKind::Access;
      const AccessKind kind = fromSrc == AccessKind::Load || fromSrc == AccessKind::Store ? fromSrc : eventKind;
      const ServedBy by = hasSrc ? servedByFromDataSrc(s.dataSrc) : ServedBy::Unknown;
      const auto latency = static_cast<uint16_t>(std::min<uint64_t>(s.weight, UINT16_MAX));
      pending_.add(static_cast<pid_t>(s.pid), s.addr, kind, scaledWeight(1, period), by, hasSrc ? latency : 0);
      return;
    }
    case RecordType::Lost:
      // On an in-kernel path event's control ring (one page) what overflows is the kernel's
      // THROTTLE / UNTHROTTLE pairs, two per tick while throttled: the program took every sample.
      // Counted as lost samples they would set the loss rule (up to 4x, held) on the period
      // instead of the throttle rule; a rare sample past the program among them is covered by
      // that rule too. Half the lost records were THROTTLEs, each a throttle the counter counts as
      // if its record had been read.
      if ((sampleType & PERF_SAMPLE_TID) == 0) {
        counters.throttled += std::max<uint64_t>(1, rec->lost / 2);
        return;
      }
      counters.lost += rec->lost;
      return;
    case RecordType::LostSamples: counters.lost += rec->lost; return;
    case RecordType::Throttle: ++counters.throttled; return;
    case RecordType::Unthrottle:
    case RecordType::Other: return;
  }
}

}  // namespace tt::sources
