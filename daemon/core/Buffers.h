// Reused per-epoch buffers: kept from epoch to epoch so a steady epoch allocates nothing, but not
// kept at the size of one exceptional epoch (a first-touch storm's evidence or count blocks).
#pragma once

#include <cstddef>
#include <vector>

namespace tt {

// Releases `v`'s memory when it holds more than four times what the epoch that just used it
// needed (and more than `minCapacity` elements, below which keeping it costs nothing worth
// freeing). Call after the epoch's use, before clearing it.
template <typename T>
void releaseIfOversized(std::vector<T>& v, size_t minCapacity) {
  if (v.capacity() > minCapacity && v.capacity() > 4 * v.size()) {
    v.clear();
    v.shrink_to_fit();
  }
}

}  // namespace tt
