#include "service/Daemon.h"

#include <google/protobuf/text_format.h>
#include <signal.h>
#include <sys/stat.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <thread>

#include "core/Log.h"
#include "heat/HeatModel.h"
#include "ipc/Placement.h"
#include "ipc/Protocol.h"
#include "ipc/Server.h"
#include "metrics/HttpExporter.h"
#include "metrics/Metrics.h"
#include "migrate/Engine.h"
#include "migrate/FreeMemory.h"
#include "registry/AddressSpace.h"
#include "registry/Registry.h"
#include "service/Adapters.h"
#include "service/AdminService.h"
#include "service/EpochLoop.h"
#include "sources/SourceSet.h"
#include "sys/PageMover.h"
#include "sys/ThreadName.h"
#include "sys/access/Sysctl.h"
#include "sys/service/Groups.h"
#include "sys/service/SdDaemon.h"
#include "sys/service/SocketFile.h"
#include "topology/Topology.h"

namespace tt::service {
namespace {

namespace asio = boost::asio;
namespace pb = tensortier::v1;

log::Level logLevelOf(const config::DaemonConfig& c) {
  switch (c.log().level()) {
    case pb::DEBUG: return log::Level::Debug;
    case pb::WARN: return log::Level::Warn;
    case pb::ERROR: return log::Level::Error;
    default: return log::Level::Info;
  }
}

registry::Limits limitsOf(const pb::ServiceConfig& s) {
  registry::Limits l;
  l.maxConnections = s.max_connections();
  l.maxConnectionsPerUid = s.max_connections_per_uid();
  l.maxRegionsPerUid = s.max_regions_per_uid();
  l.maxBytesPerUid = s.max_registered_mib_per_uid() << 20;
  return l;
}

// adminGid: the resolved service.admin_group, the recordings' group (the admins asked for them).
trace::RecorderLimits recorderLimitsOf(const pb::ServiceConfig& s, std::optional<gid_t> adminGid) {
  trace::RecorderLimits l;
  l.directory = s.trace_directory();
  l.maxBytes = uint64_t{s.trace_max_mib()} << 20;
  l.maxSeconds = s.trace_max_seconds();
  l.maxRecordings = s.trace_max_recordings();
  l.keepFiles = s.trace_keep_files();
  l.group = adminGid;
  return l;
}

ipc::ServerOptions serverOptionsOf(const pb::ServiceConfig& s) {
  return {s.max_frame_bytes(),
          s.max_send_queue_bytes(),
          std::chrono::milliseconds(s.mbind_timeout_ms()),
          std::chrono::milliseconds(s.stalled_connection_ms()),
          s.request_threads(),
          s.request_threads_per_uid()};
}

std::optional<gid_t> lookupGroup(const std::string& name, const char* what) {
  if (name.empty()) return std::nullopt;
  auto gid = sys::groupId(name);
  if (!gid) {
    TT_LOG(Warn) << what << " " << name << ": " << gid.error().message();
    return std::nullopt;
  }
  if (!*gid) {
    TT_LOG(Warn) << what << " '" << name << "' does not exist";
  }
  return *gid;
}

bool sameMessage(const google::protobuf::Message& a, const google::protobuf::Message& b) {
  return a.SerializeAsString() == b.SerializeAsString();
}

// Answers admin requests while the sources open: the status, tuning and recording need the stages
// that are not built yet.
class StartingAdmin final : public ipc::AdminHandler {
 public:
  void handleAdmin(const ipc::Session& session, const pb::ClientMessage&, pb::DaemonMessage& reply) override {
    if (!told_) {
      told_ = true;
      TT_LOG(Info) << "admin request from pid " << session.peer.pid
                   << " while starting: STARTING (tensortierctl asks again; later ones at debug level)";
    } else {
      TT_LOG(Debug) << "admin request from pid " << session.peer.pid << " while starting: STARTING";
    }
    ipc::setError(reply, pb::STARTING, "tensortierd is starting: its sources are still opening; try again in a moment");
  }

 private:
  bool told_ = false;  // the event loop's only
};

class Daemon {
 public:
  Daemon(const DaemonOptions& options, config::DaemonConfig config)
      : options_(options), config_(std::move(config)), signals_(io_), ioHeartbeat_(io_) {}

  int run();

