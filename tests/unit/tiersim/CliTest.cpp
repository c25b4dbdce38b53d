// The tiersim command line: what it accepts and rejects before any replay starts.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "Trace.h"

namespace tt::tiersim {
namespace {

struct Outcome {
  int exitCode = -1;
  std::string output;  // stdout and stderr
};

// Runs tiersim with `args` (shell words), killed after a minute: a hang fails, it does not block.
Outcome tiersim(const std::string& args) {
  const std::string command = std::string("timeout 60 ") + TT_TIERSIM_PROGRAM + " " + args + " 2>&1";
  Outcome run;
  FILE* pipe = popen(command.c_str(), "r");
  EXPECT_NE(pipe, nullptr) << command;
  if (pipe == nullptr) return run;
  char buffer[4096];
  size_t n = 0;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) run.output.append(buffer, n);
  const int status = pclose(pipe);
  run.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 1000;
  return run;
}

std::string tempPath() {
  char name[] = "/tmp/tiersim-cli-XXXXXX";
  const int fd = mkstemp(name);
  EXPECT_GE(fd, 0);
  if (fd >= 0) close(fd);
  return name;
}

// gen writes every step it is asked for: the sweep's warm-up (20 by default) is none of its business.
TEST(TiersimCli, GenWritesFewerStepsThanTheDefaultWarmup) {
  const std::string out = tempPath();
  const Outcome run = tiersim("gen --model resnet50 --steps 2 --scale 256 --out " + out);
  EXPECT_EQ(run.exitCode, 0) << run.output;
  auto trace = readTraceFile(out);
  std::remove(out.c_str());
  ASSERT_TRUE(trace.ok()) << trace.error().message();
  uint64_t steps = 0;
  for (const auto& mark : trace->marks) steps += mark.type == MarkType::StepBegin ? 1 : 0;
  EXPECT_EQ(steps, 2U);
  // A replay of generated steps still needs steps after its warm-up.
  const Outcome replay = tiersim("run --model resnet50 --steps 2 --scale 256 --policy first-touch");
  EXPECT_EQ(replay.exitCode, 2) << replay.output;
  EXPECT_NE(replay.output.find("--warmup must be smaller than --steps"), std::string::npos) << replay.output;
}

// A copy engine of 0 GB/s would never finish its first copy: the replay would never end.
TEST(TiersimCli, RejectsACopyEngineWithoutBandwidth) {
  for (const std::string rate : {"0", "nan", "inf"}) {
    const Outcome run = tiersim("run --model resnet50 --steps 2 --warmup 1 --scale 256 --policy hemem --copy-gbps " + rate);
    EXPECT_EQ(run.exitCode, 2) << rate << ": " << run.output;
    EXPECT_NE(run.output.find("--copy-gbps must be positive"), std::string::npos) << run.output;
  }
}

TEST(TiersimCli, RejectsAScaleOutsideItsBounds) {
  const std::string out = tempPath();
  for (const std::string scale : {"0", "1000000", "1e12"}) {
    const Outcome run = tiersim("gen --model resnet50 --steps 1 --out " + out + " --scale " + scale);
    EXPECT_EQ(run.exitCode, 2) << scale << ": " << run.output;
    EXPECT_NE(run.output.find("--scale must be in 1.." + std::to_string(kMaxScaleDivisor)), std::string::npos)
        << run.output;
  }
  std::remove(out.c_str());
}

}  // namespace
}  // namespace tt::tiersim
