#include "config/Config.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <cctype>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <set>
#include <sstream>

#include "tensortier/v1/options.pb.h"

namespace tt::config {
namespace {

namespace pb = google::protobuf;

// Collects the parser's messages instead of letting protobuf print them to stderr.
class ErrorCollector : public pb::io::ErrorCollector {
 public:
  explicit ErrorCollector(std::string_view origin) : origin_(origin) {}
  void AddError(int line, pb::io::ColumnNumber column, const std::string& message) override {
    add("error", line, column, message);
  }
  void AddWarning(int line, pb::io::ColumnNumber column, const std::string& message) override {
    add("warning", line, column, message);
  }
  [[nodiscard]] std::string text() const { return out_.str(); }

 private:
  void add(const char* kind, int line, pb::io::ColumnNumber column, const std::string& message) {
    if (out_.tellp() > 0) out_ << "; ";
    // The tokenizer counts from zero; editors count from one.
    out_ << origin_ << ":" << line + 1 << ":" << column + 1 << ": " << kind << ": " << message;
  }
  std::string origin_;
  std::ostringstream out_;
};

double numericValue(const pb::Reflection& r, const pb::Message& m, const pb::FieldDescriptor& f, int index) {
  const bool rep = f.is_repeated();
  switch (f.cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_INT32: return rep ? r.GetRepeatedInt32(m, &f, index) : r.GetInt32(m, &f);
    case pb::FieldDescriptor::CPPTYPE_INT64:
      return static_cast<double>(rep ? r.GetRepeatedInt64(m, &f, index) : r.GetInt64(m, &f));
    case pb::FieldDescriptor::CPPTYPE_UINT32:
      return rep ? r.GetRepeatedUInt32(m, &f, index) : r.GetUInt32(m, &f);
    case pb::FieldDescriptor::CPPTYPE_UINT64:
      return static_cast<double>(rep ? r.GetRepeatedUInt64(m, &f, index) : r.GetUInt64(m, &f));
    case pb::FieldDescriptor::CPPTYPE_DOUBLE: return rep ? r.GetRepeatedDouble(m, &f, index) : r.GetDouble(m, &f);
    case pb::FieldDescriptor::CPPTYPE_FLOAT: return rep ? r.GetRepeatedFloat(m, &f, index) : r.GetFloat(m, &f);
    default: return 0;
  }
}

bool isNumeric(const pb::FieldDescriptor& f) {
  switch (f.cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_INT32:
    case pb::FieldDescriptor::CPPTYPE_INT64:
    case pb::FieldDescriptor::CPPTYPE_UINT32:
    case pb::FieldDescriptor::CPPTYPE_UINT64:
    case pb::FieldDescriptor::CPPTYPE_DOUBLE:
    case pb::FieldDescriptor::CPPTYPE_FLOAT: return true;
    default: return false;
  }
}

// Walks the whole message, unset fields included (their defaults must be in bounds too), and
// reports every bound violation and every enum left at its UNSPECIFIED zero value.
void checkBounds(const pb::Message& m, const std::string& prefix, std::vector<std::string>& errors) {
  const pb::Descriptor& d = *m.GetDescriptor();
  const pb::Reflection& r = *m.GetReflection();
  for (int i = 0; i < d.field_count(); ++i) {
    const pb::FieldDescriptor& f = *d.field(i);
    const std::string path = prefix.empty() ? f.name() : prefix + "." + f.name();
    const int count = f.is_repeated() ? r.FieldSize(m, &f) : 1;
    for (int k = 0; k < count; ++k) {
      const std::string where = f.is_repeated() ? path + "[" + std::to_string(k) + "]" : path;
      if (f.cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
        checkBounds(f.is_repeated() ? r.GetRepeatedMessage(m, &f, k) : r.GetMessage(m, &f), where, errors);
        continue;
      }
      if (f.cpp_type() == pb::FieldDescriptor::CPPTYPE_ENUM) {
        const int v = f.is_repeated() ? r.GetRepeatedEnumValue(m, &f, k) : r.GetEnumValue(m, &f);
        const bool explicitlySet = f.is_repeated() || r.HasField(m, &f);
        if (v == 0 && (explicitlySet || f.has_default_value()))
          errors.push_back(where + ": must be set to one of the named values");
        continue;
      }
      if (!isNumeric(f) || !f.options().HasExtension(tensortier::v1::bounds)) continue;
      const auto& b = f.options().GetExtension(tensortier::v1::bounds);
      const double v = numericValue(r, m, f, k);
      std::ostringstream msg;
      if (std::isnan(v)) {
        // Every comparison with NaN is false: without this it would pass any bound.
        errors.push_back(where + ": not a number");
      } else if (b.has_min() && v < b.min()) {
        msg << where << ": " << v << " is below the minimum " << b.min();
        errors.push_back(msg.str());
      } else if (b.has_max() && v > b.max()) {
        msg << where << ": " << v << " is above the maximum " << b.max();
        errors.push_back(msg.str());
      }
    }
  }
}

// Cross-field rules that bounds cannot express, one function per section.
void checkTopology(const tensortier::v1::TopologyConfig& t, std::vector<std::string>& errors) {
  std::set<uint32_t> seen;
  for (const auto& o : t.node_override()) {
    if (!o.has_node()) errors.push_back("topology.node_override: every override needs `node`");
    if (!o.has_tier()) errors.push_back("topology.node_override: every override needs `tier`");
    if (o.has_node() && !seen.insert(o.node()).second)
      errors.push_back("topology.node_override: node " + std::to_string(o.node()) + " is listed twice");
  }
  if (t.sysfs_root().empty() || t.sysfs_root().front() != '/')
    errors.push_back("topology.sysfs_root: must be an absolute path");
}

// Sources: period ranges must be ordered, DAMON's region bounds too, and the aggregation interval
// must cover several samples or DAMON reports nothing.
void checkSources(const tensortier::v1::SourcesConfig& s, std::vector<std::string>& errors) {
  const auto& pmu = s.pmu();
  if (pmu.min_period() > pmu.max_period())
    errors.push_back("sources.pmu: min_period must not exceed max_period");
  if (pmu.initial_period() < pmu.min_period() || pmu.initial_period() > pmu.max_period())
    errors.push_back("sources.pmu: initial_period must lie within [min_period, max_period]");
  if ((pmu.ring_pages() & (pmu.ring_pages() - 1)) != 0)
    errors.push_back("sources.pmu.ring_pages: must be a power of two");
  if ((s.software_faults().ring_pages() & (s.software_faults().ring_pages() - 1)) != 0)
    errors.push_back("sources.software_faults.ring_pages: must be a power of two");
  const auto& d = s.damon();
  if (d.min_regions() > d.max_regions())
    errors.push_back("sources.damon: min_regions must not exceed max_regions");
  if (d.aggregate_interval_us() < 2 * d.sample_interval_us())
    errors.push_back("sources.damon: aggregate_interval_us must be at least twice sample_interval_us");
  if (s.procfs_root().empty() || s.procfs_root().front() != '/')
    errors.push_back("sources.procfs_root: must be an absolute path");
}

// Migration: a batch is a whole number of the kernel's own migration batches (512 pages, see
// migrate_config.proto), and procfs must be an absolute root.
void checkMigration(const tensortier::v1::MigrationConfig& m, std::vector<std::string>& errors) {
  if (m.batch_pages() % 512 != 0)
    errors.push_back("migration.batch_pages: must be a multiple of 512 (the kernel's migration batch)");
  if (m.procfs_root().empty() || m.procfs_root().front() != '/')
    errors.push_back("migration.procfs_root: must be an absolute path");
}

// Service: the socket path must fit sockaddr_un, the mode is octal permission bits, group names
// are plain names (looked up at start), a frame must fit the send queue, and one uid cannot be
// allowed more connections than all uids together.
void checkService(const tensortier::v1::ServiceConfig& s, std::vector<std::string>& errors) {
  if (s.socket_path().empty() || s.socket_path().front() != '/')
    errors.push_back("service.socket_path: must be an absolute path");
  if (s.socket_path().size() >= 108) errors.push_back("service.socket_path: longer than a Unix socket path may be (107)");
  const std::string& mode = s.socket_mode();
  bool octal = !mode.empty() && mode.size() <= 4;
  for (char c : mode) octal = octal && c >= '0' && c <= '7';
  if (!octal) errors.push_back("service.socket_mode: must be octal permission bits, e.g. \"0660\"");
  auto plainName = [](const std::string& n) {
    for (char c : n)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) return false;
    return true;
  };
  if (!plainName(s.socket_group())) errors.push_back("service.socket_group: not a group name");
  if (!plainName(s.admin_group())) errors.push_back("service.admin_group: not a group name");
  if (s.max_frame_bytes() > s.max_send_queue_bytes())
    errors.push_back("service.max_frame_bytes: must not exceed max_send_queue_bytes");
  if (s.max_connections_per_uid() > s.max_connections())
    errors.push_back("service.max_connections_per_uid: must not exceed max_connections");
}

// Heat model and planner (daemon/heat, daemon/policy).
void checkPolicy(const tensortier::v1::PolicyConfig& p, std::vector<std::string>& errors) {
  if (p.period_min_ms() >= p.period_max_ms())
    errors.push_back("policy.period_min_ms: must be below policy.period_max_ms");
  if (uint64_t{p.period_min_ms()} < 2ULL * p.period_bin_ms())
    errors.push_back("policy.period_min_ms: must be at least two period_bin_ms, or no period is resolvable");
  // The detector needs three repetitions of the longest period in its history.
  if (3ULL * p.period_max_ms() > uint64_t{p.period_bin_ms()} * p.period_history_bins())
    errors.push_back("policy.period_max_ms: three periods must fit in period_bin_ms x period_history_bins (" +
                     std::to_string(uint64_t{p.period_bin_ms()} * p.period_history_bins()) + " ms)");
  if (p.feature_weight_floor() * 4 >= 1)
    errors.push_back("policy.feature_weight_floor: four features at this floor leave nothing to learn (must be < 0.25)");
  if (p.fast_budget_bytes() > 0 && p.per_process_quota_bytes() > p.fast_budget_bytes())
    errors.push_back("policy.per_process_quota_bytes: larger than policy.fast_budget_bytes");
  if (p.max_run_bytes() % 4096 != 0) errors.push_back("policy.max_run_bytes: must be a multiple of 4096");
  if (p.fast_budget_bytes() % 4096 != 0 || p.per_process_quota_bytes() % 4096 != 0)
    errors.push_back("policy.fast_budget_bytes and per_process_quota_bytes: must be multiples of 4096");
}

}  // namespace

