// The admin requests of tensortierctl (admin.proto): status, processes, regions, top (read-only,
// any peer that can connect), tune, migrate and record (root or the configured admin group).
// Runs on the event-loop thread, but for the listings (regions, top), which run on the request
// workers (beginAdmin): they read only what is thread-safe (registry, placement, epoch loop).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ipc/Placement.h"
#include "ipc/Protocol.h"
#include "registry/Registry.h"
#include "service/EpochLoop.h"
#include "service/Stages.h"
#include "topology/Topology.h"
#include "trace/Recorder.h"

namespace tt::service {

struct AdminContext {
  registry::Registry* registry = nullptr;
  const topology::Topology* topology = nullptr;
  EpochLoop* epochLoop = nullptr;
  PlanExecutor* executor = nullptr;  // null when no engine is wired
  ipc::PlacementReader* placement = nullptr;
  std::string daemonVersion;
  std::vector<std::string> stagesMissing;
  // Whether a peer may tune and migrate.
  std::function<bool(const registry::Peer&)> isAdmin;
  // Applies a tune request like a SIGHUP reload; returns the effective sections or the error.
  std::function<Result<std::string>(const tensortier::v1::TuneRequest&)> tune;
  std::function<uint32_t()> epochMs;
  // service.manual_pin_seconds as configured now (0 = pins last until unpinned).
  std::function<uint32_t()> manualPinSeconds;
  // Recordings of live runs (tensortierctl record); null = not available.
  trace::Recorder* recorder = nullptr;
  // CLOCK_MONOTONIC ns; tests pass a fake clock. Unset = EpochLoop::monotonicNowNs.
  std::function<uint64_t()> nowNs;
};

class AdminService final : public ipc::AdminHandler {
 public:
  // Most pages a top request may ask for (TopRequest.pages): each request scans every tracked page
  // under the epoch loop's run lock; this bounds the reply and the copy, not the scan.
  static constexpr uint32_t kMaxTopPages = 1000;

  explicit AdminService(AdminContext context);
  void handleAdmin(const ipc::Session& session, const ipc::pb::ClientMessage& request,
                   ipc::pb::DaemonMessage& reply) override;
  // Listings (regions, top) come back as OffLoop: see the .cpp.
  [[nodiscard]] std::optional<ipc::OffLoop> beginAdmin(const ipc::Session& session,
                                                       const ipc::pb::ClientMessage& request,
                                                       ipc::pb::DaemonMessage& reply) override;

 private:
  // Whether the peer may make this request; if not, `reply` is the refusal.
  [[nodiscard]] bool permitted(const ipc::Session& session, const ipc::pb::ClientMessage& request,
                               ipc::pb::DaemonMessage& reply);
  void dispatch(const ipc::pb::ClientMessage& request, ipc::pb::DaemonMessage& reply);
  void status(ipc::pb::DaemonMessage& reply);
  void processes(ipc::pb::DaemonMessage& reply);
  void regions(const tensortier::v1::RegionsRequest& request, ipc::pb::DaemonMessage& reply);
  void top(const tensortier::v1::TopRequest& request, ipc::pb::DaemonMessage& reply);
  void migrate(const tensortier::v1::MigrateRequest& request, ipc::pb::DaemonMessage& reply);
  void record(const tensortier::v1::RecordRequest& request, ipc::pb::DaemonMessage& reply);
  // What one listing last found of each process's ids: a check after one region's placement read
  // also stands before the next read of that process (nothing of it is read in between).
  using IdChecks = std::unordered_map<pid_t, bool>;
  // `stride`: read the placement at every stride-th page (ipc::placementStride of the request's
  // regions, so that one request stays within ipc::kPlacementPagesPerRequest).
  [[nodiscard]] bool fillRegion(const registry::RegionRecord& record, tensortier::v1::RegionEntry& entry,
                                const std::vector<ManualPin>& pins, uint64_t stride, IdChecks& checks);
  [[nodiscard]] std::vector<ManualPin> pins() const;
  [[nodiscard]] uint64_t now() const;

  AdminContext ctx_;
  std::chrono::steady_clock::time_point started_;
};

}  // namespace tt::service
