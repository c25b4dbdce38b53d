// How tensortierctl shows what the daemon reports: the status reply as text or JSON, and the small
// text helpers the other commands share. A library of its own so unit tests render fixed replies.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tensortier/v1/admin.pb.h"

namespace tt::ctl {

// "1.5 GiB"
[[nodiscard]] std::string bytes(uint64_t b);

// A left-aligned text table.
class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  [[nodiscard]] std::string str() const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

// `tensortierctl status`: daemon, nodes, fast tier, clients, migration, sources (with their start
// notes and the kernel's own migrations), heat weights.
[[nodiscard]] std::string statusText(const tensortier::v1::StatusReply& s);
// `tensortierctl --json status`: every field of the reply.
[[nodiscard]] nlohmann::json statusJson(const tensortier::v1::StatusReply& s);

}  // namespace tt::ctl
