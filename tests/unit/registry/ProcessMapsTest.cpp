// /proc/PID/maps parsing and the "is this range mapped" rule, on fixture files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "registry/AddressSpace.h"
#include "support/TestSupport.h"
#include "sys/service/ProcessMaps.h"

namespace {

const std::string kProc = tt::test::fixture("registry/proc");

TEST(ProcessMaps, ParsesEveryLineOfAFixture) {
  auto maps = tt::sys::readMaps(tt::sys::Fs(kProc), 4242);
  ASSERT_TRUE(maps.ok()) << maps.error().message();
  ASSERT_EQ(maps->size(), 9u);
  EXPECT_EQ((*maps)[2].path, "[heap]");
  EXPECT_EQ((*maps)[3].start, 0x7f3a10000000u);
  EXPECT_EQ((*maps)[3].end, 0x7f3a10400000u);
  EXPECT_TRUE((*maps)[3].writable);
  EXPECT_EQ((*maps)[3].path, "");
  EXPECT_TRUE((*maps)[5].shared);
  EXPECT_EQ((*maps)[5].path, "/dev/shm/torch_1234_5678 (deleted)");
  EXPECT_FALSE((*maps)[6].readable);
}

TEST(ProcessMaps, RangeAcrossAdjacentVmasIsMapped) {
  auto maps = tt::sys::readMaps(tt::sys::Fs(kProc), 4242);
  ASSERT_TRUE(maps.ok());
  EXPECT_TRUE(tt::sys::rangeMapped(*maps, 0x7f3a10000000, 0x7f3a10800000));
  EXPECT_TRUE(tt::sys::rangeMapped(*maps, 0x7f3a103ff000, 0x7f3a10401000));
}

TEST(ProcessMaps, RangeWithAGapOrOutsideIsNotMapped) {
  auto maps = tt::sys::readMaps(tt::sys::Fs(kProc), 4242);
  ASSERT_TRUE(maps.ok());
  EXPECT_FALSE(tt::sys::rangeMapped(*maps, 0x7f3a10000000, 0x7f3a10a00000));  // gap at 0x7f3a10800000
  EXPECT_FALSE(tt::sys::rangeMapped(*maps, 0x1000, 0x2000));
  EXPECT_FALSE(tt::sys::rangeMapped(*maps, 0x7f3a107ff000, 0x7f3a10801000));  // runs past the end
  EXPECT_FALSE(tt::sys::rangeMapped(*maps, 0x7f3a10000000, 0x7f3a10000000));  // empty
}

TEST(ProcessMaps, MalformedLineIsAnErrorNamingTheLine) {
  auto maps = tt::sys::readMaps(tt::sys::Fs(kProc), 4343);
  ASSERT_FALSE(maps.ok());
  EXPECT_NE(maps.error().message().find("line 2"), std::string::npos) << maps.error().message();
}

TEST(ProcessMaps, RejectsInvertedAndUnsortedRanges) {
  EXPECT_FALSE(tt::sys::parseMaps("2000-1000 rw-p 00000000 00:00 0\n").ok());
  EXPECT_FALSE(tt::sys::parseMaps("3000-4000 rw-p 00000000 00:00 0\n1000-2000 rw-p 00000000 00:00 0\n").ok());
  EXPECT_FALSE(tt::sys::parseMaps("1000-2000 rw 00000000 00:00 0\n").ok());
  EXPECT_TRUE(tt::sys::parseMaps("").ok());
}

TEST(ProcessMaps, InspectorAnswersFromTheFixtureAndFailsForMissingPids) {
  tt::registry::ProcMapsInspector inspector(kProc);
  auto yes = inspector.rangeMapped(4242, 0, 0x55d4a3c00000, 0x55d4a3c01000);
  ASSERT_TRUE(yes.ok());
  EXPECT_TRUE(*yes);
  auto no = inspector.rangeMapped(4242, 0, 0x7f3a10800000, 0x7f3a10801000);
  ASSERT_TRUE(no.ok());
  EXPECT_FALSE(*no);
  auto missing = inspector.rangeMapped(99999, 0, 0, 0x1000);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ESRCH);  // the process is gone (not "no such region")
}

}  // namespace

