// The C ABI over tensortier::Client: no C++ type or exception crosses it.
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tensortier/client.hpp"
#include "tensortier/tensortier.h"

struct tensortier_client {
  std::unique_ptr<tensortier::Client> client;
};

struct tensortier_placement {
  std::vector<tensortier::RegionPlacement> regions;
  std::vector<tensortier_region_placement> views;
  std::vector<std::vector<int32_t>> nodes;
  std::vector<std::vector<uint64_t>> bytes;
};

namespace {

thread_local std::string t_lastError;

int fail(int code, std::string message) {
  t_lastError = std::move(message);
  return code;
}

int fromStatus(const tensortier::Status& s) { return s.ok() ? TENSORTIER_OK : fail(s.code(), s.message()); }

// Catches anything thrown inside (std::bad_alloc) so that no exception unwinds into C.
template <class F>
int guarded(const char* what, F&& f) noexcept {
  try {
    return f();
  } catch (const std::exception& e) {
    return fail(TENSORTIER_ERR_INVALID_ARGUMENT, std::string(what) + ": " + e.what());
  } catch (...) {
    return fail(TENSORTIER_ERR_INVALID_ARGUMENT, std::string(what) + ": unknown failure");
  }
}

std::chrono::milliseconds msOr(uint32_t value, std::chrono::milliseconds fallback) {
  return value == 0 ? fallback : std::chrono::milliseconds(value);
}

std::mutex g_cLogMutex;
tensortier_log_fn g_cLogFn = nullptr;
void* g_cLogUser = nullptr;

int markResult(bool sent) {
  return sent ? TENSORTIER_OK : fail(TENSORTIER_ERR_UNAVAILABLE, "iteration mark dropped: not connected or socket full");
}

}  // namespace

