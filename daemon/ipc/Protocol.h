// Request handling of the client protocol, without I/O: a Session per connection (the peer's
// kernel-given identity, the negotiated version) and a ProtocolHandler that turns one
// ClientMessage into at most one DaemonMessage. daemon/ipc/Server drives it from the Asio loop;
// unit tests drive it directly.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <variant>

#include "core/Result.h"
#include "ipc/Placement.h"
#include "registry/Registry.h"
#include "tensortier/v1/protocol.pb.h"

namespace tt::ipc {

namespace pb = tensortier::v1;

inline constexpr uint32_t kProtocolVersion = 1;  // the highest version this daemon speaks
inline constexpr uint32_t kOldestProtocolVersion = 1;

struct Session {
  uint64_t id = 0;
  registry::Peer peer;  // SO_PEERCRED, taken once at accept
  bool hello = false;
  uint32_t version = 0;
  bool acceptsMbind = false;
  bool attached = false;  // the process is in the registry through this connection
  bool revoked = false;   // its process no longer runs as the peer's uid: close after the reply
  std::string clientName;
};

// A request whose handling may wait on the client's own process (ipc/RequestWorkers.h says how):
// `work` touches only the registry and the placement reader, which are thread-safe, and runs off
// the event loop; `finish` then runs on the loop, fills in the reply and returns whether it is to
// be sent, as ProtocolHandler::handle does. Whatever they share, they hold themselves.
struct OffLoop {
  std::function<void()> work;
  std::function<bool(Session& session, pb::DaemonMessage& reply)> finish;
};

// Admin requests (oneof cases 20+) go to the service, which knows the pipeline and the config.
class AdminHandler {
 public:
  virtual ~AdminHandler() = default;
  // Fills `reply` (body and seq are set by the caller only for errors).
  virtual void handleAdmin(const Session& session, const pb::ClientMessage& request, pb::DaemonMessage& reply) = 0;
  // The same, but a request whose handling may wait (reading client processes' placement, the
  // epoch loop's run lock) may come back as OffLoop, whose finish fills in the whole reply, seq
  // included; nullopt when it was handled here, as by handleAdmin.
  [[nodiscard]] virtual std::optional<OffLoop> beginAdmin(const Session& session, const pb::ClientMessage& request,
                                                          pb::DaemonMessage& reply) {
    handleAdmin(session, request, reply);
    return std::nullopt;
  }
};

// Starts watching a process's lifetime when it first registers (pidfd); knows whether a known
// pid's old process has exited (pid reuse).
class ProcessLifetime {
 public:
  virtual ~ProcessLifetime() = default;
  // True when a process with this pid is known and its pidfd says it exited.
  [[nodiscard]] virtual bool exited(pid_t pid) = 0;
  // Begin watching; false when the process is already gone (pidfd_open ESRCH).
  [[nodiscard]] virtual bool watch(pid_t pid) = 0;
  // Stop watching: the process left the registry with its last connection (its pidfd would
  // otherwise stay open for as long as the process lives).
  virtual void unwatch(pid_t pid) = 0;
  // The process known under `pid` has exited, found before its pidfd event was handled (a new
  // process got the pid): handled now as that event would be. The old process's connections are
  // detached from the registry and closed (their peer has exited), so none speaks for the new one.
  virtual void forget(pid_t pid) = 0;
};

// The result of an MbindRequest from a client.
using MbindResultSink = std::function<void(const Session& session, uint64_t requestId, int errnoValue)>;

// errno of a registry error -> protocol error code.
[[nodiscard]] pb::ErrorCode errorCodeFor(const Error& error);
void setError(pb::DaemonMessage& reply, pb::ErrorCode code, const std::string& message);

class ProtocolHandler {
 public:
  // `lifetime` may be set later (the Server sets itself); without one, processes are not watched.
  ProtocolHandler(registry::Registry& registry, PlacementReader& placement, ProcessLifetime* lifetime,
                  AdminHandler* admin, std::string daemonVersion);
  void setProcessLifetime(ProcessLifetime* lifetime) { lifetime_ = lifetime; }

  void setMbindResultSink(MbindResultSink sink) { mbindSink_ = std::move(sink); }
  void setAdminHandler(AdminHandler* admin) { admin_ = admin; }

  // Handles one request. Returns whether `reply` is to be sent (IterationMark with seq 0 and
  // MbindResult expect none). `reply` is cleared first. The caller closes the connection after
  // the reply when `session.revoked` is set.
  [[nodiscard]] bool handle(Session& session, const pb::ClientMessage& request, pb::DaemonMessage& reply);
  // The same, but a request whose handling may wait on the client's process comes back as OffLoop
  // once its loop part is done: a registration that must open the process's maps file or wait for
  // an exec's ids (one whose address space is pinned is answered here), a placement query, an
  // admin listing. Everything else is handled as by handle() and gives whether `reply` is to be
  // sent. `request` and `session` need not
  // outlive the call; `reply` is filled by `finish` only.
  [[nodiscard]] std::variant<bool, OffLoop> begin(Session& session, const pb::ClientMessage& request,
                                                  pb::DaemonMessage& reply);

  // The connection closed: release the process if this session attached it.
  void sessionClosed(Session& session);

  [[nodiscard]] uint64_t nextSessionId() { return ++sessionIds_; }

 private:
  void hello(Session& s, const pb::Hello& m, pb::DaemonMessage& reply);
  [[nodiscard]] bool attach(Session& s, pb::DaemonMessage& reply);
  // Whether the session's process still runs with the peer's ids (Registry::checkRunsAs); if not,
  // `reply` becomes the error and the session is refused.
  [[nodiscard]] bool stillRunsAsPeer(Session& s, pb::DaemonMessage& reply, bool afterExec = false);
  // `reply` becomes `error`; an EKEYREVOKED one (the process runs with other ids) also revokes
  // the session and drops what it registered under them.
  // `entry`: the request began with this entry of the process (Registry::incarnationOf), and ran
  // off the loop since; the process is dropped only if that entry is still the one registered (a
  // newer one, of the new program or of a process given the pid since, is not this request's).
  void refuse(Session& s, pb::DaemonMessage& reply, const Error& error, std::optional<uint64_t> entry = std::nullopt);
  // Drops the session's process (its pidfd watch, entry and regions) as on an exit.
  void dropProcess(Session& s);
  // nullopt when the request was answered on the loop (refused before any probe).
  [[nodiscard]] std::optional<OffLoop> registerRegion(Session& s, const pb::RegisterRegion& m, pb::DaemonMessage& reply);
  // The reply to a registration, `info` being what the registry said.
  void registered(Session& s, pb::DaemonMessage& reply, const Result<RegionInfo>& info, uint64_t clientTag,
                  std::optional<uint64_t> entry = std::nullopt);
  [[nodiscard]] std::optional<OffLoop> queryPlacement(Session& s, const pb::QueryPlacement& m, pb::DaemonMessage& reply);

  registry::Registry& registry_;
  PlacementReader& placement_;
  ProcessLifetime* lifetime_;
  AdminHandler* admin_;
  std::string daemonVersion_;
  MbindResultSink mbindSink_;
  uint64_t sessionIds_ = 0;
};

[[nodiscard]] RegionKind regionKindFromProto(pb::RegionKind kind);
[[nodiscard]] pb::RegionKind regionKindToProto(RegionKind kind);

}  // namespace tt::ipc
