// Hotness-source benchmark (run as root; results in docs/benchmarks.md, "Hotness sources").
//
//   sources_bench cost       per-sample cost, user-space ring path vs in-kernel BPF aggregation,
//                            same software page-fault event, same fault-heavy workload
//   sources_bench slowdown [PAIRS [EPOCH_MS [breakdown]]]
//                            a memory-bound workload (first touch, then passes) untracked vs
//                            tracked by the default source set: PAIRS (15) alternating pairs,
//                            median per-pair ratio and spread of wall and rusage CPU time;
//                            epoch 1000 ms as the daemon's default; `breakdown` adds the
//                            software-faults-only and fault-trace-only sets
//   sources_bench slowdown-periods [PAIRS]   software faults alone at fixed periods
//   sources_bench period-latency   time of one sample-period change on every per-CPU event
//   sources_bench memory     tracking state per GiB of tracked memory (1 GiB touched in one epoch)
//   sources_bench all
//   sources_bench --record-fixture PATH   records a real software page-fault stream as hex
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "config/Config.h"
#include "core/Log.h"
#include "sources/PerfDecode.h"
#include "sources/SamplingSource.h"
#include "sources/SourceSet.h"
#include "sys/bpf/PerfSampleAgg.h"
#include "sys/perf/PerfEvent.h"