extern "C" {

const char* tensortier_version(void) { return TT_CLIENT_VERSION; }

const char* tensortier_last_error(void) { return t_lastError.c_str(); }

const char* tensortier_status_name(int status) {
  switch (status) {
    case TENSORTIER_OK: return "TENSORTIER_OK";
    case TENSORTIER_ERR_INVALID_ARGUMENT: return "TENSORTIER_ERR_INVALID_ARGUMENT";
    case TENSORTIER_ERR_UNAVAILABLE: return "TENSORTIER_ERR_UNAVAILABLE";
    case TENSORTIER_ERR_TIMEOUT: return "TENSORTIER_ERR_TIMEOUT";
    case TENSORTIER_ERR_PROTOCOL: return "TENSORTIER_ERR_PROTOCOL";
    case TENSORTIER_ERR_NO_SUCH_HANDLE: return "TENSORTIER_ERR_NO_SUCH_HANDLE";
    case TENSORTIER_ERR_DAEMON_BAD_REQUEST: return "TENSORTIER_ERR_DAEMON_BAD_REQUEST";
    case TENSORTIER_ERR_DAEMON_UNSUPPORTED_VERSION: return "TENSORTIER_ERR_DAEMON_UNSUPPORTED_VERSION";
    case TENSORTIER_ERR_DAEMON_NOT_REGISTERED: return "TENSORTIER_ERR_DAEMON_NOT_REGISTERED";
    case TENSORTIER_ERR_DAEMON_NO_SUCH_REGION: return "TENSORTIER_ERR_DAEMON_NO_SUCH_REGION";
    case TENSORTIER_ERR_DAEMON_REGION_NOT_MAPPED: return "TENSORTIER_ERR_DAEMON_REGION_NOT_MAPPED";
    case TENSORTIER_ERR_DAEMON_REGION_OVERLAPS: return "TENSORTIER_ERR_DAEMON_REGION_OVERLAPS";
    case TENSORTIER_ERR_DAEMON_LIMIT_EXCEEDED: return "TENSORTIER_ERR_DAEMON_LIMIT_EXCEEDED";
    case TENSORTIER_ERR_DAEMON_PERMISSION_DENIED: return "TENSORTIER_ERR_DAEMON_PERMISSION_DENIED";
    case TENSORTIER_ERR_DAEMON_FRAME_TOO_LARGE: return "TENSORTIER_ERR_DAEMON_FRAME_TOO_LARGE";
    case TENSORTIER_ERR_DAEMON_INTERNAL: return "TENSORTIER_ERR_DAEMON_INTERNAL";
    case TENSORTIER_ERR_DAEMON_STARTING: return "TENSORTIER_ERR_DAEMON_STARTING";
    default: return status > TENSORTIER_ERR_DAEMON_BASE ? "TENSORTIER_ERR_DAEMON_OTHER" : "TENSORTIER_ERR_UNKNOWN";
  }
}

void tensortier_set_log_handler(tensortier_log_fn handler, void* user) {
  {
    std::lock_guard lock(g_cLogMutex);
    g_cLogFn = handler;
    g_cLogUser = user;
  }
  if (handler == nullptr) {
    tensortier::setLogHandler(nullptr);
    return;
  }
  tensortier::setLogHandler([](tensortier::LogLevel level, std::string_view line) {
    tensortier_log_fn fn = nullptr;
    void* fnUser = nullptr;
    {
      std::lock_guard lock(g_cLogMutex);
      fn = g_cLogFn;
      fnUser = g_cLogUser;
    }
    if (fn != nullptr) fn(static_cast<int>(level), std::string(line).c_str(), fnUser);
  });
}

void tensortier_set_log_level(int level) {
  if (level >= TENSORTIER_LOG_DEBUG && level <= TENSORTIER_LOG_ERROR)
    tensortier::setLogLevel(static_cast<tensortier::LogLevel>(level));
}

void tensortier_options_init(tensortier_options* options) {
  if (options == nullptr) return;
  std::memset(options, 0, sizeof *options);
  options->struct_size = sizeof *options;
  const tensortier::ClientOptions d;
  options->call_timeout_ms = static_cast<uint32_t>(d.callTimeout.count());
  options->connect_timeout_ms = static_cast<uint32_t>(d.connectTimeout.count());
  options->reconnect_initial_ms = static_cast<uint32_t>(d.reconnectInitial.count());
  options->reconnect_max_ms = static_cast<uint32_t>(d.reconnectMax.count());
  options->accepts_mbind = 1;
}

int tensortier_client_create(const tensortier_options* options, tensortier_client** out) {
  if (out == nullptr) return fail(TENSORTIER_ERR_INVALID_ARGUMENT, "tensortier_client_create: out is NULL");
  *out = nullptr;
  return guarded("tensortier_client_create", [&] {
    tensortier::ClientOptions o;
    if (options != nullptr) {
      // Fields beyond what the caller's struct_size covers keep their defaults (older callers).
      if (options->struct_size < offsetof(tensortier_options, accepts_mbind) + sizeof(int32_t))
        return fail(TENSORTIER_ERR_INVALID_ARGUMENT, "tensortier_client_create: options.struct_size is " +
                                                         std::to_string(options->struct_size) +
                                                         "; call tensortier_options_init first");
      if (options->socket_path != nullptr) o.socketPath = options->socket_path;
      if (options->client_name != nullptr) o.clientName = options->client_name;
      o.callTimeout = msOr(options->call_timeout_ms, o.callTimeout);
      o.connectTimeout = msOr(options->connect_timeout_ms, o.connectTimeout);
      o.reconnectInitial = msOr(options->reconnect_initial_ms, o.reconnectInitial);
      o.reconnectMax = msOr(options->reconnect_max_ms, o.reconnectMax);
      o.acceptsMbind = options->accepts_mbind != 0;
    }
    auto c = std::make_unique<tensortier_client>();
    c->client = tensortier::Client::create(o);
    *out = c.release();
    return static_cast<int>(TENSORTIER_OK);
  });
}

void tensortier_client_destroy(tensortier_client* client) { delete client; }

int tensortier_client_connected(const tensortier_client* client) {
  return client != nullptr && client->client->connected() ? 1 : 0;
}

uint32_t tensortier_client_protocol_version(const tensortier_client* client) {
  return client == nullptr ? 0 : client->client->protocolVersion();
}

int tensortier_client_stats(const tensortier_client* client, tensortier_stats* out) {
  if (client == nullptr || out == nullptr || out->struct_size < sizeof(tensortier_stats))
    return fail(TENSORTIER_ERR_INVALID_ARGUMENT,
                "tensortier_client_stats: needs a client and out with struct_size = sizeof(tensortier_stats)");
  const auto s = client->client->stats();
  out->connected = s.connected ? 1 : 0;
  out->connects = s.connects;
  out->disconnects = s.disconnects;
  out->regions_live = s.regionsLive;
  out->regions_bound = s.regionsBound;
  out->registrations_sent = s.registrationsSent;
  out->marks_sent = s.marksSent;
  out->marks_dropped = s.marksDropped;
  out->mbind_done = s.mbindDone;
  out->mbind_failed = s.mbindFailed;
  return TENSORTIER_OK;
}

int tensortier_register_region(tensortier_client* client, const void* address, uint64_t length, const char* name,
                               int kind, uint64_t expected_lifetime_steps, tensortier_region* out) {
  if (client == nullptr || out == nullptr)
    return fail(TENSORTIER_ERR_INVALID_ARGUMENT, "tensortier_register_region: client and out must not be NULL");
  *out = 0;
  return guarded("tensortier_register_region", [&] {
    auto h = client->client->registerRegion(address, length, name == nullptr ? "" : name,
                                            static_cast<tensortier::RegionKind>(kind), {expected_lifetime_steps});
    if (!h.ok()) return fromStatus(h.status());
    *out = *h;
    return static_cast<int>(TENSORTIER_OK);
  });
}

int tensortier_unregister_region(tensortier_client* client, tensortier_region region) {
  if (client == nullptr) return fail(TENSORTIER_ERR_INVALID_ARGUMENT, "tensortier_unregister_region: client is NULL");
  return guarded("tensortier_unregister_region", [&] { return fromStatus(client->client->unregisterRegion(region)); });
}

int tensortier_step_begin(tensortier_client* client, uint64_t step) {
  if (client == nullptr) return fail(TENSORTIER_ERR_INVALID_ARGUMENT, "tensortier_step_begin: client is NULL");
  return guarded("tensortier_step_begin", [&] { return markResult(client->client->stepBegin(step)); });
}

int tensortier_step_end(tensortier_client* client, uint64_t step) {
  if (client == nullptr) return fail(TENSORTIER_ERR_INVALID_ARGUMENT, "tensortier_step_end: client is NULL");
  return guarded("tensortier_step_end", [&] { return markResult(client->client->stepEnd(step)); });
}

int tensortier_phase_begin(tensortier_client* client, uint64_t step, const char* phase) {
  if (client == nullptr || phase == nullptr)
    return fail(TENSORTIER_ERR_INVALID_ARGUMENT, "tensortier_phase_begin: client and phase must not be NULL");
  return guarded("tensortier_phase_begin", [&] { return markResult(client->client->phaseBegin(step, phase)); });
}

int tensortier_query_placement(tensortier_client* client, const tensortier_region* regions, size_t count,
                               tensortier_placement** out) {
  if (client == nullptr || out == nullptr || (count > 0 && regions == nullptr))
    return fail(TENSORTIER_ERR_INVALID_ARGUMENT, "tensortier_query_placement: NULL client, out or regions");
  *out = nullptr;
  return guarded("tensortier_query_placement", [&] {
    auto result = client->client->queryPlacement(std::span<const tensortier_region>(regions, count));
    if (!result.ok()) return fromStatus(result.status());
    auto p = std::make_unique<tensortier_placement>();
    p->regions = std::move(*result);
    const size_t n = p->regions.size();
    p->views.resize(n);
    p->nodes.resize(n);
    p->bytes.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const auto& r = p->regions[i];
      for (const auto& nb : r.bytesPerNode) {
        p->nodes[i].push_back(nb.node);
        p->bytes[i].push_back(nb.bytes);
      }
      auto& v = p->views[i];
      v.handle = r.handle;
      v.region_id = r.regionId;
      v.address = r.address;
      v.length = r.length;
      v.unmapped_bytes = r.unmappedBytes;
      v.heat = r.heat;
      v.kind = static_cast<int32_t>(r.kind);
      v.node_count = static_cast<uint32_t>(r.bytesPerNode.size());
      v.name = r.name.c_str();
      v.nodes = p->nodes[i].data();
      v.node_bytes = p->bytes[i].data();
      v.sample_stride = r.sampleStride;
    }
    *out = p.release();
    return static_cast<int>(TENSORTIER_OK);
  });
}

size_t tensortier_placement_count(const tensortier_placement* placement) {
  return placement == nullptr ? 0 : placement->views.size();
}

const tensortier_region_placement* tensortier_placement_at(const tensortier_placement* placement, size_t index) {
  return placement == nullptr || index >= placement->views.size() ? nullptr : &placement->views[index];
}

void tensortier_placement_free(tensortier_placement* placement) { delete placement; }

}  // extern "C"
