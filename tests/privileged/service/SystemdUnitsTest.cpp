// The shipped units pass `systemd-analyze verify` (with ExecStart pointed at the built binary, as
// the installed path does not exist on a build host) and keep the properties the daemon relies on.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>

#include "DaemonHarness.h"
#include "support/TestSupport.h"

namespace {

std::string unitText(const std::string& name) { return tt::test::readFileOrFail(tt::test::sourcePath("systemd/" + name)); }

TEST(SystemdUnits, VerifyCleanly) {
  TT_REQUIRE_ROOT();
  char tmpl[] = "/tmp/tt-units-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  std::ofstream(dir + "/tensortierd.service")
      << std::regex_replace(unitText("tensortierd.service"), std::regex("/usr/sbin/tensortierd"), TT_TENSORTIERD);
  std::ofstream(dir + "/tensortierd.socket") << unitText("tensortierd.socket");
  const auto r = tt::test::runCommand("cd " + dir + " && systemd-analyze verify ./tensortierd.service ./tensortierd.socket 2>&1");
  std::filesystem::remove_all(dir);
  EXPECT_EQ(r.exitCode, 0) << r.out;
  EXPECT_EQ(r.out, "") << "systemd-analyze printed warnings";
}

TEST(SystemdUnits, ServiceIsNotifyWithWatchdogAndHardening) {
  const std::string s = unitText("tensortierd.service");
  EXPECT_NE(s.find("\nType=notify\n"), std::string::npos);
  EXPECT_NE(s.find("\nWatchdogSec="), std::string::npos);
  EXPECT_NE(s.find("\nProtectSystem=strict\n"), std::string::npos);
  EXPECT_NE(s.find("\nProtectHome=yes\n"), std::string::npos);
  EXPECT_NE(s.find("\nNoNewPrivileges=yes\n"), std::string::npos);
  std::smatch caps;
  ASSERT_TRUE(std::regex_search(s, caps, std::regex("\nCapabilityBoundingSet=([^\n]*)\n")));
  EXPECT_EQ(caps[1].str().find("CAP_SYS_ADMIN"), std::string::npos) << "CAP_SYS_ADMIN is not needed (see the unit)";
  // CAP_CHOWN: the socket's group and the recordings' group (service.admin_group).
  for (const char* cap : {"CAP_SYS_NICE", "CAP_SYS_PTRACE", "CAP_BPF", "CAP_PERFMON", "CAP_CHOWN"})
    EXPECT_NE(caps[1].str().find(cap), std::string::npos) << cap;
  // The admin group must pass through the state directory to traces/ (0750, their group).
  EXPECT_NE(s.find("\nStateDirectoryMode=0751\n"), std::string::npos);
  std::smatch families;
  ASSERT_TRUE(std::regex_search(s, families, std::regex("\nRestrictAddressFamilies=([^\n]*)\n")));
  EXPECT_EQ(families[1].str(), "AF_UNIX AF_INET");
}

TEST(SystemdUnits, SocketMatchesTheDefaultPathGroupAndMode) {
  const std::string s = unitText("tensortierd.socket");
  EXPECT_NE(s.find("\nListenStream=/run/tensortier/tensortier.sock\n"), std::string::npos);
  EXPECT_NE(s.find("\nSocketMode=0660\n"), std::string::npos);
  EXPECT_NE(s.find("\nSocketGroup=tensortier\n"), std::string::npos);
}

}  // namespace