namespace {

using namespace tt;
using namespace tt::sources;

double nowSec() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A workload in a child that waits for a go byte, runs, and sends back its elapsed seconds.
class Workload {
 public:
  enum class Kind { Faults, HotFaults, TouchOnce };
  Workload(Kind kind, uint64_t bytes, int rounds) {
    int down[2], up[2];
    if (::pipe(down) != 0 || ::pipe(up) != 0) std::abort();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      char go;
      if (::read(down[0], &go, 1) != 1) ::_exit(1);
      const double t0 = nowSec();
      const uint64_t pages = bytes / 4096;
      if (kind == Kind::Faults || kind == Kind::TouchOnce) {
        for (int r = 0; r < rounds; ++r) {
          auto* p = static_cast<volatile char*>(
              ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
          ::madvise(const_cast<char*>(p), bytes, MADV_NOHUGEPAGE);
          for (uint64_t i = 0; i < pages; ++i) p[i * 4096] = 1;
          if (kind == Kind::Faults) ::munmap(const_cast<char*>(p), bytes);
        }
      } else if (kind == Kind::HotFaults) {
        // The same few pages fault again and again (zapped after each pass): samples concentrate
        // on a hot set, as PMU samples do on hot pages.
        auto* p = static_cast<volatile char*>(
            ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
        ::madvise(const_cast<char*>(p), bytes, MADV_NOHUGEPAGE);
        for (int r = 0; r < rounds; ++r) {
          for (uint64_t i = 0; i < pages; ++i) p[i * 4096] = 1;
          ::madvise(const_cast<char*>(p), bytes, MADV_DONTNEED);
        }
      }
      const double dt = nowSec() - t0;
      if (::write(up[1], &dt, sizeof dt) != sizeof dt) ::_exit(1);
      if (kind == Kind::TouchOnce) ::pause();  // keep the memory mapped until killed
      ::_exit(0);
    }
    ::close(down[0]);
    ::close(up[1]);
    go_ = down[1];
    done_ = up[0];
  }
  ~Workload() {
    if (!reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::close(go_);
    ::close(done_);
  }
  pid_t pid() const { return pid_; }
  // Waits for the child to exit; its user+system CPU seconds (BPF programs run in it, on its faults).
  double reapCpuSeconds() {
    rusage ru{};
    int status = 0;
    if (::wait4(pid_, &status, 0, &ru) != pid_) return -1;
    reaped_ = true;
    return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  }
  void start() {
    const char g = 'g';
    if (::write(go_, &g, 1) != 1) std::abort();
  }
  // Non-blocking: the elapsed seconds once the work is done.
  bool finished(double& seconds) {
    pollfd p{done_, POLLIN, 0};
    if (::poll(&p, 1, 0) != 1) return false;
    return ::read(done_, &seconds, sizeof seconds) == sizeof seconds;
  }
  double wait() {
    double s = 0;
    if (::read(done_, &s, sizeof s) != sizeof s) return -1;
    return s;
  }

 private:
  pid_t pid_ = -1;
  int go_ = -1, done_ = -1;
  bool reaped_ = false;
};

std::unique_ptr<SamplingSource> softwareSource(Aggregation a, uint32_t ringPages) {
  SamplingOptions o;
  o.name = a == Aggregation::InKernel ? "in-kernel" : "user-ring";
  o.events = {softwareFaultAttr(1)};
  o.eventDescription = "sw page faults";
  o.aggregation = a;
  o.ringPages = ringPages;
  auto s = std::make_unique<SamplingSource>(o, sys::Fs("/sys"));
  s->open();
  return s;
}

struct CostResult {
  double workloadSec = 0;
  uint64_t samples = 0, lost = 0;
  uint64_t consumerNs = 0, bpfNs = 0;
  size_t evidence = 0;
  double childCpuSec = 0;
};

// Runs the fault workload tracked by `source` (nullptr: untracked), collecting every `epochMs`.
CostResult runTracked(SamplingSource* source, Workload::Kind kind, uint64_t bytes, int rounds, int epochMs) {
  Workload w(kind, bytes, rounds);
  CostResult r;
  if (source) (void)source->addProcess(w.pid());
  std::vector<AccessEvidence> out;
  if (source) (void)source->collect(out);
  out.clear();
  const uint64_t bpf0 = source ? source->bpfRunTimeNs() : 0;
  const uint64_t samples0 = source ? source->counters().samples : 0;
  uint64_t cpu = 0;
  w.start();
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(epochMs));
    const uint64_t c0 = sys::perf::threadCpuNs();
    if (source) (void)source->collect(out);
    cpu += sys::perf::threadCpuNs() - c0;
    r.evidence += out.size();
    out.clear();
    if (w.finished(r.workloadSec)) break;
  }
  if (source) {
    const uint64_t c0 = sys::perf::threadCpuNs();
    (void)source->collect(out);
    cpu += sys::perf::threadCpuNs() - c0;
    r.evidence += out.size();
    r.samples = source->counters().samples - samples0;
    r.lost = source->counters().lost;
    r.bpfNs = source->bpfRunTimeNs() - bpf0;
    (void)source->removeProcess(w.pid());
  }
  r.consumerNs = cpu;
  r.childCpuSec = w.reapCpuSeconds();
  return r;
}

void costFor(const char* title, Workload::Kind kind, uint64_t bytes, int rounds) {
  const auto base = runTracked(nullptr, kind, bytes, rounds, 10);
  auto ring = softwareSource(Aggregation::UserRing, 1024);
  // Each path collects as often as it must: the ring path before its rings fill (10 ms), the
  // in-kernel path once per daemon epoch (1 s): not waking per batch of samples is its point.
  const auto r = runTracked(ring.get(), kind, bytes, rounds, 10);
  ring.reset();
  auto kern = softwareSource(Aggregation::InKernel, 0);
  const auto k = runTracked(kern.get(), kind, bytes, rounds, 1000);
  auto perSample = [](const CostResult& c) {
    return c.samples ? static_cast<double>(c.consumerNs + c.bpfNs) / static_cast<double>(c.samples) : 0.0;
  };
  std::printf("\n%s\n", title);
  std::printf("%-10s %8s %10s %6s %11s %8s %10s %10s %14s\n", "path", "work s", "samples", "lost", "consumer ms",
              "bpf ms", "evidence", "ns/sample", "samples/s/core");
  auto row = [&](const char* name, const CostResult& c) {
    const double ns = perSample(c);
    std::printf("%-10s %8.3f %10llu %6llu %11.2f %8.2f %10zu %10.1f %14.0f\n", name, c.workloadSec,
                static_cast<unsigned long long>(c.samples), static_cast<unsigned long long>(c.lost),
                static_cast<double>(c.consumerNs) / 1e6, static_cast<double>(c.bpfNs) / 1e6, c.evidence, ns,
                ns > 0 ? 1e9 / ns : 0.0);
  };
  row("untracked", base);
  row("user-ring", r);
  row("in-kernel", k);
  if (perSample(k) > 0)
    std::printf("user-ring / in-kernel cost per sample (daemon CPU + BPF run time): %.2fx\n", perSample(r) / perSample(k));
  if (r.samples) std::printf("user-ring daemon CPU per sample without BPF: %.1f ns; in-kernel daemon CPU per sample: %.1f ns\n",
              static_cast<double>(r.consumerNs) / static_cast<double>(r.samples),
              k.samples ? static_cast<double>(k.consumerNs) / static_cast<double>(k.samples) : 0.0);
  std::printf("workload runtime ratio vs untracked: user-ring %.3f, in-kernel %.3f\n", r.workloadSec / base.workloadSec,
              k.workloadSec / base.workloadSec);
  // End to end: extra CPU of the workload (the kernel's per-sample work runs in its context: perf
  // ring output or the BPF program) plus the daemon's CPU, per sample.
  auto total = [&](const CostResult& c) {
    return c.samples ? ((c.childCpuSec - base.childCpuSec) * 1e9 + static_cast<double>(c.consumerNs)) /
                           static_cast<double>(c.samples)
                     : 0.0;
  };
  std::printf("workload CPU s: untracked %.3f, user-ring %.3f, in-kernel %.3f; end-to-end extra CPU per sample "
              "(workload + daemon): user-ring %.0f ns, in-kernel %.0f ns\n",
              base.childCpuSec, r.childCpuSec, k.childCpuSec, total(r), total(k));
}

void cost() {
  auto stats = sys::bpf::enableBpfRunTimeStats();
  if (!stats) std::cout << "warning: " << stats.error().message() << " (BPF run time not counted)\n";
  std::printf("software page-fault event, period 1, system-wide per CPU; user-ring collects every 10 ms, in-kernel every 1 s\n");
  costFor("hot set: 256 pages re-faulted 2560 times (MADV_DONTNEED between passes) = 655360 faults",
          Workload::Kind::HotFaults, 1ULL << 20, 2560);
  costFor("distinct pages: 40 x 64 MiB mmap/touch/munmap = 655360 faults (worst case for aggregation)",
          Workload::Kind::Faults, 64ULL << 20, 40);
  if (stats) ::close(*stats);
}

// --- slowdown: a memory-bound workload run untracked (no sources open at all) and tracked by
// the default source set, alternately, many times ---

double rusageCpuSec() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// Wall and CPU (rusage user + sys: the kernel's per-sample work runs in the workload's context
// and lands in its system time) of the two phases of one run.
struct PhaseTimes {
  double wall = 0, cpu = 0;
};
struct StreamTimes {
  PhaseTimes touch, passes;
};

// A child that waits for a go byte, first-touches `bytes` (one fault per 4 KiB page) and then
// makes `rounds` memory-bound passes, sending each phase's PhaseTimes when it ends.
class StreamChild {
 public:
  StreamChild(uint64_t bytes, int rounds) {
    int down[2], up[2];
    if (::pipe(down) != 0 || ::pipe(up) != 0) std::abort();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      char go;
      if (::read(down[0], &go, 1) != 1) ::_exit(1);
      const double t0 = nowSec(), c0 = rusageCpuSec();
      auto* p = static_cast<uint64_t*>(::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
      ::madvise(p, bytes, MADV_NOHUGEPAGE);
      const uint64_t words = bytes / 8;
      for (uint64_t i = 0; i < words; i += 512) p[i] = i;
      const double t1 = nowSec(), c1 = rusageCpuSec();
      const PhaseTimes touch{t1 - t0, c1 - c0};
      if (::write(up[1], &touch, sizeof touch) != sizeof touch) ::_exit(1);
      uint64_t sum = 0;
      for (int r = 0; r < rounds; ++r)
        for (uint64_t i = 0; i < words; i += 8) {  // one word per cache line: memory bound
          sum += p[i];
          p[i] = sum;
        }
      const PhaseTimes passes{nowSec() - t1, rusageCpuSec() - c1};
      if (::write(up[1], &passes, sizeof passes) != sizeof passes) ::_exit(1);
      ::_exit(0);
    }
    ::close(down[0]);
    ::close(up[1]);
    go_ = down[1];
    done_ = up[0];
  }
  ~StreamChild() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    ::close(go_);
    ::close(done_);
  }
  pid_t pid() const { return pid_; }
  void start() {
    const char g = 'g';
    if (::write(go_, &g, 1) != 1) std::abort();
  }
  // Waits up to timeoutMs for the next phase's times.
  bool next(PhaseTimes& t, int timeoutMs) {
    pollfd p{done_, POLLIN, 0};
    if (::poll(&p, 1, timeoutMs) != 1) return false;
    return ::read(done_, &t, sizeof t) == sizeof t;
  }

