// planner_bench: what one plan costs the daemon's epoch loop (docs/benchmarks.md, "Heat model and
// planner": the planner's CPU time per plan against the registered memory it plans over).
//
//   planner_bench plan [ROUNDS [GIB]]
//
// GIB GiB (default 8) of one process registered as 64 MiB tensors on a machine with one DRAM node
// and one slow node, the fast budget 20% of the footprint, the daemon's default PolicyConfig
// (2 MiB blocks). Each epoch a quarter of the tensors has evidence on every page (64 counts each),
// the quarter moving on every epoch, so a four-epoch "step" repeats as in training, and the
// planner has moves to make every plan. The placement is the bench's own page table: every page
// starts on the slow node and each plan's moves land at once, before the next epoch.
//
// Per plan: thread CPU time of Planner::plan without the time spent in its residency queries
// (which the daemon answers with move_pages(2) in the kernel, measured apart: "The planner's
// residency queries"), of the queries themselves here (reading the bench's page table), and of
// HeatModel::advanceEpoch (closing the epoch the plan reads). Medians over ROUNDS epochs after
// 8 warm-up epochs, each figure's own, and the medians of the blocks, moves and bytes per plan. One thread;
// nothing here needs root.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "BenchStats.h"
#include "core/Types.h"
#include "heat/HeatModel.h"
#include "policy/Planner.h"
#include "topology/Topology.h"

namespace {

constexpr pid_t kTgid = 4242;
constexpr uint64_t kBase = 0x7f0000000000ULL;  // 2 MiB aligned
constexpr uint64_t kTensorPages = 16384;       // 64 MiB
constexpr uint8_t kCountsPerPage = 64;         // accesses per page and epoch in the evidence

using tt::bench::median;
using tt::bench::threadCpuNs;

// One byte per registered page: 1 on the fast node, 0 on the slow one. Counts the time spent
// answering, which plan() includes and the bench takes out.
class PageTable final : public tt::policy::PlacementQuery {
 public:
  explicit PageTable(uint64_t pages) : fast_(pages, 0) {}
  tt::policy::Residency residency(pid_t tgid, uint64_t start, uint64_t length) const override {
    const uint64_t t0 = threadCpuNs();
    tt::policy::Residency r;
    if (tgid == kTgid && start >= kBase) {
      const uint64_t first = std::min<uint64_t>((start - kBase) / tt::kBasePageSize, fast_.size());
      const uint64_t last = std::min<uint64_t>(first + length / tt::kBasePageSize, fast_.size());
      r.fastPages = static_cast<uint64_t>(std::count(fast_.begin() + static_cast<std::ptrdiff_t>(first),
                                                     fast_.begin() + static_cast<std::ptrdiff_t>(last), 1));
      r.slowPages = (last - first) - r.fastPages;
    }
    queryNs_ += threadCpuNs() - t0;
    return r;
  }
  void apply(const tt::MigrationPlan& plan) {
    for (const tt::MoveRequest& m : plan.moves) {
      const uint64_t first = (m.start - kBase) / tt::kBasePageSize;
      const uint64_t last = std::min<uint64_t>(first + m.length / tt::kBasePageSize, fast_.size());
      std::fill(fast_.begin() + static_cast<std::ptrdiff_t>(first), fast_.begin() + static_cast<std::ptrdiff_t>(last),
                m.targetNode == 0 ? 1 : 0);
    }
  }
  uint64_t takeQueryNs() const { return std::exchange(queryNs_, 0); }

