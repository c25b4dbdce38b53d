// The registry: own-process registration, maps validation, overlaps, per-uid limits, process
// removal and the change log.
#include <gtest/gtest.h>

#include "fakes/registry/FakeAddressSpace.h"
#include "registry/Registry.h"

namespace {

using tt::registry::Peer;
using tt::registry::RegisterRequest;
using tt::registry::Registry;
using Type = tt::registry::RegistryEvent::Type;
constexpr uint64_t kPage = tt::kBasePageSize;
constexpr uint64_t kBase = 0x7f0000000000;

class RegistryTest : public ::testing::Test {
 protected:
  RegistryTest() : registry(space, limits()) {
    space.map(10, kBase, kBase + (1ULL << 30));
    space.map(11, kBase, kBase + (1ULL << 30));
    space.map(20, kBase, kBase + (1ULL << 30));
  }
  static tt::registry::Limits limits() {
    tt::registry::Limits l;
    l.maxConnections = 5;
    l.maxConnectionsPerUid = 3;
    l.maxRegionsPerUid = 4;
    l.maxBytesPerUid = 64 * kPage;
    return l;
  }
  static RegisterRequest req(uint64_t address, uint64_t length) {
    RegisterRequest r;
    r.address = address;
    r.length = length;
    r.kind = tt::RegionKind::Activation;
    r.name = "act";
    return r;
  }
  tt::test::FakeAddressSpace space;
  Registry registry;
  Peer alice{10, 1000, 1000}, aliceToo{11, 1000, 1000}, bob{20, 2000, 2000};
};

TEST_F(RegistryTest, RegistersForThePeerPidAfterTheMapsCheck) {
  registry.attachProcess(alice, "a", false);
  auto r = registry.registerRegion(alice, req(kBase + 5, 2 * kPage));
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->tgid, 10);
  EXPECT_EQ(r->start, kBase);
  EXPECT_EQ(r->length, 3 * kPage);  // [kBase+5, kBase+5+8192) touches three pages
  EXPECT_EQ(space.calls, 1);
}

TEST_F(RegistryTest, UnmappedRangeIsEfault) {
  registry.attachProcess(alice, "", false);
  auto r = registry.registerRegion(alice, req(0x1000, kPage));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, EFAULT);
  EXPECT_EQ(registry.totals().regions, 0u);
}

TEST_F(RegistryTest, UnreadableAddressSpaceIsAnErrorNotASuccess) {
  space.fail(10);
  registry.attachProcess(alice, "", false);
  auto r = registry.registerRegion(alice, req(kBase, kPage));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ESRCH);
}

TEST_F(RegistryTest, WithoutHelloThereIsNoProcessToRegisterFor) {
  auto r = registry.registerRegion(alice, req(kBase, kPage));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ESRCH);
}

TEST_F(RegistryTest, BadLengthsAreRejected) {
  registry.attachProcess(alice, "", false);
  EXPECT_EQ(registry.registerRegion(alice, req(kBase, 0)).error().code, EINVAL);
  EXPECT_EQ(registry.registerRegion(alice, req(UINT64_MAX - 10, 100)).error().code, EINVAL);
  EXPECT_EQ(registry.registerRegion(alice, req(UINT64_MAX - 100, 50)).error().code, EINVAL);  // last page: end overflows
}

TEST_F(RegistryTest, OverlapsWithinAProcessAreRefusedAdjacentIsFine) {
  registry.attachProcess(alice, "", false);
  ASSERT_TRUE(registry.registerRegion(alice, req(kBase + 4 * kPage, 4 * kPage)).ok());
  EXPECT_EQ(registry.registerRegion(alice, req(kBase + 7 * kPage, 2 * kPage)).error().code, EEXIST);
  EXPECT_EQ(registry.registerRegion(alice, req(kBase + 2 * kPage, 3 * kPage)).error().code, EEXIST);
  EXPECT_EQ(registry.registerRegion(alice, req(kBase, 16 * kPage)).error().code, EEXIST);
  EXPECT_TRUE(registry.registerRegion(alice, req(kBase + 8 * kPage, kPage)).ok());
  EXPECT_TRUE(registry.registerRegion(alice, req(kBase + 3 * kPage, kPage)).ok());
}

TEST_F(RegistryTest, SameAddressInAnotherProcessIsNoOverlap) {
  registry.attachProcess(alice, "", false);
  registry.attachProcess(bob, "", false);
  EXPECT_TRUE(registry.registerRegion(alice, req(kBase, kPage)).ok());
  EXPECT_TRUE(registry.registerRegion(bob, req(kBase, kPage)).ok());
}