 private:
  pid_t pid_ = -1;
  int go_ = -1, done_ = -1;
};

constexpr uint64_t kStreamBytes = 256ULL << 20;
constexpr int kStreamRounds = 100;  // ~1 s of passes: long enough to average scheduling noise

struct TrackedInfo {
  uint64_t period = 0, lowest = 0;
  double sampleCostNs = 0, eventCountNs = 0, eventCostNs = 0, costPercent = 0;
  bool calibrated = false;
  size_t evidence = 0;
};

// One run; `set` null: untracked. Collects every `epochMs` like the daemon's epoch loop.
StreamTimes streamRun(SourceSet* set, int epochMs, TrackedInfo* info) {
  StreamChild w(kStreamBytes, kStreamRounds);
  if (set) (void)set->addProcess(w.pid());
  std::vector<AccessEvidence> out;
  StreamTimes t;
  w.start();
  int got = 0;
  auto nextEpoch = std::chrono::steady_clock::now() + std::chrono::milliseconds(epochMs);
  while (got < 2) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(nextEpoch - std::chrono::steady_clock::now());
    PhaseTimes p;
    if (w.next(p, static_cast<int>(std::max<int64_t>(0, left.count())))) {
      (got++ == 0 ? t.touch : t.passes) = p;
      continue;
    }
    nextEpoch += std::chrono::milliseconds(epochMs);
    if (set) {
      (void)set->collect(out);
      if (info) info->evidence += out.size();
      out.clear();
    }
  }
  if (set && info) {
    if (auto* sw = dynamic_cast<SamplingSource*>(set->find("software-faults"))) {
      info->period = sw->period();
      info->lowest = sw->lowestPeriod();
      info->sampleCostNs = sw->sampleCostNs();
      info->eventCostNs = sw->eventCostNs();
      info->eventCountNs = sw->eventCountNs();
      info->calibrated = sw->sampleCostCalibrated();
      info->costPercent = sw->counters().costPercent;
    }
    (void)set->removeProcess(w.pid());
  }
  return t;
}

