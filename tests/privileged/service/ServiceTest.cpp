// The real daemon on a temp socket, driven through the raw protocol (tt::ctl::CtlClient) and
// tensortierctl: registration, queries, marks, identity and permissions (a client running as
// nobody), pidfd cleanup, malformed and oversized frames, limits, SIGHUP, SIGTERM and restart,
// socket ownership, metrics.
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <future>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "DaemonHarness.h"
#include "support/HttpGet.h"
#include "Trace.h"
#include "ctl/CtlClient.h"
#include "ipc/FrameCodec.h"
#include "support/ChildProcess.h"
#include "support/TestSupport.h"

namespace {

namespace pb = tensortier::v1;
using tt::ctl::CtlClient;
using tt::test::DaemonHarness;
constexpr uint64_t kPage = 4096;
constexpr uid_t kNobody = 65534;
constexpr gid_t kNogroup = 65534;

uint16_t metricsPort() { return static_cast<uint16_t>(20000 + ::getpid() % 20000); }

// The fault trace's storm guard is off: the record test counts this process's first touches, and
// the guard counts every fault on the machine, other tests' running in parallel included.
std::string baseConfig(const std::string& extraService = "", int epochMs = 100) {
  return "service {\n  socket_group: \"nogroup\"\n  socket_mode: \"0660\"\n  epoch_ms: " + std::to_string(epochMs) +
         "\n  max_frame_bytes: 65536\n  metrics_port: " + std::to_string(metricsPort()) + "\n" + extraService + "}\n" +
         "sources { fault_trace { pause_over_budget: false } }\n";
}

pb::ClientMessage registerMsg(const void* address, uint64_t length, const std::string& name) {
  pb::ClientMessage m;
  auto* r = m.mutable_register_region();
  r->set_address(reinterpret_cast<uint64_t>(address));
  r->set_length(length);
  r->set_name(name);
  r->set_kind(pb::ACTIVATION);
  return m;
}

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TT_REQUIRE_ROOT();
    daemon.writeConfig(baseConfig());
    ASSERT_TRUE(daemon.start()) << daemon.log();
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << "--- daemon log ---\n" << daemon.log();
  }
  void connect(CtlClient& c, const std::string& name = "privileged-test", bool mbind = false) {
    auto r = c.connect(daemon.socket());
    ASSERT_TRUE(r.ok()) << r.error().message();
    auto h = c.hello(name, mbind);
    ASSERT_TRUE(h.ok()) << h.error().message();
    EXPECT_EQ(h->version(), 1u);
  }
  nlohmann::json ctlJson(const std::string& args, int expectExit = 0) {
    auto r = tt::test::runCommand(std::string(TT_TENSORTIERCTL) + " --socket " + daemon.socket() + " --json " + args);
    EXPECT_EQ(r.exitCode, expectExit) << args << ": " << r.out;
    try {
      return nlohmann::json::parse(r.out);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "tensortierctl " << args << " printed no JSON: " << r.out;
      return {};
    }
  }

  DaemonHarness daemon;
};

struct Mapping {
  explicit Mapping(size_t bytes) : size(bytes) {
    addr = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (addr != MAP_FAILED) std::memset(addr, 1, bytes);
  }
  ~Mapping() {
    if (addr != MAP_FAILED) ::munmap(addr, size);
  }
  void* addr;
  size_t size;
};

TEST_F(ServiceTest, RegisterQueryMarkAndUnregister) {
  CtlClient c;
  connect(c);
  Mapping m(64 * kPage);
  ASSERT_NE(m.addr, MAP_FAILED);
  auto reg = c.call(registerMsg(m.addr, m.size, "acts"));
  ASSERT_TRUE(reg.ok()) << reg.error().message();
  ASSERT_TRUE(reg->has_register_region_reply()) << reg->DebugString();
  const uint64_t id = reg->register_region_reply().region_id();

  pb::ClientMessage mark;
  mark.mutable_iteration_mark()->set_type(pb::IterationMark::STEP_BEGIN);
  mark.mutable_iteration_mark()->set_step(17);
  ASSERT_TRUE(c.post(mark).ok());  // seq 0: no reply

  pb::ClientMessage q;
  q.mutable_query_placement()->add_region_ids(id);
  auto placement = c.call(q);
  ASSERT_TRUE(placement.ok());
  ASSERT_TRUE(placement->has_placement()) << placement->DebugString();
  ASSERT_EQ(placement->placement().regions_size(), 1);
  const auto& rp = placement->placement().regions(0);
  EXPECT_EQ(rp.name(), "acts");
  EXPECT_EQ(rp.length(), m.size);
  uint64_t present = 0;
  for (const auto& nb : rp.bytes_per_node()) present += nb.bytes();
  EXPECT_EQ(present, m.size);  // every page was touched
  EXPECT_EQ(rp.unmapped_bytes(), 0u);

  auto procs = ctlJson("processes");
  ASSERT_EQ(procs["processes"].size(), 1u);
  EXPECT_EQ(procs["processes"][0]["pid"], ::getpid());
  EXPECT_EQ(procs["processes"][0]["last_step"], 17);
  EXPECT_EQ(procs["processes"][0]["client_name"], "privileged-test");

  pb::ClientMessage u;
  u.mutable_unregister_region()->set_region_id(id);
  auto ack = c.call(u);
  ASSERT_TRUE(ack.ok());
  EXPECT_TRUE(ack->has_ack()) << ack->DebugString();
  EXPECT_EQ(ctlJson("regions")["regions"].size(), 0u);
}

TEST_F(ServiceTest, RangeNotMappedInTheCallerIsRefused) {
  CtlClient c;
  connect(c);
  void* hole = ::mmap(nullptr, 16 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(hole, MAP_FAILED);
  ::munmap(hole, 16 * kPage);
  auto r = c.call(registerMsg(hole, 16 * kPage, "gone"));
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->has_error()) << r->DebugString();
  EXPECT_EQ(r->error().code(), pb::REGION_NOT_MAPPED);
}

// What the nobody child saw, reported through a pipe.
struct ChildReport {
  int connected = 0;
  int registerCode = -1;  // 0 = registered, else ErrorCode
  uint64_t regionId = 0;
  int tuneCode = -1;
  int migrateCode = -1;
  int statusOk = 0;
};

