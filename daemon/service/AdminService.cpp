#include "service/AdminService.h"

#include <algorithm>

#include "core/Log.h"

namespace tt::service {

namespace pb = tensortier::v1;

AdminService::AdminService(AdminContext context) : ctx_(std::move(context)), started_(std::chrono::steady_clock::now()) {}

void AdminService::handleAdmin(const ipc::Session& session, const pb::ClientMessage& request, pb::DaemonMessage& reply) {
  if (permitted(session, request, reply)) dispatch(request, reply);
}

std::optional<ipc::OffLoop> AdminService::beginAdmin(const ipc::Session& session, const pb::ClientMessage& request,
                                                     pb::DaemonMessage& reply) {
  using B = pb::ClientMessage::BodyCase;
  if (!permitted(session, request, reply)) return std::nullopt;
  if (request.body_case() != B::kRegions && request.body_case() != B::kTop) {
    dispatch(request, reply);
    return std::nullopt;
  }
  // The listings read every listed process's placement (move_pages(2) waits for its mmap lock,
  // which a client's long mprotect or munmap holds), and top --pages waits for the epoch loop's
  // run lock: on the request workers, not the event loop. Everything they read is thread-safe.
  auto built = std::make_shared<pb::DaemonMessage>();
  ipc::OffLoop off;
  off.work = [this, request, built] { dispatch(request, *built); };
  off.finish = [built, seq = request.seq()](ipc::Session&, pb::DaemonMessage& out) {
    out = std::move(*built);
    out.set_seq(seq);
    return true;
  };
  return off;
}

bool AdminService::permitted(const ipc::Session& session, const pb::ClientMessage& request, pb::DaemonMessage& reply) {
  using B = pb::ClientMessage::BodyCase;
  // Recording writes files as the daemon and reads another process's access pattern: admin only,
  // like tune and migrate (listing included: it names files and pids). A top request's page list
  // is another process's access pattern too, page by page, and its scan holds the epoch loop for
  // as long as it reads every tracked page: admin only as well; the region lists stay open.
  const bool pages = request.body_case() == B::kTop && request.top().pages() > 0;
  const bool privileged = request.body_case() == B::kTune || request.body_case() == B::kMigrate ||
                          request.body_case() == B::kRecord || pages;
  if (privileged && !(ctx_.isAdmin && ctx_.isAdmin(session.peer))) {
    const char* what = pages ? "top --pages"
                       : request.body_case() == B::kTune    ? "tune"
                       : request.body_case() == B::kMigrate ? "migrate"
                                                            : "record";
    TT_LOG(Info) << "refused " << what << " from uid " << session.peer.uid << " (pid " << session.peer.pid
                 << "): not root or in the admin group";
    ipc::setError(reply, pb::PERMISSION_DENIED, "tune, migrate, record and top --pages need root or the admin group");
    return false;
  }
  return true;
}

void AdminService::dispatch(const pb::ClientMessage& request, pb::DaemonMessage& reply) {
  using B = pb::ClientMessage::BodyCase;
  switch (request.body_case()) {
    case B::kStatus: status(reply); return;
    case B::kProcesses: processes(reply); return;
    case B::kRegions: regions(request.regions(), reply); return;
    case B::kTop: top(request.top(), reply); return;
    case B::kTune: {
      if (!ctx_.tune) {
        ipc::setError(reply, pb::INTERNAL, "tuning is not available");
        return;
      }
      auto applied = ctx_.tune(request.tune());
      if (!applied) ipc::setError(reply, pb::BAD_REQUEST, applied.error().message());
      else reply.mutable_tune()->set_effective_config(*applied);
      return;
    }
    case B::kMigrate: migrate(request.migrate(), reply); return;
    case B::kRecord: record(request.record(), reply); return;
    default: ipc::setError(reply, pb::BAD_REQUEST, "unknown admin request"); return;
  }
}

void AdminService::status(pb::DaemonMessage& reply) {
  auto* s = reply.mutable_status();
  s->set_daemon_version(ctx_.daemonVersion);
  s->set_uptime_ms(static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started_).count()));
  const EpochStats st = ctx_.epochLoop ? ctx_.epochLoop->stats() : EpochStats{};
  if (ctx_.topology)
    for (const auto& n : ctx_.topology->nodes) {
      auto* tn = s->add_nodes();
      tn->set_node(n.id);
      tn->set_tier(topology::tierName(n.tier));
      tn->set_tier_source(topology::tierSourceName(n.tierSource));
      tn->set_total_bytes(n.memory.totalBytes);
      tn->set_free_bytes(n.memory.freeBytes);
      for (int c : n.cpus) tn->add_cpus(c);
      for (const auto& f : st.policy.fastNodes)
        if (f.node == n.id) {
          tn->set_budget_bytes(f.budgetBytes);
          tn->set_managed_bytes(f.managedBytes);
        }
    }
  s->set_fast_tier_budget_bytes(st.policy.fastBudgetBytes);
  uint64_t fastUsed = 0;
  if (ctx_.epochLoop)
    for (const auto& [pid, bytes] : ctx_.epochLoop->fastBytesByProcess()) fastUsed += bytes;
  s->set_fast_tier_used_bytes(fastUsed);
  for (const auto& src : st.sources) {
    auto* o = s->add_sources();
    o->set_name(src.name);
    o->set_active(src.active);
    o->set_detail(src.detail);
    o->set_samples(src.samples);
    o->set_lost(src.lost);
    o->set_throttled(src.throttled);
    o->set_paused(src.paused);
    o->set_pauses(src.pauses);
    o->set_kernel_promoted_pages(src.kernelMoves.promoted);
    o->set_kernel_demoted_pages(src.kernelMoves.demoted);
    o->set_kernel_syscall_pages(src.kernelMoves.syscall);
    o->set_kernel_other_pages(src.kernelMoves.other);
    if (src.systemMigrations) {
      const auto& m = *src.systemMigrations;
      for (const auto& [reason, pages] : {std::pair{"promoted", m.promotion}, std::pair{"demoted", m.demotion},
                                          std::pair{"syscall", m.syscall}, std::pair{"other", m.other}}) {
        auto* k = o->add_system_migrations();
        k->set_reason(reason);
        k->set_succeeded_pages(pages.succeeded);
        k->set_failed_pages(pages.failed);
      }
      if (m.trackedUndone) o->set_kernel_undone_entries(*m.trackedUndone);
    }
  }
  for (const auto& note : st.sourceNotes) s->add_source_notes(note);
  s->set_epochs(st.epochs);
  s->set_epoch_ms(ctx_.epochMs ? ctx_.epochMs() : 0);
  s->set_last_epoch_ms(st.lastEpochMs);
  if (ctx_.executor) {
    const auto c = ctx_.executor->counters();
    s->set_bytes_promoted(c.promotedBytes);
    s->set_bytes_demoted(c.demotedBytes);
  }
  s->set_promote_bytes_per_sec(st.promoteBytesPerSec);
  s->set_demote_bytes_per_sec(st.demoteBytesPerSec);
  s->set_promote_bandwidth_bytes_per_sec(st.migrationRates.promoteBytesPerSec);
  s->set_demote_bandwidth_bytes_per_sec(st.migrationRates.demoteBytesPerSec);
  s->set_stuck_fast_pages(st.stuck.fastPages);
  s->set_stuck_slow_pages(st.stuck.slowPages);
  const auto totals = ctx_.registry->totals();
  s->set_processes(totals.processes);
  s->set_regions(totals.regions);
  s->set_registered_bytes(totals.registeredBytes);
  s->set_connections(totals.connections);
  for (const auto& m : ctx_.stagesMissing) s->add_stages_missing(m);
  s->set_slow_access_penalty_ns(st.policy.slowPenaltyNs);
  s->set_slow_access_penalty_source(st.policy.slowPenaltySource);
  for (const auto& w : st.policy.featureWeights) {
    auto* o = s->add_feature_weights();
    o->set_name(w.name);
    o->set_weight(w.weight);
  }
}

