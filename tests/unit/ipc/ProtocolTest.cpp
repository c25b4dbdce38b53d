// Request handling without sockets: Hello and version negotiation, ordering rules, registration
// errors mapped to codes, marks, placement queries, admin dispatch, pid reuse.
#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <set>
#include <variant>

#include "fakes/migrate/FakePageMover.h"
#include "fakes/registry/FakeAddressSpace.h"
#include "ipc/Protocol.h"

namespace {

namespace pb = tensortier::v1;
using tt::ipc::ProtocolHandler;
using tt::ipc::Session;
constexpr uint64_t kPage = tt::kBasePageSize;

class FakeLifetime final : public tt::ipc::ProcessLifetime {
 public:
  bool exited(pid_t pid) override { return dead.count(pid) != 0; }
  bool watch(pid_t pid) override {
    watched.push_back(pid);
    return !gone.count(pid);
  }
  void unwatch(pid_t pid) override { unwatched.push_back(pid); }
  void forget(pid_t pid) override {
    forgotten.push_back(pid);
    if (registry) registry->removeProcess(pid);
  }
  std::set<pid_t> dead, gone;
  std::vector<pid_t> watched, unwatched, forgotten;
  tt::registry::Registry* registry = nullptr;  // forget() drops the process from it, as the server does
};

class RecordingAdmin final : public tt::ipc::AdminHandler {
 public:
  void handleAdmin(const Session& s, const pb::ClientMessage& req, pb::DaemonMessage& reply) override {
    ++calls;
    lastUid = s.peer.uid;
    lastCase = req.body_case();
    reply.mutable_status()->set_daemon_version("fake");
  }
  int calls = 0;
  uid_t lastUid = 0;
  pb::ClientMessage::BodyCase lastCase = pb::ClientMessage::BODY_NOT_SET;
};

class ProtocolTest : public ::testing::Test {
 protected:
  ProtocolTest() : registry(space, {}), reader(mover), handler(registry, reader, &lifetime, &admin, "9.9") {
    session.id = handler.nextSessionId();
    session.peer = {100, 1000, 1000};
    space.map(100, 0x10000000, 0x20000000);
    lifetime.registry = &registry;
  }

  pb::DaemonMessage send(const pb::ClientMessage& m, bool expectReply = true) {
    pb::DaemonMessage reply;
    EXPECT_EQ(handler.handle(session, m, reply), expectReply);
    return reply;
  }
  pb::DaemonMessage hello(std::vector<uint32_t> versions) {
    pb::ClientMessage m;
    m.set_seq(1);
    for (auto v : versions) m.mutable_hello()->add_versions(v);
    m.mutable_hello()->set_client_name("test");
    return send(m);
  }
  // The next registration is refused because the process runs with other ids now: the session
  // is revoked and the process's regions (registered under the peer's ids) are gone.
  void expectNextRegistrationRevoked() {
    auto r = registerRegion(0x10100000, 4 * kPage, 3);
    ASSERT_TRUE(r.has_error()) << r.DebugString();
    EXPECT_EQ(r.error().code(), pb::PERMISSION_DENIED);
    EXPECT_NE(r.error().message().find("does not run as uid 1000 gid 1000"), std::string::npos) << r.error().message();
    EXPECT_TRUE(session.revoked);
    EXPECT_FALSE(registry.hasProcess(100));
  }
  static pb::ClientMessage registration(uint64_t address, uint64_t length, uint64_t seq) {
    pb::ClientMessage m;
    m.set_seq(seq);
    auto* r = m.mutable_register_region();
    r->set_address(address);
    r->set_length(length);
    r->set_kind(pb::WEIGHT);
    r->set_name("w");
    r->set_client_tag(77);
    return m;
  }
  pb::DaemonMessage registerRegion(uint64_t address, uint64_t length, uint64_t seq = 2) {
    return send(registration(address, length, seq));
  }
  // After a hello, a registration of 4 pages at 0x10000000 begun on the loop: its off-loop part,
  // not run yet (nullopt, with a failure, when the loop answered it itself).
  std::optional<tt::ipc::OffLoop> beginRegistrationOffLoop(pb::DaemonMessage& reply) {
    EXPECT_TRUE(hello({1}).has_hello_reply());
    auto begun = handler.begin(session, registration(0x10000000, 4 * kPage, 5), reply);
    if (!std::holds_alternative<tt::ipc::OffLoop>(begun)) {
      ADD_FAILURE() << "the registration was answered on the loop: " << reply.DebugString();
      return std::nullopt;
    }
    return std::get<tt::ipc::OffLoop>(std::move(begun));
  }

