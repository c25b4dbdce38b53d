// HeMem-like policy: per-page read and write sample counts, hot at 8 reads or 4 writes, counts
// halved for every page whenever one page reaches the cooling threshold (lazily, with a global
// cooling clock, as HeMem does), and a policy thread every 10 ms that promotes hot slow-tier pages,
// making room by demoting cold fast-tier pages; when no cold fast page is left it stops.
//
// HeMem manages 2 MiB huge pages and samples 1 in SAMPLE_PERIOD = 19997 loads/stores (hemem
// src/pebs.h). A scaled trace (sizes / S) keeps HeMem's view when its huge page is 2 MiB / S
// (contiguous groups of simulator pages) and its sample period 19997 / S: a huge page then holds
// the same share of every tensor and gets the same number of samples per pass over it
// (32768 / 19997 = 1.6) as in the full-size run. The thresholds then mean what the paper meant.
// The cold list is found by a rotating scan instead of HeMem's FIFO lists: the same pages (fast
// pages currently below both thresholds), possibly in another order.
#include <algorithm>

#include "Baselines.h"

namespace tt::tiersim {
namespace {

class HeMemPolicy : public Policy {
 public:
  explicit HeMemPolicy(const HeMemParams& params) : params_(params) {
    const uint64_t scale = std::max<uint32_t>(1, params.scaleDivisor);
    groupPages_ = std::max<uint64_t>(1, params.hugePageBytes / scale / 4096);
  }
  [[nodiscard]] std::string name() const override { return "hemem"; }

  void init(const std::vector<TraceRegion>&, uint64_t totalPages, const std::vector<TierInfo>&,
            const std::vector<SimAccess>*) override {
    totalPages_ = totalPages;
    groups_ = (totalPages + groupPages_ - 1) / groupPages_;
    counts_.assign(groups_, Counts{});
    inHotList_.assign(groups_, 0);
  }

  void onSample(const SimAccess& access) override {
    const uint64_t group = access.page / groupPages_;
    auto& counts = counts_[group];
    cool(counts);
    if (access.write) {
      ++counts.writes;
    } else {
      ++counts.reads;
    }
    if (counts.reads >= params_.coolingThreshold || counts.writes >= params_.coolingThreshold) {
      ++clock_;  // every page's counts halve (lazily, when next looked at)
      cool(counts);
    }
    if (isHot(counts) && inHotList_[group] == 0) {
      inHotList_[group] = 1;
      hotList_.push_back(group);
    }
  }

  void onMark(const IterationMark&) override {}

  void onEpoch(const EpochContext& context, std::vector<PageMove>& moves) override {
    const double interval = params_.intervalNs / std::max<uint32_t>(1, params_.scaleDivisor);
    if (static_cast<double>(context.nowNs) < nextRunNs_) return;
    nextRunNs_ = static_cast<double>(context.nowNs) + interval;
    scannedThisRun_ = 0;

    const auto& fast = context.tiers[0];
    auto freePages = static_cast<int64_t>(fast.capacityPages) - static_cast<int64_t>(fast.usedPages);
    DemotionRoom slowRoom(context);
    const auto budget = static_cast<uint64_t>(params_.migrateBytesPerInterval / 4096.0);
    uint64_t moved = 0;
    std::vector<uint64_t> keep;
    std::vector<PageId> slowPages;
    size_t i = 0;
    for (; i < hotList_.size() && moved < budget; ++i) {
      const uint64_t group = hotList_[i];
      cool(counts_[group]);
      pagesIn(context, group, false, slowPages);
      if (!isHot(counts_[group]) || slowPages.empty()) {  // cooled since listed, or already fast
        inHotList_[group] = 0;
        continue;
      }
      const auto need = static_cast<int64_t>(slowPages.size());
      bool room = true;
      while (freePages < need) {
        std::vector<PageId> victim;
        if (!findColdFastGroup(context, victim) || slowRoom.total() < victim.size()) {
          room = false;
          break;
        }
        for (PageId page : victim) moves.push_back(PageMove{page, slowRoom.take()});
        freePages += static_cast<int64_t>(victim.size());
        moved += victim.size();
      }
      if (!room) {  // no cold memory left in DRAM: HeMem stops promoting this round
        break;
      }
      for (PageId page : slowPages) moves.push_back(PageMove{page, 0});
      freePages -= need;
      moved += slowPages.size();
      inHotList_[group] = 0;
    }
    keep.assign(hotList_.begin() + static_cast<std::ptrdiff_t>(i), hotList_.end());
    hotList_.swap(keep);
  }

 private:
  struct Counts {
    uint32_t reads = 0;
    uint32_t writes = 0;
    uint32_t clock = 0;
  };

  void cool(Counts& counts) const {
    const uint32_t behind = clock_ - counts.clock;
    if (behind == 0) return;
    counts.reads = behind >= 32 ? 0 : counts.reads >> behind;
    counts.writes = behind >= 32 ? 0 : counts.writes >> behind;
    counts.clock = clock_;
  }

  [[nodiscard]] bool isHot(const Counts& counts) const {
    return counts.reads >= params_.hotReadThreshold || counts.writes >= params_.hotWriteThreshold;
  }

  // Present pages of `group` in the fast tier (fast = true) or a slower one.
  void pagesIn(const EpochContext& context, uint64_t group, bool fast, std::vector<PageId>& out) const {
    out.clear();
    const PageId first = group * groupPages_;
    const PageId last = std::min<PageId>(first + groupPages_, totalPages_);
    for (PageId page = first; page < last; ++page) {
      if ((*context.present)[page] == 0) continue;
      if (((*context.tierOf)[page] == 0) == fast) out.push_back(page);
    }
  }

  // Next huge page with memory in the fast tier that is not hot (HeMem's DRAM cold list). At most
  // one rotation per policy run, so a huge page chosen this run is not chosen again before the
  // simulator applies the moves.
  bool findColdFastGroup(const EpochContext& context, std::vector<PageId>& pages) {
    for (; scannedThisRun_ < groups_; ++scannedThisRun_) {
      const uint64_t group = coldHand_;
      coldHand_ = coldHand_ + 1 == groups_ ? 0 : coldHand_ + 1;
      cool(counts_[group]);
      if (isHot(counts_[group])) continue;
      pagesIn(context, group, true, pages);
      if (!pages.empty()) {
        ++scannedThisRun_;
        return true;
      }
    }
    return false;
  }

  HeMemParams params_;
  uint64_t groupPages_ = 1;
  uint64_t totalPages_ = 0;
  uint64_t groups_ = 0;
  std::vector<Counts> counts_;
  std::vector<uint8_t> inHotList_;
  std::vector<uint64_t> hotList_;
  uint32_t clock_ = 0;
  uint64_t coldHand_ = 0;
  uint64_t scannedThisRun_ = 0;
  double nextRunNs_ = 0;
};

}  // namespace

std::unique_ptr<Policy> makeHeMemPolicy(const HeMemParams& params) {
  return std::make_unique<HeMemPolicy>(params);
}

}  // namespace tt::tiersim