 private:
  [[nodiscard]] Result<void> bindSocket();
  // On the startup thread: opens the sources and builds the stages that use them.
  void buildStages();
  // On the event loop, once buildStages() is done: starts the epochs and reports ready.
  void startEpochs();
  void onSignal(int signal);
  void reload();
  // Applies the live-tunable parts of `next` and makes it current. Returns notes on what needs a
  // restart instead.
  std::string applyLive(const config::DaemonConfig& next);
  Result<std::string> tune(const pb::TuneRequest& request);
  void shutdown();
  void heartbeat();

  DaemonOptions options_;
  config::DaemonConfig config_;
  // The sources config in effect: open()'s plus live changes (restart-only keys keep their value).
  tensortier::v1::SourcesConfig runningSources_;
  asio::io_context io_;
  asio::signal_set signals_;
  asio::steady_timer ioHeartbeat_;
  std::atomic<int64_t> ioAliveNs_{0};
  std::chrono::milliseconds heartbeatPeriod_{1000};  // shorter under a short watchdog, see run()

  topology::Topology topology_;
  metrics::Registry metrics_;
  std::unique_ptr<metrics::HttpExporter> exporter_;
  std::unique_ptr<registry::ProcMapsInspector> inspector_;
  std::unique_ptr<registry::Registry> registry_;
  sys::LinuxPageMover mover_;
  std::unique_ptr<ipc::PlacementReader> placement_;
  std::unique_ptr<ipc::ProtocolHandler> handler_;
  std::unique_ptr<ipc::Server> server_;
  std::string boundSocket_;  // the file we created (unlinked at exit); empty when systemd owns it

