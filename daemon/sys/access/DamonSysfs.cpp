#include "sys/access/DamonSysfs.h"

#include <errno.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "core/Parse.h"

namespace tt::sys {

namespace {
constexpr const char* kAdmin = "kernel/mm/damon/admin/kdamonds";

Result<uint64_t> readUint(const Fs& fs, const std::string& path) {
  auto line = fs.readLine(path);
  if (!line) return line.error();
  auto v = parseUint(*line);
  if (!v) return withContext(v.error(), fs.resolve(path));
  return v;
}
}  // namespace

Result<std::vector<OwnedKdamond>> loadOwnedKdamonds(const std::string& path) {
  std::vector<OwnedKdamond> out;
  std::ifstream in(path);
  if (!in) {
    if (errno == ENOENT) return out;
    return errnoError("open " + path);
  }
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    unsigned kdamond = 0;
    int pid = 0;
    char rest = 0;
    if (std::sscanf(line.c_str(), "kdamond=%u pid=%d%c", &kdamond, &pid, &rest) != 2 || pid <= 0)
      return systemError(EINVAL, path + ":" + std::to_string(n) + ": not \"kdamond=N pid=P\": " + line);
    out.push_back({kdamond, static_cast<pid_t>(pid)});
  }
  return out;
}

Result<void> saveOwnedKdamonds(const std::string& path, const std::vector<OwnedKdamond>& owned) {
  if (owned.empty()) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return errnoError("remove " + path);
    return {};
  }
  std::string text;
  for (const OwnedKdamond& k : owned) text += "kdamond=" + std::to_string(k.kdamond) + " pid=" + std::to_string(k.pid) + "\n";
  return replaceFile(path, text);
}

std::string DamonSysfs::dir(uint32_t slot) const {
  return std::string(kAdmin) + "/" + std::to_string(first_ + slot);
}

bool DamonSysfs::available() const { return sysfs_.exists(std::string(kAdmin) + "/nr_kdamonds"); }

Result<std::vector<uint32_t>> DamonSysfs::prepare() {
  const std::string nr = std::string(kAdmin) + "/nr_kdamonds";
  auto current = readUint(sysfs_, nr);
  if (!current) return current.error();
  shortfall_.clear();
  slots_ = wanted_;
  grewFrom_.reset();
  if (*current < first_ + wanted_) {
    std::string why;
    for (uint64_t k = 0; k < std::min<uint64_t>(*current, first_) && why.empty(); ++k) {
      auto contexts = readUint(sysfs_, std::string(kAdmin) + "/" + std::to_string(k) + "/contexts/nr_contexts");
      if (!contexts)
        why = contexts.error().message();
      else if (*contexts > 0)
        why = "kdamond " + std::to_string(k) + ", below sources.damon.kdamond_index, is configured (another tool's), "
              "and growing nr_kdamonds would remove its setup";
    }
    if (why.empty()) {
      if (auto w = sysfs_.writeFile(nr, std::to_string(first_ + wanted_)); !w)
        why = w.error().message() + (w.error().code == EBUSY ? " (a kdamond runs)" : "");
      else
        grewFrom_ = *current;
    }
    if (!why.empty()) {
      const uint64_t existing = *current > first_ ? *current - first_ : 0;
      const std::string asked = "nr_kdamonds is " + std::to_string(*current) + ", short of the " +
                                std::to_string(first_ + wanted_) + " that kdamond_index " + std::to_string(first_) +
                                " and " + std::to_string(wanted_) + " slots need, and cannot grow: " + why;
      if (existing == 0) return systemError(EBUSY, asked);
      shortfall_ = asked + "; using the " + std::to_string(existing) + " that exist";
      slots_ = static_cast<uint32_t>(existing);
    }
  }
  std::vector<uint32_t> busy;
  for (uint32_t s = 0; s < slots_; ++s) {
    auto on = running(s);
    if (!on) return on.error();
    if (*on) {
      busy.push_back(s);
      continue;
    }
    if (auto w = sysfs_.writeFile(dir(s) + "/contexts/nr_contexts", "1"); !w) return w.error();
  }
  return busy;
}

Result<void> DamonSysfs::undoGrowth() {
  if (!grewFrom_) return {};
  const uint64_t to = *grewFrom_;
  grewFrom_.reset();
  return sysfs_.writeFile(std::string(kAdmin) + "/nr_kdamonds", std::to_string(to));
}

Result<pid_t> DamonSysfs::targetPid(uint32_t slot) const {
  auto pid = readUint(sysfs_, dir(slot) + "/contexts/0/targets/0/pid_target");
  if (!pid) return pid.error();
  return static_cast<pid_t>(*pid);
}

Result<bool> DamonSysfs::running(uint32_t slot) const {
  auto state = sysfs_.readLine(dir(slot) + "/state");
  if (!state) return state.error();
  return trim(*state) != "off" && !trim(*state).empty();
}

