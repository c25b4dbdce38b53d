#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>

#include "support/TestSupport.h"
#include "sys/Pagemap.h"
#include "sys/ProcMaps.h"

namespace {

namespace fs = std::filesystem;
using tt::sys::HugeRange;

constexpr uint64_t kHuge = 2ULL << 20;

TEST(MigrateSmaps, FixtureParsesEveryVma) {
  auto vmas = tt::sys::readSmaps(tt::sys::Fs(tt::test::fixture("migrate/proc")), 4242);
  ASSERT_TRUE(vmas) << vmas.error().message();
  ASSERT_EQ(vmas->size(), 4u);
  EXPECT_EQ((*vmas)[0].path, "/usr/bin/trainer");
  EXPECT_EQ((*vmas)[0].rssBytes, 300u * 1024);
  EXPECT_EQ((*vmas)[1].start, 0x40000000u);
  EXPECT_EQ((*vmas)[1].end, 0x40800000u);
  EXPECT_EQ((*vmas)[1].path, "");
  EXPECT_EQ((*vmas)[1].anonHugeBytes, 4096u * 1024);
  EXPECT_TRUE((*vmas)[1].thpEligible);
  EXPECT_FALSE((*vmas)[1].hugeDisabled);
  EXPECT_EQ((*vmas)[3].path, "[heap]");
  EXPECT_TRUE((*vmas)[3].hugeDisabled);
}

TEST(MigrateSmaps, GarbageIsAnErrorWithTheLine) {
  auto vmas = tt::sys::parseSmaps("00400000-00452000 r-xp 00000000 08:02 1 /x\nthis is not smaps\n");
  ASSERT_FALSE(vmas);
  EXPECT_NE(vmas.error().message().find("line 2"), std::string::npos) << vmas.error().message();
}

TEST(MigrateSmaps, MissingProcessIsENOENT) {
  auto vmas = tt::sys::readSmaps(tt::sys::Fs(tt::test::fixture("migrate/proc")), 99999);
  ASSERT_FALSE(vmas);
  EXPECT_EQ(vmas.error().code, ENOENT);
}

// A procfs tree in a temporary folder: the smaps fixture plus binary pagemap and kpageflags
// written in the kernel's layout (one little-endian u64 per 4 KiB page / per PFN).
class MigrateProcTree : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tt-migrate-procXXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    fs::create_directories(root_ / "4242");
    fs::copy_file(tt::test::fixture("migrate/proc/4242/smaps"), root_ / "4242/smaps");
  }
  void TearDown() override { fs::remove_all(root_); }
  void word(const std::string& file, uint64_t index, uint64_t value) {
    const int fd = ::open((root_ / file).c_str(), O_WRONLY | O_CREAT, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(pwrite(fd, &value, sizeof value, static_cast<off_t>(index * 8)), 8);
    ::close(fd);
  }
  void pagemap(uint64_t addr, uint64_t entry) { word("4242/pagemap", addr / 4096, entry); }
  void kpageflags(uint64_t pfn, uint64_t flags) { word("kpageflags", pfn, flags); }
  fs::path root_;
};

constexpr uint64_t kPresent = tt::sys::kPagemapPresent;
constexpr uint64_t kThpHead = tt::sys::kKpfThp | tt::sys::kKpfCompoundHead;

TEST_F(MigrateProcTree, PagemapAndKpageflagsLocateTheHugeBlocks) {
  const uint64_t v = 0x40000000;
  pagemap(v, kPresent | 100);               // base page
  pagemap(v + kHuge, kPresent | 200);       // THP head
  pagemap(v + 3 * kHuge, kPresent | 300);   // THP head; block 2 not present
  kpageflags(100, 0);
  kpageflags(200, kThpHead);
  kpageflags(300, kThpHead);
  // The other VMAs: 0x50000000 is all huge by smaps, but its PFNs say no THP here.
  pagemap(0x50000000, kPresent | 400);
  kpageflags(400, tt::sys::kKpfCompoundHead);  // a compound head that is not a THP (e.g. hugetlb)
  tt::sys::ProcHugePageProbe probe(tt::sys::Fs(root_.string()));
  auto ranges = probe.hugeRanges(4242, 0x40000000, 0x30000000);
  ASSERT_TRUE(ranges) << ranges.error().message();
  EXPECT_EQ(*ranges, (std::vector<HugeRange>{{v + kHuge, kHuge}, {v + 3 * kHuge, kHuge}}));
}

