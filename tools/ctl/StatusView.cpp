#include "ctl/StatusView.h"

#include <algorithm>
#include <cstdio>
#include <iomanip>
#include <sstream>

namespace tt::ctl {

namespace pb = tensortier::v1;
using nlohmann::json;

std::string bytes(uint64_t b) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  std::ostringstream s;
  s << std::fixed << std::setprecision(u == 0 ? 0 : 1) << v << ' ' << units[u];
  return s.str();
}

namespace {

// The rates the planner copies with each way; a direction not timed yet is planned as the other.
std::string plannedRates(double promote, double demote) {
  if (promote <= 0 && demote <= 0) return "the configured initial bandwidth (not measured yet)";
  const auto way = [](double rate, const char* dir, const char* other) {
    return rate > 0 ? bytes(static_cast<uint64_t>(rate)) + "/s " + dir + " (measured)"
                    : std::string(dir) + " as " + other + " (not timed yet)";
  };
  return way(promote, "up", "down") + ", " + way(demote, "down", "up");
}

}  // namespace

std::string Table::str() const {
  std::vector<size_t> w;
  for (const auto& r : rows_)
    for (size_t i = 0; i < r.size(); ++i) {
      if (w.size() <= i) w.push_back(0);
      w[i] = std::max(w[i], r[i].size());
    }
  std::ostringstream out;
  for (const auto& r : rows_) {
    for (size_t i = 0; i < r.size(); ++i) {
      out << r[i];
      if (i + 1 < r.size()) out << std::string(w[i] - r[i].size() + 2, ' ');
    }
    out << '\n';
  }
  return out.str();
}

json statusJson(const pb::StatusReply& s) {
  json nodes = json::array(), sources = json::array();
  for (const auto& n : s.nodes())
    nodes.push_back({{"node", n.node()}, {"tier", n.tier()}, {"tier_source", n.tier_source()},
                     {"total_bytes", n.total_bytes()}, {"free_bytes", n.free_bytes()},
                     {"budget_bytes", n.budget_bytes()}, {"managed_bytes", n.managed_bytes()},
                     {"cpus", std::vector<int>(n.cpus().begin(), n.cpus().end())}});
  for (const auto& src : s.sources()) {
    json system = json::array();
    for (const auto& m : src.system_migrations())
      system.push_back(
          {{"reason", m.reason()}, {"succeeded_pages", m.succeeded_pages()}, {"failed_pages", m.failed_pages()}});
    sources.push_back({{"name", src.name()}, {"active", src.active()}, {"detail", src.detail()},
                       {"samples", src.samples()}, {"lost", src.lost()}, {"throttled", src.throttled()},
                       {"paused", src.paused()}, {"pauses", src.pauses()},
                       {"kernel_promoted_pages", src.kernel_promoted_pages()},
                       {"kernel_demoted_pages", src.kernel_demoted_pages()},
                       {"kernel_syscall_pages", src.kernel_syscall_pages()},
                       {"kernel_other_pages", src.kernel_other_pages()},
                       {"system_migrations", system}});
    if (src.has_kernel_undone_entries()) sources.back()["kernel_undone_entries"] = src.kernel_undone_entries();
  }
  json j = {{"daemon_version", s.daemon_version()},
            {"uptime_ms", s.uptime_ms()},
            {"nodes", nodes},
            {"fast_tier_budget_bytes", s.fast_tier_budget_bytes()},
            {"fast_tier_used_bytes", s.fast_tier_used_bytes()},
            {"sources", sources},
            {"source_notes", std::vector<std::string>(s.source_notes().begin(), s.source_notes().end())},
            {"epochs", s.epochs()},
            {"epoch_ms", s.epoch_ms()},
            {"last_epoch_ms", s.last_epoch_ms()},
            {"bytes_promoted", s.bytes_promoted()},
            {"bytes_demoted", s.bytes_demoted()},
            {"promote_bytes_per_sec", s.promote_bytes_per_sec()},
            {"demote_bytes_per_sec", s.demote_bytes_per_sec()},
            {"promote_bandwidth_bytes_per_sec", s.promote_bandwidth_bytes_per_sec()},
            {"demote_bandwidth_bytes_per_sec", s.demote_bandwidth_bytes_per_sec()},
            {"stuck_fast_pages", s.stuck_fast_pages()},
            {"stuck_slow_pages", s.stuck_slow_pages()},
            {"slow_access_penalty_ns", s.slow_access_penalty_ns()},
            {"slow_access_penalty_source", s.slow_access_penalty_source()},
            {"processes", s.processes()},
            {"regions", s.regions()},
            {"registered_bytes", s.registered_bytes()},
            {"connections", s.connections()},
            {"stages_missing", std::vector<std::string>(s.stages_missing().begin(), s.stages_missing().end())}};
  json weights = json::object();
  for (const auto& w : s.feature_weights()) weights[w.name()] = w.weight();
  j["feature_weights"] = weights;
  return j;
}