  tt::test::FakeAddressSpace space;
  tt::registry::Registry registry;
  tt::fakes::FakePageMover mover;
  tt::ipc::PlacementReader reader;
  FakeLifetime lifetime;
  RecordingAdmin admin;
  ProtocolHandler handler;
  Session session;
};

TEST_F(ProtocolTest, HelloPicksHighestCommonVersion) {
  auto r = hello({7, 1, 3});
  ASSERT_TRUE(r.has_hello_reply()) << r.DebugString();
  EXPECT_EQ(r.seq(), 1u);
  EXPECT_EQ(r.hello_reply().version(), 1u);
  EXPECT_EQ(r.hello_reply().daemon_version(), "9.9");
  EXPECT_EQ(r.hello_reply().session_id(), session.id);
}

TEST_F(ProtocolTest, HelloWithoutCommonVersionIsUnsupportedAndCanBeRetried) {
  auto r = hello({2, 3});
  ASSERT_TRUE(r.has_error());
  EXPECT_EQ(r.error().code(), pb::UNSUPPORTED_VERSION);
  EXPECT_FALSE(session.hello);
  EXPECT_TRUE(hello({1}).has_hello_reply());
}

TEST_F(ProtocolTest, SecondHelloIsABadRequest) {
  ASSERT_TRUE(hello({1}).has_hello_reply());
  auto r = hello({1});
  ASSERT_TRUE(r.has_error());
  EXPECT_EQ(r.error().code(), pb::BAD_REQUEST);
}

TEST_F(ProtocolTest, RequestsBeforeHelloAreNotRegistered) {
  auto r = registerRegion(0x10000000, kPage);
  ASSERT_TRUE(r.has_error());
  EXPECT_EQ(r.error().code(), pb::NOT_REGISTERED);
  EXPECT_EQ(r.seq(), 2u);
  EXPECT_EQ(registry.totals().regions, 0u);
}

TEST_F(ProtocolTest, EmptyOrUnknownBodyIsABadRequest) {
  pb::ClientMessage m;
  m.set_seq(5);
  auto r = send(m);
  ASSERT_TRUE(r.has_error());
  EXPECT_EQ(r.error().code(), pb::BAD_REQUEST);
  EXPECT_EQ(r.seq(), 5u);
}

TEST_F(ProtocolTest, RegisterCoversWholePagesForTheCallersPid) {
  ASSERT_TRUE(hello({1}).has_hello_reply());
  auto r = registerRegion(0x10000010, 100);
  ASSERT_TRUE(r.has_register_region_reply()) << r.DebugString();
  EXPECT_EQ(r.register_region_reply().client_tag(), 77u);
  auto rec = registry.region(r.register_region_reply().region_id());
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->info.tgid, 100);
  EXPECT_EQ(rec->info.start, 0x10000000u);
  EXPECT_EQ(rec->info.length, kPage);
  EXPECT_EQ(lifetime.watched, std::vector<pid_t>{100});
}

TEST_F(ProtocolTest, RegistrationErrorsCarryTheirCodes) {
  ASSERT_TRUE(hello({1}).has_hello_reply());
  EXPECT_EQ(registerRegion(0x50000000, kPage).error().code(), pb::REGION_NOT_MAPPED);
  EXPECT_EQ(registerRegion(0x10000000, 0).error().code(), pb::BAD_REQUEST);
  ASSERT_TRUE(registerRegion(0x10000000, 4 * kPage).has_register_region_reply());
  EXPECT_EQ(registerRegion(0x10000000 + kPage, kPage).error().code(), pb::REGION_OVERLAPS);
  pb::ClientMessage u;
  u.set_seq(9);
  u.mutable_unregister_region()->set_region_id(999);
  EXPECT_EQ(send(u).error().code(), pb::NO_SUCH_REGION);
}

TEST_F(ProtocolTest, UnregisterAcksAndFreesTheRange) {
  ASSERT_TRUE(hello({1}).has_hello_reply());
  const uint64_t id = registerRegion(0x10000000, kPage).register_region_reply().region_id();
  pb::ClientMessage u;
  u.set_seq(3);
  u.mutable_unregister_region()->set_region_id(id);
  EXPECT_TRUE(send(u).has_ack());
  EXPECT_TRUE(registerRegion(0x10000000, kPage).has_register_region_reply());
}

TEST_F(ProtocolTest, IterationMarkWithSeqZeroHasNoReplyAndReachesTheRegistry) {
  ASSERT_TRUE(hello({1}).has_hello_reply());
  pb::ClientMessage m;
  m.mutable_iteration_mark()->set_type(pb::IterationMark::STEP_BEGIN);
  m.mutable_iteration_mark()->set_step(12);
  send(m, /*expectReply=*/false);
  m.set_seq(4);
  m.mutable_iteration_mark()->set_type(pb::IterationMark::PHASE_BEGIN);
  m.mutable_iteration_mark()->set_phase("backward");
  EXPECT_TRUE(send(m).has_ack());
  auto events = registry.drainEvents();
  std::vector<tt::IterationMark> marks;
  for (auto& e : events)
    if (e.type == tt::registry::RegistryEvent::Type::Mark) marks.push_back(e.mark);
  ASSERT_EQ(marks.size(), 2u);
  EXPECT_EQ(marks[0].tgid, 100);
  EXPECT_EQ(marks[0].step, 12u);
  EXPECT_EQ(marks[1].type, tt::MarkType::PhaseBegin);
  EXPECT_EQ(marks[1].phase, "backward");
  EXPECT_EQ(registry.processes().at(0).lastStep, 12u);
}

