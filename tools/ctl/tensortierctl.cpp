// tensortierctl: inspect and steer a running tensortierd.
//
//   tensortierctl [--socket PATH] [--json] status|processes|regions|top|tune|migrate|record|check-config ...
//
// Human tables by default; --json prints one JSON document (nlohmann-json) for scripts.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "config/Config.h"
#include "ctl/CtlClient.h"
#include "ctl/RegionsView.h"
#include "ctl/StatusView.h"

namespace {

namespace pb = tensortier::v1;
using nlohmann::json;
using tt::ctl::bytes;
using tt::ctl::regionJson;
using tt::ctl::regionsTable;
using tt::ctl::Table;

// How long a request is repeated while the daemon answers STARTING (its sources take 0.3 s on the
// development host, a few seconds under emulation; systemd gives a start 90 s).
constexpr std::chrono::seconds kStartingWait{30};

constexpr const char* kUsage =
    "usage: tensortierctl [--socket PATH] [--json] COMMAND [OPTIONS]\n"
    "commands:\n"
    "  status                         topology, tiers, fast-tier budget and use, sources, rates\n"
    "  processes                      registered client processes\n"
    "  regions [--pid PID]            registered regions: placement per node, heat, steps of steady\n"
    "                                 use (the planner's tenure), kind\n"
    "  top [--count N] [--pages M] [--pid PID]\n"
    "                                 hottest and coldest regions (N each, default 10), then the M\n"
    "                                 hottest 4 KiB pages by the heat model (default none, at most\n"
    "                                 1000; root or the admin group); --pid: of that process only\n"
    "  tune [--promote-mbps N] [--demote-mbps N] [--epoch-ms N] [--sampling-budget PERCENT]\n"
    "       [--max-regions-per-uid N] [--max-registered-mib-per-uid N] [--max-connections-per-uid N]\n"
    "       [--policy KEY=VALUE]...   change the running daemon (root or the admin group)\n"
    "  migrate (--region ID | --pid PID) --node N\n"
    "                                 move a region or all regions of a process and pin it there for\n"
    "                                 service.manual_pin_seconds (root or admin group)\n"
    "  migrate (--region ID | --pid PID) --unpin\n"
    "                                 drop the pin: the policy places it again\n"
    "  record start --pid PID [--seconds N]\n"
    "                                 record a live run (sampled accesses, marks, regions) as a trace\n"
    "                                 for `tiersim run --trace FILE` (root or admin group)\n"
    "  record stop --pid PID          end it; prints the file\n"
    "  record [list]                  running and recently ended recordings\n"
    "  check-config [--config PATH]   validate a config file (default /etc/tensortier/tensortierd.conf)\n"
    "--socket defaults to $TENSORTIER_SOCKET, else /run/tensortier/tensortier.sock.\n";

void printRecordings(const pb::RecordReply& reply, bool asJson) {
  if (asJson) {
    json a = json::array();
    for (const auto& r : reply.recordings())
      a.push_back({{"pid", r.pid()},         {"path", r.path()},     {"active", r.active()},
                   {"accesses", r.accesses()}, {"marks", r.marks()},   {"regions", r.regions()},
                   {"bytes", r.bytes()},     {"elapsed_ms", r.elapsed_ms()}, {"ends_in_ms", r.ends_in_ms()},
                   {"ended", r.ended()}});
    std::cout << json{{"recordings", a}}.dump(2) << '\n';
    return;
  }
  if (reply.recordings().empty()) {
    std::cout << "no recordings\n";
    return;
  }
  for (const auto& r : reply.recordings()) {
    std::cout << "pid " << r.pid() << "  " << (r.active() ? "recording" : "ended: " + r.ended()) << "  "
              << r.accesses() << " accesses, " << r.marks() << " marks, " << r.regions() << " regions, "
              << bytes(r.bytes());
    if (r.active()) std::cout << ", " << r.elapsed_ms() / 1000 << " s so far, at most " << r.ends_in_ms() / 1000 << " s more";
    std::cout << "\n  " << r.path() << '\n';
  }
}

void printStatus(const pb::StatusReply& s, bool asJson) {
  if (asJson) {
    std::cout << tt::ctl::statusJson(s).dump(2) << '\n';
    return;
  }
  std::cout << tt::ctl::statusText(s);
}

void printProcesses(const pb::ProcessesReply& r, bool asJson) {
  if (asJson) {
    json a = json::array();
    for (const auto& p : r.processes())
      a.push_back({{"pid", p.pid()}, {"uid", p.uid()}, {"client_name", p.client_name()}, {"regions", p.regions()},
                   {"registered_bytes", p.registered_bytes()}, {"fast_tier_bytes", p.fast_tier_bytes()},
                   {"last_step", p.last_step()}, {"accepts_mbind", p.accepts_mbind()},
                   {"step_period_us", p.step_period_us()}, {"step_period_source", p.step_period_source()},
                   {"step_period_confidence", p.step_period_confidence()}, {"phase", p.phase()}});
    std::cout << json{{"processes", a}}.dump(2) << '\n';
    return;
  }
  Table t({"PID", "UID", "CLIENT", "REGIONS", "REGISTERED", "FAST", "STEP", "PERIOD", "PHASE", "MBIND"});
  for (const auto& p : r.processes()) {
    std::ostringstream period;
    if (p.step_period_us() == 0) period << "-";
    else period << std::fixed << std::setprecision(1) << static_cast<double>(p.step_period_us()) / 1000.0 << " ms ("
                << p.step_period_source() << ")";
    t.add({std::to_string(p.pid()), std::to_string(p.uid()), p.client_name().empty() ? "-" : p.client_name(),
           std::to_string(p.regions()), bytes(p.registered_bytes()), bytes(p.fast_tier_bytes()),
           std::to_string(p.last_step()), period.str(), p.phase().empty() ? "-" : p.phase(),
           p.accepts_mbind() ? "yes" : "no"});
  }
  std::cout << t.str();
}

struct Args {
  std::vector<std::string> items;
  size_t i = 0;
  [[nodiscard]] bool more() const { return i < items.size(); }
  std::string next(const std::string& option) {
    if (!more()) {
      std::cerr << "tensortierctl: " << option << " needs a value\n";
      std::exit(2);
    }
    return items[i++];
  }
};

// A non-negative decimal integer of at most `max`. Anything else is a usage error (exit 2): a
// narrowing cast would turn --pid 4294967297 into pid 1, and act on a process nobody named.
uint64_t number(const std::string& option, const std::string& text, uint64_t max = UINT64_MAX) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (errno || !end || *end || text.empty() || text[0] == '-') {
    std::cerr << "tensortierctl: " << option << ": '" << text << "' is not a non-negative integer\n";
    std::exit(2);
  }
  if (v > max) {
    std::cerr << "tensortierctl: " << option << ": " << text << " is out of range (at most " << max << ")\n";
    std::exit(2);
  }
  return v;
}
uint32_t number32(const std::string& option, const std::string& text) {
  return static_cast<uint32_t>(number(option, text, UINT32_MAX));
}
// Process ids and NUMA nodes travel as int32.
int32_t numberInt32(const std::string& option, const std::string& text) {
  return static_cast<int32_t>(number(option, text, INT32_MAX));
}