 private:
  std::vector<uint8_t> fast_;
  mutable uint64_t queryNs_ = 0;
};

tt::topology::Topology machine(uint64_t fastBytes, uint64_t slowBytes) {
  tt::topology::Topology t;
  tt::topology::NumaNode dram;
  dram.id = 0;
  dram.cpus = {0, 1};
  dram.memory = {fastBytes, fastBytes};
  dram.distances = {10, 20};
  dram.tier = tt::topology::Tier::Fast;
  tt::topology::NumaNode slow;
  slow.id = 1;
  slow.memory = {slowBytes, slowBytes};
  slow.distances = {20, 10};
  slow.tier = tt::topology::Tier::Slow;
  t.nodes = {dram, slow};
  return t;
}

// Evidence on every page of the tensors of `quarter` (0-3) of `tensors`.
tt::EvidenceBatch epochEvidence(uint64_t tensors, uint64_t quarter) {
  tt::EvidenceBatch batch;
  const uint64_t chunksPerTensor = kTensorPages / tt::kBlockPages;
  for (uint64_t t = 0; t < tensors; ++t) {
    if (t % 4 != quarter) continue;
    for (uint64_t c = 0; c < chunksPerTensor; ++c) {
      tt::EvidenceBlock& b = batch.blocks.emplace_back();
      b.tgid = kTgid;
      b.base = kBase + (t * chunksPerTensor + c) * tt::kBlockBytes;
      b.kind = tt::AccessKind::Load;
      for (uint32_t i = 0; i < tt::kBlockPages; ++i) b.counts[i] = kCountsPerPage;
    }
  }
  return batch;
}

int plan(int rounds, uint64_t gib) {
  const uint64_t bytes = gib << 30;
  const uint64_t tensors = bytes / (kTensorPages * tt::kBasePageSize);
  const uint64_t fastBytes = bytes / 5;
  std::printf("Planner::plan, %llu GiB in %llu tensors of 64 MiB, fast budget 20%% (%llu MiB), %d rounds after 8 warm-up\n",
              static_cast<unsigned long long>(gib), static_cast<unsigned long long>(tensors),
              static_cast<unsigned long long>(fastBytes >> 20), rounds);
  tensortier::v1::PolicyConfig config;  // the daemon's defaults
  tt::heat::HeatModel heat(config);
  for (uint64_t t = 0; t < tensors; ++t) {
    tt::RegionInfo r;
    r.id = t + 1;
    r.tgid = kTgid;
    r.start = kBase + t * kTensorPages * tt::kBasePageSize;
    r.length = kTensorPages * tt::kBasePageSize;
    if (!heat.addRegion(r)) {
      std::fprintf(stderr, "the heat model refused tensor %llu\n", static_cast<unsigned long long>(t));
      return 1;
    }
  }
  std::vector<tt::EvidenceBatch> quarters;
  for (uint64_t q = 0; q < 4; ++q) quarters.push_back(epochEvidence(tensors, q));
  PageTable table(bytes / tt::kBasePageSize);
  // Slow memory as large as the footprint; the fast node's capacity is the budget after the
  // planner's reserve, which fastBudgetBytes replaces with the figure asked for.
  const tt::topology::Topology topology = machine(bytes, bytes);
  tt::policy::Planner planner(config);
  tt::policy::PlanContext context;
  context.fastBudgetBytes = fastBytes;
  context.processes.push_back({kTgid, 0, 0});
  std::vector<double> planMs, queryMs, epochMs, moves, movedMiB, blocks;
  const uint64_t kEpochNs = 1'000'000'000ULL;
  for (int e = 0; e < rounds + 8; ++e) {
    const uint64_t now = kEpochNs * static_cast<uint64_t>(e + 1);
    heat.ingest(quarters[static_cast<size_t>(e) % 4], now);
    uint64_t t0 = threadCpuNs();
    heat.advanceEpoch(now);
    const uint64_t epochNs = threadCpuNs() - t0;
    (void)table.takeQueryNs();
    t0 = threadCpuNs();
    const tt::MigrationPlan p = planner.plan(heat.snapshot(), table, topology, context);
    const uint64_t planNs = threadCpuNs() - t0;
    const uint64_t queryNs = table.takeQueryNs();
    table.apply(p);
    if (e < 8) continue;
    uint64_t moved = 0;
    for (const auto& m : p.moves) moved += m.length;
    planMs.push_back(static_cast<double>(planNs - std::min(planNs, queryNs)) / 1e6);
    queryMs.push_back(static_cast<double>(queryNs) / 1e6);
    epochMs.push_back(static_cast<double>(epochNs) / 1e6);
    moves.push_back(static_cast<double>(p.moves.size()));
    movedMiB.push_back(static_cast<double>(moved) / (1 << 20));
    blocks.push_back(static_cast<double>(planner.lastStats().blocks));
  }
  std::printf("plan (without queries): %8.2f ms median, min %.2f, max %.2f\n", median(planMs),
              *std::min_element(planMs.begin(), planMs.end()), *std::max_element(planMs.begin(), planMs.end()));
  std::printf("residency queries:      %8.2f ms median (the bench's page table; the daemon asks the kernel)\n",
              median(queryMs));
  std::printf("advanceEpoch:           %8.2f ms median\n", median(epochMs));
  std::printf("per plan (medians): %.0f blocks, %.0f moves, %.1f MiB moved\n", median(blocks), median(moves),
              median(movedMiB));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "plan") {
    const int rounds = argc > 2 ? std::atoi(argv[2]) : 21;
    const long long gib = argc > 3 ? std::atoll(argv[3]) : 8;
    if (rounds <= 0 || gib <= 0 || gib > 1024) {
      std::fprintf(stderr, "planner_bench plan: ROUNDS > 0, 0 < GIB <= 1024\n");
      return 2;
    }
    return plan(rounds, static_cast<uint64_t>(gib));
  }
  std::fprintf(stderr, "usage: planner_bench plan [ROUNDS [GIB]]\n");
  return 2;
}
