#include "Trace.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/util/delimited_message_util.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "tensortier/v1/trace.pb.h"

namespace tt::tiersim {
namespace {

namespace pb = tensortier::v1;

using trace::fromProto;
using trace::kMaxChunkBytes;
using trace::kTraceMagic;

}  // namespace

uint64_t footprintPages(const Trace& trace) {
  uint64_t pages = 0;
  for (const auto& region : trace.regions) pages += region.pages;
  return pages;
}

Result<void> validateTrace(const Trace& trace) {
  if (trace.totalPages > kMaxTracePages) {
    return logicError("trace '" + trace.name + "': " + std::to_string(trace.totalPages) + " pages, above the " +
                      std::to_string(kMaxTracePages) + " a replay can keep state for");
  }
  if (trace.scaleDivisor == 0 || trace.scaleDivisor > kMaxScaleDivisor) {
    return logicError("trace '" + trace.name + "': scale divisor " + std::to_string(trace.scaleDivisor) +
                      " outside 1.." + std::to_string(kMaxScaleDivisor));
  }
  if (trace.samplePeriod == 0 || trace.samplePeriod > kMaxTraceSamplePeriod) {
    return logicError("trace '" + trace.name + "': sample period " + std::to_string(trace.samplePeriod) +
                      " outside 1.." + std::to_string(kMaxTraceSamplePeriod));
  }
  std::vector<std::pair<PageId, uint64_t>> spans;
  for (const auto& region : trace.regions) {
    if (region.pages == 0 || region.firstPage + region.pages > trace.totalPages) {
      return logicError("trace '" + trace.name + "': region '" + region.name +
                        "' is empty or outside the address space");
    }
    spans.emplace_back(region.firstPage, region.pages);
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i - 1].first + spans[i - 1].second > spans[i].first) {
      return logicError("trace '" + trace.name + "': regions overlap at page " +
                        std::to_string(spans[i].first));
    }
  }
  for (size_t i = 0; i < trace.accesses.size(); ++i) {
    const auto& access = trace.accesses[i];
    if (access.page >= trace.totalPages) {
      return logicError("trace '" + trace.name + "': access " + std::to_string(i) + " to page " +
                        std::to_string(access.page) + " outside " + std::to_string(trace.totalPages) +
                        " pages");
    }
    if (i > 0 && access.timeNs < trace.accesses[i - 1].timeNs) {
      return logicError("trace '" + trace.name + "': access " + std::to_string(i) + " goes back in time");
    }
    if (uint64_t{access.count} * trace.samplePeriod > kMaxRecordLines) {
      return logicError("trace '" + trace.name + "': access " + std::to_string(i) + " stands for " +
                        std::to_string(uint64_t{access.count} * trace.samplePeriod) + " lines (count x sample period), above " +
                        std::to_string(kMaxRecordLines));
    }
  }
  for (size_t i = 1; i < trace.marks.size(); ++i) {
    if (trace.marks[i].timestampNs < trace.marks[i - 1].timestampNs) {
      return logicError("trace '" + trace.name + "': mark " + std::to_string(i) + " goes back in time");
    }
  }
  return {};
}

Result<void> writeTraceFile(const Trace& trace, const std::string& path) {
  if (auto valid = validateTrace(trace); !valid) return withContext(valid.error(), "writing " + path);
  TraceWriter writer;
  TraceWriter::Header header;
  header.name = trace.name;
  header.tgid = kSimTgid;
  header.samplePeriod = trace.samplePeriod;
  header.computeOnlyTime = trace.computeOnlyTime;
  header.scaleDivisor = trace.scaleDivisor;
  header.description = trace.description;
  for (const auto& region : trace.regions) {
    RegionInfo info;
    info.id = region.id;
    info.tgid = kSimTgid;
    info.start = kSimBase + region.firstPage * kBasePageSize;
    info.length = region.pages * kBasePageSize;
    info.kind = region.kind;
    info.name = region.name;
    header.regions.push_back(info);
  }
  if (auto opened = writer.open(path, header); !opened) return opened;
  // Marks go into the chunk that holds the accesses around their time.
  size_t mark = 0;
  for (const auto& access : trace.accesses) {
    while (mark < trace.marks.size() && trace.marks[mark].timestampNs <= access.timeNs) {
      if (auto added = writer.addMark(trace.marks[mark++]); !added) return added;
    }
    if (auto added = writer.addAccess(access.timeNs, kSimBase + access.page * kBasePageSize,
                                      access.count, access.write);
        !added) {
      return added;
    }
  }
  while (mark < trace.marks.size()) {
    if (auto added = writer.addMark(trace.marks[mark++]); !added) return added;
  }
  return writer.close();
}