Result<DaemonConfig> parseConfig(std::string_view text, std::string_view origin) {
  DaemonConfig config;
  ErrorCollector collector(origin);
  pb::TextFormat::Parser parser;
  parser.RecordErrorsTo(&collector);
  parser.AllowUnknownField(false);
  parser.AllowUnknownExtension(false);
  if (!parser.ParseFromString(std::string(text), &config)) return logicError(collector.text());
  return config;
}

Result<DaemonConfig> loadConfigFile(const std::string& path) {
  // stdio, not an ifstream: a stream's read error (EISDIR for a directory, EIO) leaves no trace in
  // `in` once copied through rdbuf(), and a directory then "loaded" as an empty, valid config.
  std::FILE* f = std::fopen(path.c_str(), "re");
  if (f == nullptr) return errnoError("open config " + path);
  std::string text;
  char buf[8192];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  const int readErrno = std::ferror(f) ? errno : 0;
  std::fclose(f);
  if (readErrno != 0) return systemError(readErrno, "read config " + path);
  auto config = parseConfig(text, path);
  if (!config) return config.error();
  if (auto valid = validateConfig(*config); !valid) return withContext(valid.error(), path);
  return config;
}

std::vector<std::string> validationErrors(const DaemonConfig& config) {
  std::vector<std::string> errors;
  checkBounds(config, "", errors);
  checkTopology(config.topology(), errors);
  checkMigration(config.migration(), errors);
  checkSources(config.sources(), errors);
  checkService(config.service(), errors);
  checkPolicy(config.policy(), errors);
  return errors;
}

