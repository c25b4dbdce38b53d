#include "sys/PageMover.h"

#include <numaif.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <string>

namespace tt::sys {
namespace {

// Calls the syscall directly rather than libnuma's move_pages() wrapper, which maps the kernel's
// positive "pages not migrated" return onto success and hides it.
long rawMovePages(pid_t pid, unsigned long count, void** pages, const int* nodes, int* status, int flags) {
  return ::syscall(SYS_move_pages, pid, count, pages, nodes, status, flags);
}

std::string describe(pid_t pid, size_t count) {
  return "move_pages pid " + std::to_string(pid) + " (" + std::to_string(count) + " pages)";
}

}  // namespace

Result<long> LinuxPageMover::movePages(pid_t pid, std::span<void* const> pages, std::span<const int> nodes,
                                       std::span<int> status, bool moveAll) {
  if (nodes.size() != pages.size() || status.size() != pages.size())
    return logicError("move_pages: pages, nodes and status differ in length");
  if (pages.empty()) return 0L;
  const int flags = moveAll ? MPOL_MF_MOVE_ALL : MPOL_MF_MOVE;
  // The kernel takes non-const arrays but only reads pages and nodes.
  const long rc = rawMovePages(pid, pages.size(), const_cast<void**>(pages.data()), nodes.data(), status.data(), flags);
  if (rc < 0) {
    const int err = errno;
    std::string hint;
    if (err == EPERM && moveAll) hint = " (MPOL_MF_MOVE_ALL needs CAP_SYS_NICE)";
    else if (err == EPERM || err == EACCES) hint = " (moving another user's pages needs ptrace access: CAP_SYS_PTRACE)";
    else if (err == ESRCH) hint = " (process has exited)";
    else if (err == EINVAL) hint = " (process is exiting: it has no address space; or a node is invalid)";
    return systemError(err, describe(pid, pages.size()) + hint);
  }
  return rc;
}

Result<void> LinuxPageMover::queryPages(pid_t pid, std::span<void* const> pages, std::span<int> status) {
  if (status.size() != pages.size()) return logicError("move_pages query: pages and status differ in length");
  if (pages.empty()) return {};
  if (rawMovePages(pid, pages.size(), const_cast<void**>(pages.data()), nullptr, status.data(), 0) < 0)
    return errnoError(describe(pid, pages.size()) + " query");
  return {};
}

}  // namespace tt::sys
