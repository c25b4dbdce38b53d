// The in-kernel chunk counters (bpf/tt_chunk_counts.h) in the host's kernel, driven with synthetic
// events through BPF_PROG_TEST_RUN (chunk_count_probe.bpf.c) and drained by the daemon's own
// ChunkCountMap: per-page counts and tier bits through the staging block, a merge that inserts a
// new chunk, a merge into a chunk already in the hash, and what is still staged at the drain.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <vector>

#include "chunk_count_probe.skel.h"
#include "support/TestSupport.h"
#include "sys/bpf/ChunkCounts.h"
#include "tt_events.h"

namespace tt::sys::bpf {
namespace {

class ChunkCountsInKernel : public ::testing::Test {
 protected:
  void SetUp() override {
    TT_REQUIRE_ROOT();  // a fatal failure here: the test body does not run
    skel_ = chunk_count_probe__open_and_load();
    ASSERT_NE(skel_, nullptr) << "cannot load chunk_count_probe: errno " << errno;
  }
  void TearDown() override {
    if (skel_ != nullptr) chunk_count_probe__destroy(skel_);
  }
  // Counts `n` events of (tgid, kind, tier) at `addr` on CPU 0 (one staging block); returns the
  // events the program dropped.
  int count(uint32_t tgid, uint32_t kind, uint32_t tier, uint64_t addr, uint32_t n) {
    std::array<uint64_t, 4> args{tgid, kind, tier, addr};
    int dropped = 0;
    for (uint32_t i = 0; i < n; ++i) {
      LIBBPF_OPTS(bpf_test_run_opts, opts, .ctx_in = args.data(), .ctx_size_in = sizeof args,
                  .flags = BPF_F_TEST_RUN_ON_CPU, .cpu = 0);
      const int err = bpf_prog_test_run_opts(bpf_program__fd(skel_->progs.tt_count_event), &opts);
      EXPECT_EQ(err, 0) << "test run failed: errno " << errno;
      dropped += static_cast<int>(opts.retval);
    }
    return dropped;
  }
  std::vector<ChunkCounts> drain() {
    std::vector<ChunkCounts> out;
    auto n = map_.drain(chunkMapFdsOf(*skel_), out);
    EXPECT_TRUE(n.ok()) << n.error().message();
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.base < b.base; });
    return out;
  }
  chunk_count_probe* skel_ = nullptr;
  ChunkCountMap map_{"chunk_count_probe chunks"};
};

constexpr uint64_t kA = 0x7f0000000000, kB = kA + kChunkBytes;
constexpr uint32_t kTgid = 4242;

