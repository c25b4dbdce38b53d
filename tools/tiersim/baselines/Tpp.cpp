// TPP-like policy: NUMA-hint-fault promotion with an active-LRU check and a promotion rate limit;
// proactive demotion of cold fast-tier pages chosen by LRU aging (second-chance over the PTE
// accessed bits) when fast free memory falls under a watermark.
//
// What differs from the kernel: promotion happens at the next policy epoch rather than inside the
// fault (the epoch is 1 ms/S simulated, short against a step); LRU aging is one clock over the fast
// tier instead of separate active/inactive lists (a page referenced since the last pass gets a
// second chance, which is what moving it to the active list achieves). The hint-fault scanner
// (scan rate, cost per fault) is the simulator's (SimConfig::hintScanBytesPerSec, hintFaultNs).
#include <algorithm>

#include "Baselines.h"

namespace tt::tiersim {
namespace {

class TppPolicy : public Policy {
 public:
  explicit TppPolicy(const TppParams& params) : params_(params) {}
  [[nodiscard]] std::string name() const override { return "tpp"; }

  void init(const std::vector<TraceRegion>&, uint64_t totalPages, const std::vector<TierInfo>&,
            const std::vector<SimAccess>*) override {
    active_.assign(totalPages, 0);
    queued_.assign(totalPages, 0);
    totalPages_ = totalPages;
  }

  void onSample(const SimAccess&) override {}
  void onMark(const IterationMark&) override {}

  void onHintFault(const SimAccess& access) override {
    const PageId page = access.page;
    if (params_.requireActive && active_[page] == 0) {
      active_[page] = 1;  // first fault: onto the active LRU, promoted if it faults again
      return;
    }
    if (queued_[page] == 0) {
      queued_[page] = 1;
      pending_.push_back(page);
    }
  }

  void onEpoch(const EpochContext& context, std::vector<PageMove>& moves) override {
    const auto& fast = context.tiers[0];
    const double watermark = params_.demoteWatermark * static_cast<double>(fast.capacityPages);
    auto freePages = static_cast<int64_t>(fast.capacityPages) - static_cast<int64_t>(fast.usedPages);

    // Demotion (kswapd on the fast node): age the LRU until free memory is back over the mark.
    if (static_cast<double>(freePages) < watermark) {
      const auto want = static_cast<int64_t>(watermark) + 1 - freePages;
      freePages += demoteColdPages(context, want, moves);
    }

    // Promotion of pages that hint-faulted, inside the rate limit's current window.
    const double window = 1e9 / std::max<uint32_t>(1, params_.scaleDivisor);
    if (static_cast<double>(context.nowNs) >= windowStart_ + window) {
      windowStart_ = static_cast<double>(context.nowNs);
      promotedInWindow_ = 0;
    }
    const double limitPages = params_.promoteRateLimitBytesPerSec * window / 1e9 / 4096.0;
    size_t used = 0;
    for (; used < pending_.size(); ++used) {
      const PageId page = pending_[used];
      if (freePages <= 0 || static_cast<double>(promotedInWindow_) + 1 > limitPages) break;
      queued_[page] = 0;
      if ((*context.tierOf)[page] == 0) continue;
      moves.push_back(PageMove{page, 0});
      --freePages;
      ++promotedInWindow_;
    }
    // Faults that could not be served stay queued (the kernel would retry at the next fault);
    // pages left waiting too long are dropped by the queue bound below.
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(used));
    const size_t bound = std::max<size_t>(1024, static_cast<size_t>(fast.capacityPages / 8));
    if (pending_.size() > bound) {
      const size_t excess = pending_.size() - bound;
      for (size_t i = 0; i < excess; ++i) queued_[pending_[i]] = 0;
      pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(excess));
    }
  }

 private:
  // Second-chance clock over the fast tier; returns pages demoted.
  int64_t demoteColdPages(const EpochContext& context, int64_t want, std::vector<PageMove>& moves) {
    auto& referenced = *context.accessedBits;
    const auto& tierOf = *context.tierOf;
    const auto& present = *context.present;
    DemotionRoom room(context);
    int64_t demoted = 0;
    // Two full passes at most: the first clears referenced bits, the second finds them clear.
    for (uint64_t visited = 0; visited < 2 * totalPages_ && demoted < want && room.total() > 0; ++visited) {
      const PageId page = hand_;
      hand_ = hand_ + 1 == totalPages_ ? 0 : hand_ + 1;
      if (present[page] == 0 || tierOf[page] != 0) continue;
      if (referenced[page] != 0) {
        referenced[page] = 0;
        continue;
      }
      moves.push_back(PageMove{page, room.take()});
      active_[page] = 0;  // demoted pages start on the slow node's inactive list
      ++demoted;
    }
    return demoted;
  }

  TppParams params_;
  uint64_t totalPages_ = 0;
  std::vector<uint8_t> active_;
  std::vector<uint8_t> queued_;
  std::vector<PageId> pending_;
  PageId hand_ = 0;
  double windowStart_ = 0;
  uint64_t promotedInWindow_ = 0;
};

}  // namespace

std::unique_ptr<Policy> makeTppPolicy(const TppParams& params) { return std::make_unique<TppPolicy>(params); }

}  // namespace tt::tiersim
