#include "TierReaderCheck.h"

#include <gtest/gtest.h>
#include <linux/perf_event.h>

#include <iostream>
#include <set>
#include <vector>

#include "PatternChild.h"
#include "sources/SamplingSource.h"
#include "support/TestSupport.h"

namespace tt::test {

void checkTierReaderOnSoftwareFaults(AccessKind eventKind) {
  using namespace tt::sources;
  SamplingOptions o = softwareFaultOptions(1, Aggregation::InKernel);
  o.events[0].sample_type |= PERF_SAMPLE_DATA_SRC;
  o.eventKinds = {eventKind};
  SamplingSource source(o, sys::Fs("/sys"));
  source.open();
  std::cout << source.status().detail << "\n";
  ASSERT_EQ(source.aggregation(), Aggregation::InKernel) << source.status().detail;
  EXPECT_EQ(source.agg()->dataSrcReader(),
            kernelAtLeast(6, 2) ? sys::bpf::DataSrcReader::Kfunc : sys::bpf::DataSrcReader::ProbeRead)
      << source.agg()->dataSrcReaderError();
  EXPECT_NE(source.status().detail.find("tier per sample from data_src"), std::string::npos) << source.status().detail;

  constexpr uint64_t kPages = 3072;
  PatternChild child(kPages);
  ASSERT_TRUE(source.addProcess(child.pid()).ok());
  std::vector<AccessEvidence> evidence;
  ASSERT_TRUE(tt::test::collectRecords(source, evidence).ok());
  evidence.clear();
  auto before = source.agg()->stats();
  ASSERT_TRUE(before.ok());
  const std::set<uint64_t> truth = child.touch(3, 0);
  ASSERT_TRUE(tt::test::collectRecords(source, evidence).ok());

  std::set<uint64_t> reported;
  for (const auto& e : evidence) {
    if (e.tgid != child.pid()) continue;
    EXPECT_EQ(e.kind, eventKind);
    EXPECT_EQ(e.servedBy, ServedBy::Unknown);
    if (e.page >= child.base() && e.page < child.base() + kPages * 4096) reported.insert(e.page);
  }
  size_t hit = 0;
  for (uint64_t p : reported) hit += truth.contains(p) ? 1 : 0;
  EXPECT_GE(static_cast<double>(hit), 0.95 * static_cast<double>(reported.size())) << reported.size() << " reported";
  EXPECT_GE(static_cast<double>(hit), 0.95 * static_cast<double>(truth.size())) << hit << " of " << truth.size();

  auto after = source.agg()->stats();
  ASSERT_TRUE(after.ok());
  const uint64_t sampled = (after->tracked - after->noAddress) - (before->tracked - before->noAddress);
  EXPECT_GE(sampled, truth.size());
  EXPECT_EQ(after->withTier, 0U);
  EXPECT_EQ(after->dataSrcNa - before->dataSrcNa, kernelAtLeast(6, 3) ? sampled : 0U);
}

}  // namespace tt::test
