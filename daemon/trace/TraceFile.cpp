#include "trace/TraceFile.h"

#include <google/protobuf/io/coded_stream.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace tt::trace {

namespace pb = tensortier::v1;

namespace {
constexpr size_t kChunkAccesses = 65536;
constexpr int kChunkMarksOrRegions = 16384;
constexpr uint32_t kMaxCount = 0x7fffffffU;

void fillRegion(pb::TraceRegionRecord* r, const RegionInfo& region) {
  r->set_id(region.id);
  r->set_start(region.start);
  r->set_length(region.length);
  r->set_kind(toProto(region.kind));
  r->set_name(region.name);
}
}  // namespace

pb::TraceRegionKind toProto(RegionKind kind) {
  switch (kind) {
    case RegionKind::Weight: return pb::TRACE_REGION_WEIGHT;
    case RegionKind::Gradient: return pb::TRACE_REGION_GRADIENT;
    case RegionKind::OptimizerState: return pb::TRACE_REGION_OPTIMIZER_STATE;
    case RegionKind::Activation: return pb::TRACE_REGION_ACTIVATION;
    case RegionKind::Workspace: return pb::TRACE_REGION_WORKSPACE;
    case RegionKind::Other: break;
  }
  return pb::TRACE_REGION_OTHER;
}

RegionKind fromProto(pb::TraceRegionKind kind) {
  switch (kind) {
    case pb::TRACE_REGION_WEIGHT: return RegionKind::Weight;
    case pb::TRACE_REGION_GRADIENT: return RegionKind::Gradient;
    case pb::TRACE_REGION_OPTIMIZER_STATE: return RegionKind::OptimizerState;
    case pb::TRACE_REGION_ACTIVATION: return RegionKind::Activation;
    case pb::TRACE_REGION_WORKSPACE: return RegionKind::Workspace;
    case pb::TRACE_REGION_OTHER: break;
  }
  return RegionKind::Other;
}

pb::TraceMarkType toProto(MarkType type) {
  switch (type) {
    case MarkType::StepBegin: return pb::TRACE_MARK_STEP_BEGIN;
    case MarkType::StepEnd: return pb::TRACE_MARK_STEP_END;
    case MarkType::PhaseBegin: break;
  }
  return pb::TRACE_MARK_PHASE_BEGIN;
}

MarkType fromProto(pb::TraceMarkType type) {
  switch (type) {
    case pb::TRACE_MARK_STEP_BEGIN: return MarkType::StepBegin;
    case pb::TRACE_MARK_STEP_END: return MarkType::StepEnd;
    case pb::TRACE_MARK_PHASE_BEGIN: break;
  }
  return MarkType::PhaseBegin;
}

TraceWriter::~TraceWriter() { (void)close(); }

Result<void> TraceWriter::writeDelimited(const google::protobuf::MessageLite& message, const char* what) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.WriteVarint32(static_cast<uint32_t>(message.ByteSizeLong()));
    if (!message.SerializeToCodedStream(&coded)) return logicError(std::string("serialize trace ") + what);
  }
  if (failed_) return logicError("trace " + path_ + ": an earlier write failed; nothing more is written");
  if (std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size() || std::fflush(file_) != 0) {
    auto err = errnoError(std::string("write trace ") + what + " to " + path_);
    // Part of the message may be in the file: cut it back to the last complete one, so the file
    // stays readable, and write nothing more (close() must not append the chunk again).
    failed_ = true;
    std::clearerr(file_);
    (void)::ftruncate(::fileno(file_), static_cast<off_t>(bytes_));
    return err;
  }
  bytes_ += bytes.size();
  return {};
}

Result<void> TraceWriter::open(const std::string& path, const Header& header) {
  if (file_ != nullptr) return logicError("trace writer: " + path + ": already open");
  std::FILE* f = std::fopen(path.c_str(), "wbe");
  if (f == nullptr) return errnoError("open trace file " + path + " for writing");
  return start(f, path, header);
}