void AdminService::processes(pb::DaemonMessage& reply) {
  auto* out = reply.mutable_processes();
  const auto fast = ctx_.epochLoop ? ctx_.epochLoop->fastBytesByProcess() : std::map<pid_t, uint64_t>{};
  const EpochStats st = ctx_.epochLoop ? ctx_.epochLoop->stats() : EpochStats{};
  for (const auto& p : ctx_.registry->processes()) {
    auto* e = out->add_processes();
    e->set_pid(p.pid);
    e->set_uid(p.uid);
    e->set_client_name(p.clientName);
    e->set_regions(p.regions);
    e->set_registered_bytes(p.registeredBytes);
    if (auto it = fast.find(p.pid); it != fast.end()) e->set_fast_tier_bytes(it->second);
    e->set_last_step(p.lastStep);
    e->set_accepts_mbind(p.acceptsMbind);
    for (const auto& c : st.policy.clocks)
      if (c.tgid == p.pid) {
        e->set_step_period_us(c.periodNs / 1000);
        e->set_step_period_source(c.source);
        e->set_step_period_confidence(c.confidence);
        e->set_phase(c.phase);
      }
  }
}

std::vector<ManualPin> AdminService::pins() const {
  return ctx_.epochLoop ? ctx_.epochLoop->pins() : std::vector<ManualPin>{};
}

