// The copy queue of the replay: moves take the copy engine's time, a page changes tier when its
// own copy completes, capacity is reserved on acceptance, stolen bandwidth is spread over the
// windows a copy runs in.
#include <gtest/gtest.h>

#include "Simulator.h"
#include "Sweep.h"
#include "TestTraces.h"
#include "traces/ModelTraces.h"

namespace tt::tiersim {
namespace {

using test::oneStepTrace;
using test::ScriptedPolicy;
using test::twoTierConfig;

// Optane -> DRAM and DRAM -> Optane both copy at the 2 GB/s engine ceiling: 2048 ns a page.
constexpr double kCopyNs = 4096 / 2.0;

// What the policy saw at one epoch.
struct Seen {
  uint64_t nowNs = 0;
  std::vector<TierId> tierOf;
  std::vector<TierInfo> tiers;
  uint64_t queuedPages = 0;
};

// A policy that emits `moves` at its first epoch at or after `atNs` and records every epoch.
struct Recorder {
  ScriptedPolicy policy;
  std::vector<Seen> seen;
  Recorder(uint64_t atNs, std::vector<PageMove> moves, TierId firstTouch) {
    policy.firstTouch = [firstTouch](PageId) { return firstTouch; };
    policy.epoch = [this, atNs, moves, done = false](const EpochContext& c, std::vector<PageMove>& out) mutable {
      seen.push_back(Seen{c.nowNs, *c.tierOf, c.tiers, c.queuedPages});
      if (!done && c.nowNs >= atNs) {
        done = true;
        out.insert(out.end(), moves.begin(), moves.end());
      }
    };
  }
};

SimConfig queueConfig(uint64_t fastPages, double migrationOverlap) {
  SimConfig c = twoTierConfig(fastPages);
  c.epochNs = 500;
  c.migrationOverlap = migrationOverlap;
  return c;
}

TEST(TiersimCopyQueue, APageChangesTierWhenItsOwnCopyCompletes) {
  // Four slow pages, promoted at the epoch at 1 us; fully overlapped copies charge no time, and
  // nothing is accessed until the step ends, so simulated time = trace time + the first reads' stall.
  const Trace trace = oneStepTrace(4, 40'000, {{0, 0, 1, false}, {0, 1, 1, false}, {0, 2, 1, false}, {0, 3, 1, false}});
  Recorder r(1000, {{0, 0}, {1, 0}, {2, 0}, {3, 0}}, 1);
  auto result = simulate(trace, r.policy, queueConfig(4, 1.0), false);
  ASSERT_TRUE(result.ok()) << result.error().message();
  EXPECT_EQ(result->promotedPages, 4U);
  EXPECT_EQ(result->steps[0].migratedBytes, 4U * 4096);
  EXPECT_DOUBLE_EQ(result->steps[0].migrationNs, 0);
  uint64_t emittedAt = 0;
  for (const auto& s : r.seen) {
    if (s.nowNs >= 1000) {
      emittedAt = s.nowNs;
      break;
    }
  }
  ASSERT_GT(emittedAt, 0U);
  bool sawPartial = false;
  for (const auto& s : r.seen) {
    uint64_t fast = 0;
    for (PageId p = 0; p < 4; ++p) {
      // Page p's copy starts after the p copies ahead of it: it lands (p + 1) x 2048 ns later.
      const bool landed = s.nowNs > emittedAt && static_cast<double>(s.nowNs - emittedAt) >= static_cast<double>(p + 1) * kCopyNs;
      EXPECT_EQ(s.tierOf[p], landed ? 0 : 1) << "page " << p << " at " << s.nowNs;
      fast += s.tierOf[p] == 0 ? 1 : 0;
    }
    if (s.nowNs > emittedAt) {
      // The fast tier is reserved for all four from the moment they were accepted.
      EXPECT_EQ(s.tiers[0].usedPages, 4U);
      EXPECT_EQ(s.queuedPages, 4 - fast);
    }
    sawPartial = sawPartial || (fast > 0 && fast < 4);
  }
  EXPECT_TRUE(sawPartial) << "epochs every 500 ns must see the copies land one by one";
}

TEST(TiersimCopyQueue, AccessesBeforeTheCopyCompletesAreServedByTheOldTier) {
  // Page 3 is last in the queue (it lands 8192 ns after the 1 us epoch): read 2 us after the
  // epoch it is still slow, 20 us after it is fast. Page 0 lands after 2048 ns: read at +5 us, fast.
  const Trace trace = oneStepTrace(4, 40'000,
                                   {{0, 0, 1, false}, {0, 1, 1, false}, {0, 2, 1, false}, {0, 3, 1, false},
                                    {3'000, 3, 1, false}, {6'000, 0, 1, false}, {21'000, 3, 1, false}});
  SimConfig config = queueConfig(4, 1.0);
  config.memoryParallelism = 64;  // small stalls: simulated time stays within 30 ns of trace time
  Recorder r(1000, {{0, 0}, {1, 0}, {2, 0}, {3, 0}}, 1);
  auto result = simulate(trace, r.policy, config, false);
  ASSERT_TRUE(result.ok()) << result.error().message();
  ASSERT_EQ(result->promotedPages, 4U);
  // Of the seven one-line accesses, the two made after their page landed were served by DRAM.
  EXPECT_EQ(result->steps[0].totalLines, 7U);
  EXPECT_EQ(result->steps[0].fastLines, 2U);
}

TEST(TiersimCopyQueue, OnTheCriticalPathTheQueueDrainsBeforeTheNextAccess) {
  // With no overlap the application waits for every copy: as before the queue, the pages are in
  // their new tier for the next access and the copies' whole time is charged.
  const Trace trace = oneStepTrace(4, 40'000,
                                   {{0, 0, 1, false}, {0, 1, 1, false}, {0, 2, 1, false}, {0, 3, 1, false},
                                    {1'100, 3, 1, false}});
  Recorder r(1000, {{0, 0}, {1, 0}, {2, 0}, {3, 0}}, 1);
  auto result = simulate(trace, r.policy, queueConfig(4, 0.0), false);
  ASSERT_TRUE(result.ok()) << result.error().message();
  EXPECT_EQ(result->steps[0].fastLines, 1U);
  EXPECT_DOUBLE_EQ(result->steps[0].migrationNs, 4 * kCopyNs);
}

// Page 0 and pages 11.. (`pages` of them) touched at t = 0, all in DRAM; pages 1..10 then read one
// line each every 100 ns for 100 us (every 1 us window has traffic). Pages 11.. are demoted at the
// epoch at 10 us when `move`.
double stepWithDemotions(const SimConfig& config, uint64_t pages, bool move, uint64_t* demoted) {
  std::vector<SimAccess> accesses;
  accesses.reserve(1 + pages + 1000);
  accesses.push_back(SimAccess{0, 0, 1, false});
  for (uint64_t p = 0; p < pages; ++p) accesses.push_back(SimAccess{0, 11 + p, 1, false});
  for (uint64_t t = 0; t < 100'000; t += 100) accesses.push_back(SimAccess{t, 1 + (t / 100) % 10, 1, false});
  const Trace trace = oneStepTrace(11 + pages, 100'000, accesses);
  std::vector<PageMove> moves;
  for (uint64_t p = 0; p < pages; ++p) moves.push_back({11 + p, 1});
  Recorder r(10'000, move ? moves : std::vector<PageMove>{}, 0);
  auto result = simulate(trace, r.policy, config, false);
  EXPECT_TRUE(result.ok());
  if (!result.ok()) return 0;
  if (demoted != nullptr) *demoted = result->demotedPages;
  return result->steps[0].timeNs;
}

TEST(TiersimCopyQueue, StolenBandwidthIsSpreadOverTheWindowsTheCopyRuns) {
  // Compute and memory overlap fully and copies are fully overlapped: a window pays for stolen
  // bytes only if they push its stall over its 1 us of compute. Eight pages at 2 GB/s take 16 us:
  // at most 2 KB per window, 2 KB / 100 GB/s + 2 KB / 13.8 GB/s = 169 ns of stall, so it is free.
  SimConfig config = queueConfig(20, 1.0);
  config.computeOverlap = 1;
  config.memoryParallelism = 64;
  uint64_t demoted = 0;
  const double still = stepWithDemotions(config, 8, false, nullptr);
  const double moved = stepWithDemotions(config, 8, true, &demoted);
  EXPECT_EQ(demoted, 8U);
  EXPECT_DOUBLE_EQ(moved, still);
  // Had the 32 KiB landed in one window (the model before the copy queue), it would have cost.
  TierTraffic read;
  read.extraReadBytes = 8 * 4096;
  TierTraffic write;
  write.extraWriteBytes = 8 * 4096;
  const double bunched = tierStallNs(dramTier(), read, 64) + tierStallNs(optaneTier(6), write, 64);
  EXPECT_GT(windowTimeNs(1000, bunched, 1), 1000 + 1000);

  // A copy engine as fast as Optane's write bandwidth (13.8 GB/s) fills each window it runs in:
  // the stolen bytes then do cost, about what they add per window over the copy's 2.4 us.
  config.migrationCopyBytesPerNs = 100;
  const double fastStill = stepWithDemotions(config, 8, false, nullptr);
  const double fastMoved = stepWithDemotions(config, 8, true, &demoted);
  EXPECT_EQ(demoted, 8U);
  EXPECT_GT(fastMoved, fastStill);
}

TEST(TiersimCopyQueue, CapacityIsNeverExceededWhileCopiesAreInFlight) {
  // Fast tier of 2 pages holding pages 0 and 1; pages 2..5 slow. One epoch asks for two
  // demotions and three promotions: the third promotion is refused, and at no epoch do more than
  // two pages sit in (or head for) the fast tier.
  std::vector<SimAccess> accesses;
  for (PageId p = 0; p < 6; ++p) accesses.push_back(SimAccess{0, p, 1, false});
  const Trace trace = oneStepTrace(6, 40'000, accesses);
  Recorder r(1000, {{0, 1}, {1, 1}, {2, 0}, {3, 0}, {4, 0}}, 0);
  r.policy.firstTouch = [](PageId p) { return static_cast<TierId>(p < 2 ? 0 : 1); };
  auto result = simulate(trace, r.policy, queueConfig(2, 1.0), false);
  ASSERT_TRUE(result.ok()) << result.error().message();
  EXPECT_EQ(result->refusedMoves, 1U);
  EXPECT_EQ(result->promotedPages, 2U);
  EXPECT_EQ(result->demotedPages, 2U);
  for (const auto& s : r.seen) {
    uint64_t fast = 0;
    for (TierId t : s.tierOf) fast += t == 0 ? 1 : 0;
    EXPECT_LE(fast, 2U) << "at " << s.nowNs;
    EXPECT_LE(s.tiers[0].usedPages, 2U) << "at " << s.nowNs;
  }
  ASSERT_FALSE(r.seen.empty());
  EXPECT_EQ(r.seen.back().tierOf, (std::vector<TierId>{1, 1, 0, 0, 1, 1}));
}

TEST(TiersimCopyQueue, FirstTouchDoesNotTakeRoomReservedForACopy) {
  // One fast page: page 0 (slow) is promoted at 1 us; page 1, first touched while the copy runs,
  // prefers the fast tier but finds it reserved and goes to the slow one.
  const Trace trace = oneStepTrace(2, 40'000, {{0, 0, 1, false}, {1'500, 1, 1, false}});
  Recorder r(1000, {{0, 0}}, 1);
  r.policy.firstTouch = [](PageId p) { return static_cast<TierId>(p == 0 ? 1 : 0); };
  auto result = simulate(trace, r.policy, queueConfig(1, 1.0), false);
  ASSERT_TRUE(result.ok()) << result.error().message();
  EXPECT_EQ(result->promotedPages, 1U);
  ASSERT_FALSE(r.seen.empty());
  EXPECT_EQ(r.seen.back().tierOf, (std::vector<TierId>{0, 1}));
  EXPECT_EQ(result->steps[0].fastLines, 0U);
}

TEST(TiersimCopyQueue, ABacklogIsCarriedAcrossEpochsNotLost) {
  // 40 promotions (80 us of copying) at once, with 500 ns epochs: each later epoch sees the
  // backlog shrink by what the engine copied since, and every page lands before the step ends.
  std::vector<SimAccess> accesses;
  std::vector<PageMove> moves;
  for (PageId p = 0; p < 40; ++p) {
    accesses.push_back(SimAccess{0, p, 1, false});
    moves.push_back({p, 0});
  }
  const Trace trace = oneStepTrace(40, 200'000, accesses);
  Recorder r(1000, moves, 1);
  auto result = simulate(trace, r.policy, queueConfig(40, 1.0), false);
  ASSERT_TRUE(result.ok()) << result.error().message();
  EXPECT_EQ(result->refusedMoves, 0U);
  EXPECT_EQ(result->promotedPages, 40U);
  EXPECT_EQ(result->queuedPagesAtEnd, 0U);
  EXPECT_EQ(result->steps[0].migratedBytes, 40U * 4096);
  uint64_t emittedAt = 0;
  uint64_t epochsWithBacklog = 0;
  for (const auto& s : r.seen) {
    if (emittedAt == 0 && s.nowNs >= 1000) {
      emittedAt = s.nowNs;
      continue;
    }
    if (emittedAt == 0) continue;
    const auto landed = static_cast<uint64_t>(static_cast<double>(s.nowNs - emittedAt) / kCopyNs);
    EXPECT_EQ(s.queuedPages, 40 - std::min<uint64_t>(40, landed)) << "at " << s.nowNs;
    epochsWithBacklog += s.queuedPages > 0 ? 1 : 0;
  }
  EXPECT_GT(epochsWithBacklog, 100U);  // 80 us of copies seen by 500 ns epochs
}

TEST(TiersimCopyQueue, ANewerMoveReplacesTheQueuedOne) {
  // Pages 0..3 slow, promoted at 1 us (8 us of copies). At the next epoch the policy changes its
  // mind about page 3, still queued (move back to slow: cancelled, its room freed), and about
  // page 0, already being copied (refused: it is promoted anyway).
  std::vector<SimAccess> accesses;
  for (PageId p = 0; p < 4; ++p) accesses.push_back(SimAccess{0, p, 1, false});
  const Trace trace = oneStepTrace(4, 40'000, accesses);
  ScriptedPolicy policy;
  policy.firstTouch = [](PageId) { return TierId{1}; };
  std::vector<Seen> seen;
  int emitted = 0;
  policy.epoch = [&](const EpochContext& c, std::vector<PageMove>& out) {
    seen.push_back(Seen{c.nowNs, *c.tierOf, c.tiers, c.queuedPages});
    if (c.nowNs < 1000 || emitted == 2) return;
    if (emitted++ == 0) {
      out.insert(out.end(), {{0, 0}, {1, 0}, {2, 0}, {3, 0}});
    } else {
      out.insert(out.end(), {{3, 1}, {0, 1}, {2, 0}});  // page 2: the same move again, a no-op
    }
  };
  auto result = simulate(trace, policy, queueConfig(4, 1.0), false);
  ASSERT_TRUE(result.ok()) << result.error().message();
  EXPECT_EQ(result->cancelledMoves, 1U);
  EXPECT_EQ(result->refusedMoves, 1U);
  EXPECT_EQ(result->promotedPages, 3U);
  EXPECT_EQ(result->demotedPages, 0U);
  EXPECT_EQ(result->steps[0].migratedBytes, 3U * 4096);
  ASSERT_GE(seen.size(), 3U);
  // The epoch after the change: three pages reserved in DRAM, not four.
  size_t after = 0;
  while (after < seen.size() && seen[after].nowNs < 1000) ++after;
  ASSERT_LT(after + 2, seen.size());
  EXPECT_EQ(seen[after + 2].tiers[0].usedPages, 3U);
  EXPECT_EQ(seen.back().tierOf, (std::vector<TierId>{0, 0, 0, 1}));
}

// Two steps over ten slow pages, read at t = 0..9 (a 3050 ns stall) and, when `rereadNs` is not 0,
// again from `rereadNs` (another 3050 ns, charged when step 0's last window closes with it). A
// policy promotes the ten pages at its first epoch (100 us): 10 x 2048 ns of copies with no
// overlap, all charged when they start.
SimResult twoStepsWithPromotions(uint64_t end0, uint64_t begin1, uint64_t rereadNs, std::vector<IterationMark>* marks) {
  std::vector<SimAccess> accesses;
  for (PageId p = 0; p < 10; ++p) accesses.push_back(SimAccess{p, p, 1, false});
  if (rereadNs != 0) {
    for (PageId p = 0; p < 10; ++p) accesses.push_back(SimAccess{rereadNs + p, p, 1, false});
  }
  Trace trace = oneStepTrace(10, end0, accesses);
  trace.marks.push_back(test::stepMark(MarkType::StepBegin, 1, begin1));
  trace.marks.push_back(test::stepMark(MarkType::StepEnd, 1, begin1 + 100'000));
  ScriptedPolicy policy;
  policy.firstTouch = [](PageId) { return TierId{1}; };
  policy.epoch = [](const EpochContext& c, std::vector<PageMove>& out) {
    if (c.epoch != 1) return;
    for (PageId p = 0; p < 10; ++p) out.push_back({p, 0});
  };
  auto result = simulate(trace, policy, twoTierConfig(10), false);
  EXPECT_TRUE(result.ok()) << result.error().message();
  if (marks != nullptr) *marks = policy.marks;
  return result.ok() ? *result : SimResult{};
}

TEST(TiersimCopyQueue, CopiesBetweenTwoStepsAreChargedToExactlyOneStep) {
  // Step 0 ends at 96 us of trace time; its last window's stall, charged as it ends, takes
  // simulated time past the 100 us epoch, which therefore runs at the instant between step 0's end
  // and step 1's begin, before step 1 begins: its copies start and charge their time there. That
  // time and those bytes belong to step 1, the step the gap leads into.
  std::vector<IterationMark> marks;
  const SimResult result = twoStepsWithPromotions(96'000, 96'000, 95'500, &marks);
  ASSERT_EQ(result.steps.size(), 2U);
  ASSERT_EQ(result.promotedPages, 10U);
  const auto& steps = result.steps;
  EXPECT_DOUBLE_EQ(steps[0].timeNs + steps[1].timeNs, result.totalTimeNs) << "every ns in one step";
  EXPECT_DOUBLE_EQ(steps[0].timeNs, 96'000 + 20 * 305.0);
  EXPECT_DOUBLE_EQ(steps[0].migrationNs, 0);
  EXPECT_EQ(steps[0].migratedBytes, 0U);
  EXPECT_DOUBLE_EQ(steps[1].timeNs, 100'000 + 10 * kCopyNs);
  EXPECT_DOUBLE_EQ(steps[1].computeNs, 100'000);
  EXPECT_DOUBLE_EQ(steps[1].migrationNs, 10 * kCopyNs);
  EXPECT_EQ(steps[1].migratedBytes, 10U * 4096);
  // The policy sees step 1 begin once the copies charged before it have run.
  ASSERT_EQ(marks.size(), 4U);
  EXPECT_EQ(marks[2].timestampNs, static_cast<uint64_t>(96'000 + 20 * 305.0 + 10 * kCopyNs));
}

TEST(TiersimCopyQueue, AGapBetweenStepsBelongsToTheNextStep) {
  // A recording's steps need not meet: step 1 begins 500 ns after step 0 ends. The epoch due in
  // the gap and its copies, and the gap itself, are step 1's.
  const SimResult result = twoStepsWithPromotions(97'000, 97'500, 0, nullptr);
  ASSERT_EQ(result.steps.size(), 2U);
  ASSERT_EQ(result.promotedPages, 10U);
  const auto& steps = result.steps;
  EXPECT_DOUBLE_EQ(steps[0].timeNs + steps[1].timeNs, result.totalTimeNs);
  EXPECT_DOUBLE_EQ(steps[0].timeNs, 97'000 + 10 * 305.0);
  EXPECT_DOUBLE_EQ(steps[1].computeNs, 100'500);
  EXPECT_DOUBLE_EQ(steps[1].timeNs, 100'500 + 10 * kCopyNs);
  EXPECT_DOUBLE_EQ(steps[1].migrationNs, 10 * kCopyNs);
  EXPECT_EQ(steps[0].migratedBytes + steps[1].migratedBytes, 10U * 4096);
}

TEST(TiersimCopyQueue, SameSeedGivesTheSameResultWithQueuedCopies) {
  ModelTraceOptions options;
  options.steps = 3;
  options.scaleDivisor = 64;
  auto trace = generateModelTrace("bert-base", options);
  ASSERT_TRUE(trace.ok());
  for (const std::string name : {"hemem", "memtis"}) {
    SweepOptions sweep;
    sweep.base.migrationOverlap = 1;
    sweep.base.computeOverlap = 1;
    const auto* entry = findPolicy(name);
    ASSERT_NE(entry, nullptr);
    std::vector<SimResult> runs;
    for (int i = 0; i < 2; ++i) {
      auto config = makeSimConfig(sweep, *trace, 0.2, *entry);
      ASSERT_TRUE(config.ok());
      auto policy = entry->make(makePolicyContext(*trace, *config));
      auto result = simulate(*trace, *policy, *config, entry->offline);
      ASSERT_TRUE(result.ok());
      runs.push_back(*result);
    }
    EXPECT_GT(runs[0].promotedPages, 0U) << name;
    ASSERT_EQ(runs[0].steps.size(), runs[1].steps.size());
    for (size_t i = 0; i < runs[0].steps.size(); ++i) {
      EXPECT_EQ(runs[0].steps[i].timeNs, runs[1].steps[i].timeNs) << name << " step " << i;
      EXPECT_EQ(runs[0].steps[i].migratedBytes, runs[1].steps[i].migratedBytes) << name << " step " << i;
    }
    EXPECT_EQ(runs[0].promotedPages, runs[1].promotedPages) << name;
    EXPECT_EQ(runs[0].cancelledMoves, runs[1].cancelledMoves) << name;
    EXPECT_EQ(runs[0].queuedPagesAtEnd, runs[1].queuedPagesAtEnd) << name;
  }
}

}  // namespace
}  // namespace tt::tiersim
