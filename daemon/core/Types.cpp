#include "core/Types.h"

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