uint64_t AdminService::now() const { return ctx_.nowNs ? ctx_.nowNs() : EpochLoop::monotonicNowNs(); }

bool AdminService::fillRegion(const registry::RegionRecord& r, pb::RegionEntry& e, const std::vector<ManualPin>& pins,
                              uint64_t stride, IdChecks& checks) {
  e.set_pid(r.info.tgid);
  e.set_region_id(r.info.id);
  e.set_name(r.info.name);
  e.set_kind(regionKindName(r.info.kind));
  e.set_address(r.info.start);
  e.set_length(r.info.length);
  e.set_heat(r.heat);
  e.set_steady_steps(r.steadySteps);
  for (const auto& p : pins) {
    if (p.tgid != r.info.tgid || p.regionId != r.info.id) continue;
    e.set_pinned(true);
    e.set_pinned_node(p.node);
    const uint64_t t = now();
    e.set_pin_expires_in_ms(p.expiresNs == 0 ? 0 : (p.expiresNs > t ? (p.expiresNs - t + 999999) / 1000000 : 1));
  }
  if (!ctx_.placement) return true;
  // A process that exec'd a setid program since it registered (until the server's sweep drops
  // it): its regions' placement would describe the new program's address space, and the region
  // is left out. Checked before the read and after it, with stat(2) only: waiting for an exec in
  // progress (sys::processOwner's afterExec) would hold the listing (and one of the asking uid's
  // request workers) for as long as the exec takes to free the old address space (0.66 s at
  // 8 GiB here), and any uid may ask for a listing.
  // An exec's ids land microseconds after its new address space, which then holds its stack only.
  // The check after a read stands before the process's next read in the same listing.
  auto stillRegistered = [&] {
    if (!ctx_.registry) return true;
    auto runs = ctx_.registry->runsAsRegistered(r.info.tgid, false);
    return checks[r.info.tgid] = runs.ok() && *runs;
  };
  if (auto known = checks.find(r.info.tgid); known != checks.end() ? !known->second : !stillRegistered()) return false;
  e.set_sample_stride(static_cast<uint32_t>(std::min<uint64_t>(stride, UINT32_MAX)));
  auto placement = ctx_.placement->read(r.info.tgid, r.info.start, r.info.length, stride);
  if (!placement) return false;  // exited since the snapshot
  if (!stillRegistered()) return false;
  for (const auto& [node, bytes] : placement->bytesPerNode) {
    auto* nb = e.add_bytes_per_node();
    nb->set_node(node);
    nb->set_bytes(bytes);
  }
  e.set_unmapped_bytes(placement->unmappedBytes);
  return true;
}

void AdminService::regions(const pb::RegionsRequest& request, pb::DaemonMessage& reply) {
  auto* out = reply.mutable_regions();
  const auto pinned = pins();
  const auto all = ctx_.registry->allRegions(request.pid());
  const std::optional<uint64_t> stride = ipc::placementStride(ipc::pagesOf(all), all.size());
  if (!stride) {
    ipc::setError(reply, pb::LIMIT_EXCEEDED,
                  std::to_string(all.size()) + " regions: more than one request may read (" +
                      std::to_string(ipc::kPlacementPagesPerRequest) + "); list one process at a time (--pid)");
    return;
  }
  IdChecks checks;
  for (const auto& r : all) {
    pb::RegionEntry entry;
    if (fillRegion(r, entry, pinned, *stride, checks)) *out->add_regions() = std::move(entry);
  }
}