Result<void> validateConfig(const DaemonConfig& config) {
  const auto errors = validationErrors(config);
  if (errors.empty()) return {};
  std::string joined;
  for (const auto& e : errors) joined += (joined.empty() ? "" : "; ") + e;
  return logicError("invalid config: " + joined);
}

std::string effectiveConfigText(const DaemonConfig& config) {
  // Materialise defaults by setting every unset singular field to its default value, except the
  // keys whose absence means something other than their default: printed, the default would pin
  // a figure the daemon takes from the machine (a config saved from this output would hide it).
  static const std::set<std::string> kUnsetMeansMeasured = {
      "tensortier.v1.PolicyConfig.slow_access_penalty_ns",  // else the firmware's HMAT latencies
  };
  DaemonConfig full = config;
  std::vector<pb::Message*> stack{&full};
  while (!stack.empty()) {
    pb::Message* m = stack.back();
    stack.pop_back();
    const pb::Descriptor& d = *m->GetDescriptor();
    const pb::Reflection& r = *m->GetReflection();
    for (int i = 0; i < d.field_count(); ++i) {
      const pb::FieldDescriptor& f = *d.field(i);
      if (f.is_repeated()) {
        if (f.cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE)
          for (int k = 0; k < r.FieldSize(*m, &f); ++k) stack.push_back(r.MutableRepeatedMessage(m, &f, k));
        continue;
      }
      if (f.cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
        stack.push_back(r.MutableMessage(m, &f));
        continue;
      }
      if (r.HasField(*m, &f) || kUnsetMeansMeasured.contains(f.full_name())) continue;
      switch (f.cpp_type()) {
        case pb::FieldDescriptor::CPPTYPE_INT32: r.SetInt32(m, &f, f.default_value_int32()); break;
        case pb::FieldDescriptor::CPPTYPE_INT64: r.SetInt64(m, &f, f.default_value_int64()); break;
        case pb::FieldDescriptor::CPPTYPE_UINT32: r.SetUInt32(m, &f, f.default_value_uint32()); break;
        case pb::FieldDescriptor::CPPTYPE_UINT64: r.SetUInt64(m, &f, f.default_value_uint64()); break;
        case pb::FieldDescriptor::CPPTYPE_DOUBLE: r.SetDouble(m, &f, f.default_value_double()); break;
        case pb::FieldDescriptor::CPPTYPE_FLOAT: r.SetFloat(m, &f, f.default_value_float()); break;
        case pb::FieldDescriptor::CPPTYPE_BOOL: r.SetBool(m, &f, f.default_value_bool()); break;
        case pb::FieldDescriptor::CPPTYPE_ENUM: r.SetEnum(m, &f, f.default_value_enum()); break;
        case pb::FieldDescriptor::CPPTYPE_STRING: r.SetString(m, &f, f.default_value_string()); break;
        case pb::FieldDescriptor::CPPTYPE_MESSAGE: break;
      }
    }
  }
  std::string out;
  pb::TextFormat::PrintToString(full, &out);
  return out;
}

}  // namespace tt::config
