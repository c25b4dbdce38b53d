// The user-space ring path's handling of perf records: samples of tracked processes become
// evidence records (aggregated per tgid, page and kind until flushed), LOST and THROTTLE records
// are counted. On the in-kernel path the same handler sees only each event's control ring (the
// BPF program consumes the samples), so throttling and losses reach the period controller there
// too. Kept apart from SamplingSource, which owns the perf events, so that tests can feed it
// recorded streams.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <span>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/Types.h"
#include "sources/Source.h"

namespace tt::sources {

class RingRecords {
 public:
  explicit RingRecords(std::string sourceName) : name_(std::move(sourceName)) {}
  void track(pid_t tgid) { tracked_.insert(tgid); }
  void untrack(pid_t tgid) { tracked_.erase(tgid); }

  // One record as it sat in the ring of an event recording `sampleType`. `eventKind`: what the
  // event samples, for samples whose data_src does not say load or store; `period`: the events
  // one sample stands for (the weight of its evidence). Updates counters.samples / lost /
  // throttled. Samples without a data address, with a kernel one (IBS without swfilt samples
  // kernel mode too), or of untracked processes are dropped; undecodable records are logged
  // (debug) and dropped.
  void handle(std::span<const uint8_t> record, uint64_t sampleType, AccessKind eventKind, uint64_t period,
              SourceCounters& counters);
  // Appends the evidence gathered since the last flush (sorted by tgid, page, kind). Returns the
  // number of records appended.
  size_t flush(std::vector<AccessEvidence>& out) { return pending_.flush(out); }

 private:
  std::string name_;
  std::unordered_set<pid_t> tracked_;
  EvidenceAggregator pending_;
};

}  // namespace tt::sources
