#include "ipc/Protocol.h"

#include <algorithm>
#include <cstdint>
#include <unordered_set>

#include "core/Log.h"

namespace tt::ipc {

pb::ErrorCode errorCodeFor(const Error& error) {
  switch (error.code) {
    case EINVAL: return pb::BAD_REQUEST;
    case EFAULT: return pb::REGION_NOT_MAPPED;
    case EEXIST: return pb::REGION_OVERLAPS;
    case ENOENT: return pb::NO_SUCH_REGION;
    case EDQUOT:
    case EUSERS: return pb::LIMIT_EXCEEDED;
    case EPERM:
    case EACCES:
    case EKEYREVOKED: return pb::PERMISSION_DENIED;
    case ESTALE: return pb::REGION_NOT_MAPPED;  // the process ran exec: nothing of what it had is mapped
    // The process's entry is gone (no Hello, or dropped meanwhile: an exit, an exec or an id
    // change while the request waited): the client's next request attaches afresh.
    case ESRCH: return pb::NOT_REGISTERED;
    default: return pb::INTERNAL;
  }
}

void setError(pb::DaemonMessage& reply, pb::ErrorCode code, const std::string& message) {
  auto* e = reply.mutable_error();
  e->set_code(code);
  e->set_message(message);
}

RegionKind regionKindFromProto(pb::RegionKind kind) {
  switch (kind) {
    case pb::WEIGHT: return RegionKind::Weight;
    case pb::GRADIENT: return RegionKind::Gradient;
    case pb::OPTIMIZER_STATE: return RegionKind::OptimizerState;
    case pb::ACTIVATION: return RegionKind::Activation;
    case pb::WORKSPACE: return RegionKind::Workspace;
    default: return RegionKind::Other;
  }
}

pb::RegionKind regionKindToProto(RegionKind kind) {
  switch (kind) {
    case RegionKind::Weight: return pb::WEIGHT;
    case RegionKind::Gradient: return pb::GRADIENT;
    case RegionKind::OptimizerState: return pb::OPTIMIZER_STATE;
    case RegionKind::Activation: return pb::ACTIVATION;
    case RegionKind::Workspace: return pb::WORKSPACE;
    case RegionKind::Other: return pb::OTHER;
  }
  return pb::OTHER;
}

ProtocolHandler::ProtocolHandler(registry::Registry& registry, PlacementReader& placement,
                                 ProcessLifetime* lifetime, AdminHandler* admin, std::string daemonVersion)
    : registry_(registry), placement_(placement), lifetime_(lifetime), admin_(admin),
      daemonVersion_(std::move(daemonVersion)) {}

bool ProtocolHandler::handle(Session& s, const pb::ClientMessage& req, pb::DaemonMessage& reply) {
  auto begun = begin(s, req, reply);
  if (const bool* send = std::get_if<bool>(&begun)) return *send;
  OffLoop& off = std::get<OffLoop>(begun);
  off.work();
  return off.finish(s, reply);
}

std::variant<bool, OffLoop> ProtocolHandler::begin(Session& s, const pb::ClientMessage& req, pb::DaemonMessage& reply) {
  reply.Clear();
  reply.set_seq(req.seq());
  using B = pb::ClientMessage::BodyCase;
  const B body = req.body_case();
  if (body == B::BODY_NOT_SET) {
    // Also what a newer client's unknown oneof case parses to: answer, do not guess.
    setError(reply, pb::BAD_REQUEST, "empty or unknown message (this daemon speaks protocol version " +
                                         std::to_string(kProtocolVersion) + ")");
    return true;
  }
  if (body == B::kHello) {
    hello(s, req.hello(), reply);
    return true;
  }
  if (!s.hello) {
    setError(reply, pb::NOT_REGISTERED, "send Hello first");
    return true;
  }
  switch (body) {
    case B::kRegisterRegion:
      if (auto off = registerRegion(s, req.register_region(), reply)) return std::move(*off);
      return true;
    case B::kUnregisterRegion: {
      if (!stillRunsAsPeer(s, reply)) return true;  // the new program's regions are not the old ids' to end
      if (auto r = registry_.unregisterRegion(s.peer, req.unregister_region().region_id()); !r)
        setError(reply, errorCodeFor(r.error()), r.error().message());
      else
        reply.mutable_ack();
      return true;
    }
    case B::kIterationMark: {
      const auto& m = req.iteration_mark();
      if (m.type() == pb::IterationMark::TYPE_UNSPECIFIED) {
        setError(reply, pb::BAD_REQUEST, "IterationMark needs a type");
        return req.seq() != 0;
      }
      if (!attach(s, reply)) return true;
      IterationMark mark;
      mark.type = m.type() == pb::IterationMark::STEP_BEGIN ? MarkType::StepBegin
                  : m.type() == pb::IterationMark::STEP_END ? MarkType::StepEnd
                                                             : MarkType::PhaseBegin;
      mark.step = m.step();
      mark.phase = m.phase().substr(0, 64);
      timespec ts{};
      ::clock_gettime(CLOCK_MONOTONIC, &ts);
      mark.timestampNs = static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
      registry_.mark(s.peer, std::move(mark));
      if (req.seq() == 0) return false;  // fire-and-forget on the client's hot path
      reply.mutable_ack();
      return true;
    }
    case B::kQueryPlacement:
      if (auto off = queryPlacement(s, req.query_placement(), reply)) return std::move(*off);
      return true;
    case B::kMbindResult:
      if (mbindSink_) mbindSink_(s, req.mbind_result().request_id(), req.mbind_result().errno_value());
      return false;
    default:
      if (static_cast<int>(body) >= 20 && admin_) {
        if (auto off = admin_->beginAdmin(s, req, reply)) return std::move(*off);
        reply.set_seq(req.seq());
        return true;
      }
      setError(reply, pb::BAD_REQUEST, "request not supported by this daemon");
      return true;
  }
}

void ProtocolHandler::hello(Session& s, const pb::Hello& m, pb::DaemonMessage& reply) {
  if (s.hello) {
    setError(reply, pb::BAD_REQUEST, "Hello was already sent on this connection");
    return;
  }
  uint32_t best = 0;
  for (uint32_t v : m.versions())
    if (v >= kOldestProtocolVersion && v <= kProtocolVersion && v > best) best = v;
  if (best == 0) {
    setError(reply, pb::UNSUPPORTED_VERSION,
             "no common protocol version: this daemon speaks " + std::to_string(kOldestProtocolVersion) + ".." +
                 std::to_string(kProtocolVersion));
    return;
  }
  s.hello = true;
  s.version = best;
  s.acceptsMbind = m.accepts_mbind();
  s.clientName = m.client_name().substr(0, 128);
  auto* r = reply.mutable_hello_reply();
  r->set_version(best);
  r->set_daemon_version(daemonVersion_);
  r->set_session_id(s.id);
}

bool ProtocolHandler::stillRunsAsPeer(Session& s, pb::DaemonMessage& reply, bool afterExec) {
  auto runs = registry_.checkRunsAs(s.peer, afterExec);
  if (runs) return true;
  refuse(s, reply, runs.error());
  return false;
}

void ProtocolHandler::dropProcess(Session& s) {
  if (lifetime_)
    lifetime_->forget(s.peer.pid);
  else
    (void)registry_.removeProcess(s.peer.pid);
  s.attached = false;
}

void ProtocolHandler::refuse(Session& s, pb::DaemonMessage& reply, const Error& error, std::optional<uint64_t> entry) {
  const uint64_t seq = reply.seq();
  reply.Clear();  // a placement read already filled in describes what the process runs now
  reply.set_seq(seq);
  setError(reply, errorCodeFor(error), error.message());
  const bool sameEntry = !entry || registry_.incarnationOf(s.peer.pid) == *entry;
  if (error.code == ESTALE) {
    // The process ran exec: its regions, whoever registered them, describe the program before.
    // The session stays (ESTALE comes only once the exec's ids are known to be the peer's) and
    // attaches afresh on its next request.
    if (sameEntry)
      dropProcess(s);
    else
      s.attached = false;
    return;
  }
  if (error.code == ESRCH) {
    // The entry the request began with is gone, or the pid's entry is another's now (dropped
    // while the request waited): this session's attachment went with it, and its next request
    // attaches afresh, as NOT_REGISTERED tells the client.
    if (!sameEntry || !registry_.hasProcess(s.peer.pid)) s.attached = false;
    return;
  }
  if (error.code != EKEYREVOKED) return;
  s.revoked = true;
  // Regions registered under the peer's ids were the old program's: they go as on an exit.
  // (Regions a process registered under other ids, root's, are not this connection's to end.)
  if (sameEntry && registry_.registeredUnder(s.peer.pid, s.peer.uid)) {
    dropProcess(s);
  } else {
    sessionClosed(s);  // its attachment goes now, not when the connection has closed
  }
}

bool ProtocolHandler::attach(Session& s, pb::DaemonMessage& reply) {
  if (s.attached) return true;
  if (!stillRunsAsPeer(s, reply)) return false;
  // Pid reuse: a process we knew under this pid has exited but its pidfd event is not handled
  // yet; its regions must not become the new process's.
  if (lifetime_ && registry_.hasProcess(s.peer.pid) && lifetime_->exited(s.peer.pid)) lifetime_->forget(s.peer.pid);
  // A setid exec since the process registered (before the server's sweep saw it): the entry is
  // the old program's, and the new one, which runs as this peer, does not join it.
  // Likewise after an exec that kept the ids: the entry's regions are the old program's.
  if (auto runs = registry_.runsAsRegistered(s.peer.pid);
      registry_.hasProcess(s.peer.pid) && ((runs && !*runs) || registry_.execedSinceProbed(s.peer.pid)))
    dropProcess(s);
  const bool isNew = registry_.attachProcess(s.peer, s.clientName, s.acceptsMbind);
  if (isNew && lifetime_ && !lifetime_->watch(s.peer.pid)) {
    registry_.removeProcess(s.peer.pid);
    setError(reply, pb::NOT_REGISTERED, "process " + std::to_string(s.peer.pid) + " has exited");
    return false;
  }
  s.attached = true;
  return true;
}

void ProtocolHandler::sessionClosed(Session& s) {
  if (s.attached && registry_.detachProcess(s.peer.pid) && lifetime_) lifetime_->unwatch(s.peer.pid);
  s.attached = false;
}

std::optional<OffLoop> ProtocolHandler::registerRegion(Session& s, const pb::RegisterRegion& m,
                                                       pb::DaemonMessage& reply) {
  // Checked on every registration (attach checks the first): each one probes the address space.
  const bool wasAttached = s.attached;
  if (!attach(s, reply)) return std::nullopt;
  if (wasAttached && !stillRunsAsPeer(s, reply)) return std::nullopt;
  registry::RegisterRequest r;
  r.address = m.address();
  r.length = m.length();
  r.kind = regionKindFromProto(m.kind());
  r.name = m.name();
  r.expectedLifetimeSteps = m.hints().expected_lifetime_steps();
  // A probe of an address space pinned before is one ioctl, done here. Opening the maps file
  // (the first probe of a process) and waiting for an exec's ids wait as long as the exec's
  // teardown of the old address space: those are left for the workers.
  const uint64_t incarnation = registry_.incarnationOf(s.peer.pid);  // the entry attach() found or made
  auto now = registry_.registerRegion(s.peer, r, /*mayWait=*/false, incarnation);
  if (now || (now.error().code != EWOULDBLOCK && (now.error().code != ESTALE || s.peer.uid == 0))) {
    // (A root peer's ids need no wait: root may act on whatever the process runs now.)
    registered(s, reply, now, m.client_tag());
    return std::nullopt;
  }
  auto info = std::make_shared<std::optional<Result<RegionInfo>>>();
  OffLoop off;
  if (now.error().code == ESTALE) {
    // An exec, found at once: the old program's regions go now (the probe has forgotten the
    // pinned address space, so nothing else would see the exec if this request never came back:
    // its connection may close while it waits). Whether the exec changed the ids is known once
    // it has committed them: that wait is the work.
    dropProcess(s);
    off.work = [this, peer = s.peer, stale = now.error(), info] {
      auto ids = registry_.checkRunsAs(peer, true);
      info->emplace(ids ? Result<RegionInfo>(stale) : Result<RegionInfo>(ids.error()));
    };
  } else {
    off.work = [this, peer = s.peer, r = std::move(r), incarnation, info] {
      info->emplace(registry_.registerRegion(peer, r, /*mayWait=*/true, incarnation));
    };
  }
  off.finish = [this, info, seq = reply.seq(), tag = m.client_tag(), incarnation](Session& session,
                                                                                  pb::DaemonMessage& out) {
    out.Clear();
    out.set_seq(seq);
    registered(session, out, **info, tag, incarnation);
    return true;
  };
  return off;
}

void ProtocolHandler::registered(Session& s, pb::DaemonMessage& reply, const Result<RegionInfo>& info,
                                 uint64_t clientTag, std::optional<uint64_t> entry) {
  if (!info) {
    refuse(s, reply, info.error(), entry);
    return;
  }
  auto* body = reply.mutable_register_region_reply();
  body->set_region_id(info->id);
  body->set_client_tag(clientTag);
}

std::optional<OffLoop> ProtocolHandler::queryPlacement(Session& s, const pb::QueryPlacement& m,
                                                       pb::DaemonMessage& reply) {
  if (!stillRunsAsPeer(s, reply)) return std::nullopt;
  // Each region once, in the order first asked (a frame can repeat an id a million times).
  std::vector<uint64_t> ids;
  std::unordered_set<uint64_t> seen;
  for (uint64_t id : m.region_ids())
    if (seen.insert(id).second) ids.push_back(id);
  auto regions = registry_.regionsOf(s.peer.pid, ids);
  if (!regions) {
    setError(reply, errorCodeFor(regions.error()), regions.error().message());
    return std::nullopt;
  }
  const std::optional<uint64_t> budgeted = placementStride(pagesOf(*regions), regions->size());
  if (!budgeted) {
    setError(reply, pb::LIMIT_EXCEEDED,
             std::to_string(regions->size()) + " regions: more than one request may read (" +
                 std::to_string(kPlacementPagesPerRequest) + "); ask for fewer region ids");
    return std::nullopt;
  }
  // The reads wait for the process's mmap lock: off the loop, with the ids check after them.
  struct Reads {
    std::vector<registry::RegionRecord> regions;
    uint64_t stride = 1;
    std::vector<Placement> placements;  // in the order of `regions`, up to the first failure
    std::optional<Error> failed;
    std::optional<Error> idsChanged;  // the check after the reads: an exec since would have had
                                      // them describe the new program
  };
  auto reads = std::make_shared<Reads>();
  const uint64_t incarnation = registry_.incarnationOf(s.peer.pid);
  reads->regions = std::move(*regions);
  reads->stride = *budgeted;
  OffLoop off;
  off.work = [this, peer = s.peer, reads] {
    for (const auto& rec : reads->regions) {
      auto placement = placement_.read(rec.info.tgid, rec.info.start, rec.info.length, reads->stride);
      if (!placement) {
        reads->failed = placement.error();
        break;
      }
      reads->placements.push_back(std::move(*placement));
    }
    if (auto still = registry_.checkRunsAs(peer, true); !still) reads->idsChanged = still.error();
  };
  off.finish = [this, reads, seq = reply.seq(), incarnation](Session& session, pb::DaemonMessage& out) {
    out.Clear();
    out.set_seq(seq);
    if (reads->idsChanged) {
      refuse(session, out, *reads->idsChanged, incarnation);  // what was read may be the new program's
      return true;
    }
    if (reads->failed) {
      setError(out, pb::INTERNAL, reads->failed->message());
      return true;
    }
    auto* body = out.mutable_placement();
    for (size_t i = 0; i < reads->regions.size(); ++i) {
      const auto& rec = reads->regions[i];
      const Placement& placement = reads->placements[i];
      auto* rp = body->add_regions();
      rp->set_region_id(rec.info.id);
      rp->set_name(rec.info.name);
      rp->set_kind(regionKindToProto(rec.info.kind));
      rp->set_address(rec.info.start);
      rp->set_length(rec.info.length);
      rp->set_heat(rec.heat);
      rp->set_sample_stride(static_cast<uint32_t>(std::min<uint64_t>(reads->stride, UINT32_MAX)));
      for (const auto& [node, bytes] : placement.bytesPerNode) {
        auto* nb = rp->add_bytes_per_node();
        nb->set_node(node);
        nb->set_bytes(bytes);
      }
      rp->set_unmapped_bytes(placement.unmappedBytes);
    }
    return true;
  };
  return off;
}

}  // namespace tt::ipc
