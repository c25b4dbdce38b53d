// Sampling sources: per-CPU perf events (PMU precise memory sampling, or the software page-fault
// event) whose samples are counted per (tgid, page) either
//   - in the kernel, by bpf/perf_sample_agg attached to each event (blocks of 512 per-page
//     counters per 2 MiB chunk; the daemon reads one map per epoch and hands the blocks on as
//     evidence blocks; samples never reach a ring buffer), or
//   - in user space, by reading every sample from the per-CPU mmap rings (the path for kernels
//     without BPF, and the baseline the benchmark compares against).
// Events are system-wide per CPU (pid -1), so threads a process creates later are covered; the
// tgid filter is a BPF bitmap over every possible pid (in-kernel, sys/bpf/TgidBitmap.h) or a set (user ring),
// changed at run time.
//
// The sample period adapts so the whole cost of sampling stays under the CPU budget
// (PeriodController): every epoch, events x the cost of counting one + overflows x the kernel-side
// cost of one sample (both run in the sampled thread, invisible to the daemon) + this thread's CPU
// time in collect(). Events and overflows come from the events' counts (all processes: the events
// are system-wide). The unit costs are calibrated at open() for the software page-fault event
// (calibrateSampleCost), else the configured sampleCostNs and no counting cost.
#pragma once

#include <linux/perf_event.h>

#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "sources/PeriodController.h"
#include "sources/PerfDecode.h"
#include "sources/RingRecords.h"
#include "sources/Source.h"
#include "sys/Fs.h"
#include "sys/bpf/PerfSampleAgg.h"
#include "sys/perf/PerfEvent.h"