TEST_F(ProtocolTest, QueryPlacementReportsBytesPerNode) {
  ASSERT_TRUE(hello({1}).has_hello_reply());
  const uint64_t id = registerRegion(0x10000000, 4 * kPage).register_region_reply().region_id();
  mover.map(100, 0x10000000, 3 * kPage, 1);
  pb::ClientMessage q;
  q.set_seq(8);
  q.mutable_query_placement();  // empty = all of mine
  auto r = send(q);
  ASSERT_TRUE(r.has_placement()) << r.DebugString();
  ASSERT_EQ(r.placement().regions_size(), 1);
  const auto& rp = r.placement().regions(0);
  EXPECT_EQ(rp.region_id(), id);
  EXPECT_EQ(rp.kind(), pb::WEIGHT);
  ASSERT_EQ(rp.bytes_per_node_size(), 1);
  EXPECT_EQ(rp.bytes_per_node(0).node(), 1);
  EXPECT_EQ(rp.bytes_per_node(0).bytes(), 3 * kPage);
  EXPECT_EQ(rp.unmapped_bytes(), kPage);
}

// The parts of a request that wait on the client's process (the probe; the placement reads and
// the ids check after them) are handed to the server's workers: begin() does not do them, and
// the answer comes from `finish` on the loop. Requests that do not touch the address space are
// answered at once.
TEST_F(ProtocolTest, ProbesAndPlacementReadsAreLeftForTheWorkers) {
  pb::DaemonMessage reply;
  auto off = beginRegistrationOffLoop(reply);
  ASSERT_TRUE(off);
  EXPECT_EQ(space.calls, 0) << "the probe ran on the loop";
  EXPECT_TRUE(session.attached) << "attaching is the loop's part";
  off->work();
  EXPECT_EQ(space.calls, 1);
  EXPECT_FALSE(reply.has_register_region_reply() || reply.has_error()) << "the work wrote the reply: " << reply.DebugString();
  ASSERT_TRUE(off->finish(session, reply));
  EXPECT_EQ(reply.seq(), 5u);
  ASSERT_TRUE(reply.has_register_region_reply()) << reply.DebugString();
  EXPECT_EQ(reply.register_region_reply().client_tag(), 77u);

  pb::ClientMessage q;
  q.set_seq(6);
  q.mutable_query_placement();
  mover.map(100, 0x10000000, 4 * kPage, 0);
  const int checksBefore = space.settledIdChecks;
  auto query = handler.begin(session, q, reply);
  ASSERT_TRUE(std::holds_alternative<tt::ipc::OffLoop>(query)) << reply.DebugString();
  EXPECT_EQ(space.settledIdChecks, checksBefore) << "the check after the reads ran before them";
  auto& read = std::get<tt::ipc::OffLoop>(query);
  read.work();
  EXPECT_EQ(space.settledIdChecks, checksBefore + 1);
  ASSERT_TRUE(read.finish(session, reply));
  EXPECT_EQ(reply.seq(), 6u);
  ASSERT_TRUE(reply.has_placement()) << reply.DebugString();
  ASSERT_EQ(reply.placement().regions_size(), 1);
  EXPECT_EQ(reply.placement().regions(0).bytes_per_node(0).bytes(), 4 * kPage);

  pb::ClientMessage mark;
  mark.set_seq(7);
  mark.mutable_iteration_mark()->set_type(pb::IterationMark::STEP_BEGIN);
  auto marked = handler.begin(session, mark, reply);
  ASSERT_TRUE(std::holds_alternative<bool>(marked));
  EXPECT_TRUE(std::get<bool>(marked));
  EXPECT_TRUE(reply.has_ack()) << reply.DebugString();
}

// A process whose address space is pinned (probed before) is probed with one ioctl, on the loop;
// an exec found that way waits for its ids on the workers, unless the peer is root.
TEST_F(ProtocolTest, AProbeOfAPinnedAddressSpaceIsAnsweredOnTheLoop) {
  ASSERT_TRUE(hello({1}).has_hello_reply());
  space.pins = true;
  pb::ClientMessage m = registration(0x10000000, 4 * kPage, 5);
  pb::DaemonMessage reply;
  auto begun = handler.begin(session, m, reply);
  ASSERT_TRUE(std::holds_alternative<bool>(begun)) << "a pinned probe went to the workers";
  EXPECT_TRUE(reply.has_register_region_reply()) << reply.DebugString();
  EXPECT_EQ(space.calls, 1);

  space.execKeepingIds(100);
  m = registration(0x10100000, 4 * kPage, 6);
  const int settled = space.settledIdChecks;
  auto stale = handler.begin(session, m, reply);
  ASSERT_TRUE(std::holds_alternative<tt::ipc::OffLoop>(stale)) << "the wait for the exec's ids ran on the loop";
  EXPECT_EQ(space.settledIdChecks, settled);
  // Dropped at once: the connection may close before the answer, and nothing else would see this
  // exec (the probe forgot the pinned address space).
  EXPECT_FALSE(registry.hasProcess(100)) << "the old program's regions wait for the ids";
  auto& off = std::get<tt::ipc::OffLoop>(stale);
  off.work();
  EXPECT_EQ(space.settledIdChecks, settled + 1);
  ASSERT_TRUE(off.finish(session, reply));
  ASSERT_TRUE(reply.has_error()) << reply.DebugString();
  EXPECT_EQ(reply.error().code(), pb::REGION_NOT_MAPPED);
  EXPECT_NE(reply.error().message().find("ran exec"), std::string::npos) << reply.error().message();
  EXPECT_FALSE(registry.hasProcess(100)) << "the old program's regions stayed";
}

