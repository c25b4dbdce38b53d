// Loading and validating the daemon configuration (schema: proto/tensortier/v1/config.proto).
//
// Files are protobuf text format. Parsing rejects unknown keys and type errors with line:column;
// validation then checks every (bounds) option by reflection and the cross-field rules of each
// section. A config that fails either step is never applied (SIGHUP keeps the old one).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/Result.h"
#include "tensortier/v1/config.pb.h"

namespace tt::config {

using DaemonConfig = tensortier::v1::DaemonConfig;

inline constexpr std::string_view kDefaultConfigPath = "/etc/tensortier/tensortierd.conf";

// Parses text-format config; `origin` names the source in error messages (a path, "<string>").
[[nodiscard]] Result<DaemonConfig> parseConfig(std::string_view text, std::string_view origin);

// Reads, parses and validates a file.
[[nodiscard]] Result<DaemonConfig> loadConfigFile(const std::string& path);

// Every violated rule, one message each; empty when the config is valid.
[[nodiscard]] std::vector<std::string> validationErrors(const DaemonConfig& config);

// validationErrors() folded into a Result.
[[nodiscard]] Result<void> validateConfig(const DaemonConfig& config);

// The config in text format with every field, defaults filled in: what the daemon really runs with.
[[nodiscard]] std::string effectiveConfigText(const DaemonConfig& config);

}  // namespace tt::config