TEST_F(RegistryTest, RegionLimitIsPerUidAcrossProcesses) {
  registry.attachProcess(alice, "", false);
  registry.attachProcess(aliceToo, "", false);
  registry.attachProcess(bob, "", false);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(registry.registerRegion(alice, req(kBase + i * kPage, kPage)).ok());
    ASSERT_TRUE(registry.registerRegion(aliceToo, req(kBase + i * kPage, kPage)).ok());
  }
  auto fifth = registry.registerRegion(aliceToo, req(kBase + 10 * kPage, kPage));
  ASSERT_FALSE(fifth.ok());
  EXPECT_EQ(fifth.error().code, EDQUOT);
  EXPECT_TRUE(registry.registerRegion(bob, req(kBase, kPage)).ok());  // bob has his own quota
}

TEST_F(RegistryTest, ByteLimitIsPerUidAndFreedOnUnregister) {
  registry.attachProcess(alice, "", false);
  auto big = registry.registerRegion(alice, req(kBase, 60 * kPage));
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(registry.registerRegion(alice, req(kBase + 100 * kPage, 5 * kPage)).error().code, EDQUOT);
  ASSERT_TRUE(registry.unregisterRegion(alice, big->id).ok());
  EXPECT_TRUE(registry.registerRegion(alice, req(kBase + 100 * kPage, 5 * kPage)).ok());
}

// A process registered under one uid that connects again under another (after a seteuid) is
// charged to the first, which its regions' removal refunds: nothing leaks or wraps.
TEST_F(RegistryTest, RegionsAreChargedToTheUidTheirProcessWasRegisteredUnder) {
  registry.attachProcess(alice, "", false);
  const Peer aliceAsBob{alice.pid, bob.uid, bob.gid};
  registry.attachProcess(aliceAsBob, "", false);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(registry.registerRegion(aliceAsBob, req(kBase + i * kPage, kPage)).ok());
  EXPECT_EQ(registry.registerRegion(alice, req(kBase + 10 * kPage, kPage)).error().code, EDQUOT)
      << "alice's quota was not charged";
  registry.attachProcess(bob, "", false);
  EXPECT_TRUE(registry.registerRegion(bob, req(kBase, kPage)).ok()) << "bob was charged for alice's process";
  EXPECT_EQ(registry.removeProcess(alice.pid), 4u);
  registry.attachProcess(aliceToo, "", false);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(registry.registerRegion(aliceToo, req(kBase + i * kPage, kPage)).ok()) << i;
  EXPECT_EQ(registry.registerRegion(aliceToo, req(kBase + 10 * kPage, kPage)).error().code, EDQUOT)
      << "a refund went to the wrong uid";
}

TEST_F(RegistryTest, LoweredLimitsRefuseNewButKeepExisting) {
  registry.attachProcess(alice, "", false);
  ASSERT_TRUE(registry.registerRegion(alice, req(kBase, kPage)).ok());
  ASSERT_TRUE(registry.registerRegion(alice, req(kBase + kPage, kPage)).ok());
  auto l = registry.limits();
  l.maxRegionsPerUid = 1;
  registry.setLimits(l);
  EXPECT_EQ(registry.registerRegion(alice, req(kBase + 2 * kPage, kPage)).error().code, EDQUOT);
  EXPECT_EQ(registry.totals().regions, 2u);
}

TEST_F(RegistryTest, ConnectionLimitsPerUidAndGlobal) {
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(registry.openConnection(1000).ok());
  auto fourth = registry.openConnection(1000);
  ASSERT_FALSE(fourth.ok());
  EXPECT_EQ(fourth.error().code, EDQUOT);
  ASSERT_TRUE(registry.openConnection(2000).ok());
  ASSERT_TRUE(registry.openConnection(3000).ok());
  auto sixth = registry.openConnection(4000);
  ASSERT_FALSE(sixth.ok());
  EXPECT_EQ(sixth.error().code, EUSERS);
  registry.closeConnection(1000);
  EXPECT_TRUE(registry.openConnection(4000).ok());
  EXPECT_EQ(registry.totals().connections, 5u);
}

TEST_F(RegistryTest, UnregisterOfAnotherProcessRegionLooksMissing) {
  registry.attachProcess(alice, "", false);
  registry.attachProcess(bob, "", false);
  auto r = registry.registerRegion(alice, req(kBase, kPage));
  ASSERT_TRUE(r.ok());
  auto u = registry.unregisterRegion(bob, r->id);
  ASSERT_FALSE(u.ok());
  EXPECT_EQ(u.error().code, ENOENT);
  EXPECT_TRUE(registry.region(r->id).has_value());
}

TEST_F(RegistryTest, RemoveProcessDropsEveryRegionAndReleasesQuota) {
  registry.attachProcess(alice, "", false);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(registry.registerRegion(alice, req(kBase + i * kPage, kPage)).ok());
  EXPECT_EQ(registry.removeProcess(10), 4u);
  EXPECT_FALSE(registry.hasProcess(10));
  EXPECT_EQ(registry.totals().regions, 0u);
  EXPECT_EQ(registry.totals().registeredBytes, 0u);
  registry.attachProcess(aliceToo, "", false);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(registry.registerRegion(aliceToo, req(kBase + i * kPage, kPage)).ok());
}

