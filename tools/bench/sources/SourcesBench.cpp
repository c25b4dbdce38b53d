// Hotness-source benchmark (run as root; results in docs/benchmarks.md, "Hotness sources").
//
//   sources_bench cost [N]   per-sample cost, user-space ring path vs in-kernel BPF aggregation,
//                            over a baseline where the same event's samples are dropped by an
//                            empty BPF program; same software page-fault event and workloads
//   sources_bench slowdown [PAIRS [EPOCH_MS [breakdown]]]
//                            a memory-bound workload (first touch, then passes) untracked vs
//                            tracked by the default source set: PAIRS (15) alternating pairs,
//                            median per-pair ratio and spread of wall and rusage CPU time;
//                            epoch 1000 ms as the daemon's default; `breakdown` adds the
//                            software-faults-only and fault-trace-only sets
//   sources_bench touch-rounds [CYCLES [MIB [PASSES]]]   first-touch slowdown of default sources
//                            (and of an empty fault program, with the child untracked, and of the
//                            software-fault sampler alone) from
//                            short rounds in one child, conditions rotating (median, bootstrap
//                            interval); PASSES > 0 adds memory-bound passes to every round and
//                            reports the whole round too (100: `slowdown`'s workload in small)
//   sources_bench storm [CYCLES [SECONDS [MIB [EPOCH_MS]]]]   a sustained first-touch storm in
//                            blocks of SECONDS under the daemon's epochs: no sources vs default
//                            sources with and without the fault trace's storm guard
//   sources_bench slowdown-periods [PAIRS]   software faults alone at fixed periods
//   sources_bench period-latency   time of one sample-period change on every per-CPU event
//   sources_bench fault-cost [N]   the fault tracer's cost per page fault, tracked and untracked
//   sources_bench path-cost [ROUNDS [PAGES [stats]]]   each path's cost per sample over the same
//                            event with no consumer (no ring, no program) and over an empty
//                            program, on this thread's first-touch faults, and the kernel's call
//                            into a program (a ring with a program that keeps every sample, over
//                            the ring alone) charged to both; `stats` adds BPF run time (its clock
//                            reads inflate the call)
//   sources_bench tier-cost [N]    in-kernel program time per sample with and without reading the
//                            tier (data_src) from the kernel's sample, each reader
//   sources_bench memory     tracking state per GiB of tracked memory (1 GiB touched in one epoch)
//   sources_bench pagemap-scan [MIB [ROUNDS]]   soft-dirty's scan of /proc/PID/pagemap: thread CPU
//                            per GiB for MIB (1024) of this process's touched pages, the daemon's
//                            reads (runs of 64 Ki words) against one word per read (what they
//                            were before)
//   sources_bench all
//   sources_bench --record-fixture PATH   records a real software page-fault stream as hex
#include <fcntl.h>
#include <linux/perf_event.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <random>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "config/Config.h"
#include "core/Log.h"
#include "sources/FaultTraceSource.h"
#include "sources/PerfDecode.h"
#include "sources/SamplingSource.h"
#include "sources/SourceSet.h"
#include "sys/bpf/PerfSampleAgg.h"
#include "sys/access/SoftDirty.h"
#include "sys/perf/PerfEvent.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "sample_drop.skel.h"

namespace {

using namespace tt;
using namespace tt::sources;

double nowSec() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A workload in a child that waits for a go byte, runs, and sends back its elapsed seconds.
// A forked child that runs `body(up)` once the parent calls start(); `up` is the write end of a
// pipe the parent reads with read(). Killed and reaped, at the latest, with this object.
class GatedChild {
 public:
  explicit GatedChild(const std::function<void(int up)>& body) {
    int down[2], up[2];
    if (::pipe(down) != 0 || ::pipe(up) != 0) std::abort();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      char go;
      if (::read(down[0], &go, 1) != 1) ::_exit(1);
      body(up[1]);
      ::_exit(0);
    }
    ::close(down[0]);
    ::close(up[1]);
    go_ = down[1];
    done_ = up[0];
  }
  ~GatedChild() {
    if (!reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::close(go_);
    ::close(done_);
  }
  GatedChild(const GatedChild&) = delete;
  GatedChild& operator=(const GatedChild&) = delete;
  pid_t pid() const { return pid_; }
  void start() {
    const char g = 'g';
    if (::write(go_, &g, 1) != 1) std::abort();
  }
  // The child's next message of `n` bytes, waiting at most `timeoutMs` (-1: until it comes).
  bool read(void* out, size_t n, int timeoutMs) {
    pollfd p{done_, POLLIN, 0};
    if (::poll(&p, 1, timeoutMs) != 1) return false;
    return ::read(done_, out, n) == static_cast<ssize_t>(n);
  }
  // Waits for the child to exit; its user+system CPU seconds (BPF programs run in it, on its faults).
  double reapCpuSeconds() {
    rusage ru{};
    int status = 0;
    if (::wait4(pid_, &status, 0, &ru) != pid_) return -1;
    reaped_ = true;
    return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  }

 private:
  pid_t pid_ = -1;
  int go_ = -1, done_ = -1;
  bool reaped_ = false;
};

class Workload {
 public:
  enum class Kind { Faults, HotFaults, TouchOnce };
  Workload(Kind kind, uint64_t bytes, int rounds) : child_([=](int up) { run(kind, bytes, rounds, up); }) {}
  pid_t pid() const { return child_.pid(); }
  double reapCpuSeconds() { return child_.reapCpuSeconds(); }
  void start() { child_.start(); }
  // Non-blocking: the elapsed seconds once the work is done.
  bool finished(double& seconds) { return child_.read(&seconds, sizeof seconds, 0); }
  double wait() {
    double s = 0;
    return child_.read(&s, sizeof s, -1) ? s : -1;
  }