std::string statusText(const pb::StatusReply& s) {
  std::ostringstream out;
  out << "tensortierd " << s.daemon_version() << ", up " << s.uptime_ms() / 1000 << " s, epoch " << s.epoch_ms()
      << " ms (" << s.epochs() << " run, last " << std::fixed << std::setprecision(1) << s.last_epoch_ms()
      << " ms)\n\n";
  // BUDGET and MANAGED: a fast node's share of the budget and the registered bytes on it.
  Table nodes({"NODE", "TIER", "WHY", "TOTAL", "FREE", "BUDGET", "MANAGED", "CPUS"});
  for (const auto& n : s.nodes()) {
    const bool planned = n.budget_bytes() > 0;
    nodes.add({std::to_string(n.node()), n.tier(), n.tier_source(), bytes(n.total_bytes()), bytes(n.free_bytes()),
               planned ? bytes(n.budget_bytes()) : "-", planned ? bytes(n.managed_bytes()) : "-",
               n.cpus_size() ? std::to_string(n.cpus_size()) : "none"});
  }
  out << nodes.str() << '\n';
  out << "fast tier: budget " << (s.fast_tier_budget_bytes() ? bytes(s.fast_tier_budget_bytes()) : "unknown")
      << ", registered bytes on it " << bytes(s.fast_tier_used_bytes()) << "\n";
  out << "clients: " << s.processes() << " process(es), " << s.regions() << " region(s), "
      << bytes(s.registered_bytes()) << " registered, " << s.connections() << " connection(s)\n";
  out << "migration: promoted " << bytes(s.bytes_promoted()) << ", demoted " << bytes(s.bytes_demoted()) << "; now "
      << bytes(static_cast<uint64_t>(s.promote_bytes_per_sec())) << "/s up, "
      << bytes(static_cast<uint64_t>(s.demote_bytes_per_sec())) << "/s down; planning with "
      << plannedRates(s.promote_bandwidth_bytes_per_sec(), s.demote_bandwidth_bytes_per_sec())
      << "\n";
  if (s.stuck_fast_pages() + s.stuck_slow_pages() > 0)
    out << "migration: " << s.stuck_fast_pages() << " page(s) on fast nodes and " << s.stuck_slow_pages()
        << " on slow nodes left busy by the last moves (pinned by the kernel), held where they are before a retry\n";
  if (s.slow_access_penalty_ns() > 0) {
    char ns[32];
    std::snprintf(ns, sizeof ns, "%.6g", s.slow_access_penalty_ns());
    out << "planner: a slow-tier access costs " << ns << " ns more than a fast one (" << s.slow_access_penalty_source()
        << ")\n";
  }
  out << "\n";
  Table sources({"SOURCE", "STATE", "SAMPLES", "LOST", "THROTTLED", "DETAIL"});
  for (const auto& src : s.sources())
    sources.add({src.name(), !src.active() ? "off" : src.paused() ? "paused" : "on", std::to_string(src.samples()),
                 std::to_string(src.lost()),
                 std::to_string(src.throttled()), src.detail()});
  out << sources.str();
  // The start log's other lines: kernel tiering, topology, sources not opened and why.
  for (const auto& note : s.source_notes()) out << note << '\n';
  for (const auto& src : s.sources()) {
    const uint64_t moved = src.kernel_promoted_pages() + src.kernel_demoted_pages() + src.kernel_syscall_pages() +
                           src.kernel_other_pages();
    if (moved == 0) continue;
    out << "kernel moved pages of tracked processes (" << src.name() << "): " << src.kernel_promoted_pages()
        << " promoted, " << src.kernel_demoted_pages() << " demoted, " << src.kernel_syscall_pages()
        << " by the processes' own move_pages/mbind, " << src.kernel_other_pages() << " other\n";
  }
  for (const auto& src : s.sources()) {
    if (src.system_migrations().empty()) continue;
    out << "kernel migrated pages, whole machine, since start (" << src.name() << "):";
    const char* sep = " ";
    for (const auto& m : src.system_migrations()) {
      out << sep << m.reason() << ' ' << m.succeeded_pages() << " (" << m.failed_pages() << " failed)";
      sep = ", ";
    }
    out << '\n';
  }
  for (const auto& src : s.sources())
    if (src.has_kernel_undone_entries() && src.kernel_undone_entries() > 0)
      out << "kernel mapped tracked pages back instead of moving them (" << src.name()
          << "): " << src.kernel_undone_entries() << " entries (failed migrations undone, huge pages split in place)\n";
  if (!s.feature_weights().empty()) {
    out << "\nheat feature weights (adapted online):";
    // Three significant digits: a weight at a small floor still shows (the stream is std::fixed above).
    for (const auto& w : s.feature_weights()) out << ' ' << w.name() << ' ' << std::defaultfloat << std::setprecision(3) << w.weight();
    out << '\n';
  }
  for (const auto& m : s.stages_missing()) out << "not wired in this build: " << m << '\n';
  return out.str();
}

}  // namespace tt::ctl
