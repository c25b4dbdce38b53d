#include "core/Types.h"

#include <algorithm>
#include <cmath>

namespace tt {

const char* accessKindName(AccessKind kind) {
  switch (kind) {
    case AccessKind::Load: return "load";
    case AccessKind::Store: return "store";
    case AccessKind::Fault: return "fault";
    case AccessKind::Hint: return "hint";
    case AccessKind::Access: return "access";
  }
  return "?";
}

ServedBy slowerOf(ServedBy a, ServedBy b) {
  // Position in kBlockTiers, fastest first; Unknown (absent) ranks below every memory.
  auto rank = [](ServedBy s) {
    const auto* it = std::find(kBlockTiers.begin(), kBlockTiers.end(), s);
    return it == kBlockTiers.end() ? -1 : static_cast<int>(it - kBlockTiers.begin());
  };
  return rank(b) > rank(a) ? b : a;
}

namespace {
bool usableRate(double bytesPerSec) { return bytesPerSec > 0 && std::isfinite(bytesPerSec); }
}  // namespace

bool MigrationRates::known() const { return usableRate(promoteBytesPerSec) && usableRate(demoteBytesPerSec); }

MigrationRates MigrationRates::filledIn(double fallback) const {
  if (known()) return *this;
  if (usableRate(promoteBytesPerSec)) return {promoteBytesPerSec, promoteBytesPerSec};
  if (usableRate(demoteBytesPerSec)) return {demoteBytesPerSec, demoteBytesPerSec};
  return {fallback, fallback};
}

uint32_t EvidenceBlock::weight(uint32_t page) const {
  const uint64_t w = uint64_t{counts[page]} * weightPerCount;
  return w > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(w);
}

ServedBy EvidenceBlock::servedBy(uint32_t page) const {
  const uint64_t bit = uint64_t{1} << (page % 64);
  for (size_t p = kBlockTiers.size(); p-- > 0;)
    if (served[p * kBlockTierWords + page / 64] & bit) return kBlockTiers[p];
  return ServedBy::Unknown;
}

void EvidenceBlock::setServedBy(uint32_t page, ServedBy by) {
  for (size_t p = 0; p < kBlockTiers.size(); ++p)
    if (kBlockTiers[p] == by) served[p * kBlockTierWords + page / 64] |= uint64_t{1} << (page % 64);
}

bool EvidenceBlock::tiered() const {
  return std::any_of(served.begin(), served.end(), [](uint64_t w) { return w != 0; });
}

size_t EvidenceBlock::pages() const {
  return static_cast<size_t>(std::count_if(counts.begin(), counts.end(), [](uint8_t n) { return n != 0; }));
}

AccessEvidence EvidenceBlock::record(uint32_t page) const {
  AccessEvidence e;
  e.tgid = tgid;
  e.page = base + uint64_t{page} * kBasePageSize;
  e.weight = weight(page);
  e.kind = kind;
  e.servedBy = servedBy(page);
  return e;
}

size_t EvidenceBatch::pages() const {
  size_t n = records.size();
  for (const EvidenceBlock& b : blocks) n += b.pages();
  return n;
}

uint64_t EvidenceBatch::weight() const {
  uint64_t w = 0;
  forEachRecord([&w](const AccessEvidence& e) { w += e.weight; });
  return w;
}

std::vector<AccessEvidence> EvidenceBatch::flattened() const {
  std::vector<AccessEvidence> out;
  out.reserve(pages());
  forEachRecord([&out](const AccessEvidence& e) { out.push_back(e); });
  return out;
}

const char* regionKindName(RegionKind kind) {
  switch (kind) {
    case RegionKind::Weight: return "weight";
    case RegionKind::Gradient: return "gradient";
    case RegionKind::OptimizerState: return "optimizer_state";
    case RegionKind::Activation: return "activation";
    case RegionKind::Workspace: return "workspace";
    case RegionKind::Other: return "other";
  }
  return "?";
}

}  // namespace tt
