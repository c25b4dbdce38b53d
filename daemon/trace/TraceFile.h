// The file form of a page-access trace (proto/tensortier/v1/trace.proto): what the daemon records
// from a live run (Recorder.h) and what tools/tiersim writes and replays.
//
// Layout: the 8 bytes kTraceMagic, then varint-length-delimited messages: one TraceHeader, then
// TraceChunks. A chunk is written whole, so a crash loses at most the chunk in progress.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/Result.h"
#include "core/Types.h"
#include "tensortier/v1/trace.pb.h"

namespace tt::trace {

inline constexpr char kTraceMagic[8] = {'T', 'T', 'T', 'R', 'A', 'C', 'E', '1'};

// The largest chunk a writer makes. A chunk closes at 65536 accesses (at most 25 bytes each:
// 1.6 MiB), 16384 marks (phases are cut to 64 bytes by the protocol: under 1.6 MiB) or 16384
// regions (names of at most 256 bytes: under 5 MiB). A reader takes a length prefix above it for
// corruption, not for a chunk the file was cut inside.
inline constexpr uint32_t kMaxChunkBytes = 16U << 20;

[[nodiscard]] tensortier::v1::TraceRegionKind toProto(RegionKind kind);
[[nodiscard]] RegionKind fromProto(tensortier::v1::TraceRegionKind kind);
[[nodiscard]] tensortier::v1::TraceMarkType toProto(MarkType type);
[[nodiscard]] MarkType fromProto(tensortier::v1::TraceMarkType type);

// Incremental writer: header first, then accesses and marks as they come, in time order.
// Addresses are virtual; flush() closes a chunk (it also closes itself every 65536 accesses).
class TraceWriter {
 public:
  TraceWriter() = default;
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;
  ~TraceWriter();

  struct Header {
    std::string name;
    pid_t tgid = 0;
    uint32_t samplePeriod = 1;       // counts already scaled: 1
    bool computeOnlyTime = false;    // live recordings: wall-clock (CLOCK_MONOTONIC) time
    uint32_t scaleDivisor = 1;
    std::vector<RegionInfo> regions;
    std::string description;
  };
  // Writes to `path`, replacing what is there (tools writing a file the user named).
  [[nodiscard]] Result<void> open(const std::string& path, const Header& header);
  // Writes to `fd`, a new empty file opened for writing, named `path` in messages: the daemon
  // creates its files itself (sys::TraceDirectory::createFile: exclusively, never through a
  // symlink, with their mode and group). Takes the descriptor: it is closed on failure too.
  [[nodiscard]] Result<void> open(int fd, const std::string& path, const Header& header);
  // count: cache-line accesses the record stands for (a sample's weight).
  [[nodiscard]] Result<void> addAccess(uint64_t timeNs, uint64_t address, uint32_t count, bool write);
  [[nodiscard]] Result<void> addMark(const IterationMark& mark);
  // A region registered after open() (goes into the current chunk).
  [[nodiscard]] Result<void> addRegion(const RegionInfo& region);
  [[nodiscard]] Result<void> flush();
  [[nodiscard]] Result<void> close();

  [[nodiscard]] bool isOpen() const { return file_ != nullptr; }
  // A write failed: the file was cut back to its last complete message and takes no more.
  // Bytes written to the file so far (complete chunks only).
  [[nodiscard]] uint64_t bytesWritten() const { return bytes_; }
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  [[nodiscard]] Result<void> writeDelimited(const google::protobuf::MessageLite& message, const char* what);
  [[nodiscard]] Result<void> start(std::FILE* file, const std::string& path, const Header& header);

  std::FILE* file_ = nullptr;
  std::string path_;
  tensortier::v1::TraceChunk chunk_;
  uint64_t lastTime_ = 0;
  uint64_t lastPage_ = 0;
  bool chunkStarted_ = false;
  uint64_t bytes_ = 0;
  bool failed_ = false;
};

}  // namespace tt::trace