 private:
  static void run(Kind kind, uint64_t bytes, int rounds, int up) {
    const double t0 = nowSec();
    const uint64_t pages = bytes / 4096;
    if (kind == Kind::Faults) {
      // Every round maps a fresh slice of one reserved range, touches it and unmaps it: each
      // fault is on a page (and chunk) not seen before, at most `bytes` resident at a time.
      auto* range = static_cast<char*>(::mmap(nullptr, bytes * static_cast<uint64_t>(rounds), PROT_NONE,
                                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
      for (int r = 0; r < rounds; ++r) {
        auto* p = static_cast<volatile char*>(::mmap(range + bytes * static_cast<uint64_t>(r), bytes,
                                                     PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0));
        ::madvise(const_cast<char*>(p), bytes, MADV_NOHUGEPAGE);
        for (uint64_t i = 0; i < pages; ++i) p[i * 4096] = 1;
        ::munmap(const_cast<char*>(p), bytes);
      }
    } else if (kind == Kind::TouchOnce) {
      auto* p = static_cast<volatile char*>(
          ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
      ::madvise(const_cast<char*>(p), bytes, MADV_NOHUGEPAGE);
      for (uint64_t i = 0; i < pages; ++i) p[i * 4096] = 1;
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
    if (::write(up, &dt, sizeof dt) != sizeof dt) ::_exit(1);
    if (kind == Kind::TouchOnce) ::pause();  // keep the memory mapped until killed
  }

  GatedChild child_;
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

// 95% percentile-bootstrap interval of `statistic` over `n` paired observations (2000 resamples
// of their indices, fixed seed: the same input gives the same interval).
template <typename Statistic>
std::pair<double, double> bootstrapInterval(size_t n, Statistic statistic) {
  std::vector<double> values;
  std::vector<size_t> idx(n);
  uint64_t state = 0x9e3779b97f4a7c15ULL;
  auto next = [&state] {  // splitmix64
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  for (int b = 0; b < 2000; ++b) {
    for (size_t& i : idx) i = next() % n;
    values.push_back(statistic(idx));
  }
  std::sort(values.begin(), values.end());
  return {values[50], values[1949]};
}

// The same for the median of `v`.
std::pair<double, double> medianInterval(const std::vector<double>& v) {
  return bootstrapInterval(v.size(), [&v](const std::vector<size_t>& idx) {
    std::vector<double> sample;
    for (size_t i : idx) sample.push_back(v[i]);
    return spreadOf(sample).median;
  });
}

// The same for median(num) / median(den) over paired observations (1e9 for a resample whose
// denominator's median is not positive: "unbounded").
std::pair<double, double> ratioOfMediansInterval(const std::vector<double>& num, const std::vector<double>& den) {
  return bootstrapInterval(num.size(), [&](const std::vector<size_t>& idx) {
    std::vector<double> r, k;
    for (size_t j : idx) {
      r.push_back(num[j]);
      k.push_back(den[j]);
    }
    const double km = spreadOf(k).median;
    return km > 0 ? spreadOf(r).median / km : 1e9;
  });
}

// The cost baseline: the same software page-fault event on every online CPU with sample_drop
// attached, so every sample is prepared and handed to a BPF program that returns 0 (no ring). Its
// samples carry the fields the in-kernel path asks for (aggregatedSampleType: the address), the
// least any consumer needs; the ring path's TID is the ring path's cost.
class DropBaseline {
 public:
  DropBaseline() {
    skel_ = sample_drop__open_and_load();
    if (skel_ == nullptr) return;
    auto cpus = sys::perf::onlineCpus(sys::Fs("/sys"));
    if (!cpus) return;
    for (int cpu : *cpus) {
      perf_event_attr a = softwareFaultAttr(1);
      a.sample_type = aggregatedSampleType(a.sample_type);
      a.disabled = 1;
      auto ev = sys::perf::PerfEvent::open(a, -1, cpu, 0);
      if (!ev) return;
      bpf_link* link = bpf_program__attach_perf_event(skel_->progs.tt_drop_sample, (*ev)->fd());
      if (link == nullptr) return;
      links_.push_back(link);
      if (!(*ev)->enable()) return;
      events_.push_back(std::move(*ev));
    }
    ok_ = true;
  }
  ~DropBaseline() {
    for (bpf_link* l : links_) bpf_link__destroy(l);
    events_.clear();
    if (skel_) sample_drop__destroy(skel_);
  }
  DropBaseline(const DropBaseline&) = delete;
  DropBaseline& operator=(const DropBaseline&) = delete;
  bool ok() const { return ok_; }
  // Run time (ns) and runs of the program (run time needs bpf_enable_stats).
  std::pair<uint64_t, uint64_t> runTime() const {
    auto rt = sys::bpf::programRunTime(bpf_program__fd(skel_->progs.tt_drop_sample), "sample_drop");
    return rt ? *rt : std::pair<uint64_t, uint64_t>{0, 0};
  }

 private:
  sample_drop* skel_ = nullptr;
  std::vector<bpf_link*> links_;
  std::vector<std::unique_ptr<sys::perf::PerfEvent>> events_;
  bool ok_ = false;
};

enum class Path { None, Drop, Ring, Kernel };
constexpr const char* kPathNames[] = {"no event", "baseline", "user ring", "in-kernel"};

struct CostResult {
  double workloadSec = 0;
  double childCpuSec = 0;   // the workload's user+system CPU (the kernel's per-sample work runs in its context)
  uint64_t daemonNs = 0;    // the collecting thread's CPU in collect()
  uint64_t samples = 0;     // samples of the workload the path counted
  uint64_t lost = 0;
  uint64_t bpfNs = 0, bpfRuns = 0;  // BPF program run time and runs (all processes' samples)
  size_t evidence = 0;
};

// The evidence buffer collect() appends to, kept across runs as the daemon's epoch loop keeps its
// own across epochs (EpochLoop::evidence_, released only when four times larger than an epoch's
// need): a fresh buffer per run charged every path the page faults of first touching it, ~8 ns
// per record, which a running daemon does not pay each epoch.
EvidenceBatch gEvidence;

// Starts `w` and collects from `source` (none: just waits) every `epochMs` until the workload is
// done, then once more. Returns the collecting thread's CPU in collect() (ns); the workload's
// elapsed seconds go to `workloadSec`, the evidence records collected to `evidence`.
uint64_t collectWhileRunning(Source* source, Workload& w, int epochMs, double& workloadSec, size_t& evidence) {
  EvidenceBatch& out = gEvidence;
  out.clear();
  uint64_t daemonNs = 0;
  auto collectOnce = [&] {
    const uint64_t c0 = sys::perf::threadCpuNs();
    if (source) (void)source->collect(out);
    daemonNs += sys::perf::threadCpuNs() - c0;
    evidence += out.pages();
    out.clear();
  };
  w.start();
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(epochMs));
    collectOnce();
  } while (!w.finished(workloadSec));
  collectOnce();
  return daemonNs;
}

// One run of the workload with `path` collecting: the ring path every 10 ms (its 4 MiB per-CPU
// rings must not fill), the in-kernel path once per 1 s epoch (not waking per batch of samples is
// its point).
CostResult runOnce(Path path, Workload::Kind kind, uint64_t bytes, int rounds) {
  std::unique_ptr<SamplingSource> source;
  std::unique_ptr<DropBaseline> drop;
  if (path == Path::Ring) source = softwareSource(Aggregation::UserRing, 1024);
  if (path == Path::Kernel) source = softwareSource(Aggregation::InKernel, 0);
  if (path == Path::Drop) drop = std::make_unique<DropBaseline>();
  if ((source && !source->status().available) || (path == Path::Kernel && source && source->aggregation() != Aggregation::InKernel) ||
      (drop && !drop->ok())) {
    std::fprintf(stderr, "cannot set up %s: %s\n", kPathNames[static_cast<int>(path)],
                 source ? source->status().detail.c_str() : "BPF baseline");
    std::exit(1);
  }
  const int epochMs = path == Path::Kernel ? 1000 : 10;
  Workload w(kind, bytes, rounds);
  CostResult r;
  EvidenceBatch out;
  if (source) {
    (void)source->addProcess(w.pid());
    (void)source->collect(out);
    out.clear();
  }
  const uint64_t samples0 = source ? source->counters().samples : 0;
  std::pair<uint64_t, uint64_t> bpf0{0, 0};
  if (path == Path::Kernel) {
    if (auto rt = source->agg()->runTimeNsAndCount()) bpf0 = *rt;
  }
  if (drop) bpf0 = drop->runTime();
  r.daemonNs = collectWhileRunning(source.get(), w, epochMs, r.workloadSec, r.evidence);
  if (source) {
    r.samples = source->counters().samples - samples0;
    r.lost = source->counters().lost;
  }
  std::pair<uint64_t, uint64_t> bpf1 = bpf0;
  if (path == Path::Kernel) {
    if (auto rt = source->agg()->runTimeNsAndCount()) bpf1 = *rt;
  }
  if (drop) bpf1 = drop->runTime();
  r.bpfNs = bpf1.first - bpf0.first;
  r.bpfRuns = bpf1.second - bpf0.second;
  r.childCpuSec = w.reapCpuSeconds();
  return r;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int gCostRepeats = 7;  // `sources_bench cost N` changes it

void costFor(const char* title, Workload::Kind kind, uint64_t bytes, int rounds) {
  // One run of each path per cycle, the order rotating cycle by cycle, so drifting load on the
  // shared machine hits all of them alike; medians per path, and per-cycle (paired) differences.
  std::vector<CostResult> runs[4];
  const Path order[4] = {Path::None, Path::Drop, Path::Ring, Path::Kernel};
  for (int i = 0; i < gCostRepeats; ++i)
    for (int k = 0; k < 4; ++k) {
      const Path p = order[(i + k) % 4];
      runs[static_cast<int>(p)].push_back(runOnce(p, kind, bytes, rounds));
    }
  auto med = [&](Path p, auto field) {
    std::vector<double> v;
    for (const auto& r : runs[static_cast<int>(p)]) v.push_back(static_cast<double>(field(r)));
    return median(v);
  };
  auto child = [&](Path p) { return med(p, [](const CostResult& r) { return r.childCpuSec; }); };
  auto daemon = [&](Path p) { return med(p, [](const CostResult& r) { return r.daemonNs; }); };
  auto samples = [&](Path p) { return med(p, [](const CostResult& r) { return r.samples; }); };
  std::printf("\n%s\n", title);
  std::printf("%-10s %8s %9s %10s %6s %10s %10s %12s %14s %14s\n", "path", "work s", "child s", "samples", "lost",
              "daemon ms", "evidence", "bpf ns/run", "extra/sample", "vs no event");
  const double nSamples = std::max(samples(Path::Ring), samples(Path::Kernel));
  double extra[4] = {};
  for (Path p : {Path::None, Path::Drop, Path::Ring, Path::Kernel}) {
    const int k = static_cast<int>(p);
    const double n = p == Path::Ring || p == Path::Kernel ? samples(p) : nSamples;
    // End to end over the baseline: the workload's extra CPU plus the daemon's, per sample.
    extra[k] = n > 0 ? ((child(p) - child(Path::Drop)) * 1e9 + daemon(p)) / n : 0;
    const double overNone = n > 0 ? ((child(p) - child(Path::None)) * 1e9 + daemon(p)) / n : 0;
    const double bpfRuns = med(p, [](const CostResult& r) { return r.bpfRuns; });
    const double bpfNs = med(p, [](const CostResult& r) { return r.bpfNs; });
    std::printf("%-10s %8.3f %9.3f %10.0f %6.0f %10.2f %10.0f %12.1f %11.0f ns %11.0f ns\n", kPathNames[k],
                med(p, [](const CostResult& r) { return r.workloadSec; }), child(p), samples(p),
                med(p, [](const CostResult& r) { return r.lost; }), daemon(p) / 1e6,
                med(p, [](const CostResult& r) { return r.evidence; }), bpfRuns > 0 ? bpfNs / bpfRuns : 0.0,
                p == Path::None ? 0.0 : extra[k], overNone);
  }
  const double ring = extra[static_cast<int>(Path::Ring)], kern = extra[static_cast<int>(Path::Kernel)];
  std::printf("extra CPU per sample over the baseline (workload + daemon, medians of %d): user ring %.0f ns, in-kernel "
              "%.0f ns, ratio %.2fx; daemon CPU per sample: user ring %.1f ns, in-kernel %.2f ns\n",
              gCostRepeats, ring, kern, kern > 0 ? ring / kern : 0.0, daemon(Path::Ring) / samples(Path::Ring),
              daemon(Path::Kernel) / samples(Path::Kernel));
  // Interference from other load on the machine only adds CPU time: the minima are a second,
  // less noise-prone estimate.
  auto least = [&](Path p, auto field) {
    double v = 1e300;
    for (const auto& r : runs[static_cast<int>(p)]) v = std::min(v, static_cast<double>(field(r)));
    return v;
  };
  auto minExtra = [&](Path p) {
    const double n = samples(p);
    return n > 0 ? ((least(p, [](const CostResult& r) { return r.childCpuSec; }) -
                     least(Path::Drop, [](const CostResult& r) { return r.childCpuSec; })) * 1e9 +
                    least(p, [](const CostResult& r) { return r.daemonNs; })) / n
                 : 0.0;
  };
  std::printf("same from the minima of the %d runs: user ring %.0f ns, in-kernel %.0f ns, ratio %.2fx\n", gCostRepeats,
              minExtra(Path::Ring), minExtra(Path::Kernel),
              minExtra(Path::Kernel) > 0 ? minExtra(Path::Ring) / minExtra(Path::Kernel) : 0.0);
  // Paired: each cycle's extra CPU per sample over the same cycle's baseline run, so slow drift of
  // the machine's load cancels within a cycle; the ratio of the two medians with a bootstrap
  // interval over cycles.
  std::vector<double> ringExtra, kernExtra;
  for (int i = 0; i < gCostRepeats; ++i) {
    auto cycleExtra = [&](Path p) {
      const CostResult& r = runs[static_cast<int>(p)][static_cast<size_t>(i)];
      const CostResult& b = runs[static_cast<int>(Path::Drop)][static_cast<size_t>(i)];
      return r.samples > 0 ? ((r.childCpuSec - b.childCpuSec) * 1e9 + static_cast<double>(r.daemonNs)) /
                                 static_cast<double>(r.samples)
                           : 0.0;
    };
    ringExtra.push_back(cycleExtra(Path::Ring));
    kernExtra.push_back(cycleExtra(Path::Kernel));
  }
  const auto [ringLo, ringHi] = medianInterval(ringExtra);
  const auto [kernLo, kernHi] = medianInterval(kernExtra);
  const auto [ratioLo, ratioHi] = ratioOfMediansInterval(ringExtra, kernExtra);
  const double ringMed = spreadOf(ringExtra).median, kernMed = spreadOf(kernExtra).median;
  const std::string upper = ratioHi >= 1e9 ? std::string("unbounded (a resample's in-kernel median <= 0)")
                                            : std::to_string(ratioHi).substr(0, std::to_string(ratioHi).find('.') + 3) + "x";
  std::printf("paired per cycle (extra over the same cycle's baseline run): user ring median %.0f ns [%.0f, %.0f], "
              "in-kernel %.0f ns [%.0f, %.0f]; ratio of the medians %.2fx, 95%% bootstrap interval [%.2fx, %s]\n",
              ringMed, ringLo, ringHi, kernMed, kernLo, kernHi, kernMed > 0 ? ringMed / kernMed : 0.0, ratioLo,
              upper.c_str());
  // With run-time stats the in-kernel path's kernel side is also measured directly: its program's
  // run time per run minus the empty program's (both include the stats' clock reads).
  auto perRun = [&](Path p) {
    const double n = med(p, [](const CostResult& r) { return r.bpfRuns; });
    return n > 0 ? med(p, [](const CostResult& r) { return r.bpfNs; }) / n : 0.0;
  };
  if (perRun(Path::Kernel) > 0 && perRun(Path::Drop) > 0) {
    const double direct = perRun(Path::Kernel) - perRun(Path::Drop) + daemon(Path::Kernel) / samples(Path::Kernel);
    std::printf("in-kernel extra from BPF run time (program %.1f - empty program %.1f ns per run) + daemon: %.0f ns per "
                "sample; user ring (workload + daemon over the baseline) / that: %.2fx\n",
                perRun(Path::Kernel), perRun(Path::Drop), direct, direct > 0 ? ring / direct : 0.0);
  }
}

void costAll() {
  std::printf("software page-fault event, period 1, system-wide per CPU; user ring collects every 10 ms, in-kernel every "
              "1 s; baseline = the same events with an empty BPF program (samples dropped, no ring); %d cycles of one "
              "run per path, the order rotating; medians per path and paired per cycle\n", gCostRepeats);
  costFor("hot set: 256 pages re-faulted 2560 times (MADV_DONTNEED between passes) = 655360 faults",
          Workload::Kind::HotFaults, 1ULL << 20, 2560);
  costFor("distinct pages: 40 fresh 64 MiB slices of one range, mmap/touch/munmap = 655360 faults",
          Workload::Kind::Faults, 64ULL << 20, 40);
}

void cost() {
  std::printf("=== BPF run-time stats off (no clock reads around BPF programs; bpf ns/run not available)\n");
  costAll();
  auto stats = sys::bpf::enableBpfRunTimeStats();
  if (!stats) {
    std::cout << "warning: " << stats.error().message() << " (no run with BPF run-time stats)\n";
    return;
  }
  std::printf("\n=== BPF run-time stats on (bpf_enable_stats(BPF_STATS_RUN_TIME): two clock reads per program run)\n");
  costAll();
  ::close(*stats);
}

// --- tier-cost: what reading the tier from the kernel's sample adds to the in-kernel program ---
//
// The program attached to events that record data_src (PEBS, IBS) reads it from the kernel's
// perf_sample_data, through bpf_cast_to_kern_ctx (6.2+) or two probe reads (6.1). No PMU here: the
// same software page-fault event asking for data_src runs those programs for real (the kernel
// fills in "not available", which they read and decode like any other value). Program run time
// per run from the kernel's BPF run-time stats, each reader's runs in the same cycles, rotating.

// One reader's program on the software page-fault event of every online CPU, counting one process.
class TierReaderRun {
 public:
  explicit TierReaderRun(sys::bpf::DataSrcReader reader) {
    auto agg = sys::bpf::PerfSampleAgg::load(sys::bpf::kPidMaxLimit, 16384, reader);
    if (!agg || (*agg)->dataSrcReader() != reader) return;
    agg_ = std::move(*agg);
    auto cpus = sys::perf::onlineCpus(sys::Fs("/sys"));
    if (!cpus) return;
    for (int cpu : *cpus) {
      perf_event_attr a = softwareFaultAttr(1);
      const bool recordsDataSrc = reader != sys::bpf::DataSrcReader::None;
      if (recordsDataSrc) a.sample_type |= PERF_SAMPLE_DATA_SRC;
      a = aggregatedAttr(a);  // as the daemon opens them
      a.disabled = 1;
      auto ev = sys::perf::PerfEvent::open(a, -1, cpu, 0);
      if (!ev || !agg_->attach((*ev)->fd(), 0, recordsDataSrc) || !(*ev)->enable()) return;
      events_.push_back(std::move(*ev));
    }
    ok_ = true;
  }
  ~TierReaderRun() {
    agg_.reset();  // links first
    events_.clear();
  }
  TierReaderRun(const TierReaderRun&) = delete;
  TierReaderRun& operator=(const TierReaderRun&) = delete;
  bool ok() const { return ok_; }
  sys::bpf::PerfSampleAgg& agg() { return *agg_; }

 private:
  std::unique_ptr<sys::bpf::PerfSampleAgg> agg_;
  std::vector<std::unique_ptr<sys::perf::PerfEvent>> events_;
  bool ok_ = false;
};

void tierCost(int cycles) {
  auto stats = sys::bpf::enableBpfRunTimeStats();
  if (!stats) {
    std::cerr << "tier-cost needs BPF run-time stats: " << stats.error().message() << "\n";
    std::exit(1);
  }
  using sys::bpf::DataSrcReader;
  const DataSrcReader readers[3] = {DataSrcReader::None, DataSrcReader::ProbeRead, DataSrcReader::Kfunc};
  const char* names[3] = {"no data_src (software-event program)", "data_src by bpf_probe_read_kernel (6.1)",
                          "data_src by bpf_cast_to_kern_ctx (6.2+)"};
  std::vector<double> perRun[3];
  uint64_t na[3] = {}, samples[3] = {};
  for (int i = 0; i < cycles; ++i)
    for (int k = 0; k < 3; ++k) {
      const int r = (i + k) % 3;
      TierReaderRun run(readers[r]);
      if (!run.ok()) {
        std::fprintf(stderr, "cannot set up %s on this kernel\n", names[r]);
        std::exit(1);
      }
      Workload w(Workload::Kind::HotFaults, 1ULL << 20, 1280);  // 327680 faults
      if (!run.agg().track(w.pid())) std::exit(1);
      auto rt0 = run.agg().runTimeNsAndCount();
      double sec = 0;
      w.start();
      while (!w.finished(sec)) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      auto rt1 = run.agg().runTimeNsAndCount();
      auto st = run.agg().stats();
      (void)w.reapCpuSeconds();
      if (!rt0 || !rt1 || !st || rt1->second == rt0->second) std::exit(1);
      perRun[r].push_back(double(rt1->first - rt0->first) / double(rt1->second - rt0->second));
      na[r] += st->dataSrcNa;
      samples[r] += st->tracked - st->noAddress;
    }
  ::close(*stats);
  std::printf("in-kernel program run time per sample (BPF run-time stats), %d cycles, readers rotating; software "
              "page-fault event, 256 pages re-faulted 1280 times per run\n", cycles);
  const double base = spreadOf(perRun[0]).median;
  for (int r = 0; r < 3; ++r) {
    const Spread sp = spreadOf(perRun[r]);
    std::printf("  %-42s median %6.1f ns [q1 %.1f, q3 %.1f]  %+6.1f ns over the first; data_src read as N/A in "
                "%llu of %llu tracked samples\n",
                names[r], sp.median, sp.q1, sp.q3, sp.median - base, static_cast<unsigned long long>(na[r]),
                static_cast<unsigned long long>(samples[r]));
  }
}

// --- fault-cost: what the fault tracer adds to each page fault, of a tracked process and of any
// other process (the page-fault tracepoint runs for every user fault on the machine) ---

struct FaultCostRun {
  double childCpuSec = 0;
  uint64_t bpfNs = 0, bpfRuns = 0;
  uint64_t daemonNs = 0;
  uint64_t events = 0;  // faults the source counted for the child
  uint64_t lost = 0;
};

enum class TraceMode { Off, Untracked, Tracked };
constexpr const char* kTraceModeNames[] = {"no tracer", "untracked", "tracked"};

FaultCostRun faultCostOnce(TraceMode mode, uint64_t bytes, int rounds) {
  std::unique_ptr<FaultTraceSource> source;
  if (mode != TraceMode::Off) {
    source = std::make_unique<FaultTraceSource>(sys::bpf::FaultTrace::Options{}, FaultTraceSource::Guard{.pauseOverBudget = false}, sys::Fs("/proc"));
    source->open();
    if (!source->status().available) {
      std::fprintf(stderr, "cannot open the fault trace: %s\n", source->status().detail.c_str());
      std::exit(1);
    }
  }
  Workload w(Workload::Kind::Faults, bytes, rounds);
  FaultCostRun r;
  if (mode == TraceMode::Tracked) (void)source->addProcess(w.pid());
  // Untracked: another process (this one) is tracked, so the page-fault program is attached and
  // the child pays its filter, as every process does while the daemon tracks anything.
  if (mode == TraceMode::Untracked) (void)source->addProcess(::getpid());
  std::pair<uint64_t, uint64_t> bpf0{0, 0}, bpf1{0, 0};
  if (source)
    if (auto rt = source->trace()->faultProgramRunTime()) bpf0 = *rt;
  const uint64_t events0 = source ? source->counters().samples : 0;
  double seconds = 0;
  size_t evidence = 0;
  r.daemonNs = collectWhileRunning(source.get(), w, 1000, seconds, evidence);  // the daemon's default epoch
  if (source) {
    r.events = source->counters().samples - events0;
    r.lost = source->counters().lost;
    if (auto rt = source->trace()->faultProgramRunTime()) bpf1 = *rt;
  }
  r.bpfNs = bpf1.first - bpf0.first;
  r.bpfRuns = bpf1.second - bpf0.second;
  r.childCpuSec = w.reapCpuSeconds();
  return r;
}

void faultCostAll(int repeats) {
  constexpr uint64_t kBytes = 64ULL << 20;
  constexpr int kRounds = 40;
  const double faults = static_cast<double>(kBytes / 4096 * kRounds);
  std::vector<FaultCostRun> runs[3];
  for (int i = 0; i < repeats; ++i)
    for (TraceMode m : {TraceMode::Off, TraceMode::Untracked, TraceMode::Tracked})
      runs[static_cast<int>(m)].push_back(faultCostOnce(m, kBytes, kRounds));
  auto med = [&](TraceMode m, auto field) {
    std::vector<double> v;
    for (const auto& r : runs[static_cast<int>(m)]) v.push_back(static_cast<double>(field(r)));
    return median(v);
  };
  auto child = [&](TraceMode m) { return med(m, [](const FaultCostRun& r) { return r.childCpuSec; }); };
  const double base = child(TraceMode::Off) * 1e9 / faults;
  std::printf("%-10s %9s %12s %14s %12s %10s %8s %12s\n", "tracer", "child s", "ns/fault", "extra ns/fault",
              "extra %", "daemon ms", "counted", "bpf ns/run");
  for (TraceMode m : {TraceMode::Off, TraceMode::Untracked, TraceMode::Tracked}) {
    const double perFault = child(m) * 1e9 / faults;
    const double daemon = med(m, [](const FaultCostRun& r) { return r.daemonNs; });
    const double extra = perFault - base + daemon / faults;
    const double runs_ = med(m, [](const FaultCostRun& r) { return r.bpfRuns; });
    const double bpfNs = med(m, [](const FaultCostRun& r) { return r.bpfNs; });
    std::printf("%-10s %9.3f %12.0f %14.0f %+11.2f%% %10.2f %8.0f %12.1f\n", kTraceModeNames[static_cast<int>(m)],
                child(m), perFault, extra, 100.0 * extra / base, daemon / 1e6,
                med(m, [](const FaultCostRun& r) { return r.events; }), runs_ > 0 ? bpfNs / runs_ : 0.0);
  }
}

void faultCost(int repeats) {
  std::printf("fault trace (first_touch on, default ring): a child faults 40 fresh 64 MiB slices (655360 first "
              "touches); no tracer / tracer with the child untracked / tracked (collect every 1 s); %d runs each, "
              "alternating, medians. extra = child CPU over the no-tracer run + daemon CPU, per fault\n",
              repeats);
  std::printf("\n=== BPF run-time stats off\n");
  faultCostAll(repeats);
  auto stats = sys::bpf::enableBpfRunTimeStats();
  if (!stats) {
    std::cout << "warning: " << stats.error().message() << " (no run with BPF run-time stats)\n";
    return;
  }
  std::printf("\n=== BPF run-time stats on (two clock reads around every program run, included in bpf ns/run)\n");
  faultCostAll(repeats);
  ::close(*stats);
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
  StreamChild(uint64_t bytes, int rounds) : child_([=](int up) { run(bytes, rounds, up); }) {}
  pid_t pid() const { return child_.pid(); }
  void start() { child_.start(); }
  // Waits up to timeoutMs for the next phase's times.
  bool next(PhaseTimes& t, int timeoutMs) { return child_.read(&t, sizeof t, timeoutMs); }

 private:
  static void run(uint64_t bytes, int rounds, int up) {
    const double t0 = nowSec(), c0 = rusageCpuSec();
    auto* p = static_cast<uint64_t*>(::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ::madvise(p, bytes, MADV_NOHUGEPAGE);
    const uint64_t words = bytes / 8;
    for (uint64_t i = 0; i < words; i += 512) p[i] = i;
    const double t1 = nowSec(), c1 = rusageCpuSec();
    const PhaseTimes touch{t1 - t0, c1 - c0};
    if (::write(up, &touch, sizeof touch) != sizeof touch) ::_exit(1);
    uint64_t sum = 0;
    for (int r = 0; r < rounds; ++r)
      for (uint64_t i = 0; i < words; i += 8) {  // one word per cache line: memory bound
        sum += p[i];
        p[i] = sum;
      }
    const PhaseTimes passes{nowSec() - t1, rusageCpuSec() - c1};
    if (::write(up, &passes, sizeof passes) != sizeof passes) ::_exit(1);
  }

  GatedChild child_;
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
  EvidenceBatch out;
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
      if (info) info->evidence += out.pages();
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

// `pairs` untracked/tracked pairs, the order alternating (untracked first in even pairs), so
// drifting load on the shared machine hits both sides alike. Untracked = no source open (the
// sources' perf events are system-wide: with them open, an "untracked" run would pay the overflow
// work too). Tracked = the set opened (and calibrated) before the run, as a daemon that was
// already running when the workload started, closed after it. Per pair: tracked / untracked.
void slowdownWith(const char* name, const tensortier::v1::SourcesConfig& config, int pairs, int epochMs) {
  topology::Topology topo;
  std::vector<double> touchWall, touchCpu, passWall, passCpu, wholeWall, wholeCpu;
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
    wholeWall.push_back((t.touch.wall + t.passes.wall) / (u.touch.wall + u.passes.wall));
    wholeCpu.push_back((t.touch.cpu + t.passes.cpu) / (u.touch.cpu + u.passes.cpu));
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
  printSpread("whole run, wall", wholeWall);
  printSpread("whole run, CPU", wholeCpu);
  for (auto [what, v] : {std::pair{"first touch, CPU", &touchCpu}, std::pair{"passes, CPU", &passCpu},
                         std::pair{"whole run, wall", &wholeWall}, std::pair{"whole run, CPU", &wholeCpu}}) {
    const auto [lo, hi] = medianInterval(*v);
    std::printf("  %-22s median's 95%% bootstrap interval [%+6.2f%%, %+6.2f%%]\n", what, 100 * (lo - 1), 100 * (hi - 1));
  }
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

// --- touch-rounds: the first-touch slowdown, resolved finer than `slowdown` can on this shared VM.
// In `slowdown` the two sides of a pair are seconds apart and the first-touch phase is 0.1 s of
// a 6 s run, so the host's load swings (steal time lands in a guest's CPU times too) give per-pair
// spreads of +-10%. Here one child makes many short first-touch rounds on command and the parent
// sets the condition up between rounds (nothing; an empty program on the fault tracepoint; the
// default source set opened, with the child untracked or tracked), one round per condition per
// cycle in rotating order, so drift cancels within a cycle, and a bootstrap interval of the median
// says how well the run resolved it.

struct RoundTimes {
  PhaseTimes touch, whole;
};

// A child that, for every 'r' byte, maps `bytes`, first-touches every 4 KiB page (THP off; one
// fault each), reports that loop's PhaseTimes (wall, and its own thread CPU: user + system, where
// the faults' kernel work and every BPF program run on them land), and unmaps. Exits on 'q' or EOF.
class RoundChild {
 public:
  // After the touch loop, `passes` memory-bound passes over the buffer (one word per cache line,
  // as `slowdown`'s workload); the round's PhaseTimes then also cover them (`whole`).
  RoundChild(uint64_t bytes, int passes) {
    int down[2], up[2];
    if (::pipe(down) != 0 || ::pipe(up) != 0) std::abort();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::close(down[1]);
      ::close(up[0]);
      char cmd;
      while (::read(down[0], &cmd, 1) == 1 && cmd == 'r') {
        auto* p = static_cast<volatile char*>(
            ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
        if (p == MAP_FAILED) ::_exit(1);
        ::madvise(const_cast<char*>(p), bytes, MADV_NOHUGEPAGE);
        const double t0 = nowSec(), c0 = threadCpuSec();
        for (uint64_t off = 0; off < bytes; off += 4096) p[off] = 1;
        RoundTimes t;
        t.touch = {nowSec() - t0, threadCpuSec() - c0};
        auto* words = reinterpret_cast<volatile uint64_t*>(p);
        uint64_t sum = 0;
        for (int r = 0; r < passes; ++r)
          for (uint64_t i = 0; i < bytes / 8; i += 8) {
            sum += words[i];
            words[i] = sum;
          }
        t.whole = {nowSec() - t0, threadCpuSec() - c0};
        ::munmap(const_cast<char*>(p), bytes);
        if (::write(up[1], &t, sizeof t) != sizeof t) ::_exit(1);
      }
      ::_exit(0);
    }
    ::close(down[0]);
    ::close(up[1]);
    cmd_ = down[1];
    times_ = up[0];
  }
  ~RoundChild() {
    const char q = 'q';
    (void)!::write(cmd_, &q, 1);
    ::close(cmd_);
    ::close(times_);
    ::waitpid(pid_, nullptr, 0);
  }
  RoundChild(const RoundChild&) = delete;
  RoundChild& operator=(const RoundChild&) = delete;
  pid_t pid() const { return pid_; }
  bool round(RoundTimes& t) {
    const char r = 'r';
    return ::write(cmd_, &r, 1) == 1 && ::read(times_, &t, sizeof t) == static_cast<ssize_t>(sizeof t);
  }

 private:
  static double threadCpuSec() {
    timespec ts{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
  }
  pid_t pid_ = -1;
  int cmd_ = -1, times_ = -1;
};

void touchRounds(int cycles, uint64_t mib, int passes) {
  topology::Topology topo;
  const tensortier::v1::SourcesConfig defaults;
  const uint64_t bytes = mib << 20, pages = bytes / 4096;
  sample_drop* noop = sample_drop__open_and_load();
  if (noop == nullptr) {
    std::fprintf(stderr, "cannot load the empty fault program (sample_drop)\n");
    return;
  }
  RoundChild child(bytes, passes);
  // kSampled: the fault tracer off, so first touches come from the software page-fault sampler
  // alone, whose period never goes below its storm floor (calibrated at open): what a storm
  // would cost if the tracer's program were not attached to every fault.
  enum Condition { kNone, kEmptyProgram, kUntracked, kTracked, kSampled, kConditions };
  const char* names[kConditions] = {"no program", "empty fault program", "default sources, child untracked",
                                    "default sources, child tracked", "software-fault sampler only, child tracked"};
  tensortier::v1::SourcesConfig samplerOnly = defaults;
  samplerOnly.mutable_fault_trace()->set_enabled(false);
  std::vector<double> cpu[kConditions], wall[kConditions], wholeCpu[kConditions];
  double cpuSum[kConditions] = {};
  uint64_t evidence[kConditions] = {};
  std::string sources[kConditions];
  auto run = [&](int c, RoundTimes& t) {
    if (c == kNone) {
      if (!child.round(t)) std::abort();
    } else if (c == kEmptyProgram) {
      bpf_link* link = bpf_program__attach_raw_tracepoint(noop->progs.tt_fault_noop, "page_fault_user");
      if (link == nullptr) std::abort();
      if (!child.round(t)) std::abort();
      bpf_link__destroy(link);
    } else {
      auto set = SourceSet::open(c == kSampled ? samplerOnly : defaults, topo);
      if (sources[c].empty())
        for (const auto& line : set->statusLines()) sources[c] += "\n  " + line;
      // Untracked: this process is tracked instead, so the page-fault program is attached (it is
      // only while something is tracked) and the child pays its filter, as any other process.
      (void)set->addProcess(c == kUntracked ? ::getpid() : child.pid());
      EvidenceBatch out;
      (void)set->collect(out);  // drains the sources' own start-up events
      out.clear();
      if (!child.round(t)) std::abort();
      (void)set->collect(out);  // the drain, as the daemon's epoch would
      if (c != kUntracked)
        out.forEachRecord([&](const AccessEvidence& e) { evidence[c] += e.tgid == child.pid() ? 1 : 0; });
    }
  };
  std::printf("touch-rounds: %d cycles of %llu MiB first-touch rounds (%llu faults each, then %d memory-bound passes) "
              "in one child, one round per condition, conditions rotating (cycle i starts at condition i mod %d); per "
              "cycle each condition's CPU and wall time over the same cycle's no-program round\n",
              cycles, static_cast<unsigned long long>(mib), static_cast<unsigned long long>(pages), passes,
              static_cast<int>(kConditions));
  for (int i = 0; i < 2; ++i) {  // warm-up: the child's first rounds also build its page tables
    RoundTimes w;
    run(kNone, w);
  }
  for (int i = 0; i < cycles; ++i) {
    RoundTimes t[kConditions];
    for (int k = 0; k < kConditions; ++k) {
      const int c = (i + k) % kConditions;
      run(c, t[c]);
    }
    for (int c = 0; c < kConditions; ++c) {
      cpuSum[c] += t[c].touch.cpu;
      if (c == kNone) continue;
      cpu[c].push_back(t[c].touch.cpu / t[kNone].touch.cpu);
      wall[c].push_back(t[c].touch.wall / t[kNone].touch.wall);
      wholeCpu[c].push_back(t[c].whole.cpu / t[kNone].whole.cpu);
    }
  }
  sample_drop__destroy(noop);
  for (int c : {kTracked, kSampled}) {
    std::printf("%s: sources:%s\n", names[c], sources[c].c_str());
    std::printf("  evidence pages of the child: %.3f per tracked fault\n",
                static_cast<double>(evidence[c]) / static_cast<double>(pages) / cycles);
  }
  for (int c = 0; c < kConditions; ++c) {
    std::printf("%s: child CPU %.0f ns per fault (mean)\n", names[c],
                cpuSum[c] / cycles / static_cast<double>(pages) * 1e9);
    if (c == kNone) continue;
    printSpread("CPU over no program", cpu[c]);
    printSpread("wall over no program", wall[c]);
    const auto [lo, hi] = medianInterval(cpu[c]);
    std::printf("  median CPU, 95%% bootstrap interval [%+6.2f%%, %+6.2f%%]\n", 100 * (lo - 1), 100 * (hi - 1));
    if (passes > 0) {
      printSpread("whole round, CPU", wholeCpu[c]);
      const auto [wlo, whi] = medianInterval(wholeCpu[c]);
      std::printf("  whole round median CPU, 95%% bootstrap interval [%+6.2f%%, %+6.2f%%]\n", 100 * (wlo - 1),
                  100 * (whi - 1));
    }
  }
}

// --- storm: a sustained first-touch storm under the daemon's epochs, with and without the
// fault trace's storm guard (sources.fault_trace.pause_over_budget). `touch-rounds` opens the
// sources afresh for every 25 ms round, so no epoch ever ends inside its storm; here each
// condition keeps one source set open for a block of SECONDS of back-to-back rounds and collects
// every EPOCH_MS of wall time between rounds, as the daemon's epoch loop does. Conditions per
// cycle, rotating: no sources; default sources tracking the child; the same with the guard off.
void storm(int cycles, double seconds, uint64_t mib, int epochMs) {
  topology::Topology topo;
  const uint64_t bytes = mib << 20, pagesPerRound = bytes / 4096;
  RoundChild child(bytes, 0);
  enum Condition { kNone, kGuarded, kUnguarded, kConditions };
  const char* names[kConditions] = {"no sources", "default sources (storm guard on), child tracked",
                                    "default sources, pause_over_budget: false, child tracked"};
  tensortier::v1::SourcesConfig guarded;
  tensortier::v1::SourcesConfig unguarded = guarded;
  unguarded.mutable_fault_trace()->set_pause_over_budget(false);
  std::vector<double> cpu[kConditions];
  double nsPerFault[kConditions] = {}, attachedShare[kConditions] = {}, pausesSum[kConditions] = {};
  std::vector<double> firstPauseSec;
  std::string status;
  auto block = [&](int c) {
    std::unique_ptr<SourceSet> set;
    const FaultTraceSource* trace = nullptr;
    if (c != kNone) {
      set = SourceSet::open(c == kGuarded ? guarded : unguarded, topo);
      for (const auto& src : set->sources())
        if (const auto* f = dynamic_cast<const FaultTraceSource*>(src.get())) trace = f;
      if (trace == nullptr || !trace->status().available) {
        std::fprintf(stderr, "the fault trace did not open\n");
        std::exit(1);
      }
      (void)set->addProcess(child.pid());
      EvidenceBatch out;
      (void)set->collect(out);  // starts the first epoch
    }
    double childCpu = 0, attachedRounds = 0, firstPause = -1;
    uint64_t rounds = 0;
    const double t0 = nowSec();
    double nextEpoch = t0 + epochMs / 1000.0;
    while (nowSec() - t0 < seconds) {
      const bool attached = trace != nullptr && trace->trace()->faultProgramAttached();
      RoundTimes t;
      if (!child.round(t)) std::abort();
      childCpu += t.touch.cpu;
      attachedRounds += attached ? 1 : 0;
      ++rounds;
      if (firstPause < 0 && trace != nullptr && trace->faultProgramPaused()) firstPause = nowSec() - t0;
      if (set && nowSec() >= nextEpoch) {
        EvidenceBatch out;
        (void)set->collect(out);
        nextEpoch += epochMs / 1000.0;
      }
    }
    nsPerFault[c] += childCpu / static_cast<double>(rounds * pagesPerRound) * 1e9;
    attachedShare[c] += attachedRounds / static_cast<double>(rounds);
    if (trace != nullptr) pausesSum[c] += static_cast<double>(trace->pauses());
    if (c == kGuarded && firstPause >= 0) firstPauseSec.push_back(firstPause);
    if (c == kGuarded) status = trace->status().detail;  // at the end: with the last estimate
    return childCpu / static_cast<double>(rounds * pagesPerRound);
  };
  std::printf("storm: %d cycles; per cycle one %.0f s block per condition, conditions rotating; each block back-to-back "
              "first touches of %llu MiB (%llu faults) in one child, sources collected every %d ms between rounds; per "
              "cycle each condition's child CPU per fault over the same cycle's no-sources block\n",
              cycles, seconds, static_cast<unsigned long long>(mib), static_cast<unsigned long long>(pagesPerRound),
              epochMs);
  for (int i = 0; i < 2; ++i) {  // warm-up: the child's first rounds also build its page tables
    RoundTimes w;
    if (!child.round(w)) std::abort();
  }
  for (int i = 0; i < cycles; ++i) {
    double perFault[kConditions] = {};
    for (int k = 0; k < kConditions; ++k) {
      const int c = (i + k) % kConditions;
      perFault[c] = block(c);
    }
    for (int c = 1; c < kConditions; ++c) cpu[c].push_back(perFault[c] / perFault[kNone]);
  }
  std::printf("fault-trace: %s\n", status.c_str());
  for (int c = 0; c < kConditions; ++c) {
    std::printf("%s: child CPU %.0f ns per fault (mean over blocks)", names[c], nsPerFault[c] / cycles);
    if (c != kNone)
      std::printf("; page-fault program attached for %.1f%% of rounds, %.1f pauses per block", 100 * attachedShare[c] / cycles,
                  pausesSum[c] / cycles);
    std::printf("\n");
    if (c == kNone) continue;
    printSpread("CPU over no sources", cpu[c]);
    const auto [lo, hi] = medianInterval(cpu[c]);
    std::printf("  median CPU, 95%% bootstrap interval [%+6.2f%%, %+6.2f%%]\n", 100 * (lo - 1), 100 * (hi - 1));
  }
  if (!firstPauseSec.empty())
    std::printf("storm guard: first pause seen %.2f s into the block (after a round; median of %zu blocks)\n",
                median(firstPauseSec), firstPauseSec.size());
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
  if (kern->aggregation() != Aggregation::InKernel) {
    std::fprintf(stderr, "in-kernel aggregation unavailable: %s\n", kern->status().detail.c_str());
    std::exit(1);
  }
  auto empty = kern->agg()->mapMemory();
  Workload w(Workload::Kind::TouchOnce, kBytes, 1);
  (void)kern->addProcess(w.pid());
  EvidenceBatch out;
  (void)kern->collect(out);
  out.clear();
  const uint64_t rss1 = rssBytes();
  w.start();
  (void)w.wait();
  auto full = kern->agg()->mapMemory();  // before the drain: every page of 1 GiB sampled in one epoch
  auto stats = kern->agg()->stats();
  (void)kern->collect(out);
  const uint64_t rss2 = rssBytes();
  auto drained = kern->agg()->mapMemory();
  auto mib = [](uint64_t b) { return static_cast<double>(b) / (1 << 20); };
  auto pct = [&](uint64_t b) { return 100.0 * static_cast<double>(b) / static_cast<double>(kBytes); };
  if (!empty || !full || !drained || !stats) {
    std::fprintf(stderr, "cannot read the BPF maps' memory or stats\n");
    std::exit(1);
  }
  std::printf("1 GiB touched in one epoch (262144 pages, all sampled; %llu chunks inserted, %llu samples saturated, "
              "%llu dropped as map full)\n",
              static_cast<unsigned long long>(stats->newChunks), static_cast<unsigned long long>(stats->saturated),
              static_cast<unsigned long long>(stats->mapFull));
  std::printf("BPF maps (fdinfo memlock): loaded %.3f MiB (count map %.3f, others %.3f); before the drain %.3f MiB "
              "(count map %.3f, others %.3f) = %.3f%% of tracked; after the drain %.3f MiB\n",
              mib(empty->total()), mib(empty->chunks), mib(empty->other), mib(full->total()), mib(full->chunks),
              mib(full->other), pct(full->total()), mib(drained->total()));
  std::printf("count map growth for 1 GiB: %.3f MiB = %.3f%% of tracked (%.0f bytes per chunk)\n",
              mib(full->chunks - empty->chunks), pct(full->chunks - empty->chunks),
              stats->newChunks ? static_cast<double>(full->chunks - empty->chunks) / static_cast<double>(stats->newChunks)
                               : 0.0);
  const uint64_t evidenceBytes = out.records.size() * sizeof(AccessEvidence) + out.blocks.size() * sizeof(EvidenceBlock);
  std::printf("daemon RSS: +%.2f MiB after load; +%.2f MiB over the epoch's drain, of which the evidence "
              "(the source's output: %zu records, %zu blocks, for %zu pages) %.2f MiB\n",
              mib(rss1 - rss0), mib(rss2 - rss1), out.records.size(), out.blocks.size(), out.pages(), mib(evidenceBytes));
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

// ---- path-cost: each path's cost per sample against an event nobody consumes ------------------
//
// `cost` measures the paths over an empty BPF program, which cancels the kernel's call into a
// BPF program: a cost only the in-kernel path pays. Here the reference is the same event with no
// consumer at all (no ring, no program: the kernel prepares the sample and finds nowhere to put
// it), so the in-kernel path is charged its program call and the ring path its output. Measured
// on the bench's own thread (CLOCK_THREAD_CPUTIME_ID over a burst of first-touch faults, each
// sampled: distinct pages, sys::perf::faultBurstCpuNs), which other load on the machine disturbs
// far less than a child's totals; the states run in a fresh order each round and each round's differences
// are paired. Each path's collect() after the burst (the daemon's drain) is added per sample.
//
// The empty program's reference leaves out the kernel's call into a program (the per-CPU
// recursion guard, the RCU read section, the program's indirect call), which only the in-kernel
// path pays. `RingKept` measures it: the same ring with a program attached that returns 1, so the
// kernel calls the program and then writes the sample exactly as without it. Ring-kept minus ring,
// paired per round, is that call (an upper bound: preparing the sample a second time, which finds
// it prepared, is in it too); the charged figures add it to both paths over the empty program.
//
// Sample fields: the ring states ask for what the ring path needs (TID and address: its records
// are attributed by TID), the in-kernel state for what its program reads (the address, as the
// daemon opens it: aggregatedSampleType), and the reference states (no consumer, empty program)
// for the same as the in-kernel state, the least any consumer needs. Since 6.3 the kernel prepares
// every requested field before it runs a program, so preparing the TID is the ring path's cost.
enum class Consumer { NoEvent = 0, NoConsumer, EmptyProgram, Ring, InKernel, RingKept };
constexpr const char* kConsumerNames[] = {"no event", "no consumer", "empty program", "user ring", "in-kernel",
                                          "ring + kept"};

// One consumer kept for the whole run, as a daemon keeps its own (its BPF maps' elements and
// allocator caches warm), its events enabled only for its own bursts.
class PathRig {
 public:
  explicit PathRig(Consumer c) : c_(c) {
    if (c == Consumer::NoEvent) {
      ok_ = true;
      return;
    }
    auto cpus = sys::perf::onlineCpus(sys::Fs("/sys"));
    if (!cpus) return;
    if (c == Consumer::EmptyProgram || c == Consumer::RingKept) {
      if ((drop_ = sample_drop__open_and_load()) == nullptr) return;
      program_ = c == Consumer::RingKept ? drop_->progs.tt_keep_sample : drop_->progs.tt_drop_sample;
    }
    if (c == Consumer::InKernel) {
      auto agg = sys::bpf::PerfSampleAgg::load(sys::bpf::kPidMaxLimit, 16384);
      if (!agg) return;
      agg_ = std::move(*agg);
      if (!agg_->track(sys::perf::currentTgid())) return;
    }
    // The ring path 1024 pages per CPU as in `cost` (the daemon's default is 64), the in-kernel path a control
    // ring for throttle and lost records; the baselines none.
    const bool ring = c == Consumer::Ring || c == Consumer::RingKept;
    const uint32_t ringPages = ring ? 1024 : c == Consumer::InKernel ? kControlRingPages : 0;
    for (int cpu : *cpus) {
      perf_event_attr a = softwareFaultAttr(1);
      // The ring states sample what the ring path needs (its records are attributed by TID); the
      // others what the in-kernel path's program reads, as the daemon opens them (SamplingSource).
      if (!ring) a.sample_type = aggregatedSampleType(a.sample_type);
      sampleType_ = a.sample_type;
      a.disabled = 1;
      auto ev = sys::perf::PerfEvent::open(a, -1, cpu, ringPages);
      if (!ev) return;
      if (program_ != nullptr) {
        bpf_link* link = bpf_program__attach_perf_event(program_, (*ev)->fd());
        if (link == nullptr) return;
        links_.push_back(link);
      }
      if (agg_ && !agg_->attach((*ev)->fd(), 0, false)) return;
      events_.push_back(std::move(*ev));
    }
    ring_.track(sys::perf::currentTgid());
    // libbpf's attach to a perf event also enables it: off again, or a program's events would
    // count every other state's faults until the rig's own first burst.
    for (const auto& ev : events_)
      if (!ev->disable()) return;
    ok_ = true;
  }
  ~PathRig() {
    for (bpf_link* l : links_) bpf_link__destroy(l);
    agg_.reset();  // its links before the events
    events_.clear();
    if (drop_) sample_drop__destroy(drop_);
  }
  PathRig(const PathRig&) = delete;
  PathRig& operator=(const PathRig&) = delete;
  bool ok() const { return ok_; }
  void enable(bool on) {
    for (const auto& ev : events_)
      if (!(on ? ev->enable() : ev->disable())) {
        std::fprintf(stderr, "cannot %s the %s events\n", on ? "enable" : "disable", kConsumerNames[static_cast<int>(c_)]);
        std::exit(1);
      }
  }
  // Run time (ns) and runs of the rig's BPF program (run time needs bpf_enable_stats); 0 without.
  std::pair<uint64_t, uint64_t> programRunTime() const {
    if (program_ != nullptr) {
      auto rt = sys::bpf::programRunTime(bpf_program__fd(program_), "sample_drop");
      return rt ? *rt : std::pair<uint64_t, uint64_t>{0, 0};
    }
    if (agg_) {
      auto rt = agg_->runTimeNsAndCount();
      return rt ? *rt : std::pair<uint64_t, uint64_t>{0, 0};
    }
    return {0, 0};
  }
  // The daemon's part, as SamplingSource::collect does it; returns the pages with evidence.
  size_t collect() {
    out_.clear();
    if (agg_) {
      chunks_.clear();
      (void)agg_->drain(chunks_);
      (void)appendChunkBlocks(chunks_, AccessKind::Fault, 1, out_.blocks);
    }
    for (const auto& ev : events_)
      ev->drain([&](std::span<const uint8_t> r) {
        ++ringRecords_;
        ring_.handle(r, sampleType_, AccessKind::Fault, 1, counters_);
      });
    (void)ring_.flush(out_.records);
    return out_.pages();
  }
  // Records drained from the rig's rings, all processes' (the events are system-wide), and the
  // samples among them of this thread's process: the ring path decodes the others too.
  std::pair<uint64_t, uint64_t> ringRecordsAndTracked() const { return {ringRecords_, counters_.samples}; }

 private:
  Consumer c_;
  bool ok_ = false;
  std::vector<std::unique_ptr<sys::perf::PerfEvent>> events_;
  sample_drop* drop_ = nullptr;
  bpf_program* program_ = nullptr;  // drop_'s program this rig attaches (empty or kept)
  std::vector<bpf_link*> links_;
  std::unique_ptr<sys::bpf::PerfSampleAgg> agg_;
  RingRecords ring_{"path-cost"};
  uint64_t sampleType_ = 0;  // of the rig's events, as opened
  SourceCounters counters_;
  uint64_t ringRecords_ = 0;
  std::vector<sys::bpf::ChunkCounts> chunks_;
  EvidenceBatch out_;
};

struct PathBurst {
  double faultNs = 0;   // thread CPU per fault during the burst
  double daemonNs = 0;  // collect() after it, per fault
};

PathBurst pathBurstOnce(PathRig& rig, size_t pages) {
  rig.enable(true);
  PathBurst r;
  auto ns = sys::perf::faultBurstCpuNs(pages);
  rig.enable(false);
  if (!ns) {
    std::fprintf(stderr, "fault burst: %s\n", ns.error().message().c_str());
    std::exit(1);
  }
  r.faultNs = static_cast<double>(*ns) / static_cast<double>(pages);
  const uint64_t c0 = sys::perf::threadCpuNs();
  (void)rig.collect();
  r.daemonNs = static_cast<double>(sys::perf::threadCpuNs() - c0) / static_cast<double>(pages);
  return r;
}

void pathCost(int rounds, size_t pages, bool stats) {
  std::optional<int> statsFd;
  if (stats) {
    auto fd = sys::bpf::enableBpfRunTimeStats();
    if (!fd) {
      std::fprintf(stderr, "cannot enable BPF run-time stats: %s\n", fd.error().message().c_str());
      std::exit(1);
    }
    statsFd = *fd;
  }
  std::printf("path-cost: %d rounds, each a burst of %zu first-touch faults of this thread per state, the states "
              "in a shuffled order; software page-fault event, period 1, every CPU; medians per fault\n",
              rounds, pages);
  constexpr int kStates = 6;
  std::vector<std::unique_ptr<PathRig>> rigs;
  for (int i = 0; i < kStates; ++i) {
    rigs.push_back(std::make_unique<PathRig>(static_cast<Consumer>(i)));
    if (!rigs.back()->ok()) {
      std::fprintf(stderr, "cannot set up %s\n", kConsumerNames[i]);
      std::exit(1);
    }
  }
  // A first round not kept: first use of the code, the maps and their allocators.
  for (int i = 0; i < kStates; ++i) (void)pathBurstOnce(*rigs[static_cast<size_t>(i)], pages);
  std::vector<double> fault[kStates], daemon[kStates];
  std::vector<double> ringCost, kernelCost, dispatch, ratio, ringOverEmpty, kernelOverEmpty, call, ringCharged,
      kernelCharged;
  // A fresh order every round (fixed seed): a rotation would keep each state behind the same
  // other state, and carry-over from one state's burst and drain would then bias the next.
  std::mt19937 shuffle(20261121);
  std::array<int, kStates> order{};
  for (int i = 0; i < kStates; ++i) order[static_cast<size_t>(i)] = i;
  for (int k = 0; k < rounds; ++k) {
    PathBurst b[kStates];
    std::shuffle(order.begin(), order.end(), shuffle);
    for (int state : order) b[state] = pathBurstOnce(*rigs[static_cast<size_t>(state)], pages);
    for (int i = 0; i < kStates; ++i) {
      fault[i].push_back(b[i].faultNs);
      daemon[i].push_back(b[i].daemonNs);
    }
    const auto none = static_cast<int>(Consumer::NoConsumer);
    const double ring = b[static_cast<int>(Consumer::Ring)].faultNs - b[none].faultNs + b[static_cast<int>(Consumer::Ring)].daemonNs;
    const double kern =
        b[static_cast<int>(Consumer::InKernel)].faultNs - b[none].faultNs + b[static_cast<int>(Consumer::InKernel)].daemonNs;
    ringCost.push_back(ring);
    kernelCost.push_back(kern);
    const double empty = b[static_cast<int>(Consumer::EmptyProgram)].faultNs;
    dispatch.push_back(empty - b[none].faultNs);
    ringOverEmpty.push_back(ring + b[none].faultNs - empty);
    kernelOverEmpty.push_back(kern + b[none].faultNs - empty);
    if (kern > 0) ratio.push_back(ring / kern);  // rounds without a positive in-kernel cost have no ratio
    const double programCall = b[static_cast<int>(Consumer::RingKept)].faultNs - b[static_cast<int>(Consumer::Ring)].faultNs;
    call.push_back(programCall);
    ringCharged.push_back(ringOverEmpty.back() + programCall);
    kernelCharged.push_back(kernelOverEmpty.back() + programCall);
  }
  std::printf("%-14s %14s %14s\n", "state", "thread ns/fault", "collect ns/fault");
  for (int i = 0; i < kStates; ++i)
    std::printf("%-14s %14.1f %14.2f\n", kConsumerNames[i], median(fault[i]), median(daemon[i]));
  auto show = [](const char* what, const std::vector<double>& v) {
    const auto [lo, hi] = medianInterval(v);
    std::printf("  %-58s %7.1f ns  [%.1f, %.1f]\n", what, median(v), lo, hi);
  };
  std::printf("per sample, paired per round over the same round's unconsumed event (median, 95%% bootstrap interval):\n");
  show("user ring: output + the daemon's drain and decode", ringCost);
  show("in-kernel: program call + program + the daemon's drain", kernelCost);
  show("empty program over the unconsumed event", dispatch);
  std::printf("the same over the empty program (the reference of `cost`):\n");
  show("user ring", ringOverEmpty);
  show("in-kernel", kernelOverEmpty);
  const auto [elo, ehi] = ratioOfMediansInterval(ringOverEmpty, kernelOverEmpty);
  std::printf("ring / in-kernel over the empty program: ratio of the medians %.2fx, 95%% bootstrap interval [%.2fx, %.2fx]\n",
              median(kernelOverEmpty) > 0 ? median(ringOverEmpty) / median(kernelOverEmpty) : 0.0, elo, ehi);
  std::printf("the kernel's call into a program (ring + kept over the ring), and both paths charged with it:\n");
  show("program call (upper bound)", call);
  show("user ring over the empty program + the call", ringCharged);
  show("in-kernel over the empty program + the call", kernelCharged);
  const auto [clo, chi] = ratioOfMediansInterval(ringCharged, kernelCharged);
  std::printf("ring / in-kernel with the call charged: ratio of the medians %.2fx, 95%% bootstrap interval [%.2fx, %.2fx]\n",
              median(kernelCharged) > 0 ? median(ringCharged) / median(kernelCharged) : 0.0, clo, chi);
  for (Consumer c : {Consumer::Ring, Consumer::RingKept}) {
    const auto [records, tracked] = rigs[static_cast<size_t>(c)]->ringRecordsAndTracked();
    std::printf("%s: %llu records drained, %llu of them this process's samples (%.2f%%; the rest other processes' "
                "faults, decoded and dropped)\n",
                kConsumerNames[static_cast<int>(c)], static_cast<unsigned long long>(records),
                static_cast<unsigned long long>(tracked), records ? 100.0 * static_cast<double>(tracked) / static_cast<double>(records) : 0.0);
  }
  const auto [lo, hi] = ratioOfMediansInterval(ringCost, kernelCost);
  if (median(kernelCost) > 0)
    std::printf("ring / in-kernel over the unconsumed event: ratio of the medians %.2fx, 95%% bootstrap interval "
                "[%.2fx, %.2fx]; median of the per-round ratios %.2fx\n",
                median(ringCost) / median(kernelCost), lo, hi, median(ratio));
  else
    std::printf("ring / in-kernel over the unconsumed event: no ratio (the in-kernel path costs the thread no more "
                "than an event nobody consumes)\n");
  if (statsFd) {
    auto perRun = [&](Consumer c) {
      const auto [ns, runs] = rigs[static_cast<size_t>(c)]->programRunTime();
      return runs ? static_cast<double>(ns) / static_cast<double>(runs) : 0.0;
    };
    std::printf("BPF run-time stats (all rounds, warm-up included): empty program %.1f ns per run, in-kernel program "
                "%.1f ns per run: %.1f ns apart, where the faulting thread's CPU puts them %.1f ns apart\n",
                perRun(Consumer::EmptyProgram), perRun(Consumer::InKernel),
                perRun(Consumer::InKernel) - perRun(Consumer::EmptyProgram),
                median(fault[static_cast<int>(Consumer::InKernel)]) - median(fault[static_cast<int>(Consumer::EmptyProgram)]));
    ::close(*statsFd);
  }
}

// ---- pagemap-scan: soft-dirty's pagemap reads ------------------------------------------------
void pagemapScan(uint64_t mib, int rounds) {
  const size_t bytes = mib << 20;
  auto* mem = static_cast<char*>(::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (mem == MAP_FAILED) {
    std::perror("mmap");
    return;
  }
  (void)::madvise(mem, bytes, MADV_NOHUGEPAGE);
  for (size_t i = 0; i < bytes; i += 4096) mem[i] = 1;
  const uint64_t pages = bytes / 4096, first = reinterpret_cast<uint64_t>(mem) / 4096;
  tt::sys::ProcSoftDirtyTracker tracker(tt::sys::Fs("/proc"));
  if (!tracker.track(::getpid())) {
    std::printf("pagemap-scan: cannot open /proc/self\n");
    return;
  }
  const int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  std::vector<double> bulk, perWord;
  std::vector<uint64_t> dirty;
  const double perGiB = 1024.0 / static_cast<double>(mib);
  for (int r = 0; r < rounds; ++r) {
    dirty.clear();
    uint64_t t = tt::sys::perf::threadCpuNs();
    if (!tracker.dirtyPages(::getpid(), reinterpret_cast<uint64_t>(mem), pages, dirty)) std::printf("dirtyPages failed\n");
    bulk.push_back(static_cast<double>(tt::sys::perf::threadCpuNs() - t) / 1e6 * perGiB);
    t = tt::sys::perf::threadCpuNs();
    uint64_t word = 0;
    for (uint64_t p = 0; p < pages; ++p)
      if (::pread(fd, &word, sizeof word, static_cast<off_t>((first + p) * 8)) != sizeof word) break;
    perWord.push_back(static_cast<double>(tt::sys::perf::threadCpuNs() - t) / 1e6 * perGiB);
  }
  ::close(fd);
  ::munmap(mem, bytes);
  std::sort(bulk.begin(), bulk.end());
  std::sort(perWord.begin(), perWord.end());
  std::printf("pagemap-scan: %llu MiB of this process's pages, %d rounds; thread CPU per GiB scanned (median, min-max):\n",
              static_cast<unsigned long long>(mib), rounds);
  std::printf("  ProcSoftDirtyTracker::dirtyPages (runs of 64 Ki words)  %8.2f ms  [%.2f, %.2f]\n", bulk[bulk.size() / 2],
              bulk.front(), bulk.back());
  std::printf("  one 8-byte pread per page (before fb94ee4)             %8.2f ms  [%.2f, %.2f]\n",
              perWord[perWord.size() / 2], perWord.front(), perWord.back());
}

int main(int argc, char** argv) {
  tt::log::setLevel(tt::log::Level::Warn);
  const std::string mode = argc > 1 ? argv[1] : "all";
  if (mode == "--record-fixture" && argc > 2) return recordFixture(argv[2]);
  if (::geteuid() != 0) {
    std::cerr << "sources_bench needs root (perf_event_open system-wide, BPF)\n";
    return 2;
  }
  if (mode == "cost" && argc > 2) gCostRepeats = std::max(1, std::atoi(argv[2]));
  if (mode == "cost" || mode == "all") cost();
  if (mode == "slowdown" || mode == "all") {
    // sources_bench slowdown [PAIRS [EPOCH_MS [breakdown]]]
    const int pairs = mode == "slowdown" && argc > 2 ? std::max(1, std::atoi(argv[2])) : 15;
    const int epochMs = mode == "slowdown" && argc > 3 ? std::max(10, std::atoi(argv[3])) : 1000;
    const bool breakdown = mode == "slowdown" && argc > 4 && std::string(argv[4]) == "breakdown";
    slowdown(pairs, epochMs, breakdown);
  }
  if (mode == "touch-rounds")
    touchRounds(argc > 2 ? std::max(2, std::atoi(argv[2])) : 100, argc > 3 ? std::max(1, std::atoi(argv[3])) : 64,
                argc > 4 ? std::max(0, std::atoi(argv[4])) : 0);
  if (mode == "storm")
    storm(argc > 2 ? std::max(2, std::atoi(argv[2])) : 8, argc > 3 ? std::max(1.0, std::atof(argv[3])) : 6.0,
          argc > 4 ? static_cast<uint64_t>(std::max(1, std::atoi(argv[4]))) : 64,
          argc > 5 ? std::max(100, std::atoi(argv[5])) : 1000);
  if (mode == "period-latency") periodLatency();
  if (mode == "path-cost")
    pathCost(argc > 2 ? std::max(2, std::atoi(argv[2])) : 101,
             argc > 3 ? static_cast<size_t>(std::max(1024, std::atoi(argv[3]))) : 32768,
             argc > 4 && std::string(argv[4]) == "stats");
  if (mode == "tier-cost") tierCost(argc > 2 ? std::max(1, std::atoi(argv[2])) : 9);
  if (mode == "fault-cost") faultCost(argc > 2 ? std::max(1, std::atoi(argv[2])) : 7);
  if (mode == "slowdown-periods") slowdownPeriods(argc > 2 ? std::max(1, std::atoi(argv[2])) : 9, 1000);
  if (mode == "memory" || mode == "all") memory();
  if (mode == "pagemap-scan")
    pagemapScan(argc > 2 ? static_cast<uint64_t>(std::max(1, std::atoi(argv[2]))) : 1024,
                argc > 3 ? std::max(1, std::atoi(argv[3])) : 5);
  return 0;
}