  std::unique_ptr<SourceSetEvidence> source_;
  std::unique_ptr<HeatPlannerPolicy> policy_;
  std::unique_ptr<migrate::SysfsFreeMemoryReader> freeMemory_;
  std::unique_ptr<SocketInProcessMover> inProcess_;
  std::unique_ptr<migrate::Engine> engine_;
  std::unique_ptr<EngineExecutor> executor_;
  std::unique_ptr<PageMoverResidency> residency_;
  std::unique_ptr<trace::Recorder> recorder_;
  std::unique_ptr<RecorderSink> recorderSink_;
  std::unique_ptr<EpochLoop> epochLoop_;
  std::unique_ptr<AdminService> admin_;
  std::atomic<uint32_t> epochMs_{1000};
  std::atomic<uint32_t> manualPinSeconds_{300};
  std::optional<gid_t> adminGid_;
  StartingAdmin startingAdmin_;
  // Builds the stages while the event loop already serves clients; joined by startEpochs() or
  // by a shutdown that comes first.
  std::thread startup_;
  bool started_ = false;        // startEpochs() ran: every stage exists
  bool reloadPending_ = false;  // a SIGHUP came before that
  bool stopping_ = false;
};

Result<void> Daemon::bindSocket() {
  const auto& s = config_.service();
  if (!options_.socketPath) {
    auto fds = sys::activationSockets();
    if (!fds) return fds.error();
    if (!fds->empty()) {
      if (fds->size() > 1) {
        TT_LOG(Warn) << "socket activation passed " << fds->size() << " sockets; serving the first";
      }
      TT_LOG(Info) << "serving the socket systemd passed (fd " << fds->front() << ")";
      return server_->adopt(fds->front());
    }
  }
  const std::string path = options_.socketPath.value_or(s.socket_path());
  if (auto r = server_->listen(path); !r) return r.error();
  boundSocket_ = path;
  mode_t bits = 0;  // octal digits, checked by config::checkService
  for (char c : s.socket_mode()) bits = static_cast<mode_t>(bits * 8 + static_cast<mode_t>(c - '0'));
  const auto gid = lookupGroup(s.socket_group(), "socket group");
  if (auto r = sys::setSocketAccess(path, gid, bits); !r) return r.error();
  TT_LOG(Info) << "listening on " << path << " (mode " << s.socket_mode()
               << (gid ? ", group " + s.socket_group() : std::string(", daemon's group")) << ")";
  return {};
}

void Daemon::buildStages() {
  auto sources = sources::SourceSet::open(config_.sources(), topology_);
  runningSources_ = config_.sources();
  source_ = std::make_unique<SourceSetEvidence>(std::move(sources));
  policy_ = std::make_unique<HeatPlannerPolicy>(config_.policy(), topology_, mover_, sys::Fs(config_.sources().procfs_root()));
  // The planner's move floor is counted in passes over a page; the sources say what an access is.
  const double perPass = accessesPerPagePass(source_->status());
  policy_->setAccessesPerPagePass(perPass);
  TT_LOG(Info) << "policy: " << perPass << " accesses per pass over a page (evidence unit of the active sources)";
  freeMemory_ = std::make_unique<migrate::SysfsFreeMemoryReader>(sys::Fs(config_.topology().sysfs_root()));
  inProcess_ = std::make_unique<SocketInProcessMover>(*server_, *registry_,
                                                      std::chrono::milliseconds(config_.service().mbind_timeout_ms()));
  migrate::EngineHooks hooks;
  hooks.inProcess = inProcess_.get();
  engine_ = std::make_unique<migrate::Engine>(topology_, mover_, *freeMemory_, config_.migration(), hooks);
  executor_ = std::make_unique<EngineExecutor>(*engine_, config_.migration());
  residency_ = std::make_unique<PageMoverResidency>(mover_, topology_);
}

int Daemon::run() {
  ::signal(SIGPIPE, SIG_IGN);  // a client that hangs up mid-reply is an EPIPE, not a death
  // Catch the signals first: a SIGHUP or SIGTERM arriving before the event loop runs must not kill
  // the daemon with the default action; they are handled once it does.
  signals_.add(SIGTERM);
  signals_.add(SIGINT);
  signals_.add(SIGHUP);
  signals_.async_wait([this](const boost::system::error_code& ec, int signal) {
    if (!ec) onSignal(signal);
  });
  log::setLevel(logLevelOf(config_));
  auto topology = topology::discover(sys::Fs(config_.topology().sysfs_root()), config_.topology());
  if (!topology) {
    TT_LOG(Error) << "topology: " << topology.error().message();
    return 1;
  }
  topology_ = std::move(*topology);
  if (!topology_.isTiered()) {
    TT_LOG(Warn) << "no fast+slow tier pair on this machine: the daemon serves clients but has nothing to move";
  }

  const auto& s = config_.service();
  inspector_ = std::make_unique<registry::ProcMapsInspector>(config_.sources().procfs_root());
  registry_ = std::make_unique<registry::Registry>(*inspector_, limitsOf(s));
  placement_ = std::make_unique<ipc::PlacementReader>(mover_);
  handler_ = std::make_unique<ipc::ProtocolHandler>(*registry_, *placement_, nullptr, nullptr, options_.version);
  server_ = std::make_unique<ipc::Server>(io_, *registry_, *handler_, serverOptionsOf(s));
  // Read when scraped (the workers keep them behind their own lock), not copied in each epoch.
  metrics_.addCollector([this] {
    const ipc::Server::RequestLoad load = server_->requestLoad();
    metrics_
        .gauge("tensortier_request_work_queued",
               "Client requests whose work waits for a request thread (behind other requests that wait on "
               "their processes: an exec, an mmap lock)")
        .set(static_cast<double>(load.queued));
    metrics_.gauge("tensortier_request_work_running", "Client requests whose work runs on a request thread now")
        .set(static_cast<double>(load.running));
  });
  if (auto r = bindSocket(); !r) {
    TT_LOG(Error) << "socket: " << r.error().message();
    return 1;
  }
  adminGid_ = lookupGroup(s.admin_group(), "admin group");
  handler_->setAdminHandler(&startingAdmin_);

  // Clients are served from here on, while the sources open on a thread of their own: loading and
  // verifying the BPF programs and opening per-CPU perf events takes 0.3 s on the development host,
  // 3 s under TCG and longer with many CPUs, and a client waits only its connect timeout (500 ms
  // by default) for the answer to its Hello. What clients register meanwhile waits in the
  // registry's events for the first epoch. systemd hears READY=1 only once the epochs run.
  TT_LOG(Info) << "accepting clients; opening the sources";
  startup_ = std::thread([this] {
    sys::nameThisThread("tt-startup");
    buildStages();
    asio::post(io_, [this] { startEpochs(); });
  });
  io_.run();
  if (startup_.joinable()) startup_.join();  // io_ stopped before startEpochs() ran
  TT_LOG(Info) << "tensortierd stopped";
  return 0;
}

void Daemon::startEpochs() {
  if (stopping_) return;  // shutdown() came first, joined the startup thread and shut the stages down
  startup_.join();
  const auto& s = config_.service();
  std::vector<std::string> missing;  // every stage is wired in this build
  recorder_ = std::make_unique<trace::Recorder>(recorderLimitsOf(s, adminGid_));
  recorderSink_ = std::make_unique<RecorderSink>(*recorder_);
  epochLoop_ = std::make_unique<EpochLoop>(
      *registry_,
      EpochStages{source_.get(), policy_.get(), executor_.get(), residency_.get(), recorderSink_.get()}, metrics_);
  epochMs_ = s.epoch_ms();
  manualPinSeconds_ = s.manual_pin_seconds();
  epochLoop_->setPeriod(std::chrono::milliseconds(s.epoch_ms()));
  epochLoop_->setInitialMigrationBandwidth(static_cast<double>(config_.policy().initial_migration_bandwidth()));
  const uint64_t watchdogUs = s.watchdog() ? sys::watchdogIntervalUs() : 0;
  if (watchdogUs > 0) {
    // Keep-alives come from the epoch thread, and only while the event loop is alive too.
    const auto interval = std::chrono::milliseconds(std::max<uint64_t>(1, watchdogUs / 3000));
    // The main loop's heartbeat must stay well fresher than the watchdog interval, or the
    // freshness check below drops keep-alives while both loops are fine: with a fixed 1 s
    // heartbeat and WATCHDOG_USEC=400000, keep-alives had 0.7 s gaps (NotifyTest).
    heartbeatPeriod_ = std::min<std::chrono::milliseconds>(
        std::chrono::seconds(1), std::chrono::milliseconds(std::max<uint64_t>(1, watchdogUs / 4000)));
    epochLoop_->setKeepAlive(
        [this, watchdogUs] {
          const int64_t age = static_cast<int64_t>(EpochLoop::monotonicNowNs()) - ioAliveNs_.load();
          if (age < static_cast<int64_t>(watchdogUs) * 1000) sys::notifyWatchdog();
        },
        interval);
    heartbeat();
    TT_LOG(Info) << "systemd watchdog: keep-alive every " << interval.count() << " ms";
  }

  AdminContext admin;
  admin.registry = registry_.get();
  admin.topology = &topology_;
  admin.epochLoop = epochLoop_.get();
  admin.executor = executor_.get();
  admin.placement = placement_.get();
  admin.daemonVersion = options_.version;
  admin.stagesMissing = missing;
  admin.isAdmin = [this](const registry::Peer& peer) {
    if (peer.uid == 0) return true;
    if (!adminGid_) return false;
    auto member = sys::uidInGroup(peer.uid, *adminGid_);
    return member.ok() && *member;
  };
  admin.tune = [this](const pb::TuneRequest& r) { return tune(r); };
  admin.epochMs = [this] { return epochMs_.load(); };
  admin.manualPinSeconds = [this] { return manualPinSeconds_.load(); };
  admin.recorder = recorder_.get();
  admin_ = std::make_unique<AdminService>(std::move(admin));
  handler_->setAdminHandler(admin_.get());

  if (s.metrics_port() != 0) {
    exporter_ = std::make_unique<metrics::HttpExporter>(io_, metrics_);
    if (auto port = exporter_->start(static_cast<uint16_t>(s.metrics_port())); !port) {
      TT_LOG(Warn) << port.error().message() << " (metrics off)";
    } else {
      TT_LOG(Info) << "metrics on http://127.0.0.1:" << *port << "/metrics";
    }
  }

  epochLoop_->start();
  started_ = true;
  const std::string ready = "serving " + std::to_string(topology_.nodes.size()) + " node(s), epoch " +
                            std::to_string(s.epoch_ms()) + " ms";
  sys::notifyReady(ready);
  TT_LOG(Info) << "tensortierd " << options_.version << " ready: " << ready;
  if (reloadPending_) {
    reloadPending_ = false;
    reload();
  }
}

void Daemon::heartbeat() {
  ioAliveNs_.store(static_cast<int64_t>(EpochLoop::monotonicNowNs()));
  ioHeartbeat_.expires_after(heartbeatPeriod_);
  ioHeartbeat_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec && !stopping_) heartbeat();
  });
}

