// heat_bench: the heat model's cost of taking in an epoch's evidence, per page, from records and
// from blocks (docs/benchmarks.md, "Hotness sources": both sampling paths hand their evidence to
// the heat model; the in-kernel path hands it blocks).
//
//   heat_bench ingest [ROUNDS [CHUNKS]]
//   heat_bench memory
//   heat_bench epoch [ROUNDS [CHUNKS]]
//   heat_bench top [ROUNDS [CHUNKS]]
//
// Each round builds one epoch of evidence for CHUNKS 2 MiB chunks of one process (default 256:
// 512 MiB) in two shapes, distinct pages (every page of every chunk sampled once) and a hot set
// (one page in 16, sampled 8 times), and times HeatModel::ingest of the same evidence as
// records and as blocks, each into its own model that has seen the previous rounds (the steady
// state: its pages are known). The order alternates between rounds. Prints medians in ns per
// page with evidence. One thread; nothing here needs root.
//
// `memory`: the heat model's heap (mallinfo2) after an epoch with evidence for every page of
// 1 GiB of one process (512 blocks), per GiB and as a share of it: the daemon's side of the
// tracking state (the BPF maps' side: sources_bench memory). Per GiB is the slope between 2 MiB
// and 1 GiB of evidence; per-page heat is told from the units by capping it at one chunk.
//
// `epoch`: what closing an epoch (HeatModel::advanceEpoch) costs when the evidence lies in large
// registered tensors: CHUNKS 2 MiB chunks (default 4096: 8 GiB, within the default
// max_tracked_pages of 4 Mi pages, so no page heat is forgotten) with evidence on every page,
// registered as 64 MiB tensors starting one page past a 2 MiB boundary, so every planner block
// straddles two chunks of page heat. Median thread CPU time per epoch over
// ROUNDS, with chunk_pages 512 (the default: each tensor's block weights are summed from its page
// heat) and with chunk_pages 16384 (one block per tensor: no block weights); the difference is the
// cost of the block weights.
//
// `top`: what one `tensortierctl top --pages 1000` costs the daemon: HeatModel::hottestPages(1000)
// over every process and for one of two, with evidence on every page of CHUNKS 2 MiB chunks of
// each of two processes (default 4096 each: 4 Mi pages, the default max_tracked_pages), counts
// varying per page. Median thread CPU time per call over ROUNDS (the time the request holds the
// epoch loop's run lock), and how far the calls raise the process's peak RSS (the request's
// transient memory; the model and evidence are built, and the peak taken, before).
#include <malloc.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "BenchStats.h"
#include "core/Types.h"
#include "heat/HeatModel.h"