TEST_F(ServiceTest, NobodyRegistersOnItsOwnPidAndIsRefusedAdminRequests) {
  int report[2], release[2];
  ASSERT_EQ(::pipe(report), 0);
  ASSERT_EQ(::pipe(release), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ChildReport rep;
    // Dropping root's ids without an exec leaves the process non-dumpable (commit_creds), which
    // the daemon refuses as the kernel does; the exec of a client program would make it dumpable.
    if (::setgroups(0, nullptr) == 0 && ::setgid(kNogroup) == 0 && ::setuid(kNobody) == 0 &&
        ::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) == 0) {
      CtlClient c;
      Mapping m(8 * kPage);
      if (c.connect(daemon.socket()).ok() && c.hello("nobody").ok()) {
        rep.connected = 1;
        auto r = c.call(registerMsg(m.addr, m.size, "nobody-buf"));
        if (r.ok()) {
          rep.registerCode = r->has_error() ? r->error().code() : 0;
          if (r->has_register_region_reply()) rep.regionId = r->register_region_reply().region_id();
        }
        pb::ClientMessage tune;
        tune.mutable_tune()->set_epoch_ms(500);
        auto t = c.call(tune);
        if (t.ok()) rep.tuneCode = t->has_error() ? t->error().code() : 0;
        pb::ClientMessage mig;
        mig.mutable_migrate()->set_region_id(rep.regionId);
        mig.mutable_migrate()->set_node(0);
        auto g = c.call(mig);
        if (g.ok()) rep.migrateCode = g->has_error() ? g->error().code() : 0;
        pb::ClientMessage st;
        st.mutable_status();
        auto s = c.call(st);
        rep.statusOk = s.ok() && s->has_status();
        (void)!::write(report[1], &rep, sizeof rep);
        char b;
        (void)!::read(release[0], &b, 1);  // keep the connection until the parent looked
      }
    }
    if (!rep.connected) (void)!::write(report[1], &rep, sizeof rep);
    std::_Exit(0);
  }
  ::close(report[1]);
  ::close(release[0]);
  ChildReport rep;
  ASSERT_EQ(::read(report[0], &rep, sizeof rep), static_cast<ssize_t>(sizeof rep));
  ASSERT_EQ(rep.connected, 1) << "nobody could not connect through the nogroup 0660 socket";
  EXPECT_EQ(rep.registerCode, 0);
  EXPECT_EQ(rep.tuneCode, pb::PERMISSION_DENIED);
  EXPECT_EQ(rep.migrateCode, pb::PERMISSION_DENIED);
  EXPECT_EQ(rep.statusOk, 1);

  // The registration landed on the child's own pid, under uid 65534 (from SO_PEERCRED).
  auto regions = ctlJson("regions");
  ASSERT_EQ(regions["regions"].size(), 1u);
  EXPECT_EQ(regions["regions"][0]["pid"], child);
  EXPECT_EQ(regions["regions"][0]["region_id"], rep.regionId);
  auto procs = ctlJson("processes");
  ASSERT_EQ(procs["processes"].size(), 1u);
  EXPECT_EQ(procs["processes"][0]["uid"], kNobody);
  EXPECT_EQ(ctlJson("status")["epoch_ms"], 100);  // the refused tune changed nothing

  (void)!::write(release[1], "x", 1);
  int status = 0;
  ::waitpid(child, &status, 0);
  ::close(report[0]);
  ::close(release[1]);
}

TEST_F(ServiceTest, ProcessExitCleansUpThroughPidfdEvenWhenTheSocketLivesOn) {
  // The registering process exits while a child it forked keeps the connection open: only the
  // pidfd can tell the daemon the registered process is gone.
  int ready[2], hold[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(hold), 0);
  const pid_t parent = ::fork();
  ASSERT_GE(parent, 0);
  if (parent == 0) {
    CtlClient c;
    Mapping m(4 * kPage);
    if (!c.connect(daemon.socket()).ok() || !c.hello("exiting").ok()) std::_Exit(1);
    auto r = c.call(registerMsg(m.addr, m.size, "short-lived"));
    if (!r.ok() || !r->has_register_region_reply()) std::_Exit(2);
    if (::fork() == 0) {  // the heir: inherits the socket, waits for the test to finish
      char b;
      (void)!::read(hold[0], &b, 1);
      std::_Exit(0);
    }
    (void)!::write(ready[1], "r", 1);
    std::_Exit(0);
  }
  ::close(ready[1]);
  char b = 0;
  ASSERT_EQ(::read(ready[0], &b, 1), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(parent, &status, 0), parent);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    gone = ctlJson("regions")["regions"].empty();
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(gone) << "the exited process's region is still registered";
  EXPECT_TRUE(ctlJson("processes")["processes"].empty());
  (void)!::write(hold[1], "x", 1);
  ::close(hold[1]);
  ::close(ready[0]);
}