int fail(const std::string& message) {
  std::cerr << "tensortierctl: " << message << '\n';
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  for (int k = 1; k < argc; ++k) args.items.emplace_back(argv[k]);
  std::string socket = tt::ctl::defaultSocketPath();
  bool asJson = false;
  std::string command;
  std::vector<std::string> rest;
  while (args.more()) {
    const std::string a = args.next("");
    if (a == "--socket") socket = args.next(a);
    else if (a == "--json") asJson = true;
    else if (a == "-h" || a == "--help") { std::cout << kUsage; return 0; }
    else if (a == "--version") { std::cout << "tensortierctl " << TT_VERSION << '\n'; return 0; }
    else if (command.empty() && a.rfind("--", 0) != 0) command = a;
    else rest.push_back(a);
  }
  if (command.empty()) {
    std::cerr << kUsage;
    return 2;
  }
  Args opts{rest, 0};

  if (command == "check-config") {
    std::string path(tt::config::kDefaultConfigPath);
    while (opts.more()) {
      const std::string a = opts.next("");
      if (a == "--config") path = opts.next(a);
      else { std::cerr << kUsage; return 2; }
    }
    auto loaded = tt::config::loadConfigFile(path);
    if (asJson) {
      std::cout << json{{"path", path}, {"valid", loaded.ok()}, {"error", loaded.ok() ? "" : loaded.error().message()}}.dump(2)
                << '\n';
    } else if (loaded) {
      std::cout << path << ": valid\n";
    } else {
      std::cerr << loaded.error().message() << '\n';
    }
    return loaded ? 0 : 1;
  }

  pb::ClientMessage request;
  if (command == "status") {
    request.mutable_status();
  } else if (command == "processes") {
    request.mutable_processes();
  } else if (command == "regions") {
    auto* r = request.mutable_regions();
    while (opts.more()) {
      const std::string a = opts.next("");
      if (a == "--pid") r->set_pid(numberInt32(a, opts.next(a)));
      else { std::cerr << kUsage; return 2; }
    }
  } else if (command == "top") {
    auto* r = request.mutable_top();
    while (opts.more()) {
      const std::string a = opts.next("");
      if (a == "--count") r->set_count(number32(a, opts.next(a)));
      // Passed on as given: the daemon refuses more than it serves (AdminService::kMaxTopPages).
      else if (a == "--pages") r->set_pages(number32(a, opts.next(a)));
      else if (a == "--pid") r->set_pid(numberInt32(a, opts.next(a)));
      else { std::cerr << kUsage; return 2; }
    }
  } else if (command == "tune") {
    auto* r = request.mutable_tune();
    bool any = false;
    while (opts.more()) {
      const std::string a = opts.next("");
      any = true;
      if (a == "--promote-mbps") r->set_promote_mbps(number32(a, opts.next(a)));
      else if (a == "--demote-mbps") r->set_demote_mbps(number32(a, opts.next(a)));
      else if (a == "--epoch-ms") r->set_epoch_ms(number32(a, opts.next(a)));
      else if (a == "--sampling-budget") {
        const std::string v = opts.next(a);
        char* end = nullptr;
        const double d = std::strtod(v.c_str(), &end);
        if (!end || *end || v.empty()) return fail(a + ": '" + v + "' is not a number");
        r->set_sampling_cpu_budget_percent(d);
      } else if (a == "--max-regions-per-uid") r->set_max_regions_per_uid(number32(a, opts.next(a)));
      else if (a == "--max-registered-mib-per-uid") r->set_max_registered_mib_per_uid(number(a, opts.next(a)));
      else if (a == "--max-connections-per-uid") r->set_max_connections_per_uid(number32(a, opts.next(a)));
      else if (a == "--policy") r->add_policy(opts.next(a));
      else { std::cerr << kUsage; return 2; }
    }
    if (!any) return fail("tune: nothing to change (see --help)");
  } else if (command == "migrate") {
    auto* r = request.mutable_migrate();
    bool haveNode = false;
    while (opts.more()) {
      const std::string a = opts.next("");
      if (a == "--region") r->set_region_id(number(a, opts.next(a)));
      else if (a == "--pid") r->set_pid(numberInt32(a, opts.next(a)));
      else if (a == "--node") r->set_node(numberInt32(a, opts.next(a))), haveNode = true;
      else if (a == "--unpin") r->set_unpin(true);
      else { std::cerr << kUsage; return 2; }
    }
    if (r->target_case() == pb::MigrateRequest::TARGET_NOT_SET || (haveNode == r->unpin()))
      return fail("migrate needs --region ID or --pid PID, and either --node N or --unpin");
  } else if (command == "record") {
    auto* r = request.mutable_record();
    const std::string action = opts.more() ? opts.next("") : "list";
    if (action == "start") r->set_action(pb::RecordRequest::START);
    else if (action == "stop") r->set_action(pb::RecordRequest::STOP);
    else if (action == "list") r->set_action(pb::RecordRequest::LIST);
    else return fail("record: unknown action '" + action + "' (start, stop or list)");
    while (opts.more()) {
      const std::string a = opts.next("");
      if (a == "--pid") r->set_pid(numberInt32(a, opts.next(a)));
      else if (a == "--seconds") r->set_seconds(number32(a, opts.next(a)));
      else { std::cerr << kUsage; return 2; }
    }
    if (r->action() != pb::RecordRequest::LIST && r->pid() <= 0) return fail("record " + action + " needs --pid PID");
  } else {
    std::cerr << "tensortierctl: unknown command '" << command << "'\n" << kUsage;
    return 2;
  }

  tt::ctl::CtlClient client;
  if (auto c = client.connect(socket); !c) return fail(c.error().message());
  if (auto h = client.hello("tensortierctl " + command); !h) return fail(h.error().message());
  const bool unpinRequest = request.has_migrate() && request.migrate().unpin();
  const bool pagesRequested = request.has_top() && request.top().pages() > 0;
  // A daemon whose sources are still opening (a start by socket activation: this very connection
  // may have started it) answers STARTING; its answer comes once they are open, in a few seconds.
  const auto startDeadline = std::chrono::steady_clock::now() + kStartingWait;
  auto reply = client.call(request);
  while (reply && reply->has_error() && reply->error().code() == pb::STARTING &&
         std::chrono::steady_clock::now() < startDeadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    reply = client.call(request);
  }
  if (!reply) return fail(reply.error().message());
  if (reply->has_error()) {
    if (asJson)
      std::cout << json{{"error", {{"code", pb::ErrorCode_Name(reply->error().code())}, {"message", reply->error().message()}}}}.dump(2)
                << '\n';
    return fail(pb::ErrorCode_Name(reply->error().code()) + ": " + reply->error().message());
  }

  if (reply->has_status()) {
    printStatus(reply->status(), asJson);
  } else if (reply->has_processes()) {
    printProcesses(reply->processes(), asJson);
  } else if (reply->has_regions()) {
    if (asJson) {
      json a = json::array();
      for (const auto& r : reply->regions().regions()) a.push_back(regionJson(r));
      std::cout << json{{"regions", a}}.dump(2) << '\n';
    } else {
      std::cout << regionsTable(reply->regions().regions());
    }
  } else if (reply->has_top()) {
    if (asJson) std::cout << tt::ctl::topJson(reply->top()).dump(2) << '\n';
    else std::cout << tt::ctl::topText(reply->top(), pagesRequested);
  } else if (reply->has_tune()) {
    if (asJson) std::cout << json{{"effective_config", reply->tune().effective_config()}}.dump(2) << '\n';
    else std::cout << reply->tune().effective_config();
  } else if (reply->has_migrate()) {
    const auto& m = reply->migrate();
    if (asJson)
      std::cout << json{{"requested_bytes", m.requested_bytes()}, {"moved_bytes", m.moved_bytes()},
                        {"queued", m.queued()}, {"detail", m.detail()}, {"pinned", m.pinned()},
                        {"pin_expires_in_ms", m.pin_expires_in_ms()}, {"unpinned_ranges", m.unpinned_ranges()}}
                       .dump(2)
                << '\n';
    else if (unpinRequest)
      std::cout << m.unpinned_ranges() << " pin(s) dropped: " << m.detail() << '\n';
    else
      std::cout << bytes(m.requested_bytes()) << (m.queued() ? " queued: " : " moved: ") << m.detail() << '\n';
  } else if (reply->has_record()) {
    printRecordings(reply->record(), asJson);
  } else {
    return fail("unexpected reply from the daemon");
  }
  return 0;
}