namespace {

using tt::bench::median;
using tt::bench::threadCpuNs;

// The daemon's defaults (max_tracked_pages 4 Mi pages: room for every page here).
tensortier::v1::PolicyConfig config() { return {}; }

tt::EvidenceBatch epoch(uint64_t chunks, bool hotSet) {
  tt::EvidenceBatch batch;
  for (uint64_t c = 0; c < chunks; ++c) {
    tt::EvidenceBlock& b = batch.blocks.emplace_back();
    b.tgid = 4242;
    b.base = 0x7f0000000000ULL + c * tt::kBlockBytes;
    b.kind = tt::AccessKind::Fault;
    for (uint32_t i = 0; i < tt::kBlockPages; ++i) b.counts[i] = hotSet ? (i % 16 == 0 ? 8 : 0) : 1;
  }
  return batch;
}

int ingest(int rounds, uint64_t chunks) {
  std::printf("heat model ingest, %llu chunks of one process, %d rounds (median ns per page with evidence)\n",
              static_cast<unsigned long long>(chunks), rounds);
  std::printf("%-16s %12s %12s %8s\n", "evidence", "records", "blocks", "ratio");
  for (bool hotSet : {false, true}) {
    const tt::EvidenceBatch blocks = epoch(chunks, hotSet);
    tt::EvidenceBatch records;
    records.records = blocks.flattened();
    const double pages = static_cast<double>(records.records.size());
    tt::heat::HeatModel byRecords(config()), byBlocks(config());
    std::vector<double> r, b;
    uint64_t now = 1'000'000'000ULL;
    for (int round = 0; round < rounds + 1; ++round, now += 1'000'000'000ULL) {
      auto timed = [&](tt::heat::HeatModel& m, const tt::EvidenceBatch& e) {
        const uint64_t t0 = threadCpuNs();
        m.ingest(e, now);
        const uint64_t t = threadCpuNs() - t0;
        m.advanceEpoch(now);
        return static_cast<double>(t) / pages;
      };
      double tr = 0, tb = 0;
      if (round % 2 == 0) {
        tr = timed(byRecords, records);
        tb = timed(byBlocks, blocks);
      } else {
        tb = timed(byBlocks, blocks);
        tr = timed(byRecords, records);
      }
      if (round == 0) continue;  // the first epoch inserts every page: not the steady state
      r.push_back(tr);
      b.push_back(tb);
    }
    const double mr = median(r), mb = median(b);
    std::printf("%-16s %12.1f %12.1f %7.2fx\n", hotSet ? "hot set (1/16)" : "distinct pages", mr, mb, mb > 0 ? mr / mb : 0);
  }
  return 0;
}

// Heap bytes in use, brk and mmap alike: glibc serves a large block (the period detector's 512 KiB
// history) by mmap until a freed one raises its threshold, and uordblks alone would count it in
// one measurement and not in the next.
size_t heapInUse() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

struct Footprint {
  size_t bytes = 0;  // heap the model holds after the epoch, from before it was built
  uint64_t pages = 0;
  size_t units = 0;
};

Footprint footprint(const tensortier::v1::PolicyConfig& config, const tt::EvidenceBatch& batch) {
  const size_t before = heapInUse();
  tt::heat::HeatModel model(config);
  model.ingest(batch, 1'000'000'000ULL);
  model.advanceEpoch(1'000'000'000ULL);
  return {heapInUse() - before, model.snapshot().trackedPages, model.snapshot().units.size()};
}

int memory() {
  constexpr uint64_t kChunks = 512;  // 1 GiB
  const tt::EvidenceBatch full = epoch(kChunks, false);
  const tt::EvidenceBatch one = epoch(1, false);
  // The same epoch with per-page heat capped at the minimum (1024 pages: one chunk is kept) tells
  // the per-page heat from the units.
  tensortier::v1::PolicyConfig capped = config();
  capped.set_max_tracked_pages(1024);
  const Footprint f1 = footprint(config(), one);
  const Footprint fAll = footprint(config(), full);
  const Footprint fCapped = footprint(capped, full);
  // Per GiB: the slope between 2 MiB and 1 GiB of evidence, which leaves out what a process costs
  // once (its period detector, its clock) however much memory it has.
  const double perChunk = static_cast<double>(fAll.bytes - f1.bytes) / static_cast<double>(kChunks - 1);
  const double perGiB = perChunk * static_cast<double>(kChunks);
  const double pageHeat = static_cast<double>(fAll.bytes - fCapped.bytes) / static_cast<double>(kChunks - 1);
  const double mib = 1 << 20;
  std::printf("heat model heap (uordblks + hblkhd), one process, an epoch with evidence on every page:\n");
  std::printf("  2 MiB of evidence: %.2f MiB (%llu pages, %zu unit; mostly the process's fixed cost)\n",
              static_cast<double>(f1.bytes) / mib, static_cast<unsigned long long>(f1.pages), f1.units);
  std::printf("  1 GiB of evidence: %.2f MiB (%llu pages, %zu units)\n", static_cast<double>(fAll.bytes) / mib,
              static_cast<unsigned long long>(fAll.pages), fAll.units);
  std::printf("  per GiB: +%.2f MiB = %.3f%% of tracked (%.0f bytes per 2 MiB chunk)\n", perGiB / mib,
              100.0 * perGiB / static_cast<double>(1ULL << 30), perChunk);
  std::printf("    per-page heat:                %.2f MiB (%.0f bytes per chunk)\n", pageHeat * kChunks / mib, pageHeat);
  std::printf("    units, snapshot, hash buckets: %.2f MiB (%.0f bytes per unit)\n",
              (perChunk - pageHeat) * kChunks / mib, perChunk - pageHeat);
  return 0;
}

int epochClose(int rounds, uint64_t chunks) {
  constexpr uint64_t kTensorPages = 16384;  // 64 MiB
  const uint64_t base = 0x7f0000000000ULL;
  const uint64_t pages = chunks * tt::kBlockPages;
  std::printf("advanceEpoch, %llu chunks with evidence on every page in %llu tensors of 64 MiB, %d rounds\n",
              static_cast<unsigned long long>(chunks), static_cast<unsigned long long>(pages / kTensorPages), rounds);
  std::vector<double> perConfig[2];
  tt::heat::HeatModel models[2] = {tt::heat::HeatModel(config()), tt::heat::HeatModel([] {
                                     auto c = config();
                                     c.set_chunk_pages(kTensorPages);
                                     return c;
                                   }())};
  for (auto& model : models)
    for (uint64_t t = 0; t + kTensorPages <= pages; t += kTensorPages) {
      tt::RegionInfo r;
      r.id = t / kTensorPages + 1;
      r.tgid = 4242;
      r.start = base + tt::kBasePageSize + t * tt::kBasePageSize;
      r.length = kTensorPages * tt::kBasePageSize;
      if (!model.addRegion(r)) return 1;
    }
  const tt::EvidenceBatch batch = epoch(chunks, false);
  uint64_t weighted = 0;
  for (int round = 0; round < rounds; ++round) {
    const uint64_t now = 1'000'000'000ULL * static_cast<uint64_t>(round + 1);
    for (int k = 0; k < 2; ++k) {
      auto& model = models[round % 2 == 0 ? k : 1 - k];  // alternate which goes first
      model.ingest(batch, now);
      const uint64_t t0 = threadCpuNs();
      model.advanceEpoch(now);
      perConfig[round % 2 == 0 ? k : 1 - k].push_back(static_cast<double>(threadCpuNs() - t0) / 1e6);
    }
  }
  for (const auto& u : models[0].snapshot().units) weighted += u.blockWeights.empty() ? 0 : 1;
  const double with = median(perConfig[0]), without = median(perConfig[1]);
  std::printf("chunk_pages 512   (block weights for %llu tensors): %8.2f ms per epoch (median)\n",
              static_cast<unsigned long long>(weighted), with);
  std::printf("chunk_pages 16384 (one block per tensor, none):   %8.2f ms per epoch (median)\n", without);
  std::printf("block weights: %.2f ms per epoch, %.2f ns per page with heat\n", with - without,
              (with - without) * 1e6 / static_cast<double>(pages));
  return 0;
}

long maxRssKiB() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

int top(int rounds, uint64_t chunks) {
  tt::heat::HeatModel model(config());
  for (pid_t tgid : {4242, 4343}) {
    tt::EvidenceBatch batch = epoch(chunks, false);
    for (uint64_t c = 0; c < chunks; ++c) {
      tt::EvidenceBlock& b = batch.blocks[c];
      b.tgid = tgid;
      for (uint32_t i = 0; i < tt::kBlockPages; ++i)
        b.counts[i] = static_cast<uint8_t>(1 + (c * tt::kBlockPages + i) * 2654435761ULL % 251);
    }
    model.ingest(batch, 1'000'000'000ULL);
  }
  model.advanceEpoch(1'000'000'000ULL);
  std::printf("hottestPages(1000), 2 processes x %llu chunks with evidence on every page (%llu pages tracked), "
              "%d rounds\n",
              static_cast<unsigned long long>(chunks), static_cast<unsigned long long>(model.snapshot().trackedPages),
              rounds);
  const long rssBefore = maxRssKiB();
  size_t listed = 0;
  for (pid_t only : {0, 4343}) {
    std::vector<double> ms;
    for (int round = 0; round < rounds; ++round) {
      const uint64_t t0 = threadCpuNs();
      const auto pages = model.hottestPages(1000, 2'000'000'000ULL, only);
      ms.push_back(static_cast<double>(threadCpuNs() - t0) / 1e6);
      listed = pages.size();
    }
    std::printf("%-22s %8.2f ms per call (median), %zu pages listed\n", only == 0 ? "every process" : "one of two processes",
                median(ms), listed);
  }
  std::printf("peak RSS raised by the calls: %.1f MiB\n", static_cast<double>(maxRssKiB() - rssBefore) / 1024);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  // [ROUNDS [CHUNKS]] of `ingest` and `top`, with their defaults; 0 rounds when not positive.
  const auto roundsAndChunks = [&](int rounds, uint64_t chunks) -> std::pair<int, uint64_t> {
    rounds = argc > 2 ? std::atoi(argv[2]) : rounds;
    chunks = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : chunks;
    if (rounds < 1 || chunks < 1) {
      std::fprintf(stderr, "ROUNDS and CHUNKS must be positive\n");
      return {0, 0};
    }
    return {rounds, chunks};
  };
  if (mode == "ingest") {
    const auto [rounds, chunks] = roundsAndChunks(11, 256);
    return rounds == 0 ? 2 : ingest(rounds, chunks);
  }
  if (mode == "memory") return memory();
  if (mode == "epoch") {
    const auto [rounds, chunks] = roundsAndChunks(7, 4096);
    return rounds == 0 ? 2 : epochClose(rounds, chunks);
  }
  if (mode == "top") {
    const auto [rounds, chunks] = roundsAndChunks(5, 4096);
    return rounds == 0 ? 2 : top(rounds, chunks);
  }
  std::fprintf(stderr, "usage: heat_bench ingest [ROUNDS [CHUNKS]] | memory | epoch [ROUNDS [CHUNKS]] | top [ROUNDS [CHUNKS]]\n");
  return 2;
}