// A registration finds an exec on a worker; by the time its answer is back on the loop the server
// has dropped the old entry and the new program has registered afresh: the answer ends this
// session's attachment, not the new program's entry.
TEST_F(ProtocolTest, AnExecFoundOffTheLoopDoesNotDropTheNewProgramsEntry) {
  ASSERT_TRUE(hello({1}).has_hello_reply());
  pb::DaemonMessage reply;
  auto begun = handler.begin(session, registration(0x10000000, 4 * kPage, 5), reply);
  ASSERT_TRUE(std::holds_alternative<tt::ipc::OffLoop>(begun));
  auto& off = std::get<tt::ipc::OffLoop>(begun);
  space.execKeepingIds(100);
  off.work();  // ESTALE, the ids unchanged
  (void)registry.removeProcess(100);  // the server's sweep saw the exec
  session.attached = false;
  ASSERT_TRUE(registry.attachProcess({100, 1000, 1000}, "the new program", false));
  tt::registry::RegisterRequest fresh;
  fresh.address = 0x10200000;
  fresh.length = kPage;
  ASSERT_TRUE(registry.registerRegion({100, 1000, 1000}, fresh).ok());
  ASSERT_TRUE(off.finish(session, reply));
  ASSERT_TRUE(reply.has_error()) << reply.DebugString();
  EXPECT_EQ(reply.error().code(), pb::REGION_NOT_MAPPED);
  EXPECT_TRUE(registry.hasProcess(100)) << "the new program's entry was dropped";
  EXPECT_EQ(registry.totals().regions, 1u);
}

// The process exits while its registration waits for a worker, and its pid goes to a new process
// that registers too: the old request's region does not land in the new process's entry.
TEST_F(ProtocolTest, ARegistrationWhosePidWasReusedBeforeItsWorkRanIsRefused) {
  pb::DaemonMessage reply;
  auto off = beginRegistrationOffLoop(reply);
  ASSERT_TRUE(off);
  (void)registry.removeProcess(100);  // its pidfd said it exited
  session.attached = false;           // as the server's processExited does
  ASSERT_TRUE(registry.attachProcess({100, 1000, 1000}, "the next process of pid 100", false));
  off->work();
  ASSERT_TRUE(off->finish(session, reply));
  ASSERT_TRUE(reply.has_error()) << reply.DebugString();
  EXPECT_NE(reply.error().message().find("dropped since"), std::string::npos) << reply.error().message();
  EXPECT_EQ(reply.error().code(), pb::NOT_REGISTERED) << "reads as a client bug, not as \"register again\"";
  EXPECT_EQ(registry.totals().regions, 0u) << "the old process's region went into the new one's entry";
}

// Another connection of the same process dropped its entry (an exec it saw) while this one's
// registration waited for a worker: the answer is NOT_REGISTERED, and this session attaches afresh
// on its next request instead of answering NOT_REGISTERED to every request from then on.
TEST_F(ProtocolTest, ARegistrationWhoseEntryWasDroppedMeanwhileLetsTheSessionAttachAgain) {
  pb::DaemonMessage reply;
  auto off = beginRegistrationOffLoop(reply);
  ASSERT_TRUE(off);
  (void)registry.removeProcess(100);  // dropped by another session; this one still thinks it is attached
  off->work();
  ASSERT_TRUE(off->finish(session, reply));
  ASSERT_TRUE(reply.has_error()) << reply.DebugString();
  EXPECT_EQ(reply.error().code(), pb::NOT_REGISTERED) << reply.DebugString();
  EXPECT_FALSE(session.attached);
  auto again = registerRegion(0x10000000, 4 * kPage, 6);
  EXPECT_TRUE(again.has_register_region_reply()) << again.DebugString();
  EXPECT_TRUE(registry.hasProcess(100));
}

// A request over more pages than the per-request budget is read at every Nth page and says so;
// an id asked for many times is answered once.
TEST_F(ProtocolTest, QueryPlacementStaysWithinItsPageBudgetAndAnswersEachRegionOnce) {
  constexpr uint64_t kBig = 0x100000000ULL;
  const uint64_t length = 4 * tt::ipc::kPlacementPagesPerRequest * kPage;  // 4 GiB
  space.map(100, kBig, kBig + length);
  ASSERT_TRUE(hello({1}).has_hello_reply());
  const uint64_t id = registerRegion(kBig, length).register_region_reply().region_id();
  mover.map(100, kBig, 64 * kPage, 1);
  pb::ClientMessage q;
  for (int i = 0; i < 1000; ++i) q.mutable_query_placement()->add_region_ids(id);
  const size_t queriesBefore = mover.queryCalls();
  auto r = send(q);
  ASSERT_TRUE(r.has_placement()) << r.DebugString();
  ASSERT_EQ(r.placement().regions_size(), 1) << "a repeated id was answered more than once";
  const auto& rp = r.placement().regions(0);
  const uint64_t pages = length / kPage, stride = rp.sample_stride();
  EXPECT_EQ(stride, tt::ipc::placementStride(pages, 1).value());
  EXPECT_GT(stride, 1u);
  // Within the budget, 16384 pages a call.
  const uint64_t asked = (pages + stride - 1) / stride;
  EXPECT_LE(asked, tt::ipc::kPlacementPagesPerRequest);
  EXPECT_EQ(mover.queryCalls() - queriesBefore, (asked + 16383) / 16384);
  ASSERT_EQ(rp.bytes_per_node_size(), 1);
  const uint64_t sampledPresent = (64 + stride - 1) / stride;  // pages 0, stride, ... below 64
  EXPECT_EQ(rp.bytes_per_node(0).bytes(), sampledPresent * stride * kPage) << "each sampled page counted for the stride";
  EXPECT_EQ(rp.unmapped_bytes(), length - sampledPresent * stride * kPage);
  // Within the budget every page is asked.
  const uint64_t small = registerRegion(0x10000000, 4 * kPage).register_region_reply().region_id();
  pb::ClientMessage one;
  one.mutable_query_placement()->add_region_ids(small);
  auto r1 = send(one);
  ASSERT_TRUE(r1.has_placement()) << r1.DebugString();
  EXPECT_EQ(r1.placement().regions(0).sample_stride(), 1u);
}

