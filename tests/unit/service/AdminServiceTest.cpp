// Admin requests: read-only ones for anyone, tune, migrate and record only for admins; migrate turns
// regions into a manual plan; status and regions report what the registry and loop know.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <map>
#include <regex>
#include <tuple>

#include "fakes/migrate/FakePageMover.h"
#include "fakes/registry/FakeAddressSpace.h"
#include "fakes/service/FakeStages.h"
#include "ctl/RegionsView.h"
#include "ctl/StatusView.h"
#include "fakes/sources/FakeSource.h"
#include "service/Adapters.h"
#include "service/AdminService.h"
#include "sources/SourceSet.h"

namespace {

namespace pb = tensortier::v1;
constexpr uint64_t kPage = tt::kBasePageSize;
constexpr uint64_t kBase = 0x7f0000000000;

// Node 0 fast, node 1 slow; no sizes (the requests here read placement, they do not plan by it).
tt::topology::Topology fastAndSlowNodes() {
  tt::topology::NumaNode n0, n1;
  n0.id = 0;
  n1.id = 1;
  n1.tier = tt::topology::Tier::Slow;
  tt::topology::Topology t;
  t.nodes = {n0, n1};
  return t;
}

class AdminServiceTest : public ::testing::Test {
 protected:
  AdminServiceTest() : registry(space, {}), reader(mover), loop(registry, {nullptr, nullptr, &executor, nullptr}, metrics) {
    space.map(10, kBase, kBase + (1ULL << 30));
    topology = fastAndSlowNodes();
    tt::service::AdminContext ctx;
    ctx.registry = &registry;
    ctx.topology = &topology;
    ctx.epochLoop = &loop;
    ctx.executor = &executor;
    ctx.placement = &reader;
    ctx.daemonVersion = "t";
    ctx.stagesMissing = {"policy"};
    ctx.isAdmin = [](const tt::registry::Peer& p) { return p.uid == 0 || p.uid == 500; };
    ctx.manualPinSeconds = [this] { return pinSeconds; };
    ctx.nowNs = [this] { return nowNs; };
    char tmpl[] = "/tmp/tt-admin-record-XXXXXX";
    traceDir = ::mkdtemp(tmpl) != nullptr ? tmpl : "";
    tt::trace::RecorderLimits limits;
    limits.directory = traceDir;
    recorder = std::make_unique<tt::trace::Recorder>(limits);
    ctx.recorder = recorder.get();
    ctx.tune = [this](const pb::TuneRequest& r) -> tt::Result<std::string> {
      lastTune = r;
      return std::string("tuned");
    };
    admin = std::make_unique<tt::service::AdminService>(std::move(ctx));
    registry.attachProcess({10, 1000, 1000}, "trainer", true);
    tt::registry::RegisterRequest r;
    r.address = kBase;
    r.length = 4 * kPage;
    r.kind = tt::RegionKind::Gradient;
    r.name = "grad";
    regionId = registry.registerRegion({10, 1000, 1000}, r)->id;
    mover.map(10, kBase, 4 * kPage, 1);
  }
  pb::DaemonMessage ask(uid_t uid, const pb::ClientMessage& m) {
    tt::ipc::Session s;
    s.peer = {99, uid, uid};
    s.hello = true;
    pb::DaemonMessage reply;
    admin->handleAdmin(s, m, reply);
    return reply;
  }

