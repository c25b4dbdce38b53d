#include "ctl/RegionsView.h"

#include <cmath>
#include <iomanip>
#include <sstream>

#include "ctl/StatusView.h"

namespace tt::ctl {

namespace pb = tensortier::v1;
using nlohmann::json;

namespace {

std::string placementText(const pb::RegionEntry& r) {
  std::string s;
  for (const auto& nb : r.bytes_per_node()) s += (s.empty() ? "" : " ") + std::string("n") + std::to_string(nb.node()) + "=" + bytes(nb.bytes());
  if (r.unmapped_bytes()) s += (s.empty() ? "" : " ") + std::string("unmapped=") + bytes(r.unmapped_bytes());
  if (!s.empty() && r.sample_stride() > 1) s = "~" + s + " (1/" + std::to_string(r.sample_stride()) + " pages)";
  return s.empty() ? "-" : s;
}

std::string pinText(const pb::RegionEntry& r) {
  if (!r.pinned()) return "-";
  const std::string node = "n" + std::to_string(r.pinned_node());
  if (r.pin_expires_in_ms() == 0) return node + " until unpinned";
  return node + " " + std::to_string((r.pin_expires_in_ms() + 999) / 1000) + "s";
}

std::string heatText(double heat) {
  std::ostringstream s;
  s << std::setprecision(4) << heat;
  return s.str();
}

// Whole steps of steady use (the planner's tenure); "-" when not in use.
std::string steadyText(double steps) {
  if (!(steps > 0)) return "-";
  std::ostringstream s;
  s << std::fixed << std::setprecision(0) << std::floor(steps);
  return s.str();
}

}  // namespace

std::string hex(uint64_t v) {
  std::ostringstream s;
  s << "0x" << std::hex << v;
  return s.str();
}

json regionJson(const pb::RegionEntry& r) {
  json nodes = json::object();
  for (const auto& nb : r.bytes_per_node()) nodes[std::to_string(nb.node())] = nb.bytes();
  return {{"pid", r.pid()},         {"region_id", r.region_id()},   {"name", r.name()},
          {"kind", r.kind()},       {"address", r.address()},       {"length", r.length()},
          {"bytes_per_node", nodes}, {"unmapped_bytes", r.unmapped_bytes()}, {"heat", r.heat()},
          {"pinned", r.pinned()},   {"pinned_node", r.pinned() ? json(r.pinned_node()) : json(nullptr)},
          {"pin_expires_in_ms", r.pin_expires_in_ms()}, {"steady_steps", r.steady_steps()},
          {"sample_stride", r.sample_stride()}};
}

std::string regionsTable(const google::protobuf::RepeatedPtrField<pb::RegionEntry>& regions) {
  Table t({"PID", "ID", "NAME", "KIND", "ADDRESS", "SIZE", "HEAT", "STEADY", "PLACEMENT", "PIN"});
  for (const auto& r : regions)
    t.add({std::to_string(r.pid()), std::to_string(r.region_id()), r.name().empty() ? "-" : r.name(), r.kind(),
           hex(r.address()), bytes(r.length()), heatText(r.heat()), steadyText(r.steady_steps()), placementText(r),
           pinText(r)});
  return t.str();
}

std::string topText(const pb::TopReply& reply, bool withPages) {
  std::string out = "hottest:\n" + regionsTable(reply.hottest()) + "\ncoldest:\n" + regionsTable(reply.coldest());
  if (!withPages) return out;
  if (reply.hottest_pages().empty()) return out + "\nhottest pages: none has heat\n";
  Table t({"PID", "ADDRESS", "HEAT"});
  for (const auto& p : reply.hottest_pages()) t.add({std::to_string(p.pid()), hex(p.address()), heatText(p.heat())});
  return out + "\nhottest pages:\n" + t.str();
}

json topJson(const pb::TopReply& reply) {
  json hot = json::array(), cold = json::array(), pages = json::array();
  for (const auto& r : reply.hottest()) hot.push_back(regionJson(r));
  for (const auto& r : reply.coldest()) cold.push_back(regionJson(r));
  for (const auto& p : reply.hottest_pages())
    pages.push_back({{"pid", p.pid()}, {"address", p.address()}, {"heat", p.heat()}});
  return {{"hottest", hot}, {"coldest", cold}, {"hottest_pages", pages}};
}

}  // namespace tt::ctl
