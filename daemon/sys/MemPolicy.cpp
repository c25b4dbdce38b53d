#include "sys/MemPolicy.h"

#include <numa.h>
#include <numaif.h>

#include <string>
#include <vector>

namespace tt::sys {

int maxPossibleNode() { return numa_max_possible_node(); }

Result<void> bindToNode(void* addr, size_t length, int node, BindMove move) {
  const int maxNode = maxPossibleNode();
  if (node < 0 || node > maxNode) return systemError(EINVAL, "mbind: no such node " + std::to_string(node));
  const size_t bitsPerWord = 8 * sizeof(unsigned long);
  std::vector<unsigned long> mask(static_cast<size_t>(maxNode) / bitsPerWord + 1, 0UL);
  mask[static_cast<size_t>(node) / bitsPerWord] |= 1UL << (static_cast<size_t>(node) % bitsPerWord);
  const unsigned flags = move == BindMove::Move ? MPOL_MF_MOVE | MPOL_MF_STRICT : 0;
  // maxnode counts bits and the kernel reads maxnode - 1 of them.
  if (::mbind(addr, length, MPOL_BIND, mask.data(), mask.size() * bitsPerWord + 1, flags) != 0)
    return errnoError("mbind " + std::to_string(length) + " bytes to node " + std::to_string(node));
  return {};
}

}  // namespace tt::sys