  tt::test::FakeAddressSpace space;
  tt::registry::Registry registry;
  tt::fakes::FakePageMover mover;
  tt::ipc::PlacementReader reader;
  tt::metrics::Registry metrics;
  tt::test::FakeExecutor executor;
  tt::service::EpochLoop loop;
  tt::topology::Topology topology;
  std::unique_ptr<tt::trace::Recorder> recorder;
  std::unique_ptr<tt::service::AdminService> admin;
  std::string traceDir;
  pb::TuneRequest lastTune;
  uint64_t regionId = 0;
  uint32_t pinSeconds = 300;
  uint64_t nowNs = 5'000'000'000ULL;  // fake CLOCK_MONOTONIC
};

TEST_F(AdminServiceTest, TuneAndMigrateAreRefusedToNonAdmins) {
  pb::ClientMessage tune;
  tune.mutable_tune()->set_epoch_ms(50);
  auto r = ask(65534, tune);
  ASSERT_TRUE(r.has_error());
  EXPECT_EQ(r.error().code(), pb::PERMISSION_DENIED);
  EXPECT_FALSE(lastTune.has_epoch_ms());
  pb::ClientMessage migrate;
  migrate.mutable_migrate()->set_region_id(regionId);
  migrate.mutable_migrate()->set_node(0);
  r = ask(1000, migrate);
  EXPECT_EQ(r.error().code(), pb::PERMISSION_DENIED);
  EXPECT_TRUE(executor.submitted.empty());
}

// A registered process that exec'd a setid program runs with other ids than it registered under:
// the listings do not read its regions' placement (it would describe the new program), also when
// the exec comes between the check and the read.
TEST_F(AdminServiceTest, RegionsOfAProcessThatChangedIdsAreNotRead) {
  pb::ClientMessage list;
  list.mutable_regions();
  ASSERT_EQ(ask(1000, list).regions().regions_size(), 1);
  space.execAfterNextQuickCheck(10, 0, 0);
  EXPECT_EQ(ask(1000, list).regions().regions_size(), 0) << "read during the exec";
  EXPECT_EQ(ask(1000, list).regions().regions_size(), 0) << "read after it";
  pb::ClientMessage top;
  top.mutable_top();
  const auto t = ask(1000, top).top();
  EXPECT_EQ(t.hottest_size() + t.coldest_size(), 0);
  EXPECT_EQ(registry.processesWithChangedIds(), std::vector<pid_t>{10});
}

// The listings read client processes (placement; top --pages waits for the epoch loop): they come
// back for the request workers, and nothing is read before; the others, and refusals, are
// answered at once.
TEST_F(AdminServiceTest, ListingsAreLeftForTheRequestWorkers) {
  tt::ipc::Session s;
  s.peer = {99, 1000, 1000};
  s.hello = true;
  pb::ClientMessage list;
  list.set_seq(41);
  list.mutable_regions();
  pb::DaemonMessage reply;
  const int checksBefore = space.idChecks;
  auto off = admin->beginAdmin(s, list, reply);
  ASSERT_TRUE(off.has_value()) << reply.DebugString();
  EXPECT_EQ(space.idChecks, checksBefore) << "the listing was read on the loop";
  EXPECT_FALSE(reply.has_regions());
  off->work();
  EXPECT_GT(space.idChecks, checksBefore);
  ASSERT_TRUE(off->finish(s, reply));
  EXPECT_EQ(reply.seq(), 41u);
  ASSERT_EQ(reply.regions().regions_size(), 1) << reply.DebugString();
  EXPECT_EQ(reply.regions().regions(0).bytes_per_node(0).bytes(), 4 * kPage);

  pb::ClientMessage top;
  top.mutable_top();
  EXPECT_TRUE(admin->beginAdmin(s, top, reply).has_value());

  pb::ClientMessage status;
  status.mutable_status();
  reply.Clear();
  EXPECT_FALSE(admin->beginAdmin(s, status, reply).has_value());
  EXPECT_TRUE(reply.has_status());

  pb::ClientMessage pages;
  pages.mutable_top()->set_pages(5);
  reply.Clear();
  EXPECT_FALSE(admin->beginAdmin(s, pages, reply).has_value()) << "a refusal went to the workers";
  ASSERT_TRUE(reply.has_error());
  EXPECT_EQ(reply.error().code(), pb::PERMISSION_DENIED);
}

// The check after one region's placement read also stands before the process's next read: a
// listing of a process's regions checks its ids once per region and once more, not twice a region.
TEST_F(AdminServiceTest, AListingChecksEachProcessOnceARegionAndOnceMore) {
  for (uint64_t i = 1; i < 4; ++i) {
    tt::registry::RegisterRequest r;
    r.address = kBase + i * (1ULL << 20);
    r.length = 4 * kPage;
    r.kind = tt::RegionKind::Weight;
    ASSERT_TRUE(registry.registerRegion({10, 1000, 1000}, r).ok());
    mover.map(10, r.address, 4 * kPage, 1);
  }
  pb::ClientMessage list;
  list.mutable_regions();
  const int before = space.idChecks;
  ASSERT_EQ(ask(1000, list).regions().regions_size(), 4);
  EXPECT_EQ(space.idChecks - before, 5);
  // A process found changed is not read, nor checked again, in the rest of the listing.
  space.setOwner(10, 0, 0);
  const int changed = space.idChecks;
  EXPECT_EQ(ask(1000, list).regions().regions_size(), 0);
  EXPECT_EQ(space.idChecks - changed, 1);
}

TEST_F(AdminServiceTest, RecordIsForAdminsAndOnlyOfRegisteredProcesses) {
  ASSERT_FALSE(traceDir.empty());
  pb::ClientMessage start;
  start.mutable_record()->set_action(pb::RecordRequest::START);
  start.mutable_record()->set_pid(10);
  // Not even the process's own user: recording writes files as the daemon.
  auto r = ask(1000, start);
  ASSERT_TRUE(r.has_error());
  EXPECT_EQ(r.error().code(), pb::PERMISSION_DENIED);
  pb::ClientMessage list;
  list.mutable_record();
  EXPECT_EQ(ask(1000, list).error().code(), pb::PERMISSION_DENIED);

  pb::ClientMessage stranger = start;
  stranger.mutable_record()->set_pid(4242);
  r = ask(0, stranger);
  ASSERT_TRUE(r.has_error());
  EXPECT_EQ(r.error().code(), pb::BAD_REQUEST);
  EXPECT_NE(r.error().message().find("not a registered process"), std::string::npos);

  start.mutable_record()->set_seconds(30);
  r = ask(500, start);
  ASSERT_TRUE(r.has_record()) << r.DebugString();
  ASSERT_EQ(r.record().recordings_size(), 1);
  const auto& rec = r.record().recordings(0);
  EXPECT_TRUE(rec.active());
  EXPECT_EQ(rec.pid(), 10);
  EXPECT_EQ(rec.regions(), 1u);  // "grad", registered before the recording started
  EXPECT_EQ(rec.ends_in_ms(), 30000u);
  EXPECT_EQ(rec.path().rfind(traceDir + "/trainer-10-", 0), 0u) << rec.path();
  EXPECT_EQ(ask(0, start).error().code(), pb::BAD_REQUEST);  // already recording

  auto listed = ask(0, list);
  ASSERT_EQ(listed.record().recordings_size(), 1);
  EXPECT_TRUE(listed.record().recordings(0).active());

  pb::ClientMessage stop;
  stop.mutable_record()->set_action(pb::RecordRequest::STOP);
  stop.mutable_record()->set_pid(10);
  auto stopped = ask(0, stop);
  ASSERT_TRUE(stopped.has_record()) << stopped.DebugString();
  EXPECT_FALSE(stopped.record().recordings(0).active());
  EXPECT_EQ(stopped.record().recordings(0).ended(), "stopped");
  EXPECT_EQ(stopped.record().recordings(0).path(), rec.path());
  EXPECT_GT(stopped.record().recordings(0).bytes(), 8u);
  EXPECT_EQ(ask(0, stop).error().code(), pb::BAD_REQUEST);  // nothing to stop any more
  std::filesystem::remove_all(traceDir);
}

// What the heat model learned is visible: feature weights in status, each process's step clock
// and phase in processes (as of the last epoch).
// The reply an ordinary (non-admin) client gets to `request` from a daemon with this registry and
// loop.
pb::DaemonMessage ask(tt::registry::Registry& registry, tt::service::EpochLoop& loop, const pb::ClientMessage& request,
                      const tt::topology::Topology* topology = nullptr) {
  tt::service::AdminContext ctx;
  ctx.registry = &registry;
  ctx.epochLoop = &loop;
  ctx.topology = topology;
  tt::service::AdminService admin(std::move(ctx));
  tt::ipc::Session session;
  session.peer = {99, 1000, 1000};
  session.hello = true;
  pb::DaemonMessage reply;
  admin.handleAdmin(session, request, reply);
  return reply;
}

pb::DaemonMessage askStatus(tt::registry::Registry& registry, tt::service::EpochLoop& loop) {
  pb::ClientMessage request;
  request.mutable_status();
  return ask(registry, loop, request);
}

TEST(AdminServiceHeat, StatusShowsFeatureWeightsAndProcessesShowTheStepClock) {
  tt::test::FakeAddressSpace space;
  space.map(10, kBase, kBase + (1ULL << 20));
  tt::registry::Registry registry(space, {});
  tt::metrics::Registry metrics;
  tt::test::FakePolicy policy;
  policy.learned.featureWeights = {{"frequency", 0.4}, {"recency", 0.1}, {"size", 0.2}, {"reuse", 0.3}};
  policy.learned.clocks = {{10, 250'000'000, "marks", 1.0, "backward"}, {77, 0, "none", 0, ""}};
  tt::service::EpochLoop loop(registry, {nullptr, &policy, nullptr, nullptr}, metrics);
  registry.attachProcess({10, 1000, 1000}, "trainer", false);
  loop.runOnce(1'000'000'000);
  const pb::DaemonMessage reply = askStatus(registry, loop);
  ASSERT_EQ(reply.status().feature_weights_size(), 4) << reply.DebugString();
  EXPECT_EQ(reply.status().feature_weights(3).name(), "reuse");
  EXPECT_DOUBLE_EQ(reply.status().feature_weights(3).weight(), 0.3);

  pb::ClientMessage processes;
  processes.mutable_processes();
  const pb::DaemonMessage listed = ask(registry, loop, processes);
  ASSERT_EQ(listed.processes().processes_size(), 1) << listed.DebugString();
  const auto& p = listed.processes().processes(0);
  EXPECT_EQ(p.step_period_us(), 250'000u);
  EXPECT_EQ(p.step_period_source(), "marks");
  EXPECT_DOUBLE_EQ(p.step_period_confidence(), 1.0);
  EXPECT_EQ(p.phase(), "backward");
}

// Each fast node's share of the budget and the registered bytes on it, as the last plan saw
// them, are in status and in tensortierctl's node table; slow nodes show none.
TEST(AdminServiceHeat, StatusShowsEachFastNodesShareOfTheBudget) {
  tt::test::FakeAddressSpace space;
  tt::registry::Registry registry(space, {});
  tt::metrics::Registry metrics;
  tt::test::FakePolicy policy;
  policy.learned.fastNodes = {{0, 3ULL << 30, 1ULL << 30}};
  tt::service::EpochLoop loop(registry, {nullptr, &policy, nullptr, nullptr}, metrics);
  loop.runOnce(1'000'000'000);
  const tt::topology::Topology topology = fastAndSlowNodes();
  pb::ClientMessage request;
  request.mutable_status();
  const pb::DaemonMessage reply = ask(registry, loop, request, &topology);
  ASSERT_EQ(reply.status().nodes_size(), 2) << reply.DebugString();
  EXPECT_EQ(reply.status().nodes(0).budget_bytes(), 3ULL << 30);
  EXPECT_EQ(reply.status().nodes(0).managed_bytes(), 1ULL << 30);
  EXPECT_EQ(reply.status().nodes(1).budget_bytes(), 0u);
  const std::string text = tt::ctl::statusText(reply.status());
  EXPECT_TRUE(std::regex_search(text, std::regex("\n0 +fast .* 3\\.0 GiB +1\\.0 GiB +"))) << text;
  EXPECT_TRUE(std::regex_search(text, std::regex("\n1 +slow .* - +- +"))) << text;
  EXPECT_EQ(tt::ctl::statusJson(reply.status())["nodes"][0]["budget_bytes"], 3ULL << 30);
}

TEST_F(AdminServiceTest, AdminGroupMemberMayTune) {
  pb::ClientMessage tune;
  tune.mutable_tune()->set_epoch_ms(50);
  auto r = ask(500, tune);
  ASSERT_TRUE(r.has_tune()) << r.DebugString();
  EXPECT_EQ(r.tune().effective_config(), "tuned");
  EXPECT_EQ(lastTune.epoch_ms(), 50u);
}

TEST_F(AdminServiceTest, MigrateRegionSubmitsAManualPlan) {
  pb::ClientMessage m;
  m.mutable_migrate()->set_region_id(regionId);
  m.mutable_migrate()->set_node(0);
  auto r = ask(0, m);
  ASSERT_TRUE(r.has_migrate()) << r.DebugString();
  EXPECT_EQ(r.migrate().requested_bytes(), 4 * kPage);
  ASSERT_EQ(executor.submitted.size(), 1u);
  const auto& move = executor.submitted[0].moves.at(0);
  EXPECT_EQ(move.tgid, 10);
  EXPECT_EQ(move.start, kBase);
  EXPECT_EQ(move.length, 4 * kPage);
  EXPECT_EQ(move.targetNode, 0);
  EXPECT_EQ(move.regionId, regionId);
}

TEST_F(AdminServiceTest, MigratePinsTheRegionAndRegionsShowsThePin) {
  pb::ClientMessage m;
  m.mutable_migrate()->set_region_id(regionId);
  m.mutable_migrate()->set_node(0);
  auto r = ask(0, m);
  ASSERT_TRUE(r.has_migrate()) << r.DebugString();
  EXPECT_TRUE(r.migrate().pinned());
  EXPECT_EQ(r.migrate().pin_expires_in_ms(), 300000u);
  EXPECT_EQ(executor.submitted.at(0).moves.at(0).priority, tt::service::EpochLoop::kManualPriority);
  const auto pins = loop.pins();
  ASSERT_EQ(pins.size(), 1u);
  EXPECT_EQ(pins[0].regionId, regionId);
  EXPECT_EQ(pins[0].expiresNs, nowNs + 300'000'000'000ULL);

  nowNs += 100'000'000'000ULL;  // 100 s later
  pb::ClientMessage list;
  list.mutable_regions();
  auto regions = ask(1000, list);
  ASSERT_EQ(regions.regions().regions_size(), 1);
  EXPECT_TRUE(regions.regions().regions(0).pinned());
  EXPECT_EQ(regions.regions().regions(0).pinned_node(), 0);
  EXPECT_EQ(regions.regions().regions(0).pin_expires_in_ms(), 200000u);

  // Unpin by pid: the pin is gone and nothing is moved.
  pb::ClientMessage unpin;
  unpin.mutable_migrate()->set_pid(10);
  unpin.mutable_migrate()->set_unpin(true);
  auto u = ask(0, unpin);
  ASSERT_TRUE(u.has_migrate()) << u.DebugString();
  EXPECT_EQ(u.migrate().unpinned_ranges(), 1u);
  EXPECT_TRUE(loop.pins().empty());
  EXPECT_EQ(executor.submitted.size(), 1u);
  regions = ask(1000, list);
  EXPECT_FALSE(regions.regions().regions(0).pinned());
  // Unpinning is refused to non-admins like migrate.
  EXPECT_EQ(ask(1000, unpin).error().code(), pb::PERMISSION_DENIED);
}

TEST_F(AdminServiceTest, ZeroPinSecondsPinsUntilUnpinned) {
  pinSeconds = 0;
  pb::ClientMessage m;
  m.mutable_migrate()->set_pid(10);
  m.mutable_migrate()->set_node(1);
  auto r = ask(0, m);
  ASSERT_TRUE(r.has_migrate()) << r.DebugString();
  EXPECT_TRUE(r.migrate().pinned());
  EXPECT_EQ(r.migrate().pin_expires_in_ms(), 0u);
  ASSERT_EQ(loop.pins().size(), 1u);
  EXPECT_EQ(loop.pins()[0].expiresNs, 0u);
  EXPECT_EQ(loop.pins()[0].node, 1);
  pb::ClientMessage unpin;
  unpin.mutable_migrate()->set_region_id(regionId);
  unpin.mutable_migrate()->set_unpin(true);
  EXPECT_EQ(ask(0, unpin).migrate().unpinned_ranges(), 1u);
  unpin.mutable_migrate()->set_region_id(777);
  EXPECT_EQ(ask(0, unpin).error().code(), pb::NO_SUCH_REGION);
}

TEST_F(AdminServiceTest, MigrateRejectsUnknownRegionsAndNodes) {
  pb::ClientMessage m;
  m.mutable_migrate()->set_region_id(777);
  m.mutable_migrate()->set_node(0);
  EXPECT_EQ(ask(0, m).error().code(), pb::NO_SUCH_REGION);
  m.mutable_migrate()->set_region_id(regionId);
  m.mutable_migrate()->set_node(5);
  EXPECT_EQ(ask(0, m).error().code(), pb::BAD_REQUEST);
  m.mutable_migrate()->set_pid(4);
  m.mutable_migrate()->set_node(0);
  EXPECT_EQ(ask(0, m).error().code(), pb::NO_SUCH_REGION);
  // pid 0 is no process, not every process's regions.
  m.mutable_migrate()->set_pid(0);
  EXPECT_EQ(ask(0, m).error().code(), pb::BAD_REQUEST);
  m.mutable_migrate()->set_unpin(true);
  EXPECT_EQ(ask(0, m).error().code(), pb::BAD_REQUEST);
  EXPECT_TRUE(executor.submitted.empty());
}

TEST_F(AdminServiceTest, StatusAndRegionsAreOpenToAnyone) {
  pb::ClientMessage s;
  s.mutable_status();
  auto r = ask(65534, s);
  ASSERT_TRUE(r.has_status()) << r.DebugString();
  EXPECT_EQ(r.status().nodes_size(), 2);
  EXPECT_EQ(r.status().nodes(1).tier(), "slow");
  EXPECT_EQ(r.status().regions(), 1u);
  EXPECT_EQ(r.status().registered_bytes(), 4 * kPage);
  ASSERT_EQ(r.status().stages_missing_size(), 1);
  pb::ClientMessage q;
  q.mutable_regions();
  r = ask(65534, q);
  ASSERT_EQ(r.regions().regions_size(), 1);
  const auto& e = r.regions().regions(0);
  EXPECT_EQ(e.name(), "grad");
  EXPECT_EQ(e.kind(), "gradient");
  ASSERT_EQ(e.bytes_per_node_size(), 1);
  EXPECT_EQ(e.bytes_per_node(0).node(), 1);
  EXPECT_EQ(e.bytes_per_node(0).bytes(), 4 * kPage);
  pb::ClientMessage p;
  p.mutable_processes();
  r = ask(65534, p);
  ASSERT_EQ(r.processes().processes_size(), 1);
  EXPECT_EQ(r.processes().processes(0).client_name(), "trainer");
  EXPECT_TRUE(r.processes().processes(0).accepts_mbind());
}

TEST_F(AdminServiceTest, TopOrdersByHeat) {
  tt::registry::RegisterRequest r;
  r.address = kBase + 64 * kPage;
  r.length = kPage;
  const uint64_t other = registry.registerRegion({10, 1000, 1000}, r)->id;
  const tt::registry::RegionHeat heat[] = {{regionId, 1.0, 0.0}, {other, 5.0, 12.5}};
  registry.publishHeat(heat);
  pb::ClientMessage t;
  t.mutable_top()->set_count(1);
  auto reply = ask(1000, t);
  ASSERT_EQ(reply.top().hottest_size(), 1);
  EXPECT_EQ(reply.top().hottest(0).region_id(), other);
  EXPECT_DOUBLE_EQ(reply.top().hottest(0).steady_steps(), 12.5);
  ASSERT_EQ(reply.top().coldest_size(), 1);
  EXPECT_EQ(reply.top().coldest(0).region_id(), regionId);
}

TEST_F(AdminServiceTest, TopRefusesMorePagesThanItServesAndHasNoneWithoutAHeatModel) {
  pb::ClientMessage t;
  t.mutable_top()->set_pages(tt::service::AdminService::kMaxTopPages + 1);
  auto reply = ask(0, t);
  ASSERT_TRUE(reply.has_error()) << reply.DebugString();
  EXPECT_EQ(reply.error().code(), pb::BAD_REQUEST);
  EXPECT_NE(reply.error().message().find("at most 1000 pages"), std::string::npos) << reply.error().message();
  // At the limit it answers (an admin: the page list is admin-only): this loop has no policy, so
  // there are no pages, but the regions are listed.
  t.mutable_top()->set_pages(tt::service::AdminService::kMaxTopPages);
  reply = ask(500, t);
  ASSERT_TRUE(reply.has_top()) << reply.DebugString();
  EXPECT_EQ(reply.top().hottest_pages_size(), 0);
  EXPECT_EQ(reply.top().hottest_size(), 1);
}

// The daemon's real heat model, fed evidence through the epoch loop, answers `top --pages` with
// the hottest pages in order, their heat decayed to the time of the request; --pid keeps one
// process's pages and regions; pages = 0 asks for none. tensortierctl renders the answer.
TEST(AdminServiceTop, HottestPagesComeFromTheHeatModel) {
  constexpr pid_t kA = 10, kB = 20;
  constexpr uint64_t kBaseB = 0x7e0000000000;
  constexpr uint64_t kSecond = 1'000'000'000;
  tt::test::FakeAddressSpace space;
  space.map(kA, kBase, kBase + (1ULL << 20));
  space.map(kB, kBaseB, kBaseB + (1ULL << 20));
  tt::registry::Registry registry(space, {});
  tt::metrics::Registry metrics;
  tt::topology::Topology topology = fastAndSlowNodes();
  tt::fakes::FakePageMover mover;
  pb::PolicyConfig config;
  config.set_heat_half_life_ms(1000);
  // No procfs tree: every home node unknown (this test has one fast node anyway).
  tt::service::HeatPlannerPolicy policy(config, topology, mover, tt::sys::Fs("/nonexistent-procfs"));
  tt::test::FakeEvidenceSource source;
  tt::service::EpochLoop loop(registry, {&source, &policy, nullptr, nullptr}, metrics);
  for (pid_t pid : {kA, kB}) {
    ASSERT_TRUE(registry.attachProcess({pid, 1000, 1000}, "trainer", false));
    tt::registry::RegisterRequest r;
    r.address = pid == kA ? kBase : kBaseB;
    r.length = 16 * kPage;
    ASSERT_TRUE(registry.registerRegion({pid, 1000, 1000}, r).ok());
  }
  auto access = [](pid_t pid, uint64_t page, uint32_t weight) {
    tt::AccessEvidence e;
    e.tgid = pid;
    e.page = page;
    e.weight = weight;
    e.kind = tt::AccessKind::Load;
    return e;
  };
  source.next = {access(kA, kBase + kPage, 5),   access(kA, kBase + 2 * kPage, 20), access(kA, kBase + 3 * kPage, 1),
                 access(kB, kBaseB, 12),          access(kB, kBaseB + 9 * kPage, 7)};
  const uint64_t epochNs = 10 * kSecond;
  loop.runOnce(epochNs);

  uint64_t nowNs = epochNs + kSecond;  // one half-life after the evidence
  tt::service::AdminContext ctx;
  ctx.registry = &registry;
  ctx.epochLoop = &loop;
  ctx.nowNs = [&nowNs] { return nowNs; };
  ctx.isAdmin = [](const tt::registry::Peer& p) { return p.uid == 0; };
  tt::service::AdminService admin(std::move(ctx));
  auto topAs = [&admin](uid_t uid, uint32_t pages, pid_t pid) {
    pb::ClientMessage m;
    m.mutable_top()->set_pages(pages);
    m.mutable_top()->set_pid(pid);
    tt::ipc::Session session;
    session.peer = {99, uid, uid};
    session.hello = true;
    pb::DaemonMessage reply;
    admin.handleAdmin(session, m, reply);
    return reply;
  };
  auto top = [&topAs](uint32_t pages, pid_t pid) { return topAs(0, pages, pid); };

  // The page list is another process's access pattern: admins only, even of one's own process;
  // the region lists stay open to anyone who can connect.
  auto refused = topAs(1000, 3, kA);
  ASSERT_TRUE(refused.has_error()) << refused.DebugString();
  EXPECT_EQ(refused.error().code(), pb::PERMISSION_DENIED);
  auto open = topAs(65534, 0, 0);
  ASSERT_TRUE(open.has_top()) << open.DebugString();
  EXPECT_EQ(open.top().hottest_size(), 2);

  auto reply = top(3, 0);
  ASSERT_TRUE(reply.has_top()) << reply.DebugString();
  const auto& pages = reply.top().hottest_pages();
  ASSERT_EQ(pages.size(), 3) << reply.DebugString();
  const std::tuple<pid_t, uint64_t, double> expected[] = {
      {kA, kBase + 2 * kPage, 20}, {kB, kBaseB, 12}, {kB, kBaseB + 9 * kPage, 7}};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(pages[i].pid(), std::get<0>(expected[i])) << i;
    EXPECT_EQ(pages[i].address(), std::get<1>(expected[i])) << i;
    EXPECT_NEAR(pages[i].heat(), std::get<2>(expected[i]) / 2, 1e-3) << i;  // halved by the half-life
  }

  reply = top(10, kA);
  ASSERT_EQ(reply.top().hottest_pages_size(), 3) << reply.DebugString();
  EXPECT_EQ(reply.top().hottest_pages(0).address(), kBase + 2 * kPage);
  EXPECT_EQ(reply.top().hottest_pages(1).address(), kBase + kPage);
  EXPECT_EQ(reply.top().hottest_pages(2).address(), kBase + 3 * kPage);
  for (const auto& p : reply.top().hottest_pages()) EXPECT_EQ(p.pid(), kA);
  ASSERT_EQ(reply.top().hottest_size(), 1);
  EXPECT_EQ(reply.top().hottest(0).pid(), kA);
  ASSERT_EQ(reply.top().coldest_size(), 1);
  EXPECT_EQ(reply.top().coldest(0).pid(), kA);
  EXPECT_EQ(top(10, 4242).top().hottest_pages_size(), 0);

  reply = top(0, 0);
  ASSERT_TRUE(reply.has_top());
  EXPECT_EQ(reply.top().hottest_pages_size(), 0);
  EXPECT_EQ(reply.top().hottest_size(), 2);

  reply = top(1, kB);
  const std::string text = tt::ctl::topText(reply.top(), true);
  EXPECT_TRUE(std::regex_search(text, std::regex("\nhottest pages:\nPID +ADDRESS +HEAT\n20 +0x7e0000000000 +6\n$")))
      << text;
}

// tensortierctl's rendering of a top reply: the page list after the region lists, addresses in
// hex, hottest first as the daemon sent them; a line saying so when asked pages have no heat;
// nothing about pages when none were asked for; JSON with every field.
TEST(TopView, PagesFollowTheRegionListsInTextAndJson) {
  pb::TopReply reply;
  auto* hot = reply.add_hottest();
  hot->set_pid(10);
  hot->set_region_id(3);
  hot->set_name("grad");
  hot->set_kind("gradient");
  hot->set_address(kBase);
  hot->set_length(4 * kPage);
  hot->set_heat(9.5);
  *reply.add_coldest() = *hot;
  for (auto [pid, address, heat] : {std::tuple<int32_t, uint64_t, double>{10, kBase + kPage, 42.25},
                                    {11, 0x55550000f000, 3.125}}) {
    auto* p = reply.add_hottest_pages();
    p->set_pid(pid);
    p->set_address(address);
    p->set_heat(heat);
  }
  const std::string text = tt::ctl::topText(reply, true);
  EXPECT_TRUE(std::regex_search(
      text, std::regex("^hottest:\nPID .*\n10 +3 +grad +gradient +0x7f0000000000 +16.0 KiB +9.5 .*\n\ncoldest:\n")))
      << text;
  EXPECT_TRUE(std::regex_search(
      text, std::regex("\n\nhottest pages:\nPID +ADDRESS +HEAT\n10 +0x7f0000001000 +42.25\n11 +0x55550000f000 +3.125\n$")))
      << text;
  EXPECT_EQ(tt::ctl::topText(reply, false).find("pages"), std::string::npos);
  pb::TopReply noPages = reply;
  noPages.clear_hottest_pages();
  EXPECT_NE(tt::ctl::topText(noPages, true).find("\nhottest pages: none has heat\n"), std::string::npos);

  const auto json = tt::ctl::topJson(reply);
  ASSERT_EQ(json["hottest_pages"].size(), 2u) << json.dump();
  EXPECT_EQ(json["hottest_pages"][0]["pid"], 10);
  EXPECT_EQ(json["hottest_pages"][0]["address"], kBase + kPage);
  EXPECT_DOUBLE_EQ(json["hottest_pages"][0]["heat"].get<double>(), 42.25);
  EXPECT_EQ(json["hottest_pages"][1]["pid"], 11);
  EXPECT_EQ(json["hottest"][0]["name"], "grad");
  EXPECT_EQ(json["coldest"][0]["region_id"], 3);
  EXPECT_TRUE(tt::ctl::topJson(noPages)["hottest_pages"].empty());
}

// What the sources logged at start (kernel tiering, sources not opened), each source's throttled
// count and the kernel's system-wide migrations travel from the SourceSet through the epoch loop's
// stats into the status reply, and `tensortierctl status` shows them as text and JSON.
TEST(AdminServiceSources, StatusCarriesStartNotesThrottlingPausesAndSystemMigrationsToTheCli) {
  std::vector<std::unique_ptr<tt::sources::Source>> v;
  auto trace = std::make_unique<tt::fakes::FakeSource>("fault-trace", true, "eBPF");
  trace->reported.throttled = 0;
  trace->reported.samples = 11;
  trace->reported.paused = true;
  trace->reported.pauses = 2;
  tt::sources::SystemMigrations m;
  m.demotion = {4096, 7};
  m.promotion = {300, 1};
  m.trackedUndone = 4608;
  trace->migrations = m;
  auto pmu = std::make_unique<tt::fakes::FakeSource>("pmu", true, "cycles");
  pmu->reported.throttled = 42;
  v.push_back(std::move(trace));
  v.push_back(std::move(pmu));
  const std::vector<std::string> notes = {
      "kernel-tiering: was numa_balancing=3, demotion_enabled=true; turned off until the daemon exits",
      "software-faults: not opened: fault-trace counts the same faults"};
  tt::service::SourceSetEvidence evidence(
      std::make_unique<tt::sources::SourceSet>(std::move(v), pb::SourcesConfig(), notes));
  tt::test::FakeAddressSpace space;
  tt::registry::Registry registry(space, {});
  tt::metrics::Registry metrics;
  tt::service::EpochLoop loop(registry, {&evidence, nullptr, nullptr, nullptr}, metrics);
  // Before any epoch the sources are listed already, with the start notes.
  const pb::DaemonMessage early = askStatus(registry, loop);
  ASSERT_TRUE(early.has_status()) << early.DebugString();
  EXPECT_EQ(early.status().sources_size(), 2) << early.DebugString();
  EXPECT_EQ(early.status().source_notes_size(), 2) << early.DebugString();
  loop.runOnce(1'000'000'000);
  const pb::DaemonMessage reply = askStatus(registry, loop);
  ASSERT_TRUE(reply.has_status()) << reply.DebugString();
  const auto& st = reply.status();
  ASSERT_EQ(st.source_notes_size(), 2) << st.DebugString();
  EXPECT_EQ(st.source_notes(0), notes[0]);
  EXPECT_EQ(st.source_notes(1), notes[1]);
  ASSERT_EQ(st.sources_size(), 2);
  EXPECT_EQ(st.sources(1).throttled(), 42u);
  EXPECT_TRUE(st.sources(0).paused());
  EXPECT_EQ(st.sources(0).pauses(), 2u);
  EXPECT_FALSE(st.sources(1).paused());
  EXPECT_TRUE(st.sources(1).system_migrations().empty()) << "pmu does not trace migrations";
  ASSERT_EQ(st.sources(0).system_migrations_size(), 4) << st.DebugString();
  std::map<std::string, std::pair<uint64_t, uint64_t>> byReason;
  for (const auto& k : st.sources(0).system_migrations()) byReason[k.reason()] = {k.succeeded_pages(), k.failed_pages()};
  EXPECT_EQ(byReason["demoted"], std::make_pair(uint64_t{4096}, uint64_t{7}));
  EXPECT_EQ(byReason["promoted"], std::make_pair(uint64_t{300}, uint64_t{1}));
  EXPECT_EQ(byReason["syscall"], std::make_pair(uint64_t{0}, uint64_t{0}));
  ASSERT_TRUE(st.sources(0).has_kernel_undone_entries()) << st.DebugString();
  EXPECT_EQ(st.sources(0).kernel_undone_entries(), 4608u);
  EXPECT_FALSE(st.sources(1).has_kernel_undone_entries()) << "pmu does not trace migrations";

  const std::string text = tt::ctl::statusText(st);
  EXPECT_NE(text.find(notes[0] + "\n"), std::string::npos) << text;
  EXPECT_NE(text.find(notes[1] + "\n"), std::string::npos) << text;
  EXPECT_NE(text.find("THROTTLED"), std::string::npos) << text;
  EXPECT_TRUE(std::regex_search(text, std::regex("\npmu +on +0 +0 +42 +cycles\n"))) << text;
  EXPECT_TRUE(std::regex_search(text, std::regex("\nfault-trace +paused +11 +0 +0 +eBPF\n"))) << text;
  EXPECT_NE(text.find("demoted 4096 (7 failed)"), std::string::npos) << text;
  EXPECT_NE(text.find("promoted 300 (1 failed)"), std::string::npos) << text;
  const auto json = tt::ctl::statusJson(st);
  EXPECT_EQ(json["source_notes"], nlohmann::json(notes));
  EXPECT_EQ(json["sources"][1]["throttled"], 42);
  EXPECT_EQ(json["sources"][0]["paused"], true);
  EXPECT_EQ(json["sources"][0]["pauses"], 2);
  EXPECT_EQ(json["sources"][0]["system_migrations"][1]["reason"], "demoted");
  EXPECT_EQ(json["sources"][0]["system_migrations"][1]["succeeded_pages"], 4096);
  EXPECT_EQ(json["sources"][0]["system_migrations"][1]["failed_pages"], 7);
  EXPECT_NE(text.find("mapped tracked pages back instead of moving them (fault-trace): 4608 entries"),
            std::string::npos)
      << text;
  EXPECT_EQ(json["sources"][0]["kernel_undone_entries"], 4608);
  EXPECT_FALSE(json["sources"][1].contains("kernel_undone_entries")) << json.dump();
}

// Pages held after the engine left them busy are shown only when there are any.
TEST(StatusText, StuckPagesAreShownWhenThereAreAny) {
  pb::StatusReply st;
  EXPECT_EQ(tt::ctl::statusText(st).find("left busy"), std::string::npos);
  st.set_stuck_fast_pages(7);
  st.set_stuck_slow_pages(1);
  const std::string text = tt::ctl::statusText(st);
  EXPECT_NE(text.find("7 page(s) on fast nodes and 1 on slow nodes left busy"), std::string::npos) << text;
  const auto json = tt::ctl::statusJson(st);
  EXPECT_EQ(json["stuck_fast_pages"], 7);
  EXPECT_EQ(json["stuck_slow_pages"], 1);
}

// The weights follow fixed-point figures in the same text: a weight tuned near 0 must still show.
TEST(StatusText, FeatureWeightsKeepThreeSignificantDigits) {
  pb::StatusReply st;
  auto* w = st.add_feature_weights();
  w->set_name("size");
  w->set_weight(0.0004);
  w = st.add_feature_weights();
  w->set_name("reuse");
  w->set_weight(0.61234);
  const std::string text = tt::ctl::statusText(st);
  EXPECT_NE(text.find("size 0.0004"), std::string::npos) << text;
  EXPECT_NE(text.find("reuse 0.612"), std::string::npos) << text;
}

}  // namespace