void Daemon::onSignal(int signal) {
  if (signal == SIGHUP) {
    if (started_) {
      reload();
    } else if (!reloadPending_) {
      // The stages a reload changes are being built; the config they are built from stays put.
      reloadPending_ = true;
      TT_LOG(Info) << "SIGHUP while the sources open: reloading once they are";
    }
    signals_.async_wait([this](const boost::system::error_code& ec, int next) {
      if (!ec) onSignal(next);
    });
    return;
  }
  TT_LOG(Info) << (signal == SIGTERM ? "SIGTERM" : "SIGINT") << ": shutting down";
  shutdown();
}

void Daemon::reload() {
  if (options_.configPath.empty()) {
    TT_LOG(Info) << "SIGHUP: running on built-in defaults; nothing to reload";
    return;
  }
  sys::notifyReloading();
  auto next = config::loadConfigFile(options_.configPath);  // parses and validates
  if (!next) {
    TT_LOG(Error) << "SIGHUP: keeping the running config: " << next.error().message();
    sys::notifyReady("reload failed; running config kept");
    return;
  }
  const std::string notes = applyLive(*next);
  TT_LOG(Info) << "SIGHUP: reloaded " << options_.configPath << (notes.empty() ? "" : "; ") << notes;
  sys::notifyReady("config reloaded");
}

