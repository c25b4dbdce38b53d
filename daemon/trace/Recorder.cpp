#include "trace/Recorder.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <optional>
#include <set>
#include <string_view>
#include <tuple>

#include "core/Log.h"

namespace tt::trace {

namespace {

std::string utcStamp() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

constexpr std::string_view kSuffix = ".tttrace";
constexpr size_t kStampLength = 16;  // YYYYMMDDTHHMMSSZ

bool isDigit(char c) { return c >= '0' && c <= '9'; }

// The parts of a recording's file name that order recordings by age.
struct RecordingName {
  std::string stamp;  // UTC, sorts as text
  int attempt = 0;    // the -N of a second recording of one pid in one second
};

std::optional<RecordingName> parseRecordingName(const std::string& fileName) {
  if (fileName.size() <= kSuffix.size() || fileName.compare(fileName.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0)
    return std::nullopt;
  std::string s = fileName.substr(0, fileName.size() - kSuffix.size());
  RecordingName out;
  // The stamp ends in 'Z', so a trailing "-<digit>" can only be the attempt number.
  if (s.size() >= 2 && s[s.size() - 2] == '-' && s.back() >= '1' && s.back() <= '9') {
    out.attempt = s.back() - '0';
    s.resize(s.size() - 2);
  }
  if (s.size() < kStampLength + 1 || s[s.size() - kStampLength - 1] != '-') return std::nullopt;
  const std::string stamp = s.substr(s.size() - kStampLength);
  for (size_t i = 0; i < kStampLength; ++i) {
    const bool ok = i == 8 ? stamp[i] == 'T' : i == 15 ? stamp[i] == 'Z' : isDigit(stamp[i]);
    if (!ok) return std::nullopt;
  }
  out.stamp = stamp;
  s.resize(s.size() - kStampLength - 1);
  // The pid: decimal as std::to_string writes it (no leading zero), after a '-'.
  size_t digits = 0;
  while (digits < s.size() && isDigit(s[s.size() - 1 - digits])) ++digits;
  if (digits == 0 || digits > 10 || digits == s.size() || s[s.size() - digits] == '0' || s[s.size() - digits - 1] != '-')
    return std::nullopt;
  s.resize(s.size() - digits - 1);
  // What is left is a client name exactly as sanitizeName() leaves it.
  if (s.empty() || sanitizeName(s) != s) return std::nullopt;
  return out;
}

}  // namespace

bool isRecordingFileName(const std::string& fileName) { return parseRecordingName(fileName).has_value(); }

std::string sanitizeName(const std::string& name) {
  std::string out;
  for (char c : name) {
    if (out.size() >= 32) break;
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    out += ok ? c : '_';
  }
  // A leading dot would hide the file; dots alone would be "." or "..".
  while (!out.empty() && out.front() == '.') out.erase(out.begin());
  return out.empty() ? "process" : out;
}

Recorder::Recorder(RecorderLimits limits, std::unique_ptr<sys::TraceDirectory> files)
    : limits_(std::move(limits)), files_(std::move(files)) {}

Recorder::~Recorder() {
  std::lock_guard lock(mutex_);
  for (auto& [tgid, rec] : active_) (void)rec->writer.close();
}

void Recorder::setLimits(RecorderLimits limits) {
  std::lock_guard lock(mutex_);
  limits_ = std::move(limits);
}

Result<RecordingInfo> Recorder::start(pid_t tgid, const std::string& name, const RegionsFn& regionsFn,
                                      uint64_t nowNs, uint32_t seconds) {
  std::lock_guard lock(mutex_);
  if (active_.count(tgid) != 0) {
    return systemError(EEXIST, "pid " + std::to_string(tgid) + " is already being recorded to " +
                                   active_.at(tgid)->info.path);
  }
  if (limits_.maxRecordings == 0) return systemError(EPERM, "recording is off (service.trace_max_recordings is 0)");
  if (active_.size() >= limits_.maxRecordings) {
    return systemError(EBUSY, std::to_string(active_.size()) + " recordings are running (service.trace_max_recordings)");
  }
  if (limits_.directory.empty()) return systemError(EINVAL, "no trace directory configured (service.trace_directory)");
  if (auto made = files_->ensureDirectory(limits_.directory, limits_.group); !made) return made.error();

  const std::vector<RegionInfo> regions = regionsFn ? regionsFn() : std::vector<RegionInfo>{};
  auto rec = std::make_unique<Recording>();
  TraceWriter::Header header;
  header.name = name;
  header.tgid = tgid;
  header.samplePeriod = 1;  // evidence weights are already scaled by the sources' periods
  header.computeOnlyTime = false;
  header.regions = regions;
  header.description = "recorded by tensortierd from pid " + std::to_string(tgid) +
                       "; each access at a random time within the daemon epoch that saw it (CLOCK_MONOTONIC ns)";
  const std::string base = sanitizeName(name) + "-" + std::to_string(tgid) + "-" + utcStamp();
  Result<int> created = logicError("unreachable");
  std::string path;
  // Two recordings of one pid within a second: a numbered name instead of an error.
  for (int attempt = 0; attempt < 10; ++attempt) {
    const std::string fileName = base + (attempt == 0 ? "" : "-" + std::to_string(attempt)) + ".tttrace";
    path = limits_.directory + "/" + fileName;
    created = files_->createFile(limits_.directory, fileName, limits_.group);
    if (created || created.error().code != EEXIST) break;
  }
  if (!created) return created.error();
  if (auto opened = rec->writer.open(*created, path, header); !opened) return opened.error();
  const uint32_t limit = limits_.maxSeconds;
  const uint32_t secs = seconds == 0 || seconds > limit ? limit : seconds;
  rec->info.tgid = tgid;
  rec->info.path = path;
  rec->info.active = true;
  rec->info.startedNs = nowNs;
  rec->spread.seed(nowNs ^ (static_cast<uint64_t>(tgid) << 32));
  rec->info.endsByNs = nowNs + uint64_t{secs} * 1'000'000'000ULL;
  rec->info.regions = regions.size();
  rec->info.bytes = rec->writer.bytesWritten();
  TT_LOG(Info) << "recording pid " << tgid << " to " << path << " for at most " << secs << " s";
  RecordingInfo info = rec->info;
  active_.emplace(tgid, std::move(rec));
  removeOldLocked();
  return info;
}

void Recorder::removeOldLocked() {
  const std::string& dir = limits_.directory;
  auto listed = files_->listOwnFiles(dir);
  if (!listed) {
    TT_LOG(Warn) << "trace retention: " << listed.error().message() << "; no old recording removed";
    return;
  }
  // By file name, not path: a reload may spell trace_directory differently (a trailing slash, a
  // symlink) while a recording started under the old spelling is still written. Names are unique.
  std::set<std::string> running;
  for (const auto& [tgid, rec] : active_) running.insert(std::filesystem::path(rec->info.path).filename().string());
  struct Candidate {
    RecordingName parsed;
    std::string name;
  };
  std::vector<Candidate> recordings;
  for (const std::string& name : *listed) {
    if (auto parsed = parseRecordingName(name)) recordings.push_back({std::move(*parsed), name});
  }
  if (recordings.size() <= limits_.keepFiles) return;
  std::sort(recordings.begin(), recordings.end(), [](const Candidate& a, const Candidate& b) {
    return std::tie(a.parsed.stamp, a.parsed.attempt, a.name) < std::tie(b.parsed.stamp, b.parsed.attempt, b.name);
  });
  size_t excess = recordings.size() - limits_.keepFiles;
  std::vector<std::string> removed;
  for (const Candidate& c : recordings) {
    if (excess == 0) break;
    if (running.count(c.name) != 0) continue;  // still being written
    if (auto r = files_->removeOwnFile(dir, c.name); !r) {
      TT_LOG(Warn) << "trace retention: " << r.error().message();
      continue;
    }
    removed.push_back(c.name);
    --excess;
  }
  if (removed.empty()) return;
  constexpr size_t kNamed = 16;  // a lowered keep may remove thousands: name the first ones
  std::string names;
  for (size_t i = 0; i < removed.size() && i < kNamed; ++i) names += (i == 0 ? "" : ", ") + removed[i];
  if (removed.size() > kNamed) names += " and " + std::to_string(removed.size() - kNamed) + " more";
  TT_LOG(Info) << "removed " << removed.size() << " old recording(s) from " << dir << " to keep "
               << limits_.keepFiles << " (service.trace_keep_files): " << names;
}

Result<RecordingInfo> Recorder::stop(pid_t tgid, uint64_t nowNs) {
  std::lock_guard lock(mutex_);
  if (active_.count(tgid) == 0) return systemError(ENOENT, "pid " + std::to_string(tgid) + " is not being recorded");
  endLocked(tgid, nowNs, "stopped");
  return ended_.front();
}

std::vector<RecordingInfo> Recorder::list() const {
  std::lock_guard lock(mutex_);
  std::vector<RecordingInfo> out;
  for (const auto& [tgid, rec] : active_) {
    RecordingInfo info = rec->info;
    info.bytes = rec->writer.bytesWritten();
    out.push_back(info);
  }
  out.insert(out.end(), ended_.begin(), ended_.end());
  return out;
}

void Recorder::failLocked(Recording& rec, const Error& error) {
  if (rec.info.ended.empty()) {
    rec.info.ended = "write error: " + error.message();
    failed_.push_back(rec.info.tgid);
  }
}

void Recorder::onRegion(const RegionInfo& region) {
  std::lock_guard lock(mutex_);
  auto it = active_.find(region.tgid);
  if (it == active_.end()) return;
  if (auto r = it->second->writer.addRegion(region); !r) return failLocked(*it->second, r.error());
  ++it->second->info.regions;
}

void Recorder::onMark(const IterationMark& mark) {
  std::lock_guard lock(mutex_);
  auto it = active_.find(mark.tgid);
  if (it == active_.end()) return;
  if (auto r = it->second->writer.addMark(mark); !r) return failLocked(*it->second, r.error());
  ++it->second->info.marks;
}

void Recorder::onEvidence(const EvidenceBatch& evidence, uint64_t sinceNs, uint64_t nowNs) {
  std::lock_guard lock(mutex_);
  if (active_.empty()) return;
  sinceNs = std::min(sinceNs, nowNs);
  // Each access at a random time of its epoch (see the header), written in time order: the
  // writer needs that, and the previous epoch's accesses all lie before sinceNs. Marks are kept
  // apart in the file and carry their own timestamps. Block pages are recorded as the records
  // they stand for (a trace has one access per page).
  for (auto& [tgid, buffer] : pending_) buffer.clear();
  evidence.forEachRecord([&](const AccessEvidence& e) {
    auto it = active_.find(e.tgid);
    if (it == active_.end() || !it->second->info.ended.empty()) return;
    // Not before the recording started (its first epoch began earlier).
    const uint64_t from = std::clamp(it->second->info.startedNs, sinceNs, nowNs);
    const uint64_t span = nowNs - from;
    const uint64_t at = span == 0 ? nowNs : from + it->second->spread() % span;
    pending_[e.tgid].push_back({at, e.page, e.weight, e.kind == AccessKind::Store});
  });
  std::vector<pid_t> full;
  for (auto& [tgid, buffer] : pending_) {
    auto it = active_.find(tgid);
    if (buffer.empty() || it == active_.end()) continue;
    Recording& rec = *it->second;
    std::sort(buffer.begin(), buffer.end(),
              [](const PendingAccess& a, const PendingAccess& b) { return a.timeNs < b.timeNs; });
    for (const PendingAccess& a : buffer) {
      // A failed write ends the recording and with it what the rest of the evidence would add.
      if (auto r = rec.writer.addAccess(a.timeNs, a.page, a.count, a.write); !r) {
        failLocked(rec, r.error());
        break;
      }
      ++rec.info.accesses;
      if (rec.writer.bytesWritten() >= limits_.maxBytes) {  // a chunk was just written
        full.push_back(tgid);
        break;
      }
    }
  }
  for (pid_t tgid : full) endLocked(tgid, nowNs, "size limit");
  // Buffers of recordings that ended are dropped; the others keep their capacity for next epoch.
  std::erase_if(pending_, [this](const auto& entry) { return active_.count(entry.first) == 0; });
}

void Recorder::onProcessExit(pid_t tgid, uint64_t nowNs) {
  std::lock_guard lock(mutex_);
  if (active_.count(tgid) != 0) endLocked(tgid, nowNs, "process exited");
}

void Recorder::endEpoch(uint64_t nowNs) {
  std::lock_guard lock(mutex_);
  for (pid_t tgid : failed_) {
    auto it = active_.find(tgid);
    // Only the recording that failed: one restarted since then has no failure of its own.
    if (it == active_.end() || it->second->info.ended.empty()) continue;
    const std::string why = it->second->info.ended;  // a copy: endLocked erases the recording
    endLocked(tgid, nowNs, why);
  }
  failed_.clear();
  std::vector<std::pair<pid_t, std::string>> done;
  for (auto& [tgid, rec] : active_) {
    if (auto r = rec->writer.flush(); !r) {
      done.emplace_back(tgid, "write error: " + r.error().message());
      continue;
    }
    if (rec->writer.bytesWritten() >= limits_.maxBytes) done.emplace_back(tgid, "size limit");
    else if (nowNs >= rec->info.endsByNs) done.emplace_back(tgid, "time limit");
  }
  for (const auto& [tgid, why] : done) endLocked(tgid, nowNs, why);
}

void Recorder::stopAll(uint64_t nowNs) {
  std::lock_guard lock(mutex_);
  while (!active_.empty()) endLocked(active_.begin()->first, nowNs, "daemon stopped");
}

void Recorder::endLocked(pid_t tgid, uint64_t nowNs, const std::string& why) {
  auto it = active_.find(tgid);
  if (it == active_.end()) return;
  Recording& rec = *it->second;
  RecordingInfo info = rec.info;
  info.ended = why;
  if (auto r = rec.writer.close(); !r && why.rfind("write error", 0) != 0) info.ended = "write error: " + r.error().message();
  info.active = false;
  info.bytes = rec.writer.bytesWritten();
  const double seconds = static_cast<double>(nowNs - std::min(nowNs, info.startedNs)) / 1e9;
  TT_LOG(Info) << "recording of pid " << tgid << " ended (" << info.ended << "): " << info.path << ", " << info.accesses
               << " accesses, " << info.marks << " marks, " << info.bytes << " bytes, " << seconds << " s";
  ended_.push_front(std::move(info));
  while (ended_.size() > kEndedKept) ended_.pop_back();
  active_.erase(it);
}

}  // namespace tt::trace
