// DAMON (vaddr, sysfs) inside the VM: a process re-reads a hot quarter of a mapped buffer; the
// DAMON source should report more accesses on it than on the cold rest. DAMON relies on page-table
// accessed bits, which TCG does not set again after the kernel clears them (see
// /work/shared/TESTBED.md): this test records what the emulator allows, and fails when DAMON
// cannot tell the quarter apart.
#include <gtest/gtest.h>

#include <iostream>
#include <map>

#include "privileged/sources/PatternChild.h"
#include "sources/DamonSource.h"
#include "support/TestSupport.h"

namespace tt::sources {
namespace {

TEST(DamonE2e, TellsReReadHotQuarterFromColdRest) {
  TT_REQUIRE_ROOT();
  constexpr uint64_t kPages = 16384;
  sys::DamonAttrs attrs;
  attrs.sampleUs = 5000;
  attrs.aggrUs = 100000;
  attrs.updateUs = 1000000;
  DamonSource source(sys::DamonSysfs(sys::Fs("/sys"), 0, 1), attrs, 1ULL << 22);
  source.open();
  ASSERT_TRUE(source.status().available) << source.status().detail;
  test::PatternChild child(kPages);
  (void)child.writeRange(0, kPages);
  ASSERT_TRUE(source.addProcess(child.pid()).ok());
  const uint64_t hotBegin = child.base() + kPages / 4 * 4096, hotEnd = child.base() + kPages / 2 * 4096;
  uint64_t hotWeight = 0, coldWeight = 0;
  for (int round = 0; round < 6; ++round) {
    (void)child.readRangeFor(kPages / 4, kPages / 2, 500);
    std::vector<AccessEvidence> ev;
    auto r = tt::test::collectRecords(source, ev);
    ASSERT_TRUE(r.ok()) << r.error().message();
    for (const auto& e : ev) {
      if (e.tgid != child.pid() || e.page < child.base() || e.page >= child.base() + kPages * 4096) continue;
      (e.page >= hotBegin && e.page < hotEnd ? hotWeight : coldWeight) += e.weight;
    }
  }
  (void)source.removeProcess(child.pid());
  std::cout << "DAMON: access weight on hot quarter " << hotWeight << ", on cold rest " << coldWeight << "\n";
  EXPECT_GT(hotWeight, 0U) << "DAMON saw no access to the re-read quarter (TCG accessed bits?)";
  EXPECT_GT(hotWeight / (kPages / 4), 2 * coldWeight / (kPages * 3 / 4)) << "hot quarter not told apart";
}

}  // namespace
}  // namespace tt::sources
