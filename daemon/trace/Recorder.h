// Records a live run of a registered process as a page-access trace (TraceFile.h) that
// tools/tiersim replays (`tiersim run --trace FILE`, `tiersim info --trace FILE`): what the
// daemon's sources saw (sampled accesses, already scaled by their period), the client's iteration
// marks and the process's registered regions. Started and stopped by `tensortierctl record`.
//
// What a recording holds, and what it cannot: the daemon sees evidence once per epoch, and the
// sources say only that an access happened during the epoch that gathered it. So each access gets
// a time drawn uniformly at random from that epoch (a generator per recording, seeded by its pid
// and start time): a replay sees an epoch's accesses spread over it, as the heat model spreads
// them, not heaped on its end, where steps shorter than an epoch would find all of them in one
// step and none in the others. Per-step statistics finer than the epoch are therefore estimates;
// marks keep their own timestamps. Timestamps are CLOCK_MONOTONIC wall time, stalls included
// (computeOnlyTime = false). Accesses outside the registered regions are recorded too; the replay
// drops them (it lays out the regions only).
//
// Files: <directory>/<name>-<pid>-<UTC time>[-N].tttrace, created exclusively (never overwriting,
// never through a symlink), mode 0640, group the admin group when one is configured (so the admins
// who asked for a recording can read it without root). Limits (RecorderLimits) bound size,
// duration and how many run at once; a recording ends at its limit, when the process exits, on
// stop, or on a write error, and its file is always left readable (complete chunks). The size
// limit is checked as each chunk is written, so a recording ends within one chunk (at most
// 65536 accesses) past it, even in an epoch with more evidence than that.
//
// Retention: each start keeps at most keepFiles recordings in the directory, the new one included,
// by removing the oldest (by the UTC time in the name, within one second by -N, then by name) of
// the files this recorder names: regular files of the daemon's uid whose whole name has the form
// above. Running recordings are never removed (so more than keepFiles exist while more run), nor
// anything else in the directory. The disk use is then bounded by about keepFiles * maxBytes.
//
// The file system is reached through sys::TraceDirectory (the daemon: sys::LinuxTraceDirectory).
//
// Threading: start/stop/list come from the admin handler (event-loop thread), the on*/endEpoch
// hooks from the epoch thread: one mutex guards everything, the hooks' work is a few appends.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/Result.h"
#include "core/Types.h"
#include "sys/TraceDirectory.h"
#include "trace/TraceFile.h"

namespace tt::trace {

struct RecorderLimits {
  std::string directory;
  uint64_t maxBytes = 256ULL << 20;  // per recording
  uint32_t maxSeconds = 600;         // per recording; a request may ask for less
  uint32_t maxRecordings = 4;        // at once
  uint32_t keepFiles = 32;           // recordings left in the directory by a start (see Retention)
  // The admin group: group of new files and of the directory when the recorder creates it.
  // Unset: the daemon's own group.
  std::optional<gid_t> group;
};

struct RecordingInfo {
  pid_t tgid = 0;
  std::string path;
  bool active = false;
  uint64_t startedNs = 0;
  uint64_t endsByNs = 0;    // the time limit
  uint64_t accesses = 0;    // access records written
  uint64_t marks = 0;
  uint64_t regions = 0;     // in the header plus registered later
  uint64_t bytes = 0;       // written to the file (complete chunks)
  std::string ended;        // why it ended: "stopped", "process exited", "size limit", ...
};

class Recorder {
 public:
  explicit Recorder(RecorderLimits limits,
                    std::unique_ptr<sys::TraceDirectory> files = std::make_unique<sys::LinuxTraceDirectory>());
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // New limits (SIGHUP, tune) apply to new recordings and to the size check of running ones.
  void setLimits(RecorderLimits limits);

  // Starts recording `tgid` for `seconds` (0 or more than the limit: the limit). `regions` returns
  // the regions registered so far; it is called under the recorder's lock, so a region registered
  // concurrently is either in the header or reaches onRegion() later (then it appears twice, which
  // the reader merges), never lost. Errors: already recording it, too many recordings, the
  // directory or the file cannot be created or given the group. Old files are removed (see
  // Retention above) once the new file exists; a removal that fails is logged, not an error.
  using RegionsFn = std::function<std::vector<RegionInfo>()>;
  [[nodiscard]] Result<RecordingInfo> start(pid_t tgid, const std::string& name, const RegionsFn& regions,
                                            uint64_t nowNs, uint32_t seconds);
  // Ends the recording of `tgid` and returns its summary. Error: not recording it.
  [[nodiscard]] Result<RecordingInfo> stop(pid_t tgid, uint64_t nowNs);
  // Running recordings, then the most recently ended ones (at most kEndedKept).
  [[nodiscard]] std::vector<RecordingInfo> list() const;
  static constexpr size_t kEndedKept = 16;

  // ---- epoch-thread hooks ----
  void onRegion(const RegionInfo& region);
  void onMark(const IterationMark& mark);
  // The evidence the sources gathered over the epoch [sinceNs, nowNs) (see above for its times).
  void onEvidence(const EvidenceBatch& evidence, uint64_t sinceNs, uint64_t nowNs);
  void onProcessExit(pid_t tgid, uint64_t nowNs);
  // Closes the epoch's chunk of every recording and ends those past a limit.
  void endEpoch(uint64_t nowNs);
  // Daemon shutdown: ends every recording.
  void stopAll(uint64_t nowNs);

 private:
  struct Recording {
    RecordingInfo info;
    TraceWriter writer;
    std::mt19937_64 spread;  // the accesses' times within their epoch
  };
  // An access of this epoch waiting to be written in time order.
  struct PendingAccess {
    uint64_t timeNs;
    uint64_t page;
    uint32_t count;
    bool write;
  };
  void endLocked(pid_t tgid, uint64_t nowNs, const std::string& why);
  void failLocked(Recording& rec, const Error& error);
  void removeOldLocked();

  mutable std::mutex mutex_;
  RecorderLimits limits_;
  std::unique_ptr<sys::TraceDirectory> files_;
  std::map<pid_t, std::unique_ptr<Recording>> active_;
  std::deque<RecordingInfo> ended_;
  std::vector<pid_t> failed_;  // write errors seen in a hook, ended at the next endEpoch
  std::map<pid_t, std::vector<PendingAccess>> pending_;  // onEvidence's buffers, kept across epochs
};

// The file name part from a client name: [A-Za-z0-9._-] kept, others '_', at most 32 characters,
// "process" when nothing is left.
[[nodiscard]] std::string sanitizeName(const std::string& name);

// Whether `fileName` (no directory) is one the recorder gives its files: the whole of
// <sanitizeName result>-<pid>-<YYYYMMDDTHHMMSSZ>[-<1..9>].tttrace. Only such files are removed.
[[nodiscard]] bool isRecordingFileName(const std::string& fileName);

}  // namespace tt::trace
