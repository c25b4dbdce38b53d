// Shared helpers for tensortier's tests.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/Result.h"
#include "core/Types.h"

namespace tt::test {

// Collects from a source (anything with collect(EvidenceBatch&)) and appends what it reported as
// records, blocks flattened page by page: for tests of which pages a source reports, whatever
// shape it reports them in.
template <typename Collector>
[[nodiscard]] Result<void> collectRecords(Collector& source, std::vector<AccessEvidence>& out) {
  EvidenceBatch batch;
  auto r = source.collect(batch);
  batch.forEachRecord([&out](const AccessEvidence& e) { out.push_back(e); });
  return r;
}

// Path of a checked-in fixture: fixture("topology/dram_pmem_2socket").
[[nodiscard]] std::string fixture(const std::string& relative);

// Path under the source tree: sourcePath("systemd/tensortierd.conf").
[[nodiscard]] std::string sourcePath(const std::string& relative);

// Whole contents of a file, or a test failure.
[[nodiscard]] std::string readFileOrFail(const std::string& path);

// Whether the running kernel's release (uname) is at least major.minor: tests that check what a
// kernel version does differently (and the VM runs two) state what they expect of each.
[[nodiscard]] bool kernelAtLeast(int major, int minor);

// True when the process is root; tests that need it call TT_REQUIRE_ROOT() and fail loudly if not.
[[nodiscard]] bool isRoot();

}  // namespace tt::test

// A privileged test must not pass, or silently skip, when it lacks privilege.
#define TT_REQUIRE_ROOT()                                                                                  \
  do {                                                                                                     \
    if (!::tt::test::isRoot())                                                                             \
      GTEST_FAIL() << "this test needs root (it exercises the kernel for real): run `sudo ctest -L "       \
                      "privileged` or the README test command as root";                                  \
  } while (0)
