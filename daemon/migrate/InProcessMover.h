// The in-process mover: for a region registered through the client library, the daemon can ask
// the client itself to mbind(2) the region to a node with MPOL_MF_MOVE. Unlike move_pages from
// outside, this also sets the region's policy, so pages it faults in later land on that node too.
//
// The service implements this over the client socket (protocol.proto: MbindRequest sent to the
// client, MbindResult back). The engine calls it from its coordinator thread and waits for the
// answer; the implementation bounds that wait (a client that does not answer in time is a failure,
// and the engine falls back to move_pages for the range).
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "core/Result.h"

namespace tt::migrate {

class InProcessMover {
 public:
  virtual ~InProcessMover() = default;

  // True when the client process `tgid` is connected and said Hello.accepts_mbind.
  [[nodiscard]] virtual bool acceptsMbind(pid_t tgid) const = 0;

  // Asks the client to mbind [start, start + length) of region `regionId` to `node` with
  // MPOL_BIND | MPOL_MF_MOVE and waits for its MbindResult. An error carries the client's errno
  // (MbindResult.errno_value) or the transport failure (disconnected, timed out: ETIMEDOUT).
  [[nodiscard]] virtual Result<void> requestBind(pid_t tgid, uint64_t regionId, uint64_t start, uint64_t length,
                                                 int node) = 0;
};

}  // namespace tt::migrate
