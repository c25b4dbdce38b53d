#include "service/Adapters.h"

#include <gtest/gtest.h>

#include <vector>

namespace {

using tt::service::SourceReport;

TEST(AccessesPerPagePass, CacheLineUnitsOnlyWhenPmuSamplingIsActive) {
  // PMU samples stand for cache-line accesses: a pass over a 4 KiB page is 64 of them.
  const std::vector<SourceReport> withPmu{{"pmu", true, "", 0, 0}, {"soft-dirty", true, "", 0, 0}};
  EXPECT_EQ(tt::service::accessesPerPagePass(withPmu), 64.0);
  // Configured but not opened (no PMU on the machine): the evidence is page-granular.
  const std::vector<SourceReport> pmuOff{{"pmu", false, "no PMU", 0, 0}, {"fault-trace", true, "", 0, 0}};
  EXPECT_EQ(tt::service::accessesPerPagePass(pmuOff), 1.0);
  EXPECT_EQ(tt::service::accessesPerPagePass({}), 1.0);
}

}  // namespace
