// move_pages(2) behind a narrow interface: the migration engine talks to this, tests talk to a
// fake (tests/fakes/migrate/FakePageMover.h), and end-to-end tests in the VM use the Linux one for real.
#pragma once

#include <sys/types.h>

#include <span>

#include "core/Result.h"

namespace tt::sys {

// Per-page status values are what move_pages(2) writes: a node id (>= 0) or a negative errno
// (-EFAULT, -ENOENT, -EBUSY, -ENOMEM, -EACCES, ...).
class PageMover {
 public:
  virtual ~PageMover() = default;

  // Moves each pages[i] of process `pid` (0 = the caller) to nodes[i]; status[i] gets the outcome.
  // `moveAll` asks for MPOL_MF_MOVE_ALL (pages shared with other processes too; needs
  // CAP_SYS_NICE). A failed call (as opposed to per-page failures) returns an error.
  // Returns the count the kernel reports as not migrated (its positive return value).
  [[nodiscard]] virtual Result<long> movePages(pid_t pid, std::span<void* const> pages,
                                               std::span<const int> nodes, std::span<int> status,
                                               bool moveAll) = 0;

  // Where each page is now: status[i] = node or negative errno (-EFAULT: not mapped, -ENOENT: not
  // yet faulted in).
  [[nodiscard]] virtual Result<void> queryPages(pid_t pid, std::span<void* const> pages,
                                                std::span<int> status) = 0;
};

class LinuxPageMover final : public PageMover {
 public:
  Result<long> movePages(pid_t pid, std::span<void* const> pages, std::span<const int> nodes,
                         std::span<int> status, bool moveAll) override;
  Result<void> queryPages(pid_t pid, std::span<void* const> pages, std::span<int> status) override;
};

}  // namespace tt::sys
