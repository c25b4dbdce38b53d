#include "Policy.h"

namespace tt::tiersim {

TierId Policy::firstTouchTier(PageId page, const std::vector<TierInfo>& tiers) const {
  (void)page;
  // The kernel's default local allocation falls back down the tier order when a node is full.
  for (size_t tier = 0; tier < tiers.size(); ++tier) {
    if (tiers[tier].usedPages < tiers[tier].capacityPages) return static_cast<TierId>(tier);
  }
  return static_cast<TierId>(tiers.empty() ? 0 : tiers.size() - 1);
}

}  // namespace tt::tiersim
