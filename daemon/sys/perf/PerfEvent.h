// perf_event_open(2) and its mmap ring buffer: the kernel side of every sampling source.
//
// A PerfEvent is one event fd (one CPU, all processes, or one thread) with an optional mmap ring.
// drain() copies out whole records, unwrapping those that straddle the ring's end, and advances
// data_tail so the kernel can reuse the space; decoding the bytes is pure code
// (sources/PerfDecode.h), tested from recorded fixtures.
#pragma once

#include <linux/perf_event.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/Result.h"
#include "sys/Fs.h"

namespace tt::sys::perf {

class PerfEvent {
 public:
  // Opens `attr` for (pid, cpu) (pid -1 = all processes on cpu). ringPages = 0: no ring (a BPF
  // program consumes the samples in the kernel); otherwise a power of two. groupFd: the fd of an
  // open event on the same CPU to lead this one's group (-1: a group of its own).
  [[nodiscard]] static Result<std::unique_ptr<PerfEvent>> open(const perf_event_attr& attr, pid_t pid, int cpu,
                                                               uint32_t ringPages, int groupFd = -1);
  ~PerfEvent();
  PerfEvent(const PerfEvent&) = delete;
  PerfEvent& operator=(const PerfEvent&) = delete;

  [[nodiscard]] int fd() const { return fd_; }
  [[nodiscard]] int cpu() const { return cpu_; }
  [[nodiscard]] Result<void> enable();
  [[nodiscard]] Result<void> disable();
  // PERF_EVENT_IOC_PERIOD: the new period applies from the next overflow.
  [[nodiscard]] Result<void> setPeriod(uint64_t period);
  // The event's count (read(2), read_format 0): events counted on this CPU since it was opened,
  // whether or not they overflowed into a sample.
  [[nodiscard]] Result<uint64_t> count() const;

  using RecordFn = std::function<void(std::span<const uint8_t> record)>;
  // Hands every complete record in the ring to `fn` (header included) and frees the space.
  // Returns the number of records. No-op without a ring.
  size_t drain(const RecordFn& fn);

 private:
  PerfEvent(int fd, int cpu, void* ring, size_t ringBytes, size_t dataBytes);
  int fd_;
  int cpu_;
  void* ring_;
  size_t mmapBytes_;
  size_t dataBytes_;
  std::vector<uint8_t> scratch_;  // a record that wraps around the ring end is copied here
};

// Why perf_event_open (or a BPF attach through it) failed with errno `err`, when
// kernel.perf_event_paranoid (under `procfs`, rooted at /proc) explains it: at 3 or more,
// Debian's and Ubuntu's kernels let only CAP_SYS_ADMIN open any event, CAP_PERFMON not enough.
// "" for other errors and levels, and for a process that has CAP_SYS_ADMIN (self/status CapEff).
[[nodiscard]] std::string paranoidHint(const Fs& procfs, int err);

// Online CPUs from /sys/devices/system/cpu/online ("0-3,6").
[[nodiscard]] Result<std::vector<int>> onlineCpus(const Fs& sysfs);

// The dynamic PMU type of a named event source (/sys/bus/event_source/devices/<pmu>/type),
// e.g. "ibs_op" on AMD; ENOENT when the PMU is absent.
[[nodiscard]] Result<uint32_t> pmuType(const Fs& sysfs, const std::string& pmu);

// One bit of a PMU's sysfs format attribute (bus/event_source/devices/<pmu>/format/<field>, e.g.
// ibs_op's swfilt "config2:0"): which attr word (0 config, 1 config1, 2 config2) and bit.
struct PmuConfigBit {
  unsigned word = 0;
  unsigned bit = 0;
};
// Parses "configN:B" / "config:B"; a field spanning several bits ("config:0-7") is an error.
[[nodiscard]] Result<PmuConfigBit> parsePmuFormatBit(std::string_view spec);
// The one-bit format field `field` of `pmu`; ENOENT when the kernel does not define it.
[[nodiscard]] Result<PmuConfigBit> pmuFormatBit(const Fs& sysfs, const std::string& pmu, const std::string& field);
// Whether `pmu` lists the named event (bus/event_source/devices/<pmu>/events/<event>).
[[nodiscard]] bool pmuHasEvent(const Fs& sysfs, const std::string& pmu, const std::string& event);

// CPU time of the calling thread (CLOCK_THREAD_CPUTIME_ID), nanoseconds.
[[nodiscard]] uint64_t threadCpuNs();
[[nodiscard]] uint64_t monotonicNs();

// Maps `pages` fresh anonymous pages (no huge pages), writes one byte to each (one user page
// fault per page, as a first-touch storm takes them), unmaps them, and returns the CPU time the
// calling thread spent doing so (user + system, CLOCK_THREAD_CPUTIME_ID, ns). Used to calibrate
// the kernel-side cost of a software page-fault sample, which runs in the faulting thread.
[[nodiscard]] Result<uint64_t> faultBurstCpuNs(size_t pages);
// The calling process's id (getpid(2)).
[[nodiscard]] pid_t currentTgid();

}  // namespace tt::sys::perf
