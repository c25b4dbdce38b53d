// migrate_bench: throughput of the migration engine against the kernel's own bounds, moving a
// separate process's pages node 0 -> 1 -> 0 by pid. Run inside the VM (tests/e2e/vm/ttvm) as root:
//
//   migrate_bench [--sizes 64,512] [--kinds base,thp] [--per-page-sample-mib 16] [--rounds 3]
//
// Each round runs every method once, in turn, so host noise (TCG on a shared machine) spreads over
// all methods; the table shows each method's median round. Ratios are within one run.
// Methods: engine with 1 and 2 workers (rate limit set high enough not to bind, capacity guard on);
// one move_pages call over the whole range (the syscall's own upper bound); one call per page
// (measured on the first --per-page-sample-mib of the range); fixed 256-page (1 MiB) chunks of
// 4 KiB addresses; numactl's migratepages (migrate_pages(2) on the whole process).
// For THP buffers the single call and the per-page method pass one address per 2 MiB page.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "Workload.h"
#include "core/Parse.h"
#include "migrate/Engine.h"
#include "sys/Fs.h"
#include "sys/Pagemap.h"
#include "sys/PageMover.h"
#include "topology/Topology.h"

namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kHuge = 2ULL << 20;
constexpr uint64_t kMiB = 1ULL << 20;

