#include "core/Types.h"

#include <gtest/gtest.h>

#include <limits>

namespace {

using tt::MigrationRates;

// What the planner and the epoch loop plan with when a direction has no figure yet.
TEST(MigrationRates, ADirectionNotKnownCopiesAsTheOtherAndNeitherTakesTheFallback) {
  EXPECT_EQ((MigrationRates{3e9, 1e9}.filledIn(5e8)), (MigrationRates{3e9, 1e9}));
  EXPECT_EQ((MigrationRates{3e9, 0}.filledIn(5e8)), (MigrationRates{3e9, 3e9}));
  EXPECT_EQ((MigrationRates{0, 1e9}.filledIn(5e8)), (MigrationRates{1e9, 1e9}));
  EXPECT_EQ((MigrationRates{}.filledIn(5e8)), (MigrationRates{5e8, 5e8}));
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ((MigrationRates{inf, -1}.filledIn(5e8)), (MigrationRates{5e8, 5e8})) << "neither usable";
  EXPECT_FALSE((MigrationRates{inf, 1e9}.known()));
  EXPECT_TRUE((MigrationRates{3e9, 1e9}.known()));
}

}  // namespace
