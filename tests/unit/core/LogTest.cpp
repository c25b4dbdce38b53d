#include "core/Log.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

std::vector<std::string>* g_captured = nullptr;

void capture(tt::log::Level, std::string_view line) { g_captured->emplace_back(line); }

class LogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_captured = &lines_;
    tt::log::setSink(capture);
    saved_ = tt::log::level();
  }
  void TearDown() override {
    tt::log::setSink(nullptr);
    tt::log::setLevel(saved_);
  }
  std::vector<std::string> lines_;
  tt::log::Level saved_{};
};

TEST_F(LogTest, LineCarriesLevelFileAndLine) {
  tt::log::setLevel(tt::log::Level::Info);
  const int line = __LINE__ + 1;
  TT_LOG(Warn) << "node " << 1 << " is full";
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(lines_[0], "warn LogTest.cpp:" + std::to_string(line) + "] node 1 is full");
}

TEST_F(LogTest, BelowThresholdIsNotFormatted) {
  tt::log::setLevel(tt::log::Level::Warn);
  int evaluated = 0;
  TT_LOG(Info) << "hidden " << ++evaluated;
  EXPECT_TRUE(lines_.empty());
  EXPECT_EQ(evaluated, 0) << "arguments of a disabled log line must not be evaluated";
}

TEST_F(LogTest, ParseLevelNames) {
  EXPECT_EQ(tt::log::parseLevel("debug"), tt::log::Level::Debug);
  EXPECT_EQ(tt::log::parseLevel("warning"), tt::log::Level::Warn);
  EXPECT_FALSE(tt::log::parseLevel("loud"));
}

}  // namespace