struct Spread {
  double median = 0, q1 = 0, q3 = 0, min = 0, max = 0;
};

Spread spreadOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto q = [&](double f) {  // linear interpolation between order statistics
    const double pos = f * static_cast<double>(v.size() - 1);
    const size_t i = static_cast<size_t>(pos);
    const double frac = pos - static_cast<double>(i);
    return i + 1 < v.size() ? v[i] * (1 - frac) + v[i + 1] * frac : v[i];
  };
  return {q(0.5), q(0.25), q(0.75), v.front(), v.back()};
}

void printSpread(const char* what, const std::vector<double>& ratios) {
  const Spread s = spreadOf(ratios);
  auto pct = [](double r) { return 100 * (r - 1); };
  std::printf("  %-22s median %+6.2f%%  IQR [%+6.2f%%, %+6.2f%%]  min/max [%+6.2f%%, %+6.2f%%]\n", what, pct(s.median),
              pct(s.q1), pct(s.q3), pct(s.min), pct(s.max));
}

// `pairs` untracked/tracked pairs, the order alternating (untracked first in even pairs), so
// drifting load on the shared machine hits both sides alike. Untracked = no source open (the
// sources' perf events are system-wide: with them open, an "untracked" run would pay the overflow
// work too). Tracked = the set opened (and calibrated) before the run, as a daemon that was
// already running when the workload started, closed after it. Per pair: tracked / untracked.
void slowdownWith(const char* name, const tensortier::v1::SourcesConfig& config, int pairs, int epochMs) {
  topology::Topology topo;
  std::vector<double> touchWall, touchCpu, passWall, passCpu;
  std::printf("\n%s: %d pairs, epoch %d ms; 256 MiB first touch (65536 faults) then %d memory-bound passes\n", name,
              pairs, epochMs, kStreamRounds);
  std::printf("%4s %5s %21s %21s %21s %21s %8s %8s %9s %9s %9s\n", "pair", "first", "touch wall s (u/t)",
              "touch cpu s (u/t)", "passes wall s (u/t)", "passes cpu s (u/t)", "period", "lowest", "sample ns",
              "count ns", "fault ns");
  for (int i = 0; i < pairs; ++i) {
    StreamTimes u, t;
    TrackedInfo info;
    auto tracked = [&] {
      auto set = SourceSet::open(config, topo);
      t = streamRun(set.get(), epochMs, &info);
    };
    if (i % 2 == 0) {
      u = streamRun(nullptr, epochMs, nullptr);
      tracked();
    } else {
      tracked();
      u = streamRun(nullptr, epochMs, nullptr);
    }
    touchWall.push_back(t.touch.wall / u.touch.wall);
    touchCpu.push_back(t.touch.cpu / u.touch.cpu);
    passWall.push_back(t.passes.wall / u.passes.wall);
    passCpu.push_back(t.passes.cpu / u.passes.cpu);
    std::printf("%4d %5s %10.3f/%-10.3f %10.3f/%-10.3f %10.3f/%-10.3f %10.3f/%-10.3f %8llu %8llu %9.0f %9.0f %9.0f%s\n", i,
                i % 2 == 0 ? "untr" : "track", u.touch.wall, t.touch.wall, u.touch.cpu, t.touch.cpu, u.passes.wall,
                t.passes.wall, u.passes.cpu, t.passes.cpu, static_cast<unsigned long long>(info.period),
                static_cast<unsigned long long>(info.lowest), info.sampleCostNs, info.eventCountNs, info.eventCostNs,
                info.calibrated || info.period == 0 ? "" : " (configured cost)");
  }
  std::printf("%s: tracked vs untracked, per-pair ratio over %d pairs:\n", name, pairs);
  printSpread("first touch, wall", touchWall);
  printSpread("first touch, CPU", touchCpu);
  printSpread("passes, wall", passWall);
  printSpread("passes, CPU", passCpu);
}