// The stride keeps a request's reads (at least one a region) within the budget, whatever the mix
// of region sizes; more regions than the budget cannot be read at all.
TEST(PlacementStride, KeepsEveryRequestsReadsWithinTheBudget) {
  constexpr uint64_t kBudget = tt::ipc::kPlacementPagesPerRequest;
  auto reads = [](const std::vector<uint64_t>& pages, uint64_t stride) {
    uint64_t n = 0;
    for (uint64_t p : pages) n += (p + stride - 1) / stride;
    return n;
  };
  std::mt19937_64 rng(7);
  std::vector<std::vector<uint64_t>> cases = {
      std::vector<uint64_t>(kBudget * 6 / 10, 3),  // many small regions: one read each is most of it
      std::vector<uint64_t>(kBudget, 1),           // exactly the budget, one page each
      std::vector<uint64_t>(kBudget, 5),           // the budget's count of regions, larger ones
      {4 * kBudget},                               // one large region
      {kBudget},                                   // exactly the budget in one region
  };
  for (int c = 0; c < 20; ++c) {
    std::vector<uint64_t> mix(1 + rng() % 5000);
    for (auto& p : mix) p = 1 + rng() % (rng() % 2 ? 16 : 4 * kBudget);
    cases.push_back(std::move(mix));
  }
  for (size_t c = 0; c < cases.size(); ++c) {
    uint64_t total = 0;
    for (uint64_t p : cases[c]) total += p;
    const auto stride = tt::ipc::placementStride(total, cases[c].size());
    ASSERT_TRUE(stride.has_value()) << "case " << c;
    EXPECT_LE(reads(cases[c], *stride), kBudget) << "case " << c << ": stride " << *stride;
    if (total <= kBudget) {
      EXPECT_EQ(*stride, 1u) << "case " << c << ": sampled though within the budget";
    }
  }
  EXPECT_FALSE(tt::ipc::placementStride(kBudget + 1, kBudget + 1).has_value());
}

TEST_F(ProtocolTest, QueryOfAnotherProcessRegionIsNoSuchRegion) {
  ASSERT_TRUE(hello({1}).has_hello_reply());
  const uint64_t id = registerRegion(0x10000000, kPage).register_region_reply().region_id();
  Session other;
  other.id = handler.nextSessionId();
  other.peer = {200, 1001, 1001};
  pb::ClientMessage h;
  h.mutable_hello()->add_versions(1);
  pb::DaemonMessage reply;
  ASSERT_TRUE(handler.handle(other, h, reply));
  pb::ClientMessage q;
  q.mutable_query_placement()->add_region_ids(id);
  ASSERT_TRUE(handler.handle(other, q, reply));
  ASSERT_TRUE(reply.has_error());
  EXPECT_EQ(reply.error().code(), pb::NO_SUCH_REGION);
  pb::ClientMessage u;
  u.mutable_unregister_region()->set_region_id(id);
  ASSERT_TRUE(handler.handle(other, u, reply));
  EXPECT_EQ(reply.error().code(), pb::NO_SUCH_REGION);
  EXPECT_TRUE(registry.region(id).has_value());
}

TEST_F(ProtocolTest, AdminRequestsGoToTheAdminHandlerWithThePeer) {
  ASSERT_TRUE(hello({1}).has_hello_reply());
  pb::ClientMessage m;
  m.set_seq(11);
  m.mutable_status();
  auto r = send(m);
  EXPECT_EQ(admin.calls, 1);
  EXPECT_EQ(admin.lastUid, 1000u);
  EXPECT_EQ(admin.lastCase, pb::ClientMessage::kStatus);
  EXPECT_EQ(r.seq(), 11u);
  EXPECT_TRUE(r.has_status());
}

TEST_F(ProtocolTest, ClosingTheLastSessionDropsTheProcess) {
  ASSERT_TRUE(hello({1}).has_hello_reply());
  ASSERT_TRUE(registerRegion(0x10000000, kPage).has_register_region_reply());
  handler.sessionClosed(session);
  EXPECT_FALSE(registry.hasProcess(100));
  EXPECT_EQ(registry.totals().regions, 0u);
  EXPECT_EQ(lifetime.unwatched, std::vector<pid_t>{100}) << "the pidfd watch outlived the registration";
}

