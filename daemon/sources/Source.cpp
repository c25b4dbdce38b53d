#include "sources/Source.h"

#include <algorithm>
#include <tuple>

namespace tt::sources {

void TrackedProcesses::track(pid_t tgid) {
  if (untracked_.contains(tgid)) reused_.insert(tgid);
  tracked_.insert(tgid);
}

void TrackedProcesses::untrack(pid_t tgid) {
  if (tracked_.erase(tgid) > 0) untracked_.insert(tgid);
}

namespace {
template <typename T>
size_t eraseFrom(std::vector<T>& v, size_t from, const TrackedProcesses& kept) {
  const auto begin = v.begin() + static_cast<std::ptrdiff_t>(std::min(from, v.size()));
  const auto end = std::remove_if(begin, v.end(), [&](const T& e) { return !kept.keeps(e.tgid); });
  const auto dropped = static_cast<size_t>(v.end() - end);
  v.erase(end, v.end());
  return dropped;
}
}  // namespace

size_t TrackedProcesses::filter(EvidenceBatch& batch, size_t recordsFrom, size_t blocksFrom) const {
  return eraseFrom(batch.records, recordsFrom, *this) + eraseFrom(batch.blocks, blocksFrom, *this);
}

void TrackedProcesses::collected() {
  untracked_.clear();
  reused_.clear();
}

void TrackedProcesses::clear() {
  tracked_.clear();
  collected();
}

void EvidenceAggregator::add(pid_t tgid, uint64_t address, AccessKind kind, uint32_t weight, ServedBy servedBy,
                             uint16_t latencyCycles) {
  const uint64_t page = address & ~(kBasePageSize - 1);
  auto [it, inserted] = entries_.try_emplace(Key{tgid, kind, page});
  AccessEvidence& m = it->second;
  if (inserted) {
    m.tgid = tgid;
    m.page = page;
    m.kind = kind;
    m.weight = weight;
    m.servedBy = servedBy;
    m.latencyCycles = latencyCycles;
    return;
  }
  const uint64_t w = uint64_t{m.weight} + weight;
  m.weight = w > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(w);
  // Keep the slowest memory and the highest latency seen: what the page costs is what matters.
  m.servedBy = slowerOf(m.servedBy, servedBy);
  m.latencyCycles = std::max(m.latencyCycles, latencyCycles);
}

size_t EvidenceAggregator::flush(std::vector<AccessEvidence>& out) {
  const size_t before = out.size();
  out.reserve(before + entries_.size());
  for (auto& [key, e] : entries_) out.push_back(e);
  entries_.clear();
  auto key = [](const AccessEvidence& e) { return std::tuple(e.tgid, e.page, e.kind); };
  std::sort(out.begin() + static_cast<std::ptrdiff_t>(before), out.end(),
            [&](const auto& a, const auto& b) { return key(a) < key(b); });
  return out.size() - before;
}

}  // namespace tt::sources