// Chunk A is staged, merged into the hash (a new chunk: inserted from the staging block) when B
// is counted, staged again and merged again (into the block now in the hash: counts added, tier
// bits or-ed), and staged a third time, which the drain collects from the staging block.
TEST_F(ChunkCountsInKernel, CountsAndTierBitsSurviveEveryMergePath) {
  ASSERT_EQ(count(kTgid, TT_KIND_LOAD, TT_TIER_FAST, kA + 3 * 4096, 2), 0);
  ASSERT_EQ(count(kTgid, TT_KIND_LOAD, TT_TIER_SLOW, kA + 3 * 4096, 1), 0);
  ASSERT_EQ(count(kTgid, TT_KIND_LOAD, TT_TIER_UNKNOWN, kA + 5 * 4096, 1), 0);
  ASSERT_EQ(count(kTgid, TT_KIND_LOAD, TT_TIER_REMOTE_RAM, kB + 100 * 4096, 4), 0);  // A inserted
  ASSERT_EQ(count(kTgid, TT_KIND_LOAD, TT_TIER_CACHE, kA + 3 * 4096, 1), 0);         // B inserted
  ASSERT_EQ(count(kTgid, TT_KIND_LOAD, TT_TIER_CACHE, kA + 511 * 4096, 6), 0);
  ASSERT_EQ(count(kTgid, TT_KIND_LOAD, TT_TIER_FAST, kB + 100 * 4096, 1), 0);        // A merged in
  ASSERT_EQ(count(kTgid, TT_KIND_LOAD, TT_TIER_SLOW, kA + 200 * 4096, 1), 0);        // B merged in
  const auto blocks = drain();  // A still staged
  ASSERT_EQ(blocks.size(), 2U);
  const ChunkCounts& a = blocks[0];
  const ChunkCounts& b = blocks[1];
  EXPECT_EQ(a.tgid, kTgid);
  EXPECT_EQ(a.kind, uint32_t{TT_KIND_LOAD});
  EXPECT_EQ(a.base, kA);
  EXPECT_EQ(a.counts[3], 4);
  EXPECT_TRUE(a.servedBy(3, TT_TIER_FAST));
  EXPECT_TRUE(a.servedBy(3, TT_TIER_SLOW));
  EXPECT_TRUE(a.servedBy(3, TT_TIER_CACHE));
  EXPECT_FALSE(a.servedBy(3, TT_TIER_REMOTE_RAM));
  EXPECT_EQ(a.counts[5], 1);
  for (uint32_t t = TT_TIER_CACHE; t <= TT_TIER_SLOW; ++t) EXPECT_FALSE(a.servedBy(5, t)) << "tier " << t;
  EXPECT_EQ(a.counts[511], 6);
  EXPECT_TRUE(a.servedBy(511, TT_TIER_CACHE));
  EXPECT_EQ(a.counts[200], 1);
  EXPECT_TRUE(a.servedBy(200, TT_TIER_SLOW));
  EXPECT_EQ(b.base, kB);
  EXPECT_EQ(b.counts[100], 5);
  EXPECT_TRUE(b.servedBy(100, TT_TIER_REMOTE_RAM));
  EXPECT_TRUE(b.servedBy(100, TT_TIER_FAST));
  size_t pages = 0;
  for (const auto& c : blocks) pages += static_cast<size_t>(std::count_if(c.counts.begin(), c.counts.end(), [](uint8_t n) { return n != 0; }));
  EXPECT_EQ(pages, 5U) << "counts on pages nothing was counted on";
  // Drained and zeroed: the next epoch starts empty, tier bits included.
  EXPECT_TRUE(drain().empty());
  ASSERT_EQ(count(kTgid, TT_KIND_LOAD, TT_TIER_UNKNOWN, kA + 3 * 4096, 1), 0);
  const auto next = drain();
  ASSERT_EQ(next.size(), 1U);
  EXPECT_EQ(next[0].counts[3], 1);
  EXPECT_FALSE(next[0].servedBy(3, TT_TIER_FAST));
  EXPECT_FALSE(next[0].servedBy(3, TT_TIER_CACHE));
}

// Another kind is another key: the staged block is merged and the kinds are counted apart.
TEST_F(ChunkCountsInKernel, KindsOfOneChunkAreCountedApart) {
  ASSERT_EQ(count(kTgid, TT_KIND_LOAD, TT_TIER_FAST, kA, 2), 0);
  ASSERT_EQ(count(kTgid, TT_KIND_STORE, TT_TIER_SLOW, kA, 3), 0);
  const auto blocks = drain();
  ASSERT_EQ(blocks.size(), 2U);
  const auto& load = blocks[0].kind == TT_KIND_LOAD ? blocks[0] : blocks[1];
  const auto& store = blocks[0].kind == TT_KIND_LOAD ? blocks[1] : blocks[0];
  EXPECT_EQ(load.counts[0], 2);
  EXPECT_TRUE(load.servedBy(0, TT_TIER_FAST));
  EXPECT_FALSE(load.servedBy(0, TT_TIER_SLOW));
  EXPECT_EQ(store.counts[0], 3);
  EXPECT_TRUE(store.servedBy(0, TT_TIER_SLOW));
  EXPECT_FALSE(store.servedBy(0, TT_TIER_FAST));
}

}  // namespace
}  // namespace tt::sys::bpf