TEST_F(ProtocolTest, ReusedPidDoesNotInheritTheDeadProcessRegions) {
  ASSERT_TRUE(hello({1}).has_hello_reply());
  ASSERT_TRUE(registerRegion(0x10000000, kPage).has_register_region_reply());
  // The old pid 100 exited (pidfd readable, not handled yet); a new process got pid 100.
  lifetime.dead.insert(100);
  Session fresh;
  fresh.id = handler.nextSessionId();
  fresh.peer = {100, 1000, 1000};
  pb::ClientMessage h;
  h.mutable_hello()->add_versions(1);
  pb::DaemonMessage reply;
  ASSERT_TRUE(handler.handle(fresh, h, reply));
  pb::ClientMessage m;
  m.mutable_register_region()->set_address(0x10000000);
  m.mutable_register_region()->set_length(kPage);
  ASSERT_TRUE(handler.handle(fresh, m, reply));
  ASSERT_TRUE(reply.has_register_region_reply()) << reply.DebugString();
  EXPECT_EQ(registry.totals().regions, 1u);  // only the new process's region
  EXPECT_EQ(lifetime.watched.size(), 2u);
  EXPECT_EQ(lifetime.forgotten, std::vector<pid_t>{100}) << "the old process was not handled as exited";
}

TEST_F(ProtocolTest, ProcessGoneBeforeWatchIsRefused) {
  lifetime.gone.insert(100);
  ASSERT_TRUE(hello({1}).has_hello_reply());
  auto r = registerRegion(0x10000000, kPage);
  ASSERT_TRUE(r.has_error());
  EXPECT_FALSE(registry.hasProcess(100));
}

}  // namespace

