// Shared helpers for tensortier's tests.
#pragma once

#include <gtest/gtest.h>

#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/Log.h"
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

// What TT_LOG writes while it lives, from any thread: the log level is set to `level` and lines
// at `keepFrom` and above are kept with their level. The default sink and the level before come
// back at its end. One at a time: the sink is process-wide.
class LogCapture {
 public:
  explicit LogCapture(log::Level level = log::Level::Debug, log::Level keepFrom = log::Level::Debug);
  ~LogCapture();
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  [[nodiscard]] std::vector<std::pair<log::Level, std::string>> lines() const;
  // The lines alone, in order.
  [[nodiscard]] std::vector<std::string> texts() const;
  // The level of the first line containing `text`.
  [[nodiscard]] std::optional<log::Level> levelOf(std::string_view text) const;
  // Lines at `level` containing `text`.
  [[nodiscard]] size_t count(log::Level level, std::string_view text) const;
  void clear();

 private:
  static void sink(log::Level level, std::string_view line);
  log::Level saved_;
  log::Level keepFrom_;
  mutable std::mutex mutex_;
  std::vector<std::pair<log::Level, std::string>> lines_;
};

}  // namespace tt::test

// A privileged test must not pass, or silently skip, when it lacks privilege.
#define TT_REQUIRE_ROOT()                                                                                  \
  do {                                                                                                     \
    if (!::tt::test::isRoot())                                                                             \
      GTEST_FAIL() << "this test needs root (it exercises the kernel for real): run `sudo ctest -L "       \
                      "privileged` or the README test command as root";                                  \
  } while (0)