namespace tt::sources {

enum class Aggregation { InKernel, UserRing };

struct SamplingOptions {
  std::string name;                     // "pmu", "software-faults"
  std::vector<perf_event_attr> events;  // each opened on every online CPU; sample_period = initial
  std::string eventDescription;         // for the status line
  Aggregation aggregation = Aggregation::InKernel;
  uint32_t ringPages = 64;
  uint64_t minPeriod = 1;
  uint64_t maxPeriod = 1;
  double cpuBudgetPercent = 2.0;
  // Kernel-side cost of one sample (ns) charged against the budget, unless calibrated.
  double sampleCostNs = 1000;
  // Measure the kernel-side cost of a sample at open(): only for the software page-fault event,
  // which the daemon's own thread can raise on demand (see calibrate()).
  bool calibrateSampleCost = false;
  uint32_t mapEntries = 16384;  // in-kernel count blocks (2 MiB chunks) per epoch at most
  // Evidence kind when the sample has no data_src (software events): Fault.
  AccessKind defaultKind = AccessKind::Fault;
  // What each of `events` samples (parallel to it; missing entries: defaultKind). The ring path
  // takes a sample's kind from its data_src where that names a load or a store (IBS ops), and the
  // event's kind here otherwise (PEBS loads and stores are separate events); the in-kernel path
  // always counts the event's kind (a staging block is per kind: see perf_sample_agg.bpf.c). The
  // heat model weighs every kind alike, so only the evidence's labels differ.
  std::vector<AccessKind> eventKinds;
  // Parallel to `events` (missing entries: none): a non-sampling event opened first on each CPU
  // to lead that event's group (PmuPlan::groupLeaders). Kept open and enabled beside the events;
  // no ring, no BPF program, no period changes.
  std::vector<std::optional<perf_event_attr>> groupLeaders;
  // Every period a multiple of periodGranularity and at least periodMinimum, whatever the
  // configured bounds (PmuPlan: what the PMU accepts, IBS 16 and 0x90).
  uint64_t periodGranularity = 1;
  uint64_t periodMinimum = 1;
};

// The software page-fault event every `period` faults, sampling TID|ADDR (user-space faults only).
[[nodiscard]] perf_event_attr softwareFaultAttr(uint64_t period);
// A software page-fault source sampling every `period` faults (fixed: min = max = period); the
// caller widens the period bounds and sets the budget where they should adapt.
[[nodiscard]] SamplingOptions softwareFaultOptions(uint64_t period, Aggregation aggregation);

// Turns drained count blocks into evidence blocks appended to `out`, one per (tgid, kind, chunk)
// as drained: the counts and tier bits as the kernel kept them, each count standing for `period`
// accesses (EvidenceBlock::weightPerCount), the kind the block's, `kind` for blocks of the default
// kind. Returns the pages with evidence.
size_t appendChunkBlocks(const std::vector<sys::bpf::ChunkCounts>& chunks, AccessKind kind, uint64_t period,
                         std::vector<EvidenceBlock>& out);
// A data address in the kernel half (x86-64: the top bit set). IBS without swfilt samples kernel
// mode too; such addresses are never pages of a tracked process, and reporting them would leak
// kernel layout into the evidence.
[[nodiscard]] constexpr bool isKernelAddress(uint64_t addr) { return (addr >> 63) != 0; }
// count x period as an evidence weight (AccessEvidence::weight), saturating at UINT32_MAX.
[[nodiscard]] uint32_t scaledWeight(uint64_t count, uint64_t period);

// The sample fields an event keeps on the in-kernel path: those perf_sample_agg.bpf.c reads, the
// address and, where the event records it, data_src. Since 6.3 the kernel prepares every field of
// sample_type before it runs the program, for every sample of every process on the CPU, and the
// program needs none of the others: it takes the tgid from the current task, so PERF_SAMPLE_TID
// alone (two pid-namespace lookups per sample, 40-120 ns of a first-touch fault on the development
// host; docs/benchmarks.md, path-cost) was paid for nothing. Before 6.3 the program ran before
// the fields were prepared: nothing to gain there, nothing lost. The ring path keeps the
// configured fields: its records are attributed by their TID.
[[nodiscard]] constexpr uint64_t aggregatedSampleType(uint64_t sampleType) {
  return sampleType & (PERF_SAMPLE_ADDR | PERF_SAMPLE_DATA_SRC);
}

// An event's attributes on the in-kernel path: aggregatedSampleType's fields, and a wakeup per
// sample. The wakeup keeps Intel's large PEBS off. The kernel turns it on for a precise event with
// a fixed period, no per-sample wakeup and only PEBS-buffer fields (intel_pmu_hw_config), and then
// writes every record of a PEBS buffer drain but the last straight into the ring
// (__intel_pmu_pebs_event: perf_event_output), past the program, which runs from the overflow
// handler only: it would count one record a drain, and the rest would fill the one-page control
// ring and be lost. Nothing reaches that ring to wake anyone but throttle and lost records, since
// the program consumes every sample. The ring path keeps large PEBS: it reads every record either
// way, in fewer interrupts.
[[nodiscard]] inline perf_event_attr aggregatedAttr(const perf_event_attr& configured) {
  perf_event_attr a = configured;
  a.sample_type = aggregatedSampleType(configured.sample_type);
  a.watermark = 0;
  a.wakeup_events = 1;
  return a;
}

// Ring of each event on the in-kernel path, in data pages: the BPF program consumes every sample,
// so it carries only the kernel's throttle and lost records.
inline constexpr uint32_t kControlRingPages = 1;

class SamplingSource final : public Source {
 public:
  SamplingSource(SamplingOptions options, sys::Fs sysfs);
  ~SamplingSource() override;
  // Opens the events; never fails: status() says what happened.
  void open();

  std::string_view name() const override { return options_.name; }
  const SourceStatus& status() const override { return status_; }
  Result<void> addProcess(pid_t tgid) override;
  Result<void> removeProcess(pid_t tgid) override;
  Result<void> collect(EvidenceBatch& out) override;
  SourceCounters counters() const override { return counters_; }
  Result<void> setSamplingLimits(const SamplingLimits& limits) override;