namespace {

// The process stopped running as the peer's uid (a setuid exec, as procfs ownership shows it):
// requests that probe its address space are refused, the session is to be closed, and the regions
// registered under that uid go as on an exit. A root peer is not held to it.
TEST_F(ProtocolTest, AProcessThatNoLongerRunsAsThePeerIsNotTheConnectionsToActOn) {
  ASSERT_TRUE(hello({1}).has_hello_reply());
  auto first = registerRegion(0x10000000, 4 * kPage);
  ASSERT_TRUE(first.has_register_region_reply()) << first.DebugString();
  space.setOwner(100, 0, 0);  // a setuid-root exec
  expectNextRegistrationRevoked();
  EXPECT_EQ(lifetime.forgotten, std::vector<pid_t>{100});

  // Placement on a fresh session of the same peer is refused the same way, with nothing left to drop.
  Session other;
  other.id = handler.nextSessionId();
  other.peer = session.peer;
  other.hello = true;
  pb::ClientMessage q;
  q.set_seq(4);
  q.mutable_query_placement();
  pb::DaemonMessage reply;
  ASSERT_TRUE(handler.handle(other, q, reply));
  ASSERT_TRUE(reply.has_error()) << reply.DebugString();
  EXPECT_EQ(reply.error().code(), pb::PERMISSION_DENIED);
  EXPECT_TRUE(other.revoked);
  EXPECT_EQ(lifetime.forgotten.size(), 1u);

  // A mark attaches only a process that still runs as the peer.
  Session marker = other;
  marker.revoked = false;
  pb::ClientMessage mark;
  mark.set_seq(5);
  mark.mutable_iteration_mark()->set_type(pb::IterationMark::STEP_BEGIN);
  ASSERT_TRUE(handler.handle(marker, mark, reply));
  EXPECT_EQ(reply.error().code(), pb::PERMISSION_DENIED);
  EXPECT_FALSE(registry.hasProcess(100));
}

TEST_F(ProtocolTest, ASetgidExecEndsTheConnectionToo) {
  ASSERT_TRUE(hello({1}).has_hello_reply());
  ASSERT_TRUE(registerRegion(0x10000000, 4 * kPage).has_register_region_reply());
  space.setOwner(100, 1000, 42);  // same uid, another effective gid
  expectNextRegistrationRevoked();
}

// A file-capability exec keeps the ids, but the kernel makes a process that gains capabilities
// non-dumpable, and then keeps its memory map from other processes of its uid: so does the daemon.
TEST_F(ProtocolTest, AnExecThatMakesTheProcessNonDumpableEndsTheConnection) {
  ASSERT_TRUE(hello({1}).has_hello_reply());
  ASSERT_TRUE(registerRegion(0x10000000, 4 * kPage).has_register_region_reply());
  space.setDumpable(100, false);
  expectNextRegistrationRevoked();
}

// A process not dumpable when its connection is first used cannot be told from one that became so
// after the accept (a child holding the socket across the parent's exec): only root acts on it.
TEST_F(ProtocolTest, AProcessThatIsNotDumpableIsNotAttached) {
  space.setDumpable(100, false);
  ASSERT_TRUE(hello({1}).has_hello_reply());
  auto r = registerRegion(0x10000000, 4 * kPage);
  ASSERT_TRUE(r.has_error()) << r.DebugString();
  EXPECT_EQ(r.error().code(), pb::PERMISSION_DENIED);
  EXPECT_NE(r.error().message().find("not dumpable"), std::string::npos) << r.error().message();
  EXPECT_FALSE(registry.hasProcess(100));
  EXPECT_EQ(space.calls, 0) << "its address space was probed";

  session = Session{};
  session.id = handler.nextSessionId();
  session.peer = {100, 0, 0};
  ASSERT_TRUE(hello({1}).has_hello_reply());
  EXPECT_TRUE(registerRegion(0x10000000, 4 * kPage).has_register_region_reply()) << "a root peer was refused";
}

TEST_F(ProtocolTest, ARootPeerMayActOnItsProcessWhateverItRunsAs) {
  session.peer = {100, 0, 0};
  space.setOwner(100, 4242, 4242);
  ASSERT_TRUE(hello({1}).has_hello_reply());
  auto r = registerRegion(0x10000000, 4 * kPage);
  EXPECT_TRUE(r.has_register_region_reply()) << r.DebugString();
  EXPECT_FALSE(session.revoked);
}

TEST_F(ProtocolTest, EveryRegistrationChecksTheIdsBeforeAndAfterItsProbe) {
  ASSERT_TRUE(hello({1}).has_hello_reply());
  space.setOwner(100, 1000, 1000);  // explicitly the peer's ids
  EXPECT_TRUE(registerRegion(0x10000000, 4 * kPage).has_register_region_reply());
  EXPECT_TRUE(registerRegion(0x10100000, 4 * kPage, 3).has_register_region_reply());
  EXPECT_EQ(space.idChecks, 2);
  EXPECT_EQ(space.settledIdChecks, 2);
  space.fail(100);  // the process cannot be looked at (gone): an error, not a revocation
  auto r = registerRegion(0x10200000, 4 * kPage, 4);
  ASSERT_TRUE(r.has_error());
  EXPECT_EQ(r.error().code(), pb::NOT_REGISTERED) << r.DebugString();
  EXPECT_FALSE(session.revoked);
}

// An inspector that pinned the address space at its first probe waited out any exec then: the
// check after each probe is the quick one, with no wait of its own.
TEST_F(ProtocolTest, APinnedAddressSpaceNeedsNoWaitAfterTheProbe) {
  space.pins = true;
  ASSERT_TRUE(hello({1}).has_hello_reply());
  EXPECT_TRUE(registerRegion(0x10000000, 4 * kPage).has_register_region_reply());
  EXPECT_TRUE(registerRegion(0x10100000, 4 * kPage, 3).has_register_region_reply());
  EXPECT_EQ(space.idChecks, 4);  // each registration's check before and after its probe
  EXPECT_EQ(space.settledIdChecks, 0);
}

// The process ran exec keeping its ids (a plain exec): what it registered describes the program
// before, and goes as on an exit, whoever asks next. The session stays (same ids) and attaches
// afresh; the new program registers from nothing.
TEST_F(ProtocolTest, AnExecThatKeepsTheIdsDropsWhatTheOldProgramRegistered) {
  ASSERT_TRUE(hello({1}).has_hello_reply());
  ASSERT_TRUE(registerRegion(0x10000000, 4 * kPage).has_register_region_reply());
  space.execKeepingIds(100);
  auto r = registerRegion(0x10100000, 4 * kPage, 3);
  ASSERT_TRUE(r.has_error()) << r.DebugString();
  EXPECT_EQ(r.error().code(), pb::REGION_NOT_MAPPED);
  EXPECT_NE(r.error().message().find("ran exec"), std::string::npos) << r.error().message();
  EXPECT_EQ(lifetime.forgotten, std::vector<pid_t>{100});
  EXPECT_FALSE(registry.hasProcess(100));
  EXPECT_FALSE(session.revoked);
  auto again = registerRegion(0x10100000, 4 * kPage, 4);
  ASSERT_TRUE(again.has_register_region_reply()) << again.DebugString();
  auto regions = registry.regionsOf(100, {});
  ASSERT_TRUE(regions.ok());
  ASSERT_EQ(regions->size(), 1u);
  EXPECT_EQ((*regions)[0].info.start, 0x10100000u);
}

// An exec drops the old address space before it commits the new ids: a probe that finds the
// address space gone waits for the ids, and a setid exec is then a refusal, not "register again".
TEST_F(ProtocolTest, AnExecFoundByTheProbeIsARefusalWhenItChangedTheIds) {
  ASSERT_TRUE(hello({1}).has_hello_reply());
  ASSERT_TRUE(registerRegion(0x10000000, 4 * kPage).has_register_region_reply());
  space.execKeepingIds(100);                   // the address space is gone...
  space.execAfterNextQuickCheck(100, 0, 0);    // ...and the ids, once committed, are root's
  expectNextRegistrationRevoked();
  EXPECT_EQ(space.settledIdChecks, 2) << "the ids were not waited for after the gone address space";
}

// A new program's first session after such an exec does not join the old program's entry.
TEST_F(ProtocolTest, ANewSessionAfterAnExecThatKeptTheIdsStartsAfresh) {
  ASSERT_TRUE(hello({1}).has_hello_reply());
  ASSERT_TRUE(registerRegion(0x10000000, 4 * kPage).has_register_region_reply());
  space.execKeepingIds(100);
  session = Session{};
  session.id = handler.nextSessionId();
  session.peer = {100, 1000, 1000};
  ASSERT_TRUE(hello({1}).has_hello_reply());
  auto r = registerRegion(0x10100000, 4 * kPage, 3);
  ASSERT_TRUE(r.has_register_region_reply()) << r.DebugString();
  EXPECT_EQ(lifetime.forgotten, std::vector<pid_t>{100});
  auto regions = registry.regionsOf(100, {});
  ASSERT_TRUE(regions.ok());
  ASSERT_EQ(regions->size(), 1u) << "the old program's region joined the new one's";
  EXPECT_EQ((*regions)[0].info.start, 0x10100000u);
}

// The process execs a setid program after the request's check and before its probe: the probe's
// answer (mapped or not, in the new program) is not given, and the session is revoked.
TEST_F(ProtocolTest, AnExecBetweenTheCheckAndTheProbeIsCaughtAfterIt) {
  ASSERT_TRUE(hello({1}).has_hello_reply());
  ASSERT_TRUE(registerRegion(0x10000000, 4 * kPage).has_register_region_reply());
  space.execAfterNextQuickCheck(100, 0, 0);
  expectNextRegistrationRevoked();
}

TEST_F(ProtocolTest, AnExecDuringAPlacementQueryDropsTheReadPlacement) {
  ASSERT_TRUE(hello({1}).has_hello_reply());
  ASSERT_TRUE(registerRegion(0x10000000, 4 * kPage).has_register_region_reply());
  mover.map(100, 0x10000000, 4 * kPage, 0);
  space.execAfterNextQuickCheck(100, 0, 0);
  pb::ClientMessage q;
  q.set_seq(9);
  q.mutable_query_placement();
  auto r = send(q);
  EXPECT_FALSE(r.has_placement()) << r.DebugString();
  ASSERT_TRUE(r.has_error());
  EXPECT_EQ(r.error().code(), pb::PERMISSION_DENIED);
  EXPECT_EQ(r.seq(), 9u);
  EXPECT_TRUE(session.revoked);
}

// A process root registered, then a connection of another uid of it (after a seteuid): refusing
// that connection leaves root's regions, and its attachment goes at once, so the regions still go
// with the last of root's connections.
TEST_F(ProtocolTest, ARefusedSessionOfAProcessRegisteredUnderOtherIdsReleasesItsAttachment) {
  Session root;
  root.id = handler.nextSessionId();
  root.peer = {100, 0, 0};
  pb::DaemonMessage reply;
  pb::ClientMessage h;
  h.set_seq(1);
  h.mutable_hello()->add_versions(1);
  ASSERT_TRUE(handler.handle(root, h, reply));
  pb::ClientMessage reg;
  reg.set_seq(2);
  reg.mutable_register_region()->set_address(0x10000000);
  reg.mutable_register_region()->set_length(4 * kPage);
  ASSERT_TRUE(handler.handle(root, reg, reply));
  ASSERT_TRUE(reply.has_register_region_reply()) << reply.DebugString();

  ASSERT_TRUE(hello({1}).has_hello_reply());  // uid 1000, the same pid
  pb::ClientMessage mark;
  mark.set_seq(3);
  mark.mutable_iteration_mark()->set_type(pb::IterationMark::STEP_BEGIN);
  ASSERT_TRUE(send(mark).has_ack());
  ASSERT_TRUE(session.attached);
  space.setOwner(100, 0, 0);
  auto r = registerRegion(0x10100000, 4 * kPage, 4);
  EXPECT_EQ(r.error().code(), pb::PERMISSION_DENIED);
  EXPECT_TRUE(session.revoked);
  EXPECT_FALSE(session.attached);
  EXPECT_TRUE(registry.hasProcess(100)) << "root's regions went with another uid's connection";
  handler.sessionClosed(session);  // the server closes it
  handler.sessionClosed(root);
  EXPECT_FALSE(registry.hasProcess(100)) << "the refused session kept the process attached";
}

}  // namespace