// Software faults alone at fixed periods (no adaptation): how the first-touch slowdown falls with
// the period, to check the cost model (per-fault counting + per-sample cost / period).
void slowdownPeriods(int pairs, int epochMs) {
  for (uint64_t period : {1ULL, 4ULL, 16ULL, 64ULL, 256ULL, 1000000ULL}) {
    tensortier::v1::SourcesConfig c;
    c.mutable_fault_trace()->set_enabled(false);
    c.mutable_software_faults()->set_period(period);
    c.mutable_software_faults()->set_max_period(period);
    const std::string name = "software faults, fixed period " + std::to_string(period);
    slowdownWith(name.c_str(), c, pairs, epochMs);
  }
}

// How long a period change takes (PERF_EVENT_IOC_PERIOD on every per-CPU event, through the
// live-tuning path): the controller's reaction is bounded by the epoch if this is small.
void periodLatency() {
  auto s = softwareSource(Aggregation::InKernel, 0);
  std::vector<double> us;
  for (int k = 0; k < 201; ++k) {
    SamplingLimits l;
    l.minPeriod = l.maxPeriod = k % 2 ? 1 : 65536;
    const double t0 = nowSec();
    if (auto r = s->setSamplingLimits(l); !r) {
      std::cerr << r.error().message() << "\n";
      return;
    }
    us.push_back((nowSec() - t0) * 1e6);
  }
  const Spread sp = spreadOf(us);
  std::printf("period change on %llu per-CPU events (setSamplingLimits -> PERF_EVENT_IOC_PERIOD each), 201 changes: "
              "median %.1f us, IQR [%.1f, %.1f] us, max %.1f us\n",
              static_cast<unsigned long long>(s->status().available ? sys::perf::onlineCpus(sys::Fs("/sys"))->size() : 0),
              sp.median, sp.q1, sp.q3, sp.max);
}

void slowdown(int pairs, int epochMs, bool breakdown) {
  tensortier::v1::SourcesConfig defaults;  // what the daemon runs with: pmu, software faults, fault trace
  slowdownWith("default sources", defaults, pairs, epochMs);
  if (!breakdown) return;
  tensortier::v1::SourcesConfig sw = defaults;
  sw.mutable_fault_trace()->set_enabled(false);
  slowdownWith("software faults only", sw, pairs, epochMs);
  tensortier::v1::SourcesConfig ft = defaults;
  ft.mutable_software_faults()->set_enabled(false);
  slowdownWith("fault trace only", ft, pairs, epochMs);
}

