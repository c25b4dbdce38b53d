// The shipped units pass `systemd-analyze verify` (with ExecStart pointed at the built binary, as
// the installed path does not exist on a build host) and keep the properties the daemon relies on.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>

#include "DaemonHarness.h"
#include "support/TestSupport.h"
#include "sys/access/Sysctl.h"

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
  // With CAP_SYS_ADMIN granted, what keeps the daemon from writing sysctls.
  EXPECT_NE(s.find("\nProtectKernelTunables=yes\n"), std::string::npos);
  std::smatch caps;
  ASSERT_TRUE(std::regex_search(s, caps, std::regex("\nCapabilityBoundingSet=([^\n]*)\n")));
  // CAP_CHOWN: the socket's group and the recordings' group (service.admin_group).
  // CAP_DAC_OVERRIDE: other users' /proc/PID/{pagemap,clear_refs} (UnitCapabilitiesTest).
  // CAP_SYS_ADMIN: perf_event_open under Debian's kernel.perf_event_paranoid=3 (e2e.package).
  for (const char* cap :
       {"CAP_SYS_NICE", "CAP_SYS_PTRACE", "CAP_DAC_OVERRIDE", "CAP_BPF", "CAP_PERFMON", "CAP_CHOWN", "CAP_SYS_ADMIN"})
    EXPECT_NE(caps[1].str().find(cap), std::string::npos) << cap;
  // The admin group must pass through the state directory to traces/ (0750, their group).
  EXPECT_NE(s.find("\nStateDirectoryMode=0751\n"), std::string::npos);
  std::smatch families;
  ASSERT_TRUE(std::regex_search(s, families, std::regex("\nRestrictAddressFamilies=([^\n]*)\n")));
  EXPECT_EQ(families[1].str(), "AF_UNIX AF_INET");
}

// A daemon killed with kernel tiering turned off cannot restore it; systemd runs this after every
// stop, and it restores from the state file the daemon saved first.
// Both with full privileges ("+"), whatever a drop-in takes from the daemon: writing
// kernel.numa_balancing needs CAP_SYS_ADMIN.
TEST(SystemdUnits, ExecStopPostRestoresKernelTiering) {
  const std::string s = unitText("tensortierd.service");
  EXPECT_NE(s.find("\nExecStopPost=+/usr/sbin/tensortierd --restore-kernel-tiering --config "
                   "/etc/tensortier/tensortierd.conf\n"),
            std::string::npos);
  EXPECT_NE(s.find("\nExecStartPre=+/usr/sbin/tensortierd --prepare-kernel-tiering --config "
                   "/etc/tensortier/tensortierd.conf\n"),
            std::string::npos);
  // The one step before the daemon: it validates the config too (ABrokenConfigFailsThePrepareStep).
  size_t steps = 0;
  for (size_t at = s.find("\nExecStartPre="); at != std::string::npos; at = s.find("\nExecStartPre=", at + 1)) ++steps;
  EXPECT_EQ(steps, 1U);
  // It must be able to remove the state file, under the writable runtime directory.
  EXPECT_NE(s.find("\nReadWritePaths=/run/tensortier -/sys/kernel/mm/damon\n"), std::string::npos);
}

// What ExecStopPost runs: with a state file, the saved values are written back and the file goes;
// without one (after a clean exit), nothing happens. The saved values are the host's current ones,
// so the test changes nothing on the host.
TEST(SystemdUnits, RestoreKernelTieringFlagAppliesAndRemovesTheStateFile) {
  TT_REQUIRE_ROOT();
  const auto current = tt::sys::readKernelTiering(tt::sys::Fs("/proc"), tt::sys::Fs("/sys"));
  ASSERT_TRUE(current.ok()) << current.error().message();
  ASSERT_TRUE(current->numaBalancing.has_value()) << "needs a kernel with CONFIG_NUMA_BALANCING";
  char tmpl[] = "/tmp/tt-restore-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string state = dir + "/run/kernel-tiering.state";
  std::ofstream(dir + "/tensortierd.conf") << "sources { kernel_tiering_state_file: \"" << state << "\" }\n";
  ASSERT_TRUE(tt::sys::saveKernelTiering(state, *current).ok());
  const std::string cmd = std::string(TT_TENSORTIERD) + " --restore-kernel-tiering --config " + dir + "/tensortierd.conf 2>&1";
  const auto restored = tt::test::runCommand(cmd);
  EXPECT_EQ(restored.exitCode, 0) << restored.out;
  EXPECT_NE(restored.out.find("restored numa_balancing=" + std::to_string(*current->numaBalancing)), std::string::npos)
      << restored.out;
  EXPECT_FALSE(std::filesystem::exists(state));
  const auto after = tt::sys::readKernelTiering(tt::sys::Fs("/proc"), tt::sys::Fs("/sys"));
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(*after, *current);
  const auto again = tt::test::runCommand(cmd);
  EXPECT_EQ(again.exitCode, 0) << again.out;
  EXPECT_NE(again.out.find("nothing to restore"), std::string::npos) << again.out;
  std::filesystem::remove_all(dir);
}

// The unit's only ExecStartPre is also its config check: a config that does not validate fails it
// (exit 1, the config's error on stderr, which the journal keeps) before it saves or changes
// anything, so systemd does not start the daemon.
TEST(SystemdUnits, ABrokenConfigFailsThePrepareStepBeforeItChangesAnything) {
  TT_REQUIRE_ROOT();
  char tmpl[] = "/tmp/tt-prepare-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string state = dir + "/kernel-tiering.state";
  std::ofstream(dir + "/tensortierd.conf") << "sources { kernel_tiering: DISABLE kernel_tiering_state_file: \"" << state
                                           << "\" }\nservice { epoch_ms: 5 }\n";  // below the minimum of 10
  const auto before = tt::sys::readKernelTiering(tt::sys::Fs("/proc"), tt::sys::Fs("/sys"));
  const auto r = tt::test::runCommand(std::string(TT_TENSORTIERD) + " --prepare-kernel-tiering --config " + dir +
                                      "/tensortierd.conf 2>&1");
  EXPECT_EQ(r.exitCode, 1) << r.out;
  EXPECT_NE(r.out.find("service.epoch_ms"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(state)) << "the broken config's step saved kernel-tiering state";
  const auto after = tt::sys::readKernelTiering(tt::sys::Fs("/proc"), tt::sys::Fs("/sys"));
  ASSERT_TRUE(before.ok() && after.ok());
  EXPECT_EQ(*after, *before);
  std::filesystem::remove_all(dir);
}

TEST(SystemdUnits, SocketMatchesTheDefaultPathGroupAndMode) {
  const std::string s = unitText("tensortierd.socket");
  EXPECT_NE(s.find("\nListenStream=/run/tensortier/tensortier.sock\n"), std::string::npos);
  EXPECT_NE(s.find("\nSocketMode=0660\n"), std::string::npos);
  EXPECT_NE(s.find("\nSocketGroup=tensortier\n"), std::string::npos);
}

}  // namespace