// ---- Reader -------------------------------------------------------------------------------------

Result<Trace> readTraceFile(const std::string& path, ReadTraceStats* stats) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return errnoError("open trace file " + path);
  char magic[sizeof kTraceMagic] = {};
  in.read(magic, sizeof magic);
  if (!in || std::memcmp(magic, kTraceMagic, sizeof kTraceMagic) != 0) {
    return logicError("trace file " + path + ": not a tensortier trace (bad magic)");
  }
  std::error_code sizeError;
  const uint64_t fileBytes = std::filesystem::file_size(path, sizeError);
  if (sizeError) return systemError(sizeError.value(), "size of trace file " + path);
  google::protobuf::io::IstreamInputStream stream(&in);
  bool eof = false;
  pb::TraceHeader header;
  if (!google::protobuf::util::ParseDelimitedFromZeroCopyStream(&header, &stream, &eof)) {
    return logicError("trace file " + path + ": unreadable header");
  }
  if (header.version() != 1) {
    return logicError("trace file " + path + ": unsupported version " + std::to_string(header.version()));
  }
  if (header.page_size() != kBasePageSize) {
    return logicError("trace file " + path + ": page size " + std::to_string(header.page_size()) +
                      " (only 4096 is supported)");
  }
  // Bounds before anything is sized by them (see Trace.h).
  if (header.scale_divisor() > kMaxScaleDivisor) {
    return logicError("trace file " + path + ": scale_divisor " + std::to_string(header.scale_divisor()) +
                      " above " + std::to_string(kMaxScaleDivisor));
  }
  if (header.sample_period() > kMaxTraceSamplePeriod) {
    return logicError("trace file " + path + ": sample_period " + std::to_string(header.sample_period()) +
                      " above " + std::to_string(kMaxTraceSamplePeriod));
  }
  Trace trace;
  trace.name = header.name();
  trace.samplePeriod = std::max<uint32_t>(1, header.sample_period());
  trace.computeOnlyTime = header.compute_only_time();
  trace.scaleDivisor = std::max<uint32_t>(1, header.scale_divisor());
  trace.description = header.description();

  // First pass: every chunk, with raw virtual page numbers; the layout needs all regions first.
  struct RawAccess {
    uint64_t timeNs;
    uint64_t vpn;
    uint32_t countAndWrite;
  };
  std::vector<RawAccess> raw;
  std::vector<pb::TraceRegionRecord> records(header.regions().begin(), header.regions().end());
  pb::TraceChunk chunk;
  while (true) {
    chunk.Clear();
    // A chunk the file ends inside is one still being written (or cut short by a crash): the
    // recorder writes whole chunks, and a crash loses at most the one in progress. Anything else
    // is corruption, a length prefix above the largest chunk a writer makes included: read as a
    // cut, it would silently drop every chunk after it.
    const uint64_t at = sizeof kTraceMagic + static_cast<uint64_t>(stream.ByteCount());
    if (at == fileBytes) break;
    auto corrupt = [&](const std::string& what) {
      return logicError("trace file " + path + ": corrupt chunk at byte " + std::to_string(at) + " (after " +
                        std::to_string(raw.size()) + " accesses): " + what);
    };
    google::protobuf::io::CodedInputStream coded(&stream);
    uint32_t length = 0;
    if (!coded.ReadVarint32(&length)) {
      if (fileBytes - at < 5) {  // the prefix itself was cut
        if (stats != nullptr) stats->incompleteLastChunk = true;
        break;
      }
      return corrupt("unreadable length");
    }
    if (length > kMaxChunkBytes)
      return corrupt("length " + std::to_string(length) + " above the largest chunk a writer makes");
    if (at + static_cast<uint64_t>(coded.CurrentPosition()) + length > fileBytes) {
      if (stats != nullptr) stats->incompleteLastChunk = true;
      break;
    }
    const auto limit = coded.PushLimit(static_cast<int>(length));
    if (!chunk.ParseFromCodedStream(&coded) || !coded.ConsumedEntireMessage()) return corrupt("unparsable");
    coded.PopLimit(limit);
    const int n = chunk.time_delta_ns_size();
    if (chunk.page_delta_size() != n || chunk.count_and_write_size() != n) {
      return logicError("trace file " + path + ": chunk columns differ in length");
    }
    uint64_t time = chunk.base_time_ns();
    uint64_t vpn = chunk.base_page();
    for (int i = 0; i < n; ++i) {
      time += chunk.time_delta_ns(i);
      vpn += static_cast<uint64_t>(chunk.page_delta(i));
      raw.push_back(RawAccess{time, vpn, chunk.count_and_write(i)});
    }
    for (const auto& m : chunk.marks()) {
      IterationMark mark;
      mark.tgid = header.tgid();
      mark.type = fromProto(m.type());
      mark.step = m.step();
      mark.phase = m.phase();
      mark.timestampNs = m.time_ns();
      trace.marks.push_back(mark);
    }
    records.insert(records.end(), chunk.regions().begin(), chunk.regions().end());
  }

  // Dense layout: regions in address order, overlapping registrations merged.
  struct Span {
    uint64_t firstVpn;
    uint64_t pages;
    PageId firstPage;
  };
  std::stable_sort(records.begin(), records.end(),
                   [](const auto& a, const auto& b) { return a.start() < b.start(); });
  std::vector<Span> spans;
  uint64_t merged = 0;
  for (const auto& r : records) {
    if (r.start() % kBasePageSize != 0 || r.length() == 0 || r.length() % kBasePageSize != 0) {
      return logicError("trace file " + path + ": region '" + r.name() + "' is not page aligned");
    }
    const uint64_t vpn = r.start() / kBasePageSize;
    const uint64_t pages = r.length() / kBasePageSize;
    if (pages > kMaxTracePages) {
      return logicError("trace file " + path + ": region '" + r.name() + "' length " + std::to_string(r.length()) +
                        " bytes, above the " + std::to_string(kMaxTracePages) + " pages a replay can keep state for");
    }
    if (!spans.empty() && spans.back().firstVpn + spans.back().pages > vpn) {
      auto& last = spans.back();
      last.pages = std::max(last.pages, vpn + pages - last.firstVpn);
      trace.regions.back().pages = last.pages;
      ++merged;
      continue;
    }
    TraceRegion region;
    region.id = r.id();
    region.pages = pages;
    region.kind = fromProto(r.kind());
    region.name = r.name();
    trace.regions.push_back(region);
    spans.push_back(Span{vpn, pages, 0});
  }
  PageId next = 0;
  for (size_t i = 0; i < spans.size(); ++i) {
    spans[i].firstPage = next;
    trace.regions[i].firstPage = next;
    next += spans[i].pages;  // each at most kMaxTracePages: no overflow
  }
  if (next > kMaxTracePages) {
    return logicError("trace file " + path + ": the regions' lengths add up to " + std::to_string(next) +
                      " pages, above the " + std::to_string(kMaxTracePages) + " a replay can keep state for");
  }
  trace.totalPages = next;

  uint64_t dropped = 0;
  size_t spanHint = 0;
  auto lookup = [&](uint64_t vpn) -> int64_t {
    if (spanHint < spans.size() && vpn >= spans[spanHint].firstVpn &&
        vpn < spans[spanHint].firstVpn + spans[spanHint].pages) {
      return static_cast<int64_t>(spans[spanHint].firstPage + (vpn - spans[spanHint].firstVpn));
    }
    auto it = std::upper_bound(spans.begin(), spans.end(), vpn,
                               [](uint64_t v, const Span& s) { return v < s.firstVpn; });
    if (it == spans.begin()) return -1;
    --it;
    if (vpn >= it->firstVpn + it->pages) return -1;
    spanHint = static_cast<size_t>(it - spans.begin());
    return static_cast<int64_t>(it->firstPage + (vpn - it->firstVpn));
  };
  // A recording's clock is time since boot; the simulator's epochs and windows start at 0, and
  // would run through every empty epoch up to the first access.
  uint64_t shift = 0;
  if (!trace.computeOnlyTime) {
    shift = UINT64_MAX;
    for (const auto& r : raw) shift = std::min(shift, r.timeNs);
    for (const auto& m : trace.marks) shift = std::min(shift, m.timestampNs);
    if (shift == UINT64_MAX) shift = 0;
    for (auto& r : raw) r.timeNs -= shift;
    for (auto& m : trace.marks) m.timestampNs -= shift;
  }
  if (stats != nullptr) stats->shiftedByNs = shift;
  trace.accesses.reserve(raw.size());
  for (const auto& r : raw) {
    const int64_t page = lookup(r.vpn);
    if (page < 0) {
      ++dropped;
      continue;
    }
    trace.accesses.push_back(SimAccess{r.timeNs, static_cast<PageId>(page), r.countAndWrite >> 1,
                                       (r.countAndWrite & 1U) != 0});
  }
  if (stats != nullptr) stats->mergedRegions = merged;
  if (stats != nullptr) stats->droppedAccesses = dropped;
  if (auto valid = validateTrace(trace); !valid) return withContext(valid.error(), "reading " + path);
  return trace;
}

}  // namespace tt::tiersim