namespace {

// A procfs tree in a temporary folder with process 7, whose maps file (first `maps`) the test
// writes in place (the inspector keeps it open, as it keeps the real one).
struct FixtureProcess {
  explicit FixtureProcess(const char* maps) {
    char tmpl[] = "/tmp/tt-maps-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return;
    root = tmpl;
    std::filesystem::create_directories(root + "/7");
    writeMaps(maps);
  }
  ~FixtureProcess() {
    if (!root.empty()) std::filesystem::remove_all(root);
  }
  bool ok() const { return !root.empty(); }
  void writeMaps(const char* text) const { std::ofstream(root + "/7/maps") << text; }
  std::string root;
};

// The cache: a covered range is answered without re-reading; an uncovered one re-reads; forget()
// drops it. Checked by swapping the fixture file under the inspector.
TEST(ProcessMaps, InspectorCachesCoveredRangesAndRereadsOtherwise) {
  FixtureProcess tree("10000-20000 rw-p 00000000 00:00 0\n");
  ASSERT_TRUE(tree.ok());
  auto write = [&](const char* text) { tree.writeMaps(text); };
  tt::registry::ProcMapsInspector inspector(tree.root);
  EXPECT_TRUE(*inspector.rangeMapped(7, 0, 0x10000, 0x11000));
  write("30000-40000 rw-p 00000000 00:00 0\n");
  EXPECT_TRUE(*inspector.rangeMapped(7, 0, 0x10000, 0x11000));  // cached: not re-read
  EXPECT_TRUE(*inspector.rangeMapped(7, 0, 0x30000, 0x31000));  // not in the cache: re-read
  EXPECT_FALSE(*inspector.rangeMapped(7, 0, 0x10000, 0x11000)); // the re-read replaced the cache
  inspector.forget(7);
  write("10000-20000 rw-p 00000000 00:00 0\n");
  EXPECT_TRUE(*inspector.rangeMapped(7, 0, 0x10000, 0x11000));
}

// Asked not to open (the event loop asks so): before the first probe the maps file would have to
// be opened, which waits out an exec; and where the kernel has no PROCMAP_QUERY (a fixture file
// answers ENOTTY) every probe may read the whole file. Both are EWOULDBLOCK, for a worker to ask.
TEST(ProcessMaps, InspectorAskedNotToOpenLeavesOpensAndFileReadsToTheCaller) {
  FixtureProcess tree("10000-20000 rw-p 00000000 00:00 0\n");
  ASSERT_TRUE(tree.ok());
  tt::registry::ProcMapsInspector inspector(tree.root);
  auto first = inspector.rangeMapped(7, 0, 0x10000, 0x11000, /*mayOpen=*/false);
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.error().code, EWOULDBLOCK);
  EXPECT_FALSE(inspector.pinsAddressSpace(7)) << "it opened the maps file";
  EXPECT_TRUE(*inspector.rangeMapped(7, 0, 0x10000, 0x11000));  // pins; learns there is no ioctl
  EXPECT_TRUE(inspector.pinsAddressSpace(7));
  auto read = inspector.rangeMapped(7, 0, 0x10000, 0x11000, /*mayOpen=*/false);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error().code, EWOULDBLOCK) << "the whole maps file was read for a caller that may not wait";
}

// The maps file stays open from the first probe; an open maps file of an address space gone (an
// exec) reads empty, as the emptied fixture does here. A range the cache covers is not answered
// from the cache then: the answer is ESTALE (the process is there: an exec), and the next probe
// opens the file afresh.
TEST(ProcessMaps, InspectorDoesNotAnswerFromTheCacheOnceThePinnedAddressSpaceIsGone) {
  FixtureProcess tree("10000-20000 rw-p 00000000 00:00 0\n");
  ASSERT_TRUE(tree.ok());
  auto write = [&](const char* text) { tree.writeMaps(text); };
  tt::registry::ProcMapsInspector inspector(tree.root);
  EXPECT_TRUE(*inspector.rangeMapped(7, 0, 0x10000, 0x11000));
  EXPECT_TRUE(inspector.pinsAddressSpace(7));
  write("");
  auto stale = inspector.rangeMapped(7, 0, 0x10000, 0x11000);
  ASSERT_FALSE(stale.ok()) << "answered from the cache of a gone address space";
  EXPECT_EQ(stale.error().code, ESTALE) << stale.error().message();
  EXPECT_FALSE(inspector.pinsAddressSpace(7));
  write("30000-40000 rw-p 00000000 00:00 0\n");
  auto fresh = inspector.rangeMapped(7, 0, 0x10000, 0x11000);
  ASSERT_TRUE(fresh.ok()) << fresh.error().message();
  EXPECT_FALSE(*fresh);
  // And the sweep's question, on the same kind of file.
  write("");
  auto replaced = inspector.replacedAddressSpace(7);
  ASSERT_TRUE(replaced.ok()) << replaced.error().message();
  EXPECT_TRUE(*replaced);
}

}  // namespace