void AdminService::top(const pb::TopRequest& request, pb::DaemonMessage& reply) {
  // Refused rather than clamped: a silently shorter list would read as "no more pages have heat".
  if (request.pages() > kMaxTopPages) {
    ipc::setError(reply, pb::BAD_REQUEST,
                  "top: at most " + std::to_string(kMaxTopPages) + " pages, not " + std::to_string(request.pages()));
    return;
  }
  const size_t count = request.count() == 0 ? 10 : std::min<size_t>(request.count(), 1000);
  auto all = ctx_.registry->allRegions(request.pid());
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.heat > b.heat; });
  auto* out = reply.mutable_top();
  const auto pinned = pins();
  const size_t shown = std::min(count, all.size());
  // The hottest and the coldest share the request's page budget (counted twice where they meet).
  const std::span<const registry::RegionRecord> listed(all);
  const uint64_t pages = ipc::pagesOf(listed.first(shown)) + ipc::pagesOf(listed.last(shown));
  const uint64_t stride = ipc::placementStride(pages, 2 * shown).value_or(pages);  // 2000 regions at most: always within
  IdChecks checks;
  for (size_t i = 0; i < shown; ++i) {
    pb::RegionEntry e;
    if (fillRegion(all[i], e, pinned, stride, checks)) *out->add_hottest() = std::move(e);
  }
  for (size_t i = 0; i < shown; ++i) {
    pb::RegionEntry e;
    if (fillRegion(all[all.size() - 1 - i], e, pinned, stride, checks)) *out->add_coldest() = std::move(e);
  }
  if (request.pages() == 0 || !ctx_.epochLoop) return;
  for (const auto& p : ctx_.epochLoop->hottestPages(request.pages(), request.pid(), now())) {
    auto* e = out->add_hottest_pages();
    e->set_pid(p.tgid);
    e->set_address(p.page);
    e->set_heat(p.heat);
  }
}

void AdminService::migrate(const pb::MigrateRequest& request, pb::DaemonMessage& reply) {
  if (!ctx_.executor || !ctx_.epochLoop) {
    ipc::setError(reply, pb::INTERNAL, "no migration engine in this daemon");
    return;
  }
  // pid 0 (or below) would read as "every process" where the registry lists regions by pid.
  if (request.target_case() == pb::MigrateRequest::kPid && request.pid() <= 0) {
    ipc::setError(reply, pb::BAD_REQUEST, "migrate: pid " + std::to_string(request.pid()) + " is not a process");
    return;
  }
  if (request.unpin()) {
    size_t dropped = 0;
    if (request.target_case() == pb::MigrateRequest::kRegionId) {
      auto r = ctx_.registry->region(request.region_id());
      if (!r) {
        ipc::setError(reply, pb::NO_SUCH_REGION, "no region " + std::to_string(request.region_id()));
        return;
      }
      dropped = ctx_.epochLoop->unpin(r->info.tgid, r->info.id);
    } else if (request.target_case() == pb::MigrateRequest::kPid) {
      dropped = ctx_.epochLoop->unpin(request.pid(), 0);
    } else {
      ipc::setError(reply, pb::BAD_REQUEST, "unpin needs a region id or a pid");
      return;
    }
    auto* out = reply.mutable_migrate();
    out->set_unpinned_ranges(static_cast<uint32_t>(dropped));
    out->set_detail(dropped == 0 ? "nothing was pinned" : "unpinned: the policy plans it again from the next epoch");
    return;
  }
  if (!ctx_.topology || !ctx_.topology->node(request.node())) {
    ipc::setError(reply, pb::BAD_REQUEST, "node " + std::to_string(request.node()) + " is not an online memory node");
    return;
  }
  std::vector<registry::RegionRecord> targets;
  if (request.target_case() == pb::MigrateRequest::kRegionId) {
    auto r = ctx_.registry->region(request.region_id());
    if (!r) {
      ipc::setError(reply, pb::NO_SUCH_REGION, "no region " + std::to_string(request.region_id()));
      return;
    }
    targets.push_back(*r);
  } else if (request.target_case() == pb::MigrateRequest::kPid) {
    targets = ctx_.registry->allRegions(request.pid());
    if (targets.empty()) {
      ipc::setError(reply, pb::NO_SUCH_REGION, "pid " + std::to_string(request.pid()) + " has no registered regions");
      return;
    }
  } else {
    ipc::setError(reply, pb::BAD_REQUEST, "migrate needs a region id or a pid");
    return;
  }
  MigrationPlan plan;
  uint64_t bytes = 0;
  for (const auto& t : targets) {
    MoveRequest m;
    m.tgid = t.info.tgid;
    m.start = t.info.start;
    m.length = t.info.length;
    m.targetNode = request.node();
    m.priority = EpochLoop::kManualPriority;  // by hand: before anything else
    m.regionId = t.info.id;
    plan.moves.push_back(m);
    bytes += t.info.length;
  }
  const uint64_t pinSeconds = ctx_.manualPinSeconds ? ctx_.manualPinSeconds() : 0;
  if (auto r = ctx_.epochLoop->submitManual(std::move(plan), now(), pinSeconds * 1000000000ULL); !r) {
    ipc::setError(reply, pb::INTERNAL, r.error().message());
    return;
  }
  auto* out = reply.mutable_migrate();
  out->set_requested_bytes(bytes);
  out->set_queued(true);
  out->set_pinned(true);
  out->set_pin_expires_in_ms(pinSeconds * 1000);
  out->set_detail(pinSeconds == 0 ? "queued to the migration engine; pinned there until `tensortierctl migrate --unpin`"
                                  : "queued to the migration engine; pinned there for " + std::to_string(pinSeconds) +
                                        " s (the policy will not move it back before)");
}

