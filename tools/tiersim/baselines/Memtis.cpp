// Memtis-like policy: per-page sampled access counts, a log2 histogram of them, a hot threshold
// adapted so that the hot set fits the fast tier, a warm band just under it that is neither
// promoted nor demoted, periodic cooling that halves every count, and a migration pass every
// 500 ms that promotes hot slow-tier pages and demotes cold fast-tier pages to keep free room.
//
// What differs from Memtis: base pages only (Memtis also splits huge pages by access skew, which a
// 4 KiB simulator has no use for); cooling is eager (Memtis cools lazily per page, same result);
// the migration pass scans all pages instead of walking the tier's LRU lists.
#include <algorithm>
#include <array>

#include "Baselines.h"

namespace tt::tiersim {

unsigned memtisBin(uint64_t count) {
  unsigned bin = 0;
  uint64_t n = count + 1;
  while ((n >>= 1) != 0 && bin < 15) ++bin;
  return bin;
}

namespace {

class MemtisPolicy : public Policy {
 public:
  explicit MemtisPolicy(const MemtisParams& params) : params_(params) {
    const uint64_t s = std::max<uint32_t>(1, params.scaleDivisor);
    coolingPeriod_ = std::max<uint64_t>(1, params.coolingPeriodSamples / s);
    adaptationPeriod_ = std::max<uint64_t>(1, params.adaptationPeriodSamples / s);
    intervalNs_ = params.migrationIntervalNs / static_cast<double>(s);
    minFreePages_ = params.minFreeBytes / 4096 / s;
  }
  [[nodiscard]] std::string name() const override { return "memtis"; }

  void init(const std::vector<TraceRegion>&, uint64_t totalPages, const std::vector<TierInfo>& tiers,
            const std::vector<SimAccess>*) override {
    counts_.assign(totalPages, 0);
    histogram_.fill(0);
    histogram_[0] = totalPages;
    fastCapacity_ = tiers.empty() ? 0 : tiers[0].capacityPages;
  }

  void onSample(const SimAccess& access) override {
    auto& count = counts_[access.page];
    const unsigned before = memtisBin(count);
    ++count;
    const unsigned after = memtisBin(count);
    if (before != after) {
      --histogram_[before];
      ++histogram_[after];
    }
    ++samples_;
    if (samples_ % coolingPeriod_ == 0) {
      cool();
      adaptThreshold();
    } else if (samples_ % adaptationPeriod_ == 0) {
      adaptThreshold();
    }
  }

  void onMark(const IterationMark&) override {}

  void onEpoch(const EpochContext& context, std::vector<PageMove>& moves) override {
    if (static_cast<double>(context.nowNs) < nextRunNs_) return;
    nextRunNs_ = static_cast<double>(context.nowNs) + intervalNs_;
    const auto& tierOf = *context.tierOf;
    const auto& present = *context.present;
    const auto& fast = context.tiers[0];
    const uint64_t warm = params_.warmSet && hotThreshold_ > 0 ? hotThreshold_ - 1 : hotThreshold_;

    std::vector<PageId> promote;
    std::vector<PageId> cold;
    std::vector<PageId> warmFast;
    for (PageId page = 0; page < counts_.size(); ++page) {
      if (present[page] == 0) continue;
      const unsigned bin = memtisBin(counts_[page]);
      if (tierOf[page] != 0) {
        if (bin >= hotThreshold_) promote.push_back(page);
      } else if (bin < warm) {
        cold.push_back(page);
      } else if (bin < hotThreshold_) {
        warmFast.push_back(page);
      }
    }
    // Hottest first, so a partial pass moves the pages that matter most.
    std::stable_sort(promote.begin(), promote.end(),
                     [&](PageId a, PageId b) { return counts_[a] > counts_[b]; });
    // Victims: cold pages, coldest first; warm pages only once no cold page is left (the warm set
    // stays in the fast tier while there is room for it; it is never promoted).
    std::stable_sort(cold.begin(), cold.end(), [&](PageId a, PageId b) { return counts_[a] < counts_[b]; });
    std::stable_sort(warmFast.begin(), warmFast.end(), [&](PageId a, PageId b) { return counts_[a] < counts_[b]; });
    cold.insert(cold.end(), warmFast.begin(), warmFast.end());

    auto freePages = static_cast<int64_t>(fast.capacityPages) - static_cast<int64_t>(fast.usedPages);
    DemotionRoom room(context);
    // kmigraterd demotes cold pages to keep the minimum free room and to make room for promotion.
    const auto needFree = static_cast<int64_t>(minFreePages_) + static_cast<int64_t>(promote.size());
    size_t c = 0;
    while (freePages < needFree && c < cold.size() && room.total() > 0) {
      moves.push_back(PageMove{cold[c++], room.take()});
      ++freePages;
    }
    for (const PageId page : promote) {
      if (freePages <= 0) break;
      moves.push_back(PageMove{page, 0});
      --freePages;
    }
  }

  [[nodiscard]] unsigned hotThreshold() const { return hotThreshold_; }

 private:
  void cool() {
    histogram_.fill(0);
    for (auto& count : counts_) {
      count >>= 1;
      ++histogram_[memtisBin(count)];
    }
  }

  // __adjust_active_threshold(): from the hottest bin down, take bins while the pages in them fit
  // the fast tier; the hot threshold is the last bin taken (at least 1: unsampled pages are never
  // hot).
  void adaptThreshold() {
    uint64_t pages = 0;
    unsigned threshold = 16;
    for (int bin = 15; bin >= 1; --bin) {
      if (pages + histogram_[static_cast<size_t>(bin)] > fastCapacity_) break;
      pages += histogram_[static_cast<size_t>(bin)];
      threshold = static_cast<unsigned>(bin);
    }
    hotThreshold_ = std::min(threshold, 15U);
    if (threshold == 16) hotThreshold_ = 15;
  }

  MemtisParams params_;
  uint64_t coolingPeriod_ = 1;
  uint64_t adaptationPeriod_ = 1;
  double intervalNs_ = 0;
  uint64_t minFreePages_ = 0;
  uint64_t fastCapacity_ = 0;
  std::vector<uint64_t> counts_;
  std::array<uint64_t, 16> histogram_{};
  uint64_t samples_ = 0;
  unsigned hotThreshold_ = 1;  // htmm_thres_hot
  double nextRunNs_ = 0;
};

}  // namespace

std::unique_ptr<Policy> makeMemtisPolicy(const MemtisParams& params) {
  return std::make_unique<MemtisPolicy>(params);
}

int memtisHotThreshold(const Policy& policy) {
  const auto* memtis = dynamic_cast<const MemtisPolicy*>(&policy);
  return memtis == nullptr ? -1 : static_cast<int>(memtis->hotThreshold());
}

}  // namespace tt::tiersim