TEST_F(RegistryTest, ProcessStaysUntilItsLastConnectionDetaches) {
  EXPECT_TRUE(registry.attachProcess(alice, "", false));
  EXPECT_FALSE(registry.attachProcess(alice, "", true));
  ASSERT_TRUE(registry.registerRegion(alice, req(kBase, kPage)).ok());
  EXPECT_TRUE(registry.acceptsMbind(10));
  EXPECT_FALSE(registry.detachProcess(10));
  EXPECT_TRUE(registry.hasProcess(10));
  EXPECT_TRUE(registry.detachProcess(10));
  EXPECT_FALSE(registry.hasProcess(10));
  EXPECT_FALSE(registry.acceptsMbind(10));
}

TEST_F(RegistryTest, ChangeLogRecordsEverythingInOrder) {
  registry.attachProcess(alice, "", false);
  auto r = registry.registerRegion(alice, req(kBase, kPage));
  ASSERT_TRUE(r.ok());
  tt::IterationMark m;
  m.tgid = 999;  // ignored: the peer's pid is what counts
  m.step = 3;
  registry.mark(alice, m);
  registry.removeProcess(10);
  auto ev = registry.drainEvents();
  ASSERT_EQ(ev.size(), 5u);
  EXPECT_EQ(ev[0].type, Type::ProcessAdded);
  EXPECT_EQ(ev[1].type, Type::RegionAdded);
  EXPECT_EQ(ev[1].region.id, r->id);
  EXPECT_EQ(ev[2].type, Type::Mark);
  EXPECT_EQ(ev[2].mark.tgid, 10);
  EXPECT_EQ(ev[3].type, Type::RegionRemoved);
  EXPECT_EQ(ev[3].region.id, r->id);
  EXPECT_EQ(ev[4].type, Type::ProcessRemoved);
  EXPECT_TRUE(registry.drainEvents().empty());
}

// Past the bound the older half of the queued marks is dropped; the newest are all kept, in
// order, and so are the other events.
TEST_F(RegistryTest, QueuedMarksAreBounded) {
  registry.attachProcess(alice, "", false);
  (void)registry.drainEvents();
  tt::IterationMark m;
  const uint64_t total = Registry::kMaxQueuedMarks + 100;
  for (uint64_t i = 0; i < total; ++i) {
    m.step = i;
    registry.mark(alice, m);
    if (i == 10) {
      ASSERT_TRUE(registry.registerRegion(alice, req(kBase, kPage)).ok());
    }
  }
  auto ev = registry.drainEvents();
  ASSERT_LE(ev.size(), Registry::kMaxQueuedMarks + 1);
  ASSERT_EQ(ev.front().type, tt::registry::RegistryEvent::Type::RegionAdded) << "a region event was dropped with the marks";
  const uint64_t firstKept = total - (ev.size() - 1);
  EXPECT_GT(firstKept, 0u) << "no mark was dropped";
  for (size_t i = 1; i < ev.size(); ++i) {
    ASSERT_EQ(ev[i].type, tt::registry::RegistryEvent::Type::Mark);
    ASSERT_EQ(ev[i].mark.step, firstKept + i - 1) << "the kept marks are not the newest, in order";
  }
  EXPECT_EQ(ev.back().mark.step, total - 1);
}

TEST_F(RegistryTest, HeatIsPublishedPerRegionAndListingsAreOrdered) {
  registry.attachProcess(bob, "b", false);
  registry.attachProcess(alice, "a", false);
  auto b = registry.registerRegion(bob, req(kBase, kPage));
  auto a2 = registry.registerRegion(alice, req(kBase + 8 * kPage, kPage));
  auto a1 = registry.registerRegion(alice, req(kBase, kPage));
  ASSERT_TRUE(b.ok() && a1.ok() && a2.ok());
  const tt::registry::RegionHeat heat[] = {{a1->id, 2.5, 7.0}, {12345, 9.0, 1.0}};
  registry.publishHeat(heat);
  auto all = registry.allRegions();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].info.id, a1->id);
  EXPECT_DOUBLE_EQ(all[0].heat, 2.5);
  EXPECT_DOUBLE_EQ(all[0].steadySteps, 7.0);
  EXPECT_EQ(all[1].info.id, a2->id);
  EXPECT_EQ(all[2].info.id, b->id);
  EXPECT_EQ(registry.allRegions(20).size(), 1u);
  auto procs = registry.processes();
  ASSERT_EQ(procs.size(), 2u);
  EXPECT_EQ(procs[0].pid, 10);
  EXPECT_EQ(procs[0].regions, 2u);
  EXPECT_EQ(procs[0].registeredBytes, 2 * kPage);
}

}  // namespace