std::string Daemon::applyLive(const config::DaemonConfig& next) {
  std::string notes;
  auto note = [&notes](const std::string& n) { notes += (notes.empty() ? "" : "; ") + n; };
  const auto& o = config_.service();
  const auto& n = next.service();
  log::setLevel(logLevelOf(next));
  registry_->setLimits(limitsOf(n));
  server_->setOptions(serverOptionsOf(n));
  epochMs_ = n.epoch_ms();
  manualPinSeconds_ = n.manual_pin_seconds();  // for later migrations; existing pins keep their expiry
  adminGid_ = lookupGroup(n.admin_group(), "admin group");
  recorder_->setLimits(recorderLimitsOf(n, adminGid_));
  epochLoop_->setPeriod(std::chrono::milliseconds(n.epoch_ms()));
  if (o.socket_path() != n.socket_path() || o.socket_group() != n.socket_group() || o.socket_mode() != n.socket_mode())
    note("service.socket_*: takes effect at restart");
  if (o.metrics_port() != n.metrics_port()) note("service.metrics_port: takes effect at restart");
  if (o.request_threads() != n.request_threads() || o.request_threads_per_uid() != n.request_threads_per_uid())
    note("service.request_threads*: take effect at restart");
  if (!sameMessage(config_.topology(), next.topology())) note("topology: takes effect at restart");
  if (auto r = executor_->applyConfig(next.migration()); !r) note(r.error().message());
  // The sources live on the epoch thread: the live keys are applied there before the next epoch;
  // the rest is reported against what actually runs until a restart.
  const auto sourceChanges = sources::SourceSet::classifyChanges(runningSources_, next.sources());
  for (const auto& key : sourceChanges.live) note(key + ": live from the next epoch");
  for (const auto& key : sourceChanges.restart) note(key + ": takes effect at restart");
  if (!sourceChanges.live.empty()) {
    runningSources_ = sources::SourceSet::withLiveKeys(runningSources_, next.sources());
    auto sourcesConfig = next.sources();
    epochLoop_->runBeforeNextEpoch([this, sourcesConfig] {
      if (auto r = source_->applyConfig(sourcesConfig); !r) {
        TT_LOG(Warn) << r.error().message();
      }
    });
  }
  // The policy lives on the epoch thread: its new config is applied there, before the next epoch.
  // The planner's keys need no note (it is rebuilt for every change); the heat model's say what
  // becomes of its learned state.
  for (const auto& heatNote : heat::heatModelChangeNotes(config_.policy(), next.policy())) note(heatNote);
  auto policy = next.policy();
  epochLoop_->runBeforeNextEpoch([this, policy] {
    if (auto r = policy_->applyConfig(policy); !r) {
      TT_LOG(Warn) << r.error().message();
    } else {
      epochLoop_->setInitialMigrationBandwidth(static_cast<double>(policy.initial_migration_bandwidth()));
    }
  });
  config_ = next;
  return notes;
}

