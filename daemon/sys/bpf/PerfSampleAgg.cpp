#include "sys/bpf/PerfSampleAgg.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "perf_sample_agg.skel.h"
#include "sys/bpf/LibbpfLog.h"
#include "sys/bpf/RunStats.h"
#include "sys/bpf/TgidBitmap.h"
#include "tt_events.h"

namespace tt::sys::bpf {

const char* toString(DataSrcReader r) {
  switch (r) {
    case DataSrcReader::Kfunc: return "bpf_cast_to_kern_ctx";
    case DataSrcReader::ProbeRead: return "bpf_probe_read_kernel";
    case DataSrcReader::None: break;
  }
  return "none";
}

namespace {

// Whether the running kernel has the kfunc (6.2+): the program calling it is loaded only then.
bool kernelHasCastToKernCtx() {
  btf* vmlinux = btf__load_vmlinux_btf();
  if (vmlinux == nullptr) return false;
  const bool has = btf__find_by_name_kind(vmlinux, "bpf_cast_to_kern_ctx", BTF_KIND_FUNC) > 0;
  btf__free(vmlinux);
  return has;
}

}  // namespace

Result<std::unique_ptr<PerfSampleAgg>> PerfSampleAgg::load(uint32_t pidMax, uint32_t maxChunks,
                                                           DataSrcReader mostCapable) {
  routeLibbpfLogs();
  // One object holds every program, and a failed load fails all of them: the data_src readers are
  // tried best first and given up one after the other, so that a kernel that refuses them still
  // counts samples (without their tier) rather than losing in-kernel aggregation.
  std::vector<DataSrcReader> tries;
  if (mostCapable >= DataSrcReader::Kfunc && kernelHasCastToKernCtx()) tries.push_back(DataSrcReader::Kfunc);
  if (mostCapable >= DataSrcReader::ProbeRead) tries.push_back(DataSrcReader::ProbeRead);
  tries.push_back(DataSrcReader::None);
  std::string why;
  for (DataSrcReader reader : tries) {
    auto agg = loadWith(pidMax, maxChunks, reader);
    if (agg) {
      (*agg)->readerError_ = why;
      return agg;
    }
    if (reader == DataSrcReader::None) return agg.error();
    why += std::string(why.empty() ? "" : "; ") + toString(reader) + ": " + agg.error().message();
  }
  return logicError("no perf_sample_agg variant to load");
}

Result<std::unique_ptr<PerfSampleAgg>> PerfSampleAgg::loadWith(uint32_t pidMax, uint32_t maxChunks,
                                                              DataSrcReader reader) {
  perf_sample_agg* skel = perf_sample_agg__open();
  if (skel == nullptr) return errnoError("open BPF object perf_sample_agg");
  std::unique_ptr<PerfSampleAgg> self(new PerfSampleAgg(skel, pidMax, reader));
  if (bpf_map__set_max_entries(skel->maps.tracked_bits, tgidBitmapWords(pidMax)) != 0 ||
      bpf_map__set_max_entries(skel->maps.chunks0, maxChunks) != 0 ||
      bpf_map__set_max_entries(skel->maps.chunks1, maxChunks) != 0)
    return errnoError("size perf_sample_agg maps");
  if (bpf_program__set_autoload(skel->progs.tt_count_sample_sourced, reader == DataSrcReader::Kfunc) != 0 ||
      bpf_program__set_autoload(skel->progs.tt_count_sample_sourced_read, reader == DataSrcReader::ProbeRead) != 0)
    return errnoError("select perf_sample_agg programs");
  if (int err = perf_sample_agg__load(skel); err != 0) return systemError(-err, "load BPF perf_sample_agg");
  return self;
}

PerfSampleAgg::PerfSampleAgg(perf_sample_agg* skel, uint32_t pidMax, DataSrcReader reader)
    : skel_(skel), pidMax_(pidMax), reader_(reader), chunks_("perf_sample_agg chunks") {}

PerfSampleAgg::~PerfSampleAgg() {
  for (bpf_link* link : links_) bpf_link__destroy(link);
  perf_sample_agg__destroy(skel_);
}

Result<void> PerfSampleAgg::attach(int perfEventFd, uint32_t kind, bool recordsDataSrc) {
  // Each event gets the cheapest program that knows what its samples are (see the .bpf.c).
  LIBBPF_OPTS(bpf_perf_event_opts, opts, .bpf_cookie = kind);
  bpf_program* prog = skel_->progs.tt_count_sample;
  if (recordsDataSrc && reader_ == DataSrcReader::Kfunc)
    prog = skel_->progs.tt_count_sample_sourced;
  else if (recordsDataSrc && reader_ == DataSrcReader::ProbeRead)
    prog = skel_->progs.tt_count_sample_sourced_read;
  else if (kind != TT_KIND_DEFAULT)
    prog = skel_->progs.tt_count_sample_kinded;
  bpf_link* link = bpf_program__attach_perf_event_opts(prog, perfEventFd, &opts);
  if (link == nullptr) return errnoError("attach perf_sample_agg to perf fd " + std::to_string(perfEventFd));
  links_.push_back(link);
  return {};
}

Result<void> PerfSampleAgg::setBit(pid_t tgid, bool on) {
  return setTgidBit(bpf_map__fd(skel_->maps.tracked_bits), pidMax_, tgid, on, "perf_sample_agg");
}

Result<void> PerfSampleAgg::track(pid_t tgid) { return setBit(tgid, true); }

Result<void> PerfSampleAgg::untrack(pid_t tgid) { return setBit(tgid, false); }

Result<size_t> PerfSampleAgg::drain(std::vector<ChunkCounts>& out) {
  return chunks_.drain(chunkMapFdsOf(*skel_), out);
}

Result<AggStats> PerfSampleAgg::stats() const {
  const int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) return systemError(-ncpu, "libbpf_num_possible_cpus");
  std::vector<uint64_t> perCpu(static_cast<size_t>(ncpu));
  uint64_t sums[TT_AGG_NR_STATS] = {};
  for (uint32_t i = 0; i < TT_AGG_NR_STATS; ++i) {
    if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.stats), &i, perCpu.data()) != 0)
      return errnoError("read perf_sample_agg stats");
    for (uint64_t v : perCpu) sums[i] += v;
  }
  return AggStats{sums[TT_AGG_SAMPLES],
                  sums[TT_AGG_TRACKED],
                  sums[TT_AGG_NO_ADDR],
                  sums[TT_AGG_MAP_FULL],
                  sums[TT_AGG_NEW_CHUNKS],
                  sums[TT_AGG_SATURATED] + chunks_.saturated(),
                  sums[TT_AGG_TIER_KNOWN],
                  sums[TT_AGG_DATA_SRC_NA]};
}