namespace {

TEST_F(ProtocolTest, UnregisteringIsRefusedToOldIdsToo) {
  ASSERT_TRUE(hello({1}).has_hello_reply());
  auto r = registerRegion(0x10000000, 4 * kPage);
  ASSERT_TRUE(r.has_register_region_reply());
  space.setOwner(100, 0, 0);
  pb::ClientMessage u;
  u.set_seq(5);
  u.mutable_unregister_region()->set_region_id(r.register_region_reply().region_id());
  auto reply = send(u);
  ASSERT_TRUE(reply.has_error()) << reply.DebugString();
  EXPECT_EQ(reply.error().code(), pb::PERMISSION_DENIED);
  EXPECT_TRUE(session.revoked);
}

// After a setid exec the new program (here root's connection) does not join the old program's
// entry, registered under other ids: that entry goes first, as on an exit.
TEST_F(ProtocolTest, TheNewProgramDoesNotJoinTheOldProgramsEntry) {
  ASSERT_TRUE(hello({1}).has_hello_reply());
  ASSERT_TRUE(registerRegion(0x10000000, 4 * kPage).has_register_region_reply());
  space.setOwner(100, 0, 0);
  Session fresh;
  fresh.id = handler.nextSessionId();
  fresh.peer = {100, 0, 0};
  fresh.hello = true;
  pb::ClientMessage mark;
  mark.set_seq(6);
  mark.mutable_iteration_mark()->set_type(pb::IterationMark::STEP_BEGIN);
  pb::DaemonMessage reply;
  ASSERT_TRUE(handler.handle(fresh, mark, reply));
  EXPECT_TRUE(reply.has_ack()) << reply.DebugString();
  EXPECT_EQ(lifetime.forgotten, std::vector<pid_t>{100});
  EXPECT_TRUE(registry.hasProcess(100));
  EXPECT_TRUE(registry.allRegions(100).empty()) << "the old program's region became the new one's";
  EXPECT_TRUE(registry.registeredUnder(100, 0));
}

}  // namespace
