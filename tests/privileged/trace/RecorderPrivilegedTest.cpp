// trace::Recorder with the real file system as root (the daemon runs as root): a recording is
// readable by the admin group and nobody else, a group that cannot be given fails that start
// only, and retention leaves other users' files alone.
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "support/TestSupport.h"
#include "trace/Recorder.h"

namespace tt::trace {
namespace {

namespace fs = std::filesystem;

constexpr uid_t kNobody = 65534;

// Runs `body` in a child process as uid/gid 65534 with exactly `groups` as its supplementary
// groups; returns the child's exit status (body's return value, 100+ when dropping failed).
int runAsNobody(const std::vector<gid_t>& groups, const std::function<int()>& body) {
  const pid_t child = ::fork();
  if (child < 0) return -1;
  if (child == 0) {
    if (::setgroups(groups.size(), groups.data()) != 0) std::_Exit(101);
    if (::setresgid(kNobody, kNobody, kNobody) != 0) std::_Exit(102);
    if (::setresuid(kNobody, kNobody, kNobody) != 0) std::_Exit(103);
    std::_Exit(body());
  }
  int status = 0;
  if (::waitpid(child, &status, 0) != child || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

class RecorderPrivilegedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TT_REQUIRE_ROOT();
    char tmpl[] = "/tmp/tt-recorder-priv-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    ASSERT_EQ(::chmod(root_.c_str(), 0755), 0);  // uid 65534 must reach what is below
    // A non-root group: adm where it exists (no change to the host's groups), else a temporary one.
    if (const group* adm = ::getgrnam("adm"); adm != nullptr && adm->gr_gid != 0) {
      gid_ = adm->gr_gid;
    } else {
      createdGroup_ = "tt-rec-test-" + std::to_string(::getpid());
      ASSERT_EQ(std::system(("groupadd " + createdGroup_).c_str()), 0) << "groupadd " << createdGroup_;
      const group* g = ::getgrnam(createdGroup_.c_str());
      ASSERT_NE(g, nullptr);
      gid_ = g->gr_gid;
    }
  }
  void TearDown() override {
    std::error_code ec;
    if (!root_.empty()) fs::remove_all(root_, ec);
    if (!createdGroup_.empty()) {
      EXPECT_EQ(std::system(("groupdel " + createdGroup_).c_str()), 0);
    }
  }
  [[nodiscard]] RecorderLimits limits(const std::string& directory) const {
    RecorderLimits l;
    l.directory = directory;
    l.maxRecordings = 4;
    l.keepFiles = 8;
    l.group = gid_;
    return l;
  }

  std::string root_;
  std::string createdGroup_;
  gid_t gid_ = 0;
};

TEST_F(RecorderPrivilegedTest, ARecordingIsReadableByTheAdminGroupAndNobodyElse) {
  // Neither the directory nor its parent exists; a tight umask must not narrow the modes.
  const std::string dir = root_ + "/state/traces";
  const mode_t oldMask = ::umask(077);
  Recorder rec(limits(dir));
  auto started = rec.start(42, "train", nullptr, 0, 0);
  ::umask(oldMask);
  ASSERT_TRUE(started.ok()) << started.error().message();
  ASSERT_TRUE(rec.stop(42, 0).ok());

  struct stat st {};
  ASSERT_EQ(::lstat(started->path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0640U);
  EXPECT_EQ(st.st_uid, 0U);
  EXPECT_EQ(st.st_gid, gid_);
  ASSERT_EQ(::lstat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750U);
  EXPECT_EQ(st.st_uid, 0U);
  EXPECT_EQ(st.st_gid, gid_);
  ASSERT_EQ(::lstat((root_ + "/state").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755U);  // a parent made on the way: passable, not the admins'

  // A member of the group lists the directory and reads the recording; nobody else does either.
  const std::string path = started->path;
  auto readsIt = [&]() -> int {
    std::error_code ec;
    fs::directory_iterator it(dir, ec);
    if (ec) return 1;
    std::ifstream in(path, std::ios::binary);
    char magic[8] = {};
    if (!in.read(magic, 8)) return 2;
    return std::string(magic, 8) == "TTTRACE1" ? 0 : 3;
  };
  EXPECT_EQ(runAsNobody({gid_}, readsIt), 0) << "1: cannot list, 2: cannot read, 3: not a trace";
  EXPECT_EQ(runAsNobody({}, [&]() -> int {
              const bool listed = ::access(dir.c_str(), R_OK) == 0;
              std::ifstream in(path, std::ios::binary);
              return listed ? 1 : in.is_open() ? 2 : 0;
            }),
            0)
      << "1: a non-member can list, 2: a non-member can read";
}

// Without CAP_CHOWN (here: not root at all) the group cannot be given: the start fails with a
// clear message, and neither an unreadable file nor a directory without its group is left.
TEST_F(RecorderPrivilegedTest, AGroupThatCannotBeGivenFailsTheStartAndLeavesNothing) {
  const std::string own = root_ + "/own";  // writable by 65534, which is not in the group
  ASSERT_TRUE(fs::create_directory(own));
  ASSERT_EQ(::chown(own.c_str(), kNobody, kNobody), 0);
  const RecorderLimits fileLimits = limits(own + "/traces-there");
  const RecorderLimits dirLimits = limits(own + "/new");
  fs::create_directory(fileLimits.directory);
  ASSERT_EQ(::chown(fileLimits.directory.c_str(), kNobody, kNobody), 0);
  const int status = runAsNobody({}, [&]() -> int {
    Recorder rec(fileLimits);
    auto r = rec.start(1, "a", nullptr, 0, 0);
    if (r.ok()) return 1;
    if (r.error().code != EPERM || r.error().message().find("admin group") == std::string::npos) return 2;
    if (!fs::is_empty(fileLimits.directory) || !rec.list().empty()) return 3;
    Recorder inNew(dirLimits);
    auto d = inNew.start(1, "a", nullptr, 0, 0);
    if (d.ok() || d.error().message().find("trace directory") == std::string::npos) return 4;
    if (fs::exists(dirLimits.directory)) return 5;
    return 0;
  });
  EXPECT_EQ(status, 0) << "1: started, 2: wrong error, 3: a file was left, 4: directory started or wrong "
                          "error, 5: directory left without its group";
}

// Files named like recordings but of another user are not the daemon's: retention keeps them.
TEST_F(RecorderPrivilegedTest, RetentionRemovesOnlyTheDaemonsOwnFiles) {
  const std::string dir = root_ + "/traces";
  ASSERT_TRUE(fs::create_directory(dir));
  const std::string theirs = dir + "/old-1-20200101T000000Z.tttrace";
  const std::string ours = dir + "/old-2-20200102T000000Z.tttrace";
  std::ofstream(theirs) << "x";
  std::ofstream(ours) << "x";
  ASSERT_EQ(::chown(theirs.c_str(), kNobody, kNobody), 0);
  RecorderLimits l = limits(dir);
  l.keepFiles = 1;
  Recorder rec(l);
  auto started = rec.start(3, "new", nullptr, 0, 0);
  ASSERT_TRUE(started.ok()) << started.error().message();
  EXPECT_TRUE(fs::exists(theirs));
  EXPECT_FALSE(fs::exists(ours));
  EXPECT_TRUE(fs::exists(started->path));
}

}  // namespace
}  // namespace tt::trace
