// Runs c_abi_program (compiled as C, linked to libtensortier.so.1) against the fake daemon.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "fakes/client/FakeDaemon.h"

namespace {

using tt::fake::FakeDaemon;

struct Child {
  pid_t pid = -1;
  int in = -1;   // child's stdin
  int out = -1;  // child's stdout
};

Child spawn(const std::string& mode, const std::string& socket) {
  int toChild[2], fromChild[2];
  EXPECT_EQ(pipe2(toChild, O_CLOEXEC), 0);
  EXPECT_EQ(pipe2(fromChild, O_CLOEXEC), 0);
  Child c;
  c.pid = fork();
  if (c.pid == 0) {
    dup2(toChild[0], 0);
    dup2(fromChild[1], 1);
    setenv("TENSORTIER_SOCKET", socket.c_str(), 1);
    execl(TT_C_ABI_PROGRAM, TT_C_ABI_PROGRAM, mode.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(toChild[0]);
  close(fromChild[1]);
  c.in = toChild[1];
  c.out = fromChild[0];
  return c;
}

int waitExit(Child& c) {
  close(c.in);
  close(c.out);
  int status = 0;
  EXPECT_EQ(waitpid(c.pid, &status, 0), c.pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1000 + WTERMSIG(status);
}

class CAbiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tt-cabi-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(CAbiTest, CProgramRegistersMarksAndQueriesThroughTheCAbi) {
  FakeDaemon fake(dir_ + "/tt.sock");
  ASSERT_TRUE(fake.start().ok());
  Child c = spawn("connected", fake.socketPath());
  std::string line;
  char ch = 0;
  while (read(c.out, &ch, 1) == 1 && ch != '\n') line += ch;
  ASSERT_EQ(line, "registered") << "c_abi_program failed before registering (exit " << waitExit(c) << ")";
  const auto regions = fake.regions();
  ASSERT_EQ(regions.size(), 1u);
  EXPECT_EQ(regions[0].name, "c.weights");
  EXPECT_EQ(regions[0].length, 3u * 4096);
  ASSERT_EQ(fake.hellos().size(), 1u);
  EXPECT_EQ(fake.hellos()[0].clientName, "c-abi-program");
  ASSERT_TRUE(fake.waitFor([](const FakeDaemon& f) { return f.marks().size() == 3; }));
  EXPECT_EQ(fake.marks()[1].phase, "forward");
  ASSERT_EQ(write(c.in, "quit\n", 5), 5);
  EXPECT_EQ(waitExit(c), 0) << "nonzero = the source line of the failed check in c_abi_program.c (mod 256)";
  // Destroying the client closes the session; the daemon drops its regions.
  EXPECT_TRUE(fake.waitFor([](const FakeDaemon& f) { return f.regions().empty() && f.liveSessions() == 0; }));
}

TEST_F(CAbiTest, CProgramWithoutDaemonGetsNoOpsAndOneWarning) {
  Child c = spawn("absent", dir_ + "/nobody-listens.sock");
  EXPECT_EQ(waitExit(c), 0) << "nonzero = the source line of the failed check in c_abi_program.c (mod 256)";
}

}  // namespace