Result<std::pair<uint64_t, uint64_t>> PerfSampleAgg::runTimeNsAndCount() const {
  // Every loaded program: a source's events each have one of them, so the sum is the source's.
  std::pair<uint64_t, uint64_t> total{0, 0};
  for (const bpf_program* prog : {skel_->progs.tt_count_sample, skel_->progs.tt_count_sample_kinded,
                                  skel_->progs.tt_count_sample_sourced, skel_->progs.tt_count_sample_sourced_read}) {
    if (!bpf_program__autoload(prog)) continue;
    auto rt = programRunTime(bpf_program__fd(prog), std::string("perf_sample_agg ") + bpf_program__name(prog));
    if (!rt) return rt.error();
    total.first += rt->first;
    total.second += rt->second;
  }
  return total;
}

Result<PerfSampleAgg::MapMemory> PerfSampleAgg::mapMemory() const {
  auto memlock = [](const bpf_map* map) -> Result<uint64_t> {
    const std::string path = "/proc/self/fdinfo/" + std::to_string(bpf_map__fd(map));
    std::ifstream in(path);
    if (!in) return errnoError("open " + path);
    std::string key;
    uint64_t value = 0;
    while (in >> key)
      if (key == "memlock:" && (in >> value)) return value;
    return logicError(path + " has no memlock line");
  };
  MapMemory m;
  for (const bpf_map* map : {skel_->maps.chunks0, skel_->maps.chunks1}) {
    auto v = memlock(map);
    if (!v) return v.error();
    m.chunks += *v;
  }
  for (const bpf_map* map : {skel_->maps.tracked_bits, skel_->maps.chunk_stage, skel_->maps.chunk_generation,
                              skel_->maps.chunk_grace, skel_->maps.chunk_grace_inner, skel_->maps.rodata,
                              skel_->maps.stats}) {
    auto v = memlock(map);
    if (!v) return v.error();
    m.other += *v;
  }
  return m;
}

}  // namespace tt::sys::bpf