Result<std::string> Daemon::tune(const pb::TuneRequest& r) {
  config::DaemonConfig next = config_;
  auto* m = next.mutable_migration();
  auto* s = next.mutable_service();
  if (r.has_promote_mbps()) m->set_promote_mbps(r.promote_mbps());
  if (r.has_demote_mbps()) m->set_demote_mbps(r.demote_mbps());
  if (r.has_epoch_ms()) s->set_epoch_ms(r.epoch_ms());
  if (r.has_sampling_cpu_budget_percent()) next.mutable_sources()->set_cpu_budget_percent(r.sampling_cpu_budget_percent());
  if (r.has_max_regions_per_uid()) s->set_max_regions_per_uid(r.max_regions_per_uid());
  if (r.has_max_registered_mib_per_uid()) s->set_max_registered_mib_per_uid(r.max_registered_mib_per_uid());
  if (r.has_max_connections_per_uid()) s->set_max_connections_per_uid(r.max_connections_per_uid());
  for (const auto& kv : r.policy()) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) return logicError("policy setting '" + kv + "': expected key=value");
    google::protobuf::TextFormat::Parser parser;
    parser.AllowUnknownField(false);
    const std::string text = kv.substr(0, eq) + ": " + kv.substr(eq + 1);
    if (!parser.MergeFromString(text, next.mutable_policy()))
      return logicError("policy setting '" + kv + "': not a policy key or not a valid value");
  }
  if (auto valid = config::validateConfig(next); !valid) return valid.error();
  const std::string notes = applyLive(next);
  TT_LOG(Info) << "tuned by tensortierctl" << (notes.empty() ? "" : ": ") << notes;
  std::string text = config::effectiveConfigText(next);
  if (!notes.empty()) text = "# " + notes + "\n" + text;
  return text;
}

void Daemon::shutdown() {
  if (stopping_) return;
  stopping_ = true;
  sys::notifyStopping();
  server_->stop();  // no new requests; pending mbinds fail
  if (!started_ && startup_.joinable()) {
    // Stopped while the sources open: that cannot be cut short, and what it opens (a kernel
    // tiering guard among them) must be closed in order, so wait for it.
    TT_LOG(Info) << "waiting for the sources to finish opening";
    startup_.join();
  }
  inProcess_->cancelAll();
  if (epochLoop_) epochLoop_->stop();  // finishes the epoch in progress
  if (recorder_) recorder_->stopAll(EpochLoop::monotonicNowNs());  // recordings end with complete files
  executor_->shutdown(config_.service().shutdown_grace_ms());
  source_->shutdown();
  if (exporter_) exporter_->stop();
  ioHeartbeat_.cancel();
  signals_.cancel();
  if (!boundSocket_.empty()) sys::unlinkSocket(boundSocket_);
  io_.stop();
}

}  // namespace

int runDaemon(const DaemonOptions& options, config::DaemonConfig config) {
  Daemon daemon(options, std::move(config));
  return daemon.run();
}

bool prepareKernelTiering(const pb::SourcesConfig& sources) {
  std::vector<std::string> lines;
  const bool ok = sources::SourceSet::prepareKernelTiering(sources, sys::Fs(sources.procfs_root()), sys::Fs("/sys"), lines);
  for (const auto& l : lines) {
    if (ok) {
      TT_LOG(Info) << l;
    } else {
      TT_LOG(Error) << l;
    }
  }
  return ok;
}

bool restoreKernelTiering(const pb::SourcesConfig& sources) {
  const std::string& path = sources.kernel_tiering_state_file();
  auto state = sys::loadKernelTieringState(path);
  std::string leftAlone;
  auto restored = sys::restoreKernelTiering(sys::Fs(sources.procfs_root()), sys::Fs("/sys"), path, &leftAlone);
  if (!restored) {
    TT_LOG(Error) << "kernel-tiering: restoring the values saved in " << path << ": " << restored.error().message();
    return false;
  }
  if (*restored) {
    // The unit's own file is the normal case (ExecStartPre turned it off); any other means the
    // daemon died with it off.
    const std::string what = (*restored)->describe() + " from " + path +
                             (leftAlone.empty() ? "" : ", but for what was changed while it ran: " + leftAlone);
    if (state && *state && (*state)->byUnit) {
      TT_LOG(Info) << "kernel-tiering: restored " << what;
    } else {
      TT_LOG(Warn) << "kernel-tiering: the daemon exited without restoring it: restored " << what;
    }
  } else {
    TT_LOG(Info) << "kernel-tiering: nothing to restore (no " << path << ")";
  }
  return true;
}

}  // namespace tt::service
