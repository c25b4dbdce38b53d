// Routes libbpf's own messages (load failures, verifier logs, CO-RE relocation notes) into TT_LOG.
#pragma once

namespace tt::sys::bpf {

// Installs the libbpf print callback once per process; idempotent. libbpf's debug messages go to
// TT_LOG(Debug), warnings to Warn, info to Info.
void routeLibbpfLogs();

}  // namespace tt::sys::bpf
