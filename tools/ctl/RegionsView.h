// How tensortierctl shows regions and top: the region table and JSON, and top's hottest and
// coldest regions followed by the hottest pages. A library (with StatusView) so unit tests render
// fixed replies.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "tensortier/v1/admin.pb.h"

namespace tt::ctl {

// "0x7f0000000000"
[[nodiscard]] std::string hex(uint64_t v);

[[nodiscard]] nlohmann::json regionJson(const tensortier::v1::RegionEntry& r);
[[nodiscard]] std::string regionsTable(const google::protobuf::RepeatedPtrField<tensortier::v1::RegionEntry>& regions);

// `tensortierctl top`: "hottest:" and "coldest:" region tables, then, when pages were asked for
// (`withPages`), "hottest pages:" with pid, address and heat (or a line saying none has heat).
[[nodiscard]] std::string topText(const tensortier::v1::TopReply& reply, bool withPages);
// `tensortierctl --json top`: {"hottest": [...], "coldest": [...], "hottest_pages": [...]}.
[[nodiscard]] nlohmann::json topJson(const tensortier::v1::TopReply& reply);

}  // namespace tt::ctl