TEST_F(MigrateProcTree, BlocksOnlyPartlyInsideTheRangeAreNotHuge) {
  const uint64_t v = 0x40000000;
  pagemap(v + kHuge, kPresent | 200);
  pagemap(v + 3 * kHuge, kPresent | 300);
  kpageflags(200, kThpHead);
  kpageflags(300, kThpHead);
  tt::sys::ProcHugePageProbe probe(tt::sys::Fs(root_.string()));
  auto ranges = probe.hugeRanges(4242, v + kHuge + 4096, 3 * kHuge);
  ASSERT_TRUE(ranges) << ranges.error().message();
  EXPECT_EQ(*ranges, (std::vector<HugeRange>{{v + 3 * kHuge, kHuge}}));
}

TEST_F(MigrateProcTree, AdjacentHugeBlocksAreMerged) {
  const uint64_t v = 0x40000000;
  for (uint64_t b = 0; b < 4; ++b) {
    pagemap(v + b * kHuge, kPresent | (500 + b));
    kpageflags(500 + b, kThpHead);
  }
  tt::sys::ProcHugePageProbe probe(tt::sys::Fs(root_.string()));
  auto ranges = probe.hugeRanges(4242, v, 4 * kHuge);
  ASSERT_TRUE(ranges) << ranges.error().message();
  EXPECT_EQ(*ranges, (std::vector<HugeRange>{{v, 4 * kHuge}}));
}

// Runs of words (soft-dirty reads pagemap 64 Ki words at a time) come back in order, and what lies
// past the end of the file reads as 0, as pagemap gives for unmapped addresses.
TEST_F(MigrateProcTree, ReadWordsReturnsARunInOrderAndZerosPastTheEnd) {
  for (uint64_t i = 0; i < 1000; ++i) word("4242/pagemap", i, kPresent | (i * 7));
  std::vector<uint64_t> out(3, 99);
  ASSERT_TRUE(tt::sys::readWords(tt::sys::Fs(root_.string()), "4242/pagemap", 990, out, 20));
  ASSERT_EQ(out.size(), 20u);
  for (uint64_t i = 0; i < 10; ++i) EXPECT_EQ(out[i], kPresent | ((990 + i) * 7)) << i;
  for (uint64_t i = 10; i < 20; ++i) EXPECT_EQ(out[i], 0u) << i;
  ASSERT_TRUE(tt::sys::readWords(tt::sys::Fs(root_.string()), "4242/pagemap", 0, out, 1000));
  for (uint64_t i = 0; i < 1000; ++i) ASSERT_EQ(out[i], kPresent | (i * 7)) << i;
  EXPECT_FALSE(tt::sys::readWords(tt::sys::Fs(root_.string()), "4243/pagemap", 0, out, 1));
}

// Without CAP_SYS_ADMIN the kernel shows PFN 0: only a VMA that smaps reports as entirely huge
// can be treated as huge block by block; a partly huge one is moved as base pages (safe).
TEST_F(MigrateProcTree, WithoutPfnsOnlyWhollyHugeVmasCount) {
  for (uint64_t b = 0; b < 4; ++b) pagemap(0x40000000 + b * kHuge, kPresent);
  for (uint64_t b = 0; b < 2; ++b) pagemap(0x50000000 + b * kHuge, kPresent);
  tt::sys::ProcHugePageProbe probe(tt::sys::Fs(root_.string()));
  auto ranges = probe.hugeRanges(4242, 0x40000000, 0x30000000);
  ASSERT_TRUE(ranges) << ranges.error().message();
  EXPECT_EQ(*ranges, (std::vector<HugeRange>{{0x50000000, 2 * kHuge}}));
}

}  // namespace