// A connection speaks for the process that opened it and for no other. The opener exits while a
// child it forked keeps the socket; its pid is then handed to another process (through
// ns_last_pid, as CRIU does), which has the same mappings (a fork of this test). The child's
// registration must not land on that process: the daemon closed the connection when the opener
// exited.
TEST_F(ServiceTest, AConnectionDiesWithTheProcessThatOpenedIt) {
  Mapping shared(4 * kPage);  // mapped in every fork of this test, the victim included
  int go[2], heirReady[2], victimHold[2], verdict[2];
  ASSERT_EQ(::pipe(go), 0);
  ASSERT_EQ(::pipe(verdict), 0);
  ASSERT_EQ(::pipe(heirReady), 0);
  ASSERT_EQ(::pipe(victimHold), 0);
  const pid_t opener = ::fork();
  ASSERT_GE(opener, 0);
  if (opener == 0) {
    CtlClient c;
    if (!c.connect(daemon.socket()).ok() || !c.hello("opener").ok()) std::_Exit(1);
    if (::fork() == 0) {  // the heir: keeps the socket, registers when told to
      char b;
      (void)!::write(heirReady[1], "r", 1);
      if (::read(go[0], &b, 1) != 1) std::_Exit(4);
      auto r = c.call(registerMsg(shared.addr, shared.size, "not-mine"));
      (void)!::write(verdict[1], r.ok() && r->has_register_region_reply() ? "A" : "R", 1);
      std::_Exit(0);
    }
    char b;
    (void)!::read(heirReady[0], &b, 1);
    std::_Exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(opener, &status, 0), opener);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the opener could not connect";
  // The daemon sees the opener gone: only this status request's own connection is left.
  bool closed = false;
  for (int i = 0; i < 60 && !closed; ++i) {
    closed = ctlJson("status")["connections"] == 1;
    if (!closed) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(closed) << "the opener's connection outlived it";
  // A process of the opener's pid.
  const pid_t victim = tt::test::forkWithPid(opener, victimHold[0]);
  ASSERT_EQ(victim, opener) << "no process got pid " << opener << " in 20 tries (other processes took it)";
  (void)!::write(go[1], "g", 1);
  char answer = 0;
  ASSERT_EQ(::read(verdict[0], &answer, 1), 1);  // the heir is the opener's child: it tells by pipe
  EXPECT_EQ(answer, 'R') << "the daemon accepted the heir's registration";
  EXPECT_TRUE(ctlJson("regions")["regions"].empty()) << "the heir registered a region of pid " << opener
                                                      << ", now another process";
  EXPECT_TRUE(ctlJson("processes")["processes"].empty());
  (void)!::write(victimHold[1], "x", 1);
  ::waitpid(victim, nullptr, 0);
  for (int fd : {go[0], go[1], heirReady[0], heirReady[1], victimHold[0], victimHold[1], verdict[0], verdict[1]}) ::close(fd);
}

// A process that execs a setuid or setgid program keeps its pid, and a child may hold its
// connections. The old program's regions are not listed after the exec (their placement would
// describe the new program); the child, still of the old ids, can neither register (each answer
// says whether an address is mapped in the new program) nor keep its connections: a refused
// request closes them all at once, and with no request at all the server's sweep drops the
// process and closes them within a second.
class SetidExecTest : public ServiceTest {
 protected:
  // Runs the scenario with a root-owned copy of sleep of this mode (04755 or 02755; 0755 with
  // `fileCapability`: CAP_NET_BIND_SERVICE permitted and effective, which keeps the ids but makes
  // the process non-dumpable). `askAtOnce`: the child asks right after the exec (before the
  // sweep, most likely); else once the sweep has dropped the process.
  void execAndProbe(mode_t mode, bool askAtOnce, bool fileCapability = false) {
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("tt-setid-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    ::chmod(dir.c_str(), 0755);
    const std::string sleeper = (dir / "sleep").string();
    std::filesystem::copy_file("/bin/sleep", sleeper, std::filesystem::copy_options::overwrite_existing);
    ASSERT_EQ(::chown(sleeper.c_str(), 0, 0), 0);
    ASSERT_EQ(::chmod(sleeper.c_str(), mode), 0);
    if (fileCapability) {
      vfs_cap_data caps{};  // little-endian fields, as on this machine
      caps.magic_etc = VFS_CAP_REVISION_2 | VFS_CAP_FLAGS_EFFECTIVE;
      caps.data[0].permitted = 1u << CAP_NET_BIND_SERVICE;
      ASSERT_EQ(::setxattr(sleeper.c_str(), "security.capability", &caps, XATTR_CAPS_SZ_2, 0), 0)
          << "setting a file capability on " << sleeper << ": " << std::strerror(errno);
    }

    Mapping buffer(4 * kPage);  // mapped in the opener until it execs
    // Close-on-exec: the exec'd program holds none of them, so a child that dies early ends the
    // parent's read instead of hanging it.
    int registered[2], go[2], verdict[2];
    ASSERT_EQ(::pipe2(registered, O_CLOEXEC), 0);
    ASSERT_EQ(::pipe2(go, O_CLOEXEC), 0);
    ASSERT_EQ(::pipe2(verdict, O_CLOEXEC), 0);
    struct Verdict {
      int registerCode = -1, placementCode = -1, closed = 0, otherClosedAtOnce = 0;
    };
    const pid_t opener = ::fork();
    ASSERT_GE(opener, 0);
    if (opener == 0) {
      if (::setgroups(0, nullptr) != 0 || ::setgid(kNogroup) != 0 || ::setuid(kNobody) != 0) std::_Exit(2);
      if (::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0) std::_Exit(2);  // as an exec'd client would be
      CtlClient c, other;
      if (!c.connect(daemon.socket()).ok() || !c.hello("before-exec").ok()) std::_Exit(3);
      if (!other.connect(daemon.socket()).ok() || !other.hello("before-exec-too").ok()) std::_Exit(3);
      auto r = c.call(registerMsg(buffer.addr, buffer.size, "old-program"));
      if (!r.ok() || !r->has_register_region_reply()) std::_Exit(4);
      if (::fork() == 0) {  // the heir: keeps the sockets, asks when told to
        char b;
        if (::read(go[0], &b, 1) != 1) std::_Exit(5);
        Verdict out;
        auto reg = c.call(registerMsg(buffer.addr, buffer.size, "probe"));
        if (reg.ok()) out.registerCode = reg->has_error() ? reg->error().code() : 0;
        // The other connection: closed by now (EPIPE/ECONNRESET/EOF), not just quiet (ETIMEDOUT).
        auto quiet = other.nextMessage(std::chrono::milliseconds(200));
        out.otherClosedAtOnce = !quiet.ok() && quiet.error().code != ETIMEDOUT;
        pb::ClientMessage q;
        q.mutable_query_placement();
        auto place = c.call(q);
        if (place.ok()) out.placementCode = place->has_error() ? place->error().code() : 0;
        out.closed = !place.ok();
        (void)!::write(verdict[1], &out, sizeof out);
        std::_Exit(0);
      }
      (void)!::write(registered[1], "r", 1);
      ::execl(sleeper.c_str(), "sleep", "60", static_cast<char*>(nullptr));
      std::_Exit(6);
    }
    struct Cleanup {
      pid_t opener;
      std::filesystem::path dir;
      std::vector<int> fds;
      ~Cleanup() {
        ::kill(opener, SIGKILL);
        ::waitpid(opener, nullptr, 0);
        for (int fd : fds) ::close(fd);
        std::filesystem::remove_all(dir);
      }
    } cleanup{opener, dir, {registered[0], go[1], verdict[0]}};
    for (int fd : {registered[1], go[0], verdict[1]}) ::close(fd);

    char b = 0;
    ASSERT_EQ(::read(registered[0], &b, 1), 1) << "the opener (uid 65534) could not register";
    // Wait for the exec: /proc/PID takes the program's effective uid or gid, root's; with a file
    // capability the ids stay, and /proc/PID/status turns root's (not dumpable).
    bool execd = false;
    for (int i = 0; i < 100 && !execd; ++i) {
      struct stat st{};
      const std::string proc = "/proc/" + std::to_string(opener);
      if (fileCapability)
        execd = ::stat((proc + "/status").c_str(), &st) == 0 && st.st_uid == 0;
      else
        execd = ::stat(proc.c_str(), &st) == 0 && ((mode & S_ISUID) ? st.st_uid == 0 : st.st_gid == 0);
      if (!execd) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_TRUE(execd) << sleeper << " did not take its owner's ids, or its capability, after exec (a nosuid "
                       << "mount? fs.suid_dumpable 1?)";
    if (askAtOnce) (void)!::write(go[1], "g", 1);
    EXPECT_TRUE(ctlJson("regions")["regions"].empty()) << "the old program's region is listed after the exec";
    // The sweep (or the refused request) drops the process within a second or so.
    bool dropped = false;
    for (int i = 0; i < 60 && !dropped; ++i) {
      dropped = ctlJson("processes")["processes"].empty();
      if (!dropped) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_TRUE(dropped) << "the old program's registration outlived the exec by 3 s";
    if (!askAtOnce) (void)!::write(go[1], "g", 1);
    Verdict out;
    ASSERT_EQ(::read(verdict[0], &out, sizeof out), static_cast<ssize_t>(sizeof out)) << "the heir died";
    // Refused (PERMISSION_DENIED) if the heir asked first, or its connection already closed (-1).
    EXPECT_TRUE(out.registerCode == pb::PERMISSION_DENIED || out.registerCode == -1)
        << "the heir probed the new program's address space: answer " << out.registerCode;
    if (askAtOnce && out.registerCode == pb::PERMISSION_DENIED)
      std::cout << "the heir's request was refused before the sweep ran\n";
    // A refusal closes the other connection of the old ids with it (the sweep would too, later).
    if (out.registerCode == pb::PERMISSION_DENIED) {
      EXPECT_EQ(out.otherClosedAtOnce, 1) << "the other connection of the old ids stayed open after the refusal";
    }
    EXPECT_EQ(out.closed, 1) << "the connection stayed open (placement answered " << out.placementCode << ")";
    EXPECT_TRUE(ctlJson("regions")["regions"].empty());
    EXPECT_TRUE(ctlJson("processes")["processes"].empty());
  }
};

TEST_F(SetidExecTest, ASetuidExecEndsWhatTheOldUidRegistered) { execAndProbe(04755, true); }

TEST_F(SetidExecTest, ASetgidExecEndsWhatTheOldGidRegisteredAlsoWithNoRequest) { execAndProbe(02755, false); }

// A plain exec keeps the pid and the ids: the connection, held by a child, may stay, but the
// regions describe the program before, and the server's sweep drops them within a second or so.
// A registration from the child after that is probed in the new program's address space.
TEST_F(ServiceTest, AnExecThatKeepsTheIdsDropsTheOldProgramsRegions) {
  Mapping buffer(4 * kPage);  // mapped in the opener until it execs
  int registered[2], go[2], verdict[2];
  ASSERT_EQ(::pipe2(registered, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(go, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(verdict, O_CLOEXEC), 0);
  const pid_t opener = ::fork();
  ASSERT_GE(opener, 0);
  if (opener == 0) {
    // Not root: the ids and dumpable checks run on every request (root peers are exempt).
    if (::setgroups(0, nullptr) != 0 || ::setgid(kNogroup) != 0 || ::setuid(kNobody) != 0) std::_Exit(2);
    if (::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0) std::_Exit(2);  // as an exec'd client would be
    CtlClient c;
    if (!c.connect(daemon.socket()).ok() || !c.hello("before-exec").ok()) std::_Exit(3);
    auto r = c.call(registerMsg(buffer.addr, buffer.size, "old-program"));
    if (!r.ok() || !r->has_register_region_reply()) std::_Exit(4);
    if (::fork() == 0) {  // the heir: keeps the socket, registers the old buffer when told to
      char b;
      if (::read(go[0], &b, 1) != 1) std::_Exit(5);
      auto reg = c.call(registerMsg(buffer.addr, buffer.size, "probe"));
      const int code = !reg.ok() ? -1 : reg->has_error() ? reg->error().code() : 0;
      (void)!::write(verdict[1], &code, sizeof code);
      std::_Exit(0);
    }
    (void)!::write(registered[1], "r", 1);
    ::execl("/bin/sleep", "sleep", "60", static_cast<char*>(nullptr));
    std::_Exit(6);
  }
  struct Cleanup {
    pid_t opener;
    std::vector<int> fds;
    ~Cleanup() {
      ::kill(opener, SIGKILL);
      ::waitpid(opener, nullptr, 0);
      for (int fd : fds) ::close(fd);
    }
  } cleanup{opener, {registered[0], go[1], verdict[0]}};
  for (int fd : {registered[1], go[0], verdict[1]}) ::close(fd);
  char b = 0;
  ASSERT_EQ(::read(registered[0], &b, 1), 1) << "the opener could not register";
  bool dropped = false;
  for (int i = 0; i < 60 && !dropped; ++i) {
    dropped = ctlJson("regions")["regions"].empty();
    if (!dropped) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(dropped) << "the old program's region outlived the exec by 3 s";
  EXPECT_EQ(ctlJson("status")["connections"], 2) << "the heir's connection was closed (status's own is the other)";
  ASSERT_EQ(::write(go[1], "g", 1), 1);
  int code = -2;
  ASSERT_EQ(::read(verdict[0], &code, sizeof code), static_cast<ssize_t>(sizeof code)) << "the heir died";
  EXPECT_EQ(code, pb::REGION_NOT_MAPPED) << "the old buffer was taken as mapped in sleep";
  EXPECT_TRUE(ctlJson("regions")["regions"].empty());
}

// The ids stay, but the kernel now keeps the program's memory map from the old program's uid.
TEST_F(SetidExecTest, AFileCapabilityExecEndsWhatTheOldProgramRegistered) { execAndProbe(0755, true, true); }

TEST_F(ServiceTest, MalformedFrameGetsBadRequestAndTheConnectionKeepsWorking) {
  CtlClient c;
  ASSERT_TRUE(c.connect(daemon.socket()).ok());
  std::string garbage;
  tt::ipc::appendFrameHeader(5, garbage);
  garbage += "\xff\xff\xff\xff\xff";
  ASSERT_TRUE(c.sendRaw(garbage).ok());
  auto r = c.nextMessage();
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_TRUE(r->has_error());
  EXPECT_EQ(r->error().code(), pb::BAD_REQUEST);
  EXPECT_TRUE(c.hello("after-garbage").ok());
  // A message with a field this daemon does not know (a newer client's request) parses to an
  // empty body: seq 7, then field 100 = 1.
  std::string unknown;
  tt::ipc::appendFrameHeader(5, unknown);
  unknown += std::string("\x08\x07\xa0\x06\x01", 5);
  ASSERT_TRUE(c.sendRaw(unknown).ok());
  auto u = c.nextMessage();
  ASSERT_TRUE(u.ok());
  ASSERT_TRUE(u->has_error());
  EXPECT_EQ(u->error().code(), pb::BAD_REQUEST);
  EXPECT_EQ(u->seq(), 7u);
  pb::ClientMessage st;
  st.mutable_status();
  auto s = c.call(st);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->has_status());
}

TEST_F(ServiceTest, OversizedFrameGetsFrameTooLargeAndTheDaemonKeepsServing) {
  CtlClient c;
  ASSERT_TRUE(c.connect(daemon.socket()).ok());
  std::string header;
  tt::ipc::appendFrameHeader(65537, header);  // max_frame_bytes is 65536
  ASSERT_TRUE(c.sendRaw(header).ok());
  auto r = c.nextMessage();
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_TRUE(r->has_error());
  EXPECT_EQ(r->error().code(), pb::FRAME_TOO_LARGE);
  auto closed = c.nextMessage(std::chrono::seconds(5));
  ASSERT_FALSE(closed.ok());
  EXPECT_EQ(closed.error().code, ENOTCONN) << closed.error().message();
  CtlClient fresh;
  connect(fresh);
  EXPECT_TRUE(daemon.running());
}

TEST_F(ServiceTest, HalfAFrameThenHangupDoesNotDisturbOthers) {
  CtlClient other;
  connect(other);
  {
    CtlClient c;
    ASSERT_TRUE(c.connect(daemon.socket()).ok());
    std::string header;
    tt::ipc::appendFrameHeader(1000, header);
    ASSERT_TRUE(c.sendRaw(header + "abc").ok());
  }
  pb::ClientMessage st;
  st.mutable_status();
  auto s = other.call(st);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->has_status());
}

TEST_F(ServiceTest, SocketIsOwnedByTheConfiguredGroupWithMode0660) {
  struct stat st {};
  ASSERT_EQ(::stat(daemon.socket().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0660u);
  EXPECT_EQ(st.st_gid, kNogroup);
}

TEST_F(ServiceTest, SigtermExitsZeroRemovesTheSocketAndARestartServesAgain) {
  CtlClient c;
  connect(c);
  Mapping m(4 * kPage);
  auto reg = c.call(registerMsg(m.addr, m.size, "before-restart"));
  ASSERT_TRUE(reg.ok() && reg->has_register_region_reply());
  daemon.signal(SIGTERM);
  const auto code = daemon.wait();
  ASSERT_TRUE(code.has_value()) << "tensortierd did not exit after SIGTERM";
  EXPECT_EQ(*code, 0);
  EXPECT_NE(::access(daemon.socket().c_str(), F_OK), 0);
  ASSERT_TRUE(daemon.start()) << daemon.log();
  EXPECT_EQ(ctlJson("regions")["regions"].size(), 0u);  // registrations do not survive a restart
  CtlClient again;
  connect(again);
  auto reg2 = again.call(registerMsg(m.addr, m.size, "after-restart"));
  ASSERT_TRUE(reg2.ok());
  EXPECT_TRUE(reg2->has_register_region_reply()) << reg2->DebugString();
}

TEST_F(ServiceTest, SighupKeepsTheRunningConfigWhenTheFileIsBadAndAppliesAGoodOne) {
  daemon.writeConfig("service { epoch_ms: 5 }\n");  // below the minimum of 10
  daemon.signal(SIGHUP);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_TRUE(daemon.running());
  EXPECT_EQ(ctlJson("status")["epoch_ms"], 100);
  EXPECT_NE(daemon.log().find("keeping the running config"), std::string::npos);
  daemon.writeConfig(baseConfig("", 250));
  daemon.signal(SIGHUP);
  bool applied = false;
  for (int i = 0; i < 50 && !applied; ++i) {
    applied = ctlJson("status")["epoch_ms"] == 250;
    if (!applied) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(applied);
}

TEST_F(ServiceTest, TensortierctlJsonStatusAndTuneAsRoot) {
  auto status = ctlJson("status");
  EXPECT_EQ(status["daemon_version"], "0.1.0");
  ASSERT_TRUE(status["nodes"].is_array());
  EXPECT_GE(status["nodes"].size(), 1u);
  EXPECT_TRUE(status["nodes"][0].contains("tier"));
  ASSERT_TRUE(status["sources"].is_array());
  EXPECT_GE(status["epochs"].get<uint64_t>(), 0u);
  auto tuned = ctlJson("tune --epoch-ms 300 --promote-mbps 123");
  EXPECT_NE(tuned["effective_config"].get<std::string>().find("promote_mbps: 123"), std::string::npos);
  EXPECT_EQ(ctlJson("status")["epoch_ms"], 300);
  auto bad = ctlJson("tune --epoch-ms 1", 1);
  EXPECT_EQ(bad["error"]["code"], "BAD_REQUEST");
  EXPECT_EQ(ctlJson("status")["epoch_ms"], 300);
  // Heat-model keys are live too: the reply says so, and says what becomes of learned schedules;
  // the epoch thread applies them before its next epoch.
  auto heat = ctlJson("tune --policy heat_half_life_ms=2000 --policy schedule_buckets=16");
  const std::string heatText = heat["effective_config"].get<std::string>();
  EXPECT_NE(heatText.find("policy.heat_half_life_ms: live from the next epoch"), std::string::npos) << heatText;
  EXPECT_NE(heatText.find("policy.schedule_buckets: live from the next epoch (step schedules resampled"),
            std::string::npos)
      << heatText;
  EXPECT_EQ(heatText.find("restart"), std::string::npos) << heatText;
  bool applied = false;
  for (int i = 0; i < 50 && !applied; ++i) {
    applied = daemon.log().find("heat model: applied policy.heat_half_life_ms, policy.schedule_buckets") !=
              std::string::npos;
    if (!applied) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(applied) << daemon.log();
  auto top = ctlJson("top --count 3");
  EXPECT_TRUE(top["hottest"].is_array());
  auto check = tt::test::runCommand(std::string(TT_TENSORTIERCTL) + " --json check-config --config " + daemon.configPath());
  EXPECT_EQ(check.exitCode, 0) << check.out;
  EXPECT_EQ(nlohmann::json::parse(check.out)["valid"], true);
}

// Live sampling budget, and a manual migration pinned until unpinned, through tensortierctl --json.
TEST_F(ServiceTest, TensortierctlTunesTheSamplingBudgetLiveAndMigratePinsUntilUnpinned) {
  auto tuned = ctlJson("tune --sampling-budget 5");
  const std::string text = tuned["effective_config"].get<std::string>();
  EXPECT_NE(text.find("sources.cpu_budget_percent: live"), std::string::npos) << text;
  EXPECT_EQ(text.find("sources.cpu_budget_percent: takes effect at restart"), std::string::npos) << text;
  EXPECT_NE(text.find("cpu_budget_percent: 5"), std::string::npos) << text;

  CtlClient c;
  connect(c);
  Mapping m(16 * kPage);
  ASSERT_NE(m.addr, MAP_FAILED);
  auto reg = c.call(registerMsg(m.addr, m.size, "by-hand"));
  ASSERT_TRUE(reg.ok()) << reg.error().message();
  ASSERT_TRUE(reg->has_register_region_reply()) << reg->DebugString();
  const std::string id = std::to_string(reg->register_region_reply().region_id());

  auto moved = ctlJson("migrate --region " + id + " --node 0");
  EXPECT_EQ(moved["queued"], true);
  EXPECT_EQ(moved["pinned"], true);
  EXPECT_EQ(moved["pin_expires_in_ms"], 300000);  // service.manual_pin_seconds default
  auto regions = ctlJson("regions");
  ASSERT_EQ(regions["regions"].size(), 1u);
  EXPECT_EQ(regions["regions"][0]["pinned"], true);
  EXPECT_EQ(regions["regions"][0]["pinned_node"], 0);
  const auto left = regions["regions"][0]["pin_expires_in_ms"].get<uint64_t>();
  EXPECT_GT(left, 0u);
  EXPECT_LE(left, 300000u);

  auto unpinned = ctlJson("migrate --region " + id + " --unpin");
  EXPECT_EQ(unpinned["unpinned_ranges"], 1);
  EXPECT_EQ(ctlJson("regions")["regions"][0]["pinned"], false);
  // --node and --unpin together are a usage error.
  auto both = tt::test::runCommand(std::string(TT_TENSORTIERCTL) + " --socket " + daemon.socket() +
                                   " --json migrate --region " + id + " --node 0 --unpin");
  EXPECT_EQ(both.exitCode, 1) << both.out;
}

// tensortierctl record: a live run of this process (first touches the sources see, iteration
// marks, the registered region) ends up in a trace file that tiersim's reader replays, and that
// the admin group (here adm, which uid 65534 is not in) may read; status, processes and
// top --pages show what the heat model made of the run meanwhile.
TEST_F(ServiceTest, TensortierctlRecordsALiveRunThatTiersimReadsBack) {
  const std::string traceDir = daemon.dir() + "/traces";
  const group* adm = ::getgrnam("adm");
  ASSERT_NE(adm, nullptr) << "this test gives the recordings the group adm";
  const gid_t admGid = adm->gr_gid;
  daemon.signal(SIGTERM);
  ASSERT_EQ(daemon.wait(), std::optional<int>(0)) << daemon.log();
  daemon.writeConfig(baseConfig("  trace_directory: \"" + traceDir + "\"\n  admin_group: \"adm\"\n"));
  ASSERT_TRUE(daemon.start()) << daemon.log();

  CtlClient c;
  connect(c, "record-test");
  constexpr size_t kPages = 64;
  void* addr = ::mmap(nullptr, kPages * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(addr, MAP_FAILED);
  auto reg = c.call(registerMsg(addr, kPages * kPage, "acts"));
  ASSERT_TRUE(reg.ok()) << reg.error().message();
  ASSERT_TRUE(reg->has_register_region_reply()) << reg->DebugString();

  const std::string pid = std::to_string(::getpid());
  auto started = ctlJson("record start --pid " + pid + " --seconds 60");
  ASSERT_EQ(started["recordings"].size(), 1u) << started.dump();
  EXPECT_EQ(started["recordings"][0]["active"], true);
  const std::string path = started["recordings"][0]["path"].get<std::string>();
  EXPECT_EQ(path.rfind(traceDir + "/record-test-" + pid + "-", 0), 0u) << path;
  // Let the sources pick the process up (next epoch), then run two "steps" of first touches.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  auto* bytes = static_cast<volatile char*>(addr);
  for (uint64_t step = 0; step < 2; ++step) {
    pb::ClientMessage mark;
    mark.mutable_iteration_mark()->set_type(pb::IterationMark::STEP_BEGIN);
    mark.mutable_iteration_mark()->set_step(step);
    ASSERT_TRUE(c.post(mark).ok());
    for (size_t p = step * kPages / 2; p < (step + 1) * kPages / 2; ++p) bytes[p * kPage] = 1;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    mark.mutable_iteration_mark()->set_type(pb::IterationMark::STEP_END);
    ASSERT_TRUE(c.post(mark).ok());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // The real heat model's state is visible: four feature weights summing to 1, the step clock.
  auto status = ctlJson("status");
  ASSERT_EQ(status["feature_weights"].size(), 4u) << status.dump();
  double sum = 0;
  for (const char* f : {"frequency", "recency", "size", "reuse"}) sum += status["feature_weights"][f].get<double>();
  EXPECT_NEAR(sum, 1.0, 1e-6);
  auto procs = ctlJson("processes");
  ASSERT_EQ(procs["processes"].size(), 1u);
  EXPECT_TRUE(procs["processes"][0].contains("step_period_us")) << procs.dump();
  // And its per-page heat: the first touches put heat on the pages, which top --pages lists for
  // this process, hottest first: most of the 64 (as in the trace below), among whatever other
  // faults of this process the sources saw.
  auto top = ctlJson("top --pages 1000 --pid " + pid);
  ASSERT_FALSE(top["hottest_pages"].empty()) << top.dump() << daemon.log();
  EXPECT_LE(top["hottest_pages"].size(), 1000u);
  double previous = HUGE_VAL;
  size_t inRegion = 0;
  const auto base = reinterpret_cast<uint64_t>(addr);
  for (const auto& p : top["hottest_pages"]) {
    EXPECT_EQ(p["pid"], ::getpid()) << p.dump();
    const auto a = p["address"].get<uint64_t>();
    EXPECT_EQ(a % kPage, 0u) << p.dump();
    const double heat = p["heat"].get<double>();
    EXPECT_GT(heat, 0) << p.dump();
    EXPECT_LE(heat, previous) << top.dump();
    previous = heat;
    if (a >= base && a < base + kPages * kPage) ++inRegion;
  }
  EXPECT_GE(inRegion, kPages * 95 / 100) << top.dump();
  EXPECT_EQ(ctlJson("top --pages 1001", 1)["error"]["code"], "BAD_REQUEST");
  auto text = tt::test::runCommand(std::string(TT_TENSORTIERCTL) + " --socket " + daemon.socket() + " top --pages 3 --pid " + pid);
  EXPECT_EQ(text.exitCode, 0) << text.out;
  EXPECT_NE(text.out.find("\nhottest pages:\nPID"), std::string::npos) << text.out;

  auto listed = ctlJson("record list");
  ASSERT_GE(listed["recordings"].size(), 1u);
  EXPECT_EQ(listed["recordings"][0]["active"], true);
  auto stopped = ctlJson("record stop --pid " + pid);
  ASSERT_EQ(stopped["recordings"].size(), 1u) << stopped.dump();
  EXPECT_EQ(stopped["recordings"][0]["ended"], "stopped");
  EXPECT_EQ(stopped["recordings"][0]["marks"], 4);
  // Not root and not in the admin group: refused.
  auto refused = tt::test::runCommand("setpriv --reuid=65534 --regid=65534 --clear-groups " + std::string(TT_TENSORTIERCTL) +
                                      " --socket " + daemon.socket() + " record list");
  EXPECT_EQ(refused.exitCode, 1) << refused.out;

  // The file and the directory the daemon made belong to the admin group, readable, not writable.
  struct stat st {};
  ASSERT_EQ(::lstat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(st.st_gid, admGid);
  ASSERT_EQ(::lstat(traceDir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750u);
  EXPECT_EQ(st.st_gid, admGid);

  tt::tiersim::ReadTraceStats stats;
  auto trace = tt::tiersim::readTraceFile(path, &stats);
  ASSERT_TRUE(trace.ok()) << trace.error().message();
  EXPECT_EQ(trace->name, "record-test");
  ASSERT_EQ(trace->regions.size(), 1u);
  EXPECT_EQ(trace->regions[0].name, "acts");
  EXPECT_EQ(trace->regions[0].pages, kPages);
  ASSERT_EQ(trace->marks.size(), 4u);
  EXPECT_EQ(trace->marks[3].step, 1u);
  EXPECT_EQ(trace->marks[3].type, tt::MarkType::StepEnd);
  // Every first touch the daemon's sources saw is there, on the right page: most of the 64.
  std::set<uint64_t> pages;
  for (const auto& a : trace->accesses) pages.insert(a.page);
  EXPECT_GE(pages.size(), kPages * 95 / 100) << trace->accesses.size() << " accesses, " << stats.droppedAccesses
                                             << " outside the region\n" << daemon.log();
  // And the simulator replays it: one row per recorded step.
  auto replay = tt::test::runCommand(std::string(TT_TIERSIM) + " run --trace " + path + " --policy tensortier --fraction 0.5");
  EXPECT_EQ(replay.exitCode, 0) << replay.out;
  EXPECT_NE(replay.out.find("\n   0 "), std::string::npos) << replay.out;
  EXPECT_NE(replay.out.find("\n   1 "), std::string::npos) << replay.out;
  EXPECT_NE(replay.out.find("mean step"), std::string::npos) << replay.out;
  ::munmap(addr, kPages * kPage);
}

// A reply larger than the whole send queue (here the placement of 3000 regions against a 64 KiB
// queue) is refused with LIMIT_EXCEEDED, and the connection goes on serving: it used to be closed
// as if the client had stopped reading.
TEST_F(ServiceTest, AReplyOverTheSendLimitIsAnErrorNotAHangup) {
  daemon.writeConfig(baseConfig("  max_send_queue_bytes: 65536\n"));
  daemon.signal(SIGHUP);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  constexpr int kRegions = 3000;
  Mapping m(kRegions * kPage);
  CtlClient c;
  connect(c);
  uint64_t firstId = 0;
  for (int i = 0; i < kRegions; ++i) {
    auto r = c.call(registerMsg(static_cast<char*>(m.addr) + i * kPage, kPage, "r" + std::to_string(i)));
    ASSERT_TRUE(r.ok() && r->has_register_region_reply()) << i << ": " << (r.ok() ? r->DebugString() : r.error().message());
    if (i == 0) firstId = r->register_region_reply().region_id();
  }
  pb::ClientMessage query;
  query.mutable_query_placement();
  auto all = c.call(query);
  ASSERT_TRUE(all.ok()) << "the connection was closed: " << all.error().message();
  ASSERT_TRUE(all->has_error()) << "a reply over the limit came through";
  EXPECT_EQ(all->error().code(), pb::LIMIT_EXCEEDED);
  EXPECT_NE(all->error().message().find("max_send_queue_bytes"), std::string::npos) << all->error().message();
  // The same connection answers a smaller query.
  query.mutable_query_placement()->add_region_ids(firstId);
  auto one = c.call(query);
  ASSERT_TRUE(one.ok()) << one.error().message();
  ASSERT_TRUE(one->has_placement()) << one->DebugString();
  EXPECT_EQ(one->placement().regions_size(), 1);
}

// A connection that says no Hello (silent, or sending other frames), or holds part of a frame, for
// stalled_connection_ms is closed;
// one that said Hello and sits idle is not, and neither is one that keeps sending whole frames
// while its reads end mid-frame.
TEST_F(ServiceTest, StalledConnectionsAreClosedAndBusyOnesAreNot) {
  daemon.writeConfig(baseConfig("  stalled_connection_ms: 300\n"));
  daemon.signal(SIGHUP);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  CtlClient silent, chatty, halfFrame, idle, streaming;
  ASSERT_TRUE(silent.connect(daemon.socket()).ok());
  ASSERT_TRUE(chatty.connect(daemon.socket()).ok());  // sends frames, never Hello
  connect(halfFrame);
  connect(idle);
  connect(streaming);
  std::string header;
  tt::ipc::appendFrameHeader(1000, header);
  ASSERT_TRUE(halfFrame.sendRaw(header + "abc").ok());
  // Marks (seq 0: no reply), each frame sent in two halves 50 ms apart, for 1.2 s.
  pb::ClientMessage mark;
  mark.mutable_iteration_mark()->set_step(1);
  std::string frame;
  ASSERT_TRUE(tt::ipc::appendFrame(mark, frame));
  const size_t half = frame.size() / 2;
  std::string empty;
  tt::ipc::appendFrameHeader(0, empty);
  int chattyRefused = 0;  // sends that failed: the daemon closed it while it was still sending
  for (int i = 0; i < 12; ++i) {
    chattyRefused += chatty.sendRaw(empty).ok() ? 0 : 1;  // BAD_REQUEST each, until closed
    ASSERT_TRUE(streaming.sendRaw(std::string_view(frame).substr(0, half)).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_TRUE(streaming.sendRaw(std::string_view(frame).substr(half)).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  auto silentGot = silent.nextMessage(std::chrono::milliseconds(3000));
  ASSERT_FALSE(silentGot.ok()) << silentGot->DebugString();
  EXPECT_EQ(silentGot.error().code, ENOTCONN) << "a connection without Hello is still open: " << silentGot.error().message();
  EXPECT_GT(chattyRefused, 0) << "frames without Hello kept the connection open for 1.2 s";
  // The chatty one's BAD_REQUESTs, then the close.
  tt::Result<pb::DaemonMessage> chattyGot = chatty.nextMessage(std::chrono::milliseconds(3000));
  for (int i = 0; i < 20 && chattyGot.ok(); ++i) chattyGot = chatty.nextMessage(std::chrono::milliseconds(3000));
  ASSERT_FALSE(chattyGot.ok());
  EXPECT_EQ(chattyGot.error().code, ENOTCONN) << "frames without Hello kept a connection open: " << chattyGot.error().message();
  auto halfGot = halfFrame.nextMessage(std::chrono::milliseconds(3000));
  ASSERT_FALSE(halfGot.ok()) << halfGot->DebugString();
  EXPECT_EQ(halfGot.error().code, ENOTCONN) << "a connection holding half a frame is still open: " << halfGot.error().message();
  pb::ClientMessage st;
  st.mutable_status();
  auto idleGot = idle.call(st);
  ASSERT_TRUE(idleGot.ok()) << "an idle connection after Hello was closed: " << idleGot.error().message();
  EXPECT_TRUE(idleGot->has_status());
  auto streamingGot = streaming.call(st);
  ASSERT_TRUE(streamingGot.ok()) << "a connection sending whole frames was closed: " << streamingGot.error().message();
  EXPECT_TRUE(streamingGot->has_status());
  EXPECT_NE(daemon.log().find("did not say Hello for 300 ms: closed"), std::string::npos) << daemon.log();
  EXPECT_NE(daemon.log().find("held part of a frame for 300 ms: closed"), std::string::npos);
}

TEST_F(ServiceTest, PerUidConnectionLimitRefusesTheExtraConnection) {
  daemon.writeConfig(baseConfig("  max_connections_per_uid: 4\n"));
  daemon.signal(SIGHUP);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::vector<std::unique_ptr<CtlClient>> clients;
  for (int i = 0; i < 4; ++i) {
    clients.push_back(std::make_unique<CtlClient>());
    connect(*clients.back());
  }
  CtlClient extra;
  ASSERT_TRUE(extra.connect(daemon.socket()).ok());
  auto r = extra.nextMessage();
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_TRUE(r->has_error());
  EXPECT_EQ(r->error().code(), pb::LIMIT_EXCEEDED);
  clients.pop_back();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CtlClient again;
  connect(again);
}

// Fetches /metrics until it holds `text` (about 10 s at most); the last page either way.
std::string metricsOnceTheyHold(const std::string& text) {
  std::string out;
  for (int i = 0; i < 100 && out.find(text) == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    out = tt::test::httpGetLoopback(metricsPort(), "/metrics");
  }
  return out;
}

TEST_F(ServiceTest, MetricsAreServedOnLoopback) {
  // The socket accepts before the sources are open (software-fault sampling calibrates its cost
  // at start, ~0.1-0.5 s on a loaded machine) and the epoch loop runs: fetch until an epoch has
  // been exported, instead of guessing how long start-up takes.
  const std::string out = metricsOnceTheyHold("tensortier_epochs_total ");
  ASSERT_FALSE(out.empty()) << "no answer on the metrics port";
  EXPECT_NE(out.find("200 OK"), std::string::npos);
  EXPECT_NE(out.find("# TYPE tensortier_epoch_duration_seconds histogram"), std::string::npos) << out;
  EXPECT_NE(out.find("tensortier_epochs_total "), std::string::npos);
  EXPECT_NE(out.find("tensortier_promoted_bytes_total "), std::string::npos);
  // Set by a collector when scraped; nothing is waiting on a process here.
  EXPECT_NE(out.find("\ntensortier_request_work_queued 0\n"), std::string::npos) << out;
  EXPECT_NE(out.find("\ntensortier_request_work_running 0\n"), std::string::npos) << out;
}

// Each direction's rate limit, tuned live, caps the copy rate the planner plans that direction
// with (here, with nothing moved yet, the initial 1 GB/s under each limit), as the metrics show.
TEST_F(ServiceTest, TunedRateLimitsCapThePlannersRateOfTheirOwnDirection) {
  const std::string promote = "tensortier_migration_rate_bytes_per_second{direction=\"promote\"} ";
  const std::string demote = "tensortier_migration_rate_bytes_per_second{direction=\"demote\"} ";
  std::string out = metricsOnceTheyHold(promote);
  EXPECT_NE(out.find(promote + "1e+09\n"), std::string::npos) << out;
  EXPECT_NE(out.find(demote + "1e+09\n"), std::string::npos) << out;
  auto tuned = ctlJson("tune --promote-mbps 123 --demote-mbps 45");
  EXPECT_NE(tuned["effective_config"].get<std::string>().find("demote_mbps: 45"), std::string::npos) << tuned.dump();
  out = metricsOnceTheyHold(demote + "4.5e+07\n");
  EXPECT_NE(out.find(demote + "4.5e+07\n"), std::string::npos) << out;
  EXPECT_NE(out.find(promote + "1.23e+08\n"), std::string::npos) << out;
}

}  // namespace

namespace {

// A number an option's field cannot hold is refused before anything is sent (exit 2): a narrowing
// cast used to turn --pid 4294967297 into pid 1. No daemon is needed; the largest value that fits
// gets past parsing and fails on the socket instead (exit 1).
TEST(CtlArguments, NumbersOutOfRangeAreRefusedNotTruncated) {
  const std::string ctl = std::string(TT_TENSORTIERCTL) + " --socket /nonexistent/tensortier.sock ";
  for (const std::string args : {"top --pid 4294967297", "regions --pid 2147483648", "migrate --pid 1 --node 4294967296",
                                 "tune --epoch-ms 4294967296", "record start --pid 4294967297",
                                 "top --pages 4294967296"}) {
    auto r = tt::test::runCommand(ctl + args + " 2>&1");
    EXPECT_EQ(r.exitCode, 2) << args << ": " << r.out;
    EXPECT_NE(r.out.find("is out of range"), std::string::npos) << args << ": " << r.out;
  }
  auto fits = tt::test::runCommand(ctl + "top --pid 2147483647 2>&1");
  EXPECT_EQ(fits.exitCode, 1) << fits.out;
  EXPECT_EQ(fits.out.find("out of range"), std::string::npos) << fits.out;
  EXPECT_NE(fits.out.find("connect"), std::string::npos) << fits.out;
}

// A procfs for the daemon's sources (sources.procfs_root) that is the real one but for
// sys/kernel/numa_balancing, a FIFO: the sources read it first when they open, so they stay
// opening until release() writes it a value. Every other entry links to /proc (pids: those that
// exist when it is made, this test's among them).
class StalledProcfs {
 public:
  explicit StalledProcfs(const std::string& root) : root_(root) {
    // Each level of the path to numa_balancing is a directory of links to the real entries but
    // for the next level, made below.
    std::string real = "/proc", copy = root_;
    for (const char* next : {"sys", "kernel", "numa_balancing"}) {
      std::filesystem::create_directories(copy);
      for (const auto& e : std::filesystem::directory_iterator(real))
        if (e.path().filename() != next) std::filesystem::create_symlink(e.path(), copy + "/" + e.path().filename().string());
      real += std::string("/") + next;
      copy += std::string("/") + next;
    }
    ok_ = ::mkfifo(fifo().c_str(), 0600) == 0;
  }
  [[nodiscard]] bool ok() const { return ok_; }
  [[nodiscard]] const std::string& root() const { return root_; }
  [[nodiscard]] std::string fifo() const { return root_ + "/sys/kernel/numa_balancing"; }
  // Lets the reader go on: numa_balancing reads 0. Waits (up to 5 s) for the daemon to open the
  // FIFO for reading: without a reader a non-blocking open for writing fails with ENXIO.
  [[nodiscard]] bool release() const {
    int fd = -1;
    for (int i = 0; i < 500 && fd < 0; ++i) {
      fd = ::open(fifo().c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
      if (fd < 0 && errno != ENXIO) return false;
      if (fd < 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (fd < 0) return false;
    const bool wrote = ::write(fd, "0\n", 2) == 2;
    ::close(fd);
    return wrote;
  }

 private:
  std::string root_;
  bool ok_ = false;
};

// The daemon with its sources stalled while opening (StalledProcfs).
class ServiceStartupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TT_REQUIRE_ROOT();
    procfs = std::make_unique<StalledProcfs>(daemon.dir() + "/proc");
    ASSERT_TRUE(procfs->ok()) << "mkfifo " << procfs->fifo() << ": " << std::strerror(errno);
    // A state file of its own: the default one is the host's, and a previous run's values in it
    // would be written back into the FIFO.
    daemon.writeConfig("log { level: DEBUG }\n"
                       "service { socket_group: \"\" epoch_ms: 100 }\n"
                       "sources { procfs_root: \"" + procfs->root() + "\" kernel_tiering_state_file: \"" +
                       daemon.dir() + "/kernel-tiering.state\" fault_trace { pause_over_budget: false } }\n");
    daemon.launch();
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << "--- daemon log ---\n" << daemon.log();
  }
  // Connects and says Hello, retrying until the socket exists; the Hello's own wait is CtlClient's
  // 10 s reply timeout.
  void connect(CtlClient& c) {
    for (int i = 0; i < 200; ++i) {
      if (c.connect(daemon.socket()).ok()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    auto h = c.hello("startup-test");
    ASSERT_TRUE(h.ok()) << "no answer to Hello while the sources open: " << h.error().message();
  }
  [[nodiscard]] bool logHas(const std::string& text) const { return daemon.log().find(text) != std::string::npos; }

  DaemonHarness daemon;
  std::unique_ptr<StalledProcfs> procfs;
};

// Clients are not kept waiting for the sources (BPF verification, per-CPU perf events): Hello and
// registrations are answered at once, admin requests say the daemon is starting, and the first
// epoch takes up what was registered meanwhile. A SIGHUP in that time is applied once it is ready.
TEST_F(ServiceStartupTest, ClientsAreServedWhileTheSourcesOpen) {
  CtlClient c;
  connect(c);
  // Mapped, not yet touched: the first touches after the daemon is ready are the fault trace's.
  constexpr size_t kPages = 256;
  void* addr = ::mmap(nullptr, kPages * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(addr, MAP_FAILED);
  auto registered = c.call(registerMsg(addr, kPages * kPage, "early"));
  ASSERT_TRUE(registered.ok()) << registered.error().message();
  ASSERT_TRUE(registered->has_register_region_reply()) << registered->DebugString();

  pb::ClientMessage status;
  status.mutable_status();
  auto starting = c.call(status);
  ASSERT_TRUE(starting.ok()) << starting.error().message();
  ASSERT_TRUE(starting->has_error()) << starting->DebugString();
  EXPECT_EQ(starting->error().code(), pb::STARTING) << starting->DebugString();
  EXPECT_NE(starting->error().message().find("starting"), std::string::npos) << starting->DebugString();
  EXPECT_FALSE(logHas(" ready: serving ")) << "ready before the sources were open";

  daemon.signal(SIGHUP);
  for (int i = 0; i < 100 && !logHas("SIGHUP while the sources open"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(logHas("SIGHUP while the sources open: reloading once they are"));
  EXPECT_FALSE(logHas("SIGHUP: reloaded"));

  ASSERT_TRUE(procfs->release()) << "open " << procfs->fifo() << " for writing: " << std::strerror(errno);
  ASSERT_TRUE(daemon.waitReady()) << "not ready after the sources could open";
  for (int i = 0; i < 100 && !logHas("SIGHUP: reloaded"); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::string log = daemon.log();
  const size_t ready = log.find(" ready: serving "), reloaded = log.find("SIGHUP: reloaded");
  ASSERT_NE(reloaded, std::string::npos) << "the SIGHUP that came while starting was not applied";
  EXPECT_GT(reloaded, ready);

  auto served = c.call(status);
  ASSERT_TRUE(served.ok()) << served.error().message();
  ASSERT_TRUE(served->has_status()) << served->DebugString();
  EXPECT_EQ(served->status().regions(), 1u);
  // The region registered before the first epoch is tracked: its first touches become heat. Two
  // epochs first: the first attaches the fault trace to the process.
  uint64_t epochs = 0;
  for (int i = 0; i < 200 && epochs < 2; ++i) {
    auto st = c.call(status);
    ASSERT_TRUE(st.ok() && st->has_status()) << (st.ok() ? st->DebugString() : st.error().message());
    epochs = st->status().epochs();
    if (epochs < 2) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GE(epochs, 2U);
  std::memset(addr, 1, kPages * kPage);
  double heat = 0;
  for (int i = 0; i < 100 && heat <= 0; ++i) {
    pb::ClientMessage q;
    q.mutable_regions();
    auto regions = c.call(q);
    ASSERT_TRUE(regions.ok()) << regions.error().message();
    for (const auto& region : regions->regions().regions())
      if (region.name() == "early") heat = region.heat();
    if (heat <= 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_GT(heat, 0) << "the early registration's first touches left no heat";
  ::munmap(addr, kPages * kPage);
}

// tensortierctl asks again while the daemon answers STARTING (a status that started the daemon
// through its socket gets the status, not an error), and answers once the sources are open.
TEST_F(ServiceStartupTest, TensortierctlWaitsOutTheStart) {
  CtlClient c;
  connect(c);  // the event loop runs: tensortierctl's Hello is answered
  auto status = std::async(std::launch::async, [this] {
    return tt::test::runCommand(std::string(TT_TENSORTIERCTL) + " --socket " + daemon.socket() + " --json status");
  });
  // Its request was answered STARTING (and is asked again), not merely not sent yet.
  for (int i = 0; i < 500 && !logHas("while starting: STARTING"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(logHas("while starting: STARTING")) << "tensortierctl's request never reached the daemon";
  ASSERT_EQ(status.wait_for(std::chrono::milliseconds(500)), std::future_status::timeout)
      << "tensortierctl returned while the sources were opening: " << status.get().out;
  ASSERT_TRUE(procfs->release()) << "open " << procfs->fifo() << " for writing: " << std::strerror(errno);
  ASSERT_EQ(status.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  const auto r = status.get();
  EXPECT_EQ(r.exitCode, 0) << r.out;
  EXPECT_NE(r.out.find("\"daemon_version\""), std::string::npos) << r.out;
}

// A SIGTERM while the sources open waits for them (what they opened is closed in order), then the
// daemon exits 0 and removes its socket without ever reporting ready.
TEST_F(ServiceStartupTest, SigtermWhileTheSourcesOpenExitsCleanlyOnceTheyAre) {
  CtlClient c;
  connect(c);
  daemon.signal(SIGTERM);
  for (int i = 0; i < 100 && !logHas("waiting for the sources to finish opening"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(logHas("waiting for the sources to finish opening"));
  EXPECT_TRUE(daemon.running());
  ASSERT_TRUE(procfs->release()) << "open " << procfs->fifo() << " for writing: " << std::strerror(errno);
  const auto code = daemon.wait();
  ASSERT_TRUE(code.has_value()) << "tensortierd did not exit after SIGTERM once its sources were open";
  EXPECT_EQ(*code, 0);
  EXPECT_NE(::access(daemon.socket().c_str(), F_OK), 0);
  EXPECT_FALSE(logHas(" ready: serving "));
}

// Socket activation: systemd-socket-activate (from the systemd package) binds the socket and
// passes it as fd 3 with LISTEN_FDS, as tensortierd.socket does; the daemon serves it.
TEST(ServiceActivation, ServesTheSocketSystemdPasses) {
  TT_REQUIRE_ROOT();
  ASSERT_EQ(::access("/usr/bin/systemd-socket-activate", X_OK), 0) << "needs systemd-socket-activate (package systemd)";
  DaemonHarness dir;  // only for its temp directory and config file
  dir.writeConfig("service { socket_group: \"\" }\n");
  const std::string sock = dir.dir() + "/activated.sock", log = dir.dir() + "/activated.log";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    const std::string listen = "--listen=" + sock, config = dir.configPath();
    ::execl("/usr/bin/systemd-socket-activate", "systemd-socket-activate", listen.c_str(), TT_TENSORTIERD,
            "--config", config.c_str(), static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  bool served = false;
  for (int i = 0; i < 200 && !served; ++i) {
    CtlClient c;
    if (c.connect(sock).ok() && c.hello("activation-test").ok()) {
      pb::ClientMessage st;
      st.mutable_status();
      auto s = c.call(st);
      served = s.ok() && s->has_status();
    }
    if (!served) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const std::string text = tt::test::readFileOrFail(log);
  EXPECT_TRUE(served) << text;
  EXPECT_NE(text.find("serving the socket systemd passed"), std::string::npos) << text;
}

}  // namespace