struct Options {
  std::vector<uint64_t> sizesMiB = {64, 512};
  std::vector<std::string> kinds = {"base", "thp"};
  uint64_t perPageSampleMiB = 16;
  int rounds = 3;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(item);
  return out;
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

uint64_t pagesNotOn(pid_t pid, uint64_t start, uint64_t length, int node) {
  tt::sys::LinuxPageMover mover;
  std::vector<void*> pages(length / kPage);
  for (size_t i = 0; i < pages.size(); ++i) pages[i] = reinterpret_cast<void*>(start + i * kPage);
  std::vector<int> status(pages.size(), -1000);
  if (!mover.queryPages(pid, pages, status)) return pages.size();
  uint64_t wrong = 0;
  for (int s : status) wrong += s != node;
  return wrong;
}

// Moves `addrs` of `pid` to `node` in calls of `chunk` entries.
bool moveChunked(pid_t pid, const std::vector<void*>& addrs, int node, size_t chunk) {
  tt::sys::LinuxPageMover mover;
  std::vector<int> nodes(std::min(chunk, addrs.size()), node), status(nodes.size());
  for (size_t i = 0; i < addrs.size(); i += chunk) {
    const size_t n = std::min(chunk, addrs.size() - i);
    auto rc = mover.movePages(pid, std::span<void* const>(addrs.data() + i, n), std::span<const int>(nodes.data(), n),
                              std::span(status.data(), n), false);
    if (!rc) {
      std::cerr << rc.error().message() << "\n";
      return false;
    }
  }
  return true;
}

bool runMigratepages(pid_t pid, int from, int to) {
  const pid_t child = fork();
  if (child == 0) {
    const std::string p = std::to_string(pid), f = std::to_string(from), t = std::to_string(to);
    execlp("migratepages", "migratepages", p.c_str(), f.c_str(), t.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

struct Result {
  std::string method;
  double seconds = 0;   // both directions
  uint64_t bytes = 0;   // both directions
  uint64_t misplaced = 0;
  uint64_t hugeAfterMiB = 0;  // THP-backed MiB of the buffer after the method's round trip
  bool ok = true;
};

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--sizes") {
      opt.sizesMiB.clear();
      for (const auto& s : split(next())) opt.sizesMiB.push_back(std::strtoull(s.c_str(), nullptr, 10));
    } else if (a == "--kinds") {
      opt.kinds = split(next());
    } else if (a == "--rounds") {
      opt.rounds = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--per-page-sample-mib") {
      opt.perPageSampleMiB = std::strtoull(next().c_str(), nullptr, 10);
    } else {
      std::cerr << "usage: migrate_bench [--sizes 64,512] [--kinds base,thp] [--per-page-sample-mib 16] [--rounds 3]\n";
      return 2;
    }
  }
  tensortier::v1::TopologyConfig topoConfig;
  auto topo = tt::topology::discover(tt::sys::Fs("/sys"), topoConfig);
  if (!topo || !topo->isTiered()) {
    std::cerr << "needs a tiered two-node machine (run inside tests/e2e/vm/ttvm): "
              << (topo ? "one tier only" : topo.error().message()) << "\n";
    return 1;
  }
  tt::sys::LinuxPageMover mover;
  tt::migrate::SysfsFreeMemoryReader freeMemory(tt::sys::Fs("/sys"));

  std::cout << "kind  size_MiB  method            MB/s     x_single  x_per_page  misplaced  thp_MiB_after\n";
  for (const std::string& kind : opt.kinds) {
    const bool huge = kind == "thp";
    for (uint64_t sizeMiB : opt.sizesMiB) {
      const uint64_t bytes = sizeMiB * kMiB;
      tt::e2e::Workload w({huge ? 0 : bytes, huge ? bytes : 0, 0, 0});
      if (!w.started()) {
        std::cerr << w.error() << "\n";
        return 1;
      }
      const uint64_t start = huge ? w.hugeAddr() : w.baseAddr();
      const uint64_t entry = huge ? kHuge : kPage;
      std::vector<void*> entries, basePages;
      for (uint64_t a = start; a < start + bytes; a += entry) entries.push_back(reinterpret_cast<void*>(a));
      for (uint64_t a = start; a < start + bytes; a += kPage) basePages.push_back(reinterpret_cast<void*>(a));
      const uint64_t sampleBytes = std::min(bytes, opt.perPageSampleMiB * kMiB);
      std::vector<void*> sample(entries.begin(), entries.begin() + static_cast<long>(sampleBytes / entry));

      std::vector<std::vector<Result>> samples;  // [method][round]
      tt::sys::ProcHugePageProbe probe(tt::sys::Fs("/proc"));
      auto hugeMiB = [&] {
        auto r = probe.hugeRanges(w.pid(), start, bytes);
        uint64_t sum = 0;
        if (r)
          for (const auto& h : *r) sum += h.length;
        return sum / kMiB;
      };
      // Runs `move(node)` to node 1 and back to node 0, timing both and checking placement of
      // [start, start + moved).
      size_t method = 0;
      auto measure = [&](const std::string& name, uint64_t moved, const std::function<bool(int)>& move) {
        Result r{name};
        for (int node : {1, 0}) {
          const double t0 = now();
          r.ok = move(node) && r.ok;
          r.seconds += now() - t0;
          r.bytes += moved;
          r.misplaced += pagesNotOn(w.pid(), start, moved, node);
        }
        r.hugeAfterMiB = huge ? hugeMiB() : 0;
        if (samples.size() <= method) samples.resize(method + 1);
        samples[method++].push_back(r);
      };
      auto engineMove = [&](uint32_t workers) {
        tt::migrate::MigrationConfig c;
        c.set_workers(workers);
        c.set_promote_mbps(1000000);  // 1 TB/s: honoured, never binding
        c.set_demote_mbps(1000000);
        c.set_fast_node_min_free_mib(64);
        c.set_fast_node_min_free_percent(0);
        auto engine = std::make_shared<tt::migrate::Engine>(*topo, mover, freeMemory, c);
        return [engine, &w, start, bytes, gen = uint64_t{0}](int node) mutable {
          const auto report = engine->execute({++gen, {{w.pid(), start, bytes, node, 0, 0}}});
          const auto t = report.total();
          return t.moved + t.alreadyThere == bytes / kPage;
        };
      };
      const auto engine1 = engineMove(1), engine2 = engineMove(2);
      const uint64_t hugeAtStart = huge ? hugeMiB() : 0;
      for (int round = 0; round < opt.rounds; ++round) {
        method = 0;
        measure("single-call", bytes, [&](int node) { return moveChunked(w.pid(), entries, node, entries.size()); });
        measure("per-page", sampleBytes, [&](int node) { return moveChunked(w.pid(), sample, node, 1); });
        measure("chunks-256", bytes, [&](int node) { return moveChunked(w.pid(), basePages, node, 256); });
        measure("engine-1-worker", bytes, engine1);
        measure("engine-2-workers", bytes, engine2);
        measure("migratepages", bytes, [&](int node) { return runMigratepages(w.pid(), 1 - node, node); });
      }
      if (huge) std::cout << "# thp " << sizeMiB << " MiB: " << hugeAtStart << " MiB THP-backed at start\n";
      std::vector<Result> results;
      for (auto& runs : samples) {
        std::sort(runs.begin(), runs.end(), [](const Result& a, const Result& b) {
          return double(a.bytes) / a.seconds < double(b.bytes) / b.seconds;
        });
        results.push_back(runs[runs.size() / 2]);
      }
      double single = 0, perPage = 0;
      for (const Result& r : results) {
        if (r.method == "single-call") single = double(r.bytes) / r.seconds;
        if (r.method == "per-page") perPage = double(r.bytes) / r.seconds;
      }
      for (const Result& r : results) {
        const double rate = double(r.bytes) / r.seconds;
        char line[200];
        std::snprintf(line, sizeof line, "%-5s %-9llu %-17s %-8.1f %-9.2f %-11.1f %-10llu %llu%s", kind.c_str(),
                      static_cast<unsigned long long>(sizeMiB), r.method.c_str(), rate / 1e6, rate / single,
                      rate / perPage, static_cast<unsigned long long>(r.misplaced),
                      static_cast<unsigned long long>(r.hugeAfterMiB), r.ok ? "" : "  (a call failed)");
        std::cout << line << std::endl;
      }
    }
  }
  return 0;
}
