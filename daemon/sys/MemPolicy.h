// mbind(2) on the calling process's own memory: the in-process mover (a client library binds its
// tensors, which also steers future faults to the node) and test workloads that need memory on a
// chosen node.
#pragma once

#include <cstddef>

#include "core/Result.h"

namespace tt::sys {

enum class BindMove {
  FutureOnly,  // set the policy; pages already present stay where they are
  Move,        // MPOL_MF_MOVE: also migrate present pages mapped only by this process
};

// Binds [addr, addr+length) to `node` (MPOL_BIND). addr must be page aligned.
[[nodiscard]] Result<void> bindToNode(void* addr, size_t length, int node, BindMove move);

// Highest node id the kernel could have (from get_mempolicy's view of the system).
[[nodiscard]] int maxPossibleNode();

}  // namespace tt::sys
