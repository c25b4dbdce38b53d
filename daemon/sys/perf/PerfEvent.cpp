#include "sys/perf/PerfEvent.h"

#include <linux/capability.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "core/Parse.h"
#include "sys/ProcStat.h"


namespace tt::sys::perf {

Result<std::unique_ptr<PerfEvent>> PerfEvent::open(const perf_event_attr& attr, pid_t pid, int cpu,
                                                   uint32_t ringPages, int groupFd) {
  if (ringPages != 0 && (ringPages & (ringPages - 1)) != 0)
    return logicError("perf ring of " + std::to_string(ringPages) + " pages: must be a power of two");
  perf_event_attr a = attr;
  a.size = sizeof(a);
  const int fd = static_cast<int>(::syscall(SYS_perf_event_open, &a, pid, cpu, groupFd, PERF_FLAG_FD_CLOEXEC));
  if (fd < 0) {
    const int err = errno;
    return systemError(err, "perf_event_open type " + std::to_string(a.type) + " config 0x" +
                                [&] { char b[32]; snprintf(b, sizeof b, "%llx", static_cast<unsigned long long>(a.config)); return std::string(b); }() +
                                " pid " + std::to_string(pid) + " cpu " + std::to_string(cpu) +
                                (groupFd >= 0 ? " in a group" : "") + paranoidHint(Fs("/proc"), err));
  }
  void* ring = nullptr;
  size_t mmapBytes = 0, dataBytes = 0;
  if (ringPages != 0) {
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    dataBytes = page * ringPages;
    mmapBytes = page + dataBytes;
    ring = ::mmap(nullptr, mmapBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (ring == MAP_FAILED) {
      auto err = errnoError("mmap perf ring (" + std::to_string(ringPages) + " pages) cpu " + std::to_string(cpu));
      ::close(fd);
      return err;
    }
  }
  return std::unique_ptr<PerfEvent>(new PerfEvent(fd, cpu, ring, mmapBytes, dataBytes));
}

PerfEvent::PerfEvent(int fd, int cpu, void* ring, size_t mmapBytes, size_t dataBytes)
    : fd_(fd), cpu_(cpu), ring_(ring), mmapBytes_(mmapBytes), dataBytes_(dataBytes) {}

PerfEvent::~PerfEvent() {
  if (ring_ != nullptr) ::munmap(ring_, mmapBytes_);
  ::close(fd_);
}

Result<void> PerfEvent::enable() {
  if (::ioctl(fd_, PERF_EVENT_IOC_ENABLE, 0) != 0) return errnoError("PERF_EVENT_IOC_ENABLE cpu " + std::to_string(cpu_));
  return {};
}

Result<void> PerfEvent::disable() {
  if (::ioctl(fd_, PERF_EVENT_IOC_DISABLE, 0) != 0) return errnoError("PERF_EVENT_IOC_DISABLE cpu " + std::to_string(cpu_));
  return {};
}

Result<void> PerfEvent::setPeriod(uint64_t period) {
  if (::ioctl(fd_, PERF_EVENT_IOC_PERIOD, &period) != 0)
    return errnoError("PERF_EVENT_IOC_PERIOD " + std::to_string(period) + " cpu " + std::to_string(cpu_));
  return {};
}

Result<uint64_t> PerfEvent::count() const {
  uint64_t v = 0;
  if (::read(fd_, &v, sizeof v) != static_cast<ssize_t>(sizeof v)) return errnoError("read perf count cpu " + std::to_string(cpu_));
  return v;
}

size_t PerfEvent::drain(const RecordFn& fn) {
  if (ring_ == nullptr) return 0;
  auto* meta = static_cast<perf_event_mmap_page*>(ring_);
  const auto* data = static_cast<const uint8_t*>(ring_) + (mmapBytes_ - dataBytes_);
  // data_head is written by the kernel; the acquire load orders our reads of the records after it.
  const uint64_t head = __atomic_load_n(&meta->data_head, __ATOMIC_ACQUIRE);
  uint64_t tail = meta->data_tail;
  size_t records = 0;
  while (tail < head) {
    const size_t offset = tail % dataBytes_;
    perf_event_header header;
    if (offset + sizeof header <= dataBytes_) {
      std::memcpy(&header, data + offset, sizeof header);
    } else {
      const size_t first = dataBytes_ - offset;
      std::memcpy(&header, data + offset, first);
      std::memcpy(reinterpret_cast<uint8_t*>(&header) + first, data, sizeof header - first);
    }
    // The kernel publishes data_head only past whole records, so this is corruption: skip what is
    // left rather than stop here for good (the tail would never move again).
    if (header.size < sizeof header || tail + header.size > head) {
      tail = head;
      break;
    }
    if (offset + header.size <= dataBytes_) {
      fn(std::span<const uint8_t>(data + offset, header.size));
    } else {
      scratch_.resize(header.size);
      const size_t first = dataBytes_ - offset;
      std::memcpy(scratch_.data(), data + offset, first);
      std::memcpy(scratch_.data() + first, data, header.size - first);
      fn(std::span<const uint8_t>(scratch_.data(), header.size));
    }
    tail += header.size;
    ++records;
  }
  // Release: the kernel may overwrite the space only after we are done reading it.
  __atomic_store_n(&meta->data_tail, tail, __ATOMIC_RELEASE);
  return records;
}

std::string paranoidHint(const Fs& procfs, int err) {
  if (err != EACCES && err != EPERM) return "";
  auto line = procfs.readLine("sys/kernel/perf_event_paranoid");
  if (!line) return "";
  auto level = parseUint(trim(*line));  // -1 (no restriction at all) does not parse: not >= 3
  if (!level || *level < 3) return "";
  // A process that has CAP_SYS_ADMIN was refused for another reason (an LSM, say).
  if (auto caps = procfs.readParsed("self/status", parseStatusEffectiveCaps); caps && (*caps >> CAP_SYS_ADMIN) & 1)
    return "";
  return " (kernel.perf_event_paranoid=" + std::to_string(*level) +
         ": this kernel lets only CAP_SYS_ADMIN open perf events; the shipped unit grants it)";
}

Result<std::vector<int>> onlineCpus(const Fs& sysfs) {
  auto line = sysfs.readLine("devices/system/cpu/online");
  if (!line) return line.error();
  auto cpus = parseIdList(*line);
  if (!cpus) return withContext(cpus.error(), sysfs.resolve("devices/system/cpu/online"));
  if (cpus->empty()) return logicError("no online CPUs in " + sysfs.resolve("devices/system/cpu/online"));
  return cpus;
}

Result<uint32_t> pmuType(const Fs& sysfs, const std::string& pmu) {
  auto line = sysfs.readLine("bus/event_source/devices/" + pmu + "/type");
  if (!line) return line.error();
  auto type = parseUint(*line);
  if (!type) return withContext(type.error(), "PMU " + pmu + " type");
  return static_cast<uint32_t>(*type);
}

Result<PmuConfigBit> parsePmuFormatBit(std::string_view spec) {
  const auto bad = [&] { return logicError("PMU format \"" + std::string(spec) + "\": not configN:bit"); };
  const size_t colon = spec.find(':');
  if (colon == std::string_view::npos || spec.substr(0, 6) != "config") return bad();
  PmuConfigBit b;
  const std::string_view word = spec.substr(6, colon - 6);
  if (!word.empty()) {
    auto w = parseUint(word);
    if (!w || *w > 2) return bad();
    b.word = static_cast<unsigned>(*w);
  }
  auto bit = parseUint(spec.substr(colon + 1));  // a range "0-7" does not parse: not one bit
  if (!bit || *bit > 63) return bad();
  b.bit = static_cast<unsigned>(*bit);
  return b;
}

Result<PmuConfigBit> pmuFormatBit(const Fs& sysfs, const std::string& pmu, const std::string& field) {
  auto line = sysfs.readLine("bus/event_source/devices/" + pmu + "/format/" + field);
  if (!line) return line.error();
  return parsePmuFormatBit(*line);
}

bool pmuHasEvent(const Fs& sysfs, const std::string& pmu, const std::string& event) {
  return sysfs.exists("bus/event_source/devices/" + pmu + "/events/" + event);
}

uint64_t threadCpuNs() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t monotonicNs() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

Result<uint64_t> faultBurstCpuNs(size_t pages) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t bytes = pages * page;
  void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return errnoError("mmap " + std::to_string(bytes) + " bytes for a fault burst");
  (void)::madvise(m, bytes, MADV_NOHUGEPAGE);  // one fault per page, not one per 2 MiB
  auto* p = static_cast<volatile char*>(m);
  const uint64_t t0 = threadCpuNs();
  for (size_t i = 0; i < pages; ++i) p[i * page] = 1;
  const uint64_t t1 = threadCpuNs();
  ::munmap(m, bytes);
  return t1 - t0;
}

pid_t currentTgid() { return ::getpid(); }

}  // namespace tt::sys::perf