namespace {
void fillRecording(const trace::RecordingInfo& r, uint64_t nowNs, pb::Recording& out) {
  out.set_pid(r.tgid);
  out.set_path(r.path);
  out.set_active(r.active);
  out.set_accesses(r.accesses);
  out.set_marks(r.marks);
  out.set_regions(r.regions);
  out.set_bytes(r.bytes);
  if (r.active) {
    out.set_elapsed_ms(nowNs > r.startedNs ? (nowNs - r.startedNs) / 1000000 : 0);
    out.set_ends_in_ms(r.endsByNs > nowNs ? (r.endsByNs - nowNs) / 1000000 : 0);
  }
  out.set_ended(r.ended);
}
}  // namespace

void AdminService::record(const pb::RecordRequest& request, pb::DaemonMessage& reply) {
  if (!ctx_.recorder) {
    ipc::setError(reply, pb::INTERNAL, "recording is not available in this daemon");
    return;
  }
  const uint64_t nowNs = now();
  switch (request.action()) {
    case pb::RecordRequest::START: {
      const auto procs = ctx_.registry->processes();
      const auto proc = std::find_if(procs.begin(), procs.end(), [&](const auto& p) { return p.pid == request.pid(); });
      if (request.pid() <= 0 || proc == procs.end()) {
        ipc::setError(reply, pb::BAD_REQUEST,
                      "pid " + std::to_string(request.pid()) + " is not a registered process (see tensortierctl processes)");
        return;
      }
      const pid_t tgid = request.pid();
      auto regionsNow = [this, tgid] {
        std::vector<RegionInfo> out;
        for (const auto& r : ctx_.registry->allRegions(tgid)) out.push_back(r.info);
        return out;
      };
      auto started = ctx_.recorder->start(tgid, proc->clientName, regionsNow, nowNs, request.seconds());
      if (!started) {
        ipc::setError(reply, started.error().code == EEXIST || started.error().code == EBUSY ? pb::BAD_REQUEST : pb::INTERNAL,
                      started.error().message());
        return;
      }
      fillRecording(*started, nowNs, *reply.mutable_record()->add_recordings());
      return;
    }
    case pb::RecordRequest::STOP: {
      auto stopped = ctx_.recorder->stop(request.pid(), nowNs);
      if (!stopped) {
        ipc::setError(reply, pb::BAD_REQUEST, stopped.error().message());
        return;
      }
      fillRecording(*stopped, nowNs, *reply.mutable_record()->add_recordings());
      return;
    }
    default: {
      auto* out = reply.mutable_record();
      for (const auto& r : ctx_.recorder->list()) fillRecording(r, nowNs, *out->add_recordings());
      return;
    }
  }
}

}  // namespace tt::service