  [[nodiscard]] Aggregation aggregation() const { return aggregation_; }
  // The sample_type each open event asked the kernel for (one per event and CPU).
  [[nodiscard]] const std::vector<uint64_t>& eventSampleTypes() const { return eventSampleType_; }
  [[nodiscard]] uint64_t period() const { return period_; }
  // Kernel-side cost of the in-kernel path so far (BPF run time, ns) when stats are enabled.
  [[nodiscard]] uint64_t bpfRunTimeNs() const;
  [[nodiscard]] const sys::bpf::PerfSampleAgg* agg() const { return agg_.get(); }
  // Kernel-side cost per sample in use (ns), and whether open() measured it.
  [[nodiscard]] double sampleCostNs() const { return controller_.limits().sampleCostNs; }
  [[nodiscard]] bool sampleCostCalibrated() const { return calibratedCostNs_ > 0; }
  // CPU a thread spends per event without sampling (one page fault), when calibrated; else 0.
  [[nodiscard]] double eventCostNs() const { return eventCostNs_; }
  // Extra CPU per event of the event being enabled (counting, no sample), when calibrated; else 0.
  [[nodiscard]] double eventCountNs() const { return eventCountNs_; }
  [[nodiscard]] uint64_t lowestPeriod() const { return controller_.lowestPeriod(); }

 private:
  // Opens every configured event on every CPU; `forProgram`: with the fields the in-kernel
  // program reads only (aggregatedSampleType).
  // On failure nothing stays open.
  Result<void> openEvents(uint32_t ringPages, bool forProgram);
  Result<void> openEachEvent(uint32_t ringPages, bool forProgram);
  void closeEvents();
  // Measures calibratedCostNs_ and eventCostNs_ with bursts of the daemon's own page faults.
  [[nodiscard]] Result<void> calibrate();
  [[nodiscard]] PeriodLimits periodLimits() const;
  // Events counted on all events since the last call, and the samples among them (/ period).
  void takeCounts(uint64_t& events, uint64_t& overflows);
  void adaptPeriod(const EpochCost& epoch);
  // Sets every event's period (PERF_EVENT_IOC_PERIOD); on failure the old period stays recorded.
  Result<void> changePeriod(uint64_t next);
  // Drains the samples taken so far, weighted by period_: in-kernel blocks into `blocks`, ring
  // records into ring_. The drain's error, if any (what was drained before it is kept).
  std::optional<Error> drainSamples(std::vector<EvidenceBlock>& blocks);

  SamplingOptions options_;
  sys::Fs sysfs_;
  SourceStatus status_;
  SourceCounters counters_;
  Aggregation aggregation_ = Aggregation::UserRing;
  std::vector<std::unique_ptr<sys::perf::PerfEvent>> events_;
  std::vector<std::unique_ptr<sys::perf::PerfEvent>> leaders_;  // group leaders (no samples)
  std::string physAddrDropped_;  // why the events sample without PHYS_ADDR, when they had to
  std::string skippedCpus_;      // CPUs an event's PMU did not cover (hybrid parts), for the status
  std::vector<uint64_t> eventSampleType_;  // parallel to events_
  std::vector<AccessKind> eventKind_;       // parallel to events_
  std::unique_ptr<sys::bpf::PerfSampleAgg> agg_;
  // The ring records of every event; a sample stands for period_ events, the period in force when
  // it was drained (the period changes at a collect, or on live tuning after a drain).
  RingRecords ring_{options_.name};
  // In-kernel blocks drained before a live period change, handed out at the next collect.
  std::vector<EvidenceBlock> drainedBeforePeriodChange_;
  std::vector<sys::bpf::ChunkCounts> chunks_;
  uint64_t throttledAtLastEpoch_ = 0;  // counters_.throttled at the previous collect
  uint64_t lostAtLastEpoch_ = 0;       // counters_.lost at the previous collect
  uint64_t lastAggSamples_ = 0;  // tracked samples with an address the BPF program has seen
  uint64_t lastAggMapFull_ = 0;  // of them, dropped because the count map was full
  uint64_t period_ = 1;
  uint64_t lastWallNs_ = 0;
  std::vector<uint64_t> lastCounts_;  // parallel to events_
  double calibratedCostNs_ = 0;       // 0: not calibrated
  double eventCostNs_ = 0;
  double eventCountNs_ = 0;
  PeriodController controller_;
};

}  // namespace tt::sources