uint64_t rssBytes() {
  std::ifstream in("/proc/self/status");
  std::string key;
  uint64_t kb = 0;
  while (in >> key)
    if (key == "VmRSS:") {
      in >> kb;
      break;
    }
  return kb * 1024;
}

void memory() {
  constexpr uint64_t kBytes = 1ULL << 30;
  const uint64_t rss0 = rssBytes();
  auto kern = softwareSource(Aggregation::InKernel, 0);
  Workload w(Workload::Kind::TouchOnce, kBytes, 1);
  (void)kern->addProcess(w.pid());
  std::vector<AccessEvidence> out;
  w.start();
  (void)w.wait();
  auto mem = kern->agg()->mapMemoryBytes();  // before the drain: every page of 1 GiB sampled in one epoch
  (void)kern->collect(out);
  const uint64_t rss1 = rssBytes();
  std::printf("1 GiB touched in one epoch (262144 pages, all sampled): BPF map memory %.2f MiB = %.3f%% of tracked; "
              "evidence vector %zu records = %.2f MiB; daemon RSS growth %.2f MiB\n",
              mem ? static_cast<double>(*mem) / (1 << 20) : -1.0,
              mem ? 100.0 * static_cast<double>(*mem) / static_cast<double>(kBytes) : -1.0, out.size(),
              static_cast<double>(out.size() * sizeof(AccessEvidence)) / (1 << 20),
              static_cast<double>(rss1 - rss0) / (1 << 20));
  out.clear();
  out.shrink_to_fit();
  auto after = kern->agg()->mapMemoryBytes();
  std::printf("after the epoch's drain: BPF map memory %.2f MiB\n", after ? static_cast<double>(*after) / (1 << 20) : -1.0);
}

int recordFixture(const std::string& path) {
  perf_event_attr a = softwareFaultAttr(1);
  a.disabled = 1;
  a.enable_on_exec = 0;
  Workload w(Workload::Kind::Faults, 16 * 4096, 1);
  auto ev = sys::perf::PerfEvent::open(a, w.pid(), -1, 16);
  if (!ev) {
    std::cerr << ev.error().message() << "\n";
    return 1;
  }
  (void)(*ev)->enable();
  w.start();
  (void)w.wait();
  std::ofstream out(path);
  out << "# Software page-fault stream recorded from a live kernel by\n"
         "#   tools/bench/sources/sources_bench --record-fixture <this file>\n"
         "# PERF_TYPE_SOFTWARE/PERF_COUNT_SW_PAGE_FAULTS, period 1, one child touching 16 fresh pages\n";
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(a.sample_type));
  out << "sample_type " << buf << "\n";
  size_t n = 0;
  (*ev)->drain([&](std::span<const uint8_t> r) {
    for (size_t i = 0; i < r.size(); ++i) {
      std::snprintf(buf, sizeof buf, "%02x", r[i]);
      out << (i ? " " : "") << buf;
    }
    out << "\n";
    ++n;
  });
  std::cout << "recorded " << n << " records to " << path << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  tt::log::setLevel(tt::log::Level::Warn);
  const std::string mode = argc > 1 ? argv[1] : "all";
  if (mode == "--record-fixture" && argc > 2) return recordFixture(argv[2]);
  if (::geteuid() != 0) {
    std::cerr << "sources_bench needs root (perf_event_open system-wide, BPF)\n";
    return 2;
  }
  if (mode == "cost" || mode == "all") cost();
  if (mode == "slowdown" || mode == "all") {
    // sources_bench slowdown [PAIRS [EPOCH_MS [breakdown]]]
    const int pairs = mode == "slowdown" && argc > 2 ? std::max(1, std::atoi(argv[2])) : 15;
    const int epochMs = mode == "slowdown" && argc > 3 ? std::max(10, std::atoi(argv[3])) : 1000;
    const bool breakdown = mode == "slowdown" && argc > 4 && std::string(argv[4]) == "breakdown";
    slowdown(pairs, epochMs, breakdown);
  }
  if (mode == "period-latency") periodLatency();
  if (mode == "slowdown-periods") slowdownPeriods(argc > 2 ? std::max(1, std::atoi(argv[2])) : 9, 1000);
  if (mode == "memory" || mode == "all") memory();
  return 0;
}