Result<bool> DamonSysfs::reportsRegions(uint32_t slot, bool running) {
  if (slot >= slots_) return false;
  const std::string schemes = dir(slot) + "/contexts/0/schemes";
  if (!running) {
    if (auto w = sysfs_.writeFile(schemes + "/nr_schemes", "1"); !w) return w.error();
  }
  return sysfs_.exists(schemes + "/0/tried_regions");
}

Result<bool> DamonSysfs::offersVaddr(uint32_t slot) const {
  const std::string path = dir(slot) + "/contexts/0/avail_operations";
  if (!sysfs_.exists(path)) return true;
  auto text = sysfs_.readFile(path);
  if (!text) return text.error();
  std::string_view rest = *text;
  while (!rest.empty()) {
    const size_t end = rest.find_first_of(" \n");
    if (rest.substr(0, end) == "vaddr") return true;
    rest.remove_prefix(end == std::string_view::npos ? rest.size() : end + 1);
  }
  return false;
}

Result<void> DamonSysfs::start(uint32_t slot, pid_t pid, const DamonAttrs& a) {
  if (slot >= slots_) return logicError("DAMON slot " + std::to_string(slot) + " out of range");
  const std::string ctx = dir(slot) + "/contexts/0";
  const std::pair<std::string, std::string> writes[] = {
      {dir(slot) + "/contexts/nr_contexts", "1"},  // a slot running at prepare() was not given one
      {ctx + "/operations", "vaddr"},
      {ctx + "/monitoring_attrs/intervals/sample_us", std::to_string(a.sampleUs)},
      {ctx + "/monitoring_attrs/intervals/aggr_us", std::to_string(a.aggrUs)},
      {ctx + "/monitoring_attrs/intervals/update_us", std::to_string(a.updateUs)},
      {ctx + "/monitoring_attrs/nr_regions/min", std::to_string(a.minRegions)},
      {ctx + "/monitoring_attrs/nr_regions/max", std::to_string(a.maxRegions)},
      {ctx + "/targets/nr_targets", "1"},
      {ctx + "/targets/0/pid_target", std::to_string(pid)},
      {ctx + "/schemes/nr_schemes", "1"},
      {ctx + "/schemes/0/action", "stat"},
      // Match every region: size, access count and age unbounded.
      {ctx + "/schemes/0/access_pattern/sz/min", "0"},
      {ctx + "/schemes/0/access_pattern/sz/max", "18446744073709551615"},
      {ctx + "/schemes/0/access_pattern/nr_accesses/min", "0"},
      {ctx + "/schemes/0/access_pattern/nr_accesses/max", "4294967295"},
      {ctx + "/schemes/0/access_pattern/age/min", "0"},
      {ctx + "/schemes/0/access_pattern/age/max", "4294967295"},
      {dir(slot) + "/state", "on"},
  };
  for (const auto& [path, value] : writes)
    if (auto w = sysfs_.writeFile(path, value); !w) return withContext(w.error(), "DAMON start pid " + std::to_string(pid));
  return {};
}

Result<void> DamonSysfs::stop(uint32_t slot) {
  auto on = running(slot);
  if (!on) return on.error();
  if (!*on) return {};
  return sysfs_.writeFile(dir(slot) + "/state", "off");
}

Result<void> DamonSysfs::requestRegions(uint32_t slot) const {
  return sysfs_.writeFile(dir(slot) + "/state", "update_schemes_tried_regions");
}

Result<std::vector<DamonRegion>> DamonSysfs::regions(uint32_t slot) {
  if (auto w = requestRegions(slot); !w) return w.error();
  return readRegions(slot);
}

Result<std::vector<DamonRegion>> DamonSysfs::readRegions(uint32_t slot) const {
  const std::string tried = dir(slot) + "/contexts/0/schemes/0/tried_regions";
  auto entries = sysfs_.listDir(tried);
  if (!entries) return entries.error();
  std::vector<DamonRegion> out;
  for (const auto& e : *entries) {
    if (e.empty() || !std::all_of(e.begin(), e.end(), [](char c) { return c >= '0' && c <= '9'; })) continue;
    const std::string r = tried + "/" + e;
    auto start = readUint(sysfs_, r + "/start");
    auto end = readUint(sysfs_, r + "/end");
    auto acc = readUint(sysfs_, r + "/nr_accesses");
    auto age = readUint(sysfs_, r + "/age");
    if (!start) return start.error();
    if (!end) return end.error();
    if (!acc) return acc.error();
    if (!age) return age.error();
    out.push_back(DamonRegion{*start, *end, static_cast<uint32_t>(*acc), static_cast<uint32_t>(*age)});
  }
  std::sort(out.begin(), out.end(), [](const DamonRegion& a, const DamonRegion& b) { return a.start < b.start; });
  return out;
}

}  // namespace tt::sys