Result<void> TraceWriter::open(int fd, const std::string& path, const Header& header) {
  if (file_ != nullptr) {
    ::close(fd);
    return logicError("trace writer: " + path + ": already open");
  }
  std::FILE* f = ::fdopen(fd, "wb");
  if (f == nullptr) {
    auto err = errnoError("fdopen trace file " + path);
    ::close(fd);
    return err;
  }
  return start(f, path, header);
}

Result<void> TraceWriter::start(std::FILE* f, const std::string& path, const Header& header) {
  failed_ = false;
  file_ = f;
  path_ = path;
  bytes_ = 0;
  chunk_.Clear();
  chunkStarted_ = false;
  if (std::fwrite(kTraceMagic, 1, sizeof kTraceMagic, file_) != sizeof kTraceMagic) {
    auto err = errnoError("write trace magic to " + path);
    (void)close();
    return err;
  }
  bytes_ = sizeof kTraceMagic;
  pb::TraceHeader proto;
  proto.set_name(header.name);
  proto.set_tgid(header.tgid);
  proto.set_sample_period(header.samplePeriod);
  proto.set_compute_only_time(header.computeOnlyTime);
  proto.set_scale_divisor(header.scaleDivisor);
  proto.set_description(header.description);
  for (const auto& region : header.regions) fillRegion(proto.add_regions(), region);
  if (auto written = writeDelimited(proto, "header"); !written) {
    (void)close();
    return written;
  }
  return {};
}

Result<void> TraceWriter::addAccess(uint64_t timeNs, uint64_t address, uint32_t count, bool write) {
  if (file_ == nullptr) return logicError("trace writer: addAccess before open");
  const uint64_t page = address / kBasePageSize;
  if (!chunkStarted_) {
    chunk_.set_base_time_ns(timeNs);
    chunk_.set_base_page(page);
    lastTime_ = timeNs;
    lastPage_ = page;
    chunkStarted_ = true;
  }
  if (timeNs < lastTime_) return logicError("trace writer " + path_ + ": access goes back in time");
  chunk_.add_time_delta_ns(timeNs - lastTime_);
  chunk_.add_page_delta(static_cast<int64_t>(page - lastPage_));
  chunk_.add_count_and_write((std::min(count, kMaxCount) << 1) | (write ? 1U : 0U));
  lastTime_ = timeNs;
  lastPage_ = page;
  if (static_cast<size_t>(chunk_.time_delta_ns_size()) >= kChunkAccesses) return flush();
  return {};
}

Result<void> TraceWriter::addMark(const IterationMark& mark) {
  if (file_ == nullptr) return logicError("trace writer: addMark before open");
  auto* m = chunk_.add_marks();
  m->set_time_ns(mark.timestampNs);
  m->set_type(toProto(mark.type));
  m->set_step(mark.step);
  m->set_phase(mark.phase);
  if (chunk_.marks_size() >= kChunkMarksOrRegions) return flush();
  return {};
}

Result<void> TraceWriter::addRegion(const RegionInfo& region) {
  if (file_ == nullptr) return logicError("trace writer: addRegion before open");
  fillRegion(chunk_.add_regions(), region);
  if (chunk_.regions_size() >= kChunkMarksOrRegions) return flush();
  return {};
}

Result<void> TraceWriter::flush() {
  if (file_ == nullptr) return logicError("trace writer: flush before open");
  if (chunk_.time_delta_ns_size() == 0 && chunk_.marks_size() == 0 && chunk_.regions_size() == 0) return {};
  // Only inputs outside what the daemon and tools give (phases or region names longer than the
  // protocol allows) could pass it; readers would take such a chunk for corruption.
  if (chunk_.ByteSizeLong() > kMaxChunkBytes) return logicError("trace " + path_ + ": chunk larger than kMaxChunkBytes");
  if (auto written = writeDelimited(chunk_, "chunk"); !written) return written;
  chunk_.Clear();
  chunkStarted_ = false;
  return {};
}

Result<void> TraceWriter::close() {
  if (file_ == nullptr) return {};
  auto flushed = failed_ ? Result<void>{} : flush();
  const bool closedOk = std::fclose(file_) == 0;
  const int closeErrno = errno;
  file_ = nullptr;
  if (!flushed) return flushed;
  if (!closedOk) return systemError(closeErrno, "close trace file " + path_);
  return {};
}

}  // namespace tt::trace
