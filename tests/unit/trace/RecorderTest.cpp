// trace::Recorder: a live run of one process written as a trace that tiersim reads back.
#include "trace/Recorder.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "Trace.h"

namespace tt::trace {
namespace {

namespace fs = std::filesystem;

class RecorderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tt-recorder-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  [[nodiscard]] RecorderLimits limits() const {
    RecorderLimits l;
    l.directory = dir_ + "/traces";  // created on first use
    l.maxBytes = 1 << 20;
    l.maxSeconds = 60;
    l.maxRecordings = 2;
    return l;
  }
  // Retention keeps one file while up to four recordings run: a running one must outlive it.
  [[nodiscard]] RecorderLimits keepOneOfFour() const {
    RecorderLimits l = limits();
    l.keepFiles = 1;
    l.maxRecordings = 4;
    return l;
  }
  static AccessEvidence evidence(pid_t tgid, uint64_t page, uint32_t weight, AccessKind kind) {
    AccessEvidence e;
    e.tgid = tgid;
    e.page = page;
    e.weight = weight;
    e.kind = kind;
    return e;
  }
  static EvidenceBatch batch(std::vector<AccessEvidence> records) {
    EvidenceBatch b;
    b.records = std::move(records);
    return b;
  }
  std::string dir_;
};

constexpr uint64_t kS = 1'000'000'000ULL;

TEST_F(RecorderTest, RecordsRegionsMarksAndAccessesOfOneProcessOnly) {
  Recorder rec(limits());
  const RegionInfo weights{1, 100, 0x7f0000000000, 4 * 4096, RegionKind::Weight, "w", 0};
  auto started = rec.start(100, "train.py", [&] { return std::vector<RegionInfo>{weights}; }, 10 * kS, 0);
  ASSERT_TRUE(started.ok()) << started.error().message();
  EXPECT_TRUE(started->active);
  EXPECT_EQ(fs::path(started->path).parent_path(), fs::path(dir_ + "/traces"));
  EXPECT_NE(started->path.find("train.py-100-"), std::string::npos) << started->path;
  EXPECT_EQ(started->endsByNs, 70 * kS);  // the limit: 60 s

  // Epoch 1: a mark, evidence of the recorded process and of another one.
  rec.onMark(IterationMark{100, MarkType::StepBegin, 0, "", 10 * kS + 5});
  rec.onMark(IterationMark{200, MarkType::StepBegin, 0, "", 10 * kS + 6});  // not recorded
  rec.onEvidence(batch({evidence(100, 0x7f0000001000, 64, AccessKind::Load),
                        evidence(200, 0x7f0000001000, 9, AccessKind::Load),
                        evidence(100, 0x7f0000003000, 8, AccessKind::Store)}),
                 10 * kS, 11 * kS);
  rec.endEpoch(11 * kS);
  // Epoch 2: a region registered later, an access in it, a phase mark.
  const RegionInfo acts{2, 100, 0x7f0000100000, 2 * 4096, RegionKind::Activation, "act", 0};
  rec.onRegion(acts);
  rec.onRegion(RegionInfo{3, 200, 0x7f0000200000, 4096, RegionKind::Other, "theirs", 0});
  rec.onMark(IterationMark{100, MarkType::PhaseBegin, 0, "backward", 11 * kS + 500});
  // Its evidence comes as a block (in-kernel counts): a page of it is recorded as its record is.
  EvidenceBatch epoch2;
  for (pid_t tgid : {100, 200}) {
    EvidenceBlock& b = epoch2.blocks.emplace_back();
    b.tgid = tgid;
    b.base = 0x7f0000000000;
    b.kind = AccessKind::Fault;
    b.counts[0x101] = 2;  // 0x7f0000101000
  }
  rec.onEvidence(epoch2, 11 * kS, 12 * kS);
  rec.endEpoch(12 * kS);

  auto stopped = rec.stop(100, 13 * kS);
  ASSERT_TRUE(stopped.ok()) << stopped.error().message();
  EXPECT_FALSE(stopped->active);
  EXPECT_EQ(stopped->ended, "stopped");
  EXPECT_EQ(stopped->accesses, 3U);
  EXPECT_EQ(stopped->marks, 2U);
  EXPECT_EQ(stopped->regions, 2U);
  EXPECT_EQ(stopped->bytes, fs::file_size(stopped->path));

  // Only the owner (root in the daemon) may write; the group may read; others nothing.
  struct stat st {};
  ASSERT_EQ(::stat(stopped->path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640U);

  tiersim::ReadTraceStats stats;
  auto trace = tiersim::readTraceFile(stopped->path, &stats);
  ASSERT_TRUE(trace.ok()) << trace.error().message();
  EXPECT_EQ(trace->name, "train.py");
  EXPECT_FALSE(trace->computeOnlyTime);
  EXPECT_EQ(trace->samplePeriod, 1U);
  ASSERT_EQ(trace->regions.size(), 2U);
  EXPECT_EQ(trace->regions[0].name, "w");
  EXPECT_EQ(trace->regions[0].kind, RegionKind::Weight);
  EXPECT_EQ(trace->regions[1].name, "act");
  EXPECT_EQ(trace->regions[1].pages, 2U);
  ASSERT_EQ(trace->accesses.size(), 3U);
  EXPECT_EQ(stats.droppedAccesses, 0U);
  // Page ids are dense over the regions: w = 0..3, act = 4..5. Each access has a time within the
  // epoch that gathered it (times since boot, shifted to start at the recording's first event),
  // so the two of epoch 1 may come in either order.
  EXPECT_GT(stats.shiftedByNs, 0U);
  std::map<uint64_t, tiersim::SimAccess> byPage;
  for (const auto& a : trace->accesses) byPage[a.page] = a;
  ASSERT_EQ(byPage.size(), 3U);
  EXPECT_EQ(byPage[1].count, 64U);
  EXPECT_FALSE(byPage[1].write);
  EXPECT_TRUE(byPage[3].write);
  EXPECT_EQ(byPage[5].count, 2U);
  EXPECT_FALSE(byPage[5].write);
  for (uint64_t page : {1, 3}) {
    EXPECT_GE(byPage[page].timeNs + stats.shiftedByNs, 10 * kS) << page;
    EXPECT_LT(byPage[page].timeNs + stats.shiftedByNs, 11 * kS) << page;
  }
  EXPECT_GE(byPage[5].timeNs + stats.shiftedByNs, 11 * kS);
  EXPECT_LT(byPage[5].timeNs + stats.shiftedByNs, 12 * kS);
  ASSERT_EQ(trace->marks.size(), 2U);
  EXPECT_EQ(trace->marks[0].type, MarkType::StepBegin);
  EXPECT_EQ(trace->marks[0].timestampNs + stats.shiftedByNs, 10 * kS + 5);
  EXPECT_EQ(trace->marks[1].phase, "backward");
}

// The sources say only that an access happened during its epoch: a recording spreads an epoch's
// accesses over it instead of stamping them all with its end, so a replay of 200 ms steps in a
// 1 s epoch finds each step with its share of them, not four empty steps and one with all.
TEST_F(RecorderTest, AnEpochsAccessesAreSpreadOverTheEpoch) {
  Recorder rec(limits());
  const RegionInfo buffer{1, 7, 0x10000000, 1000 * 4096, RegionKind::Activation, "buffer", 0};
  ASSERT_TRUE(rec.start(7, "spread", [&] { return std::vector<RegionInfo>{buffer}; }, 1 * kS, 0).ok());
  std::vector<AccessEvidence> records;
  for (uint64_t i = 0; i < 1000; ++i) records.push_back(evidence(7, 0x10000000 + i * 4096, 1, AccessKind::Load));
  rec.onEvidence(batch(std::move(records)), 1 * kS, 2 * kS);
  rec.endEpoch(2 * kS);
  auto stopped = rec.stop(7, 2 * kS);
  ASSERT_TRUE(stopped.ok());
  tiersim::ReadTraceStats stats;
  auto trace = tiersim::readTraceFile(stopped->path, &stats);
  ASSERT_TRUE(trace.ok()) << trace.error().message();
  ASSERT_EQ(trace->accesses.size(), 1000U);
  std::vector<uint64_t> perStep(5, 0);
  uint64_t last = 0;
  for (const auto& a : trace->accesses) {
    const uint64_t t = a.timeNs + stats.shiftedByNs;
    ASSERT_GE(t, 1 * kS);
    ASSERT_LT(t, 2 * kS);
    ASSERT_GE(t, last) << "accesses out of time order";
    last = t;
    ++perStep[(t - 1 * kS) / (kS / 5)];
  }
  for (size_t step = 0; step < 5; ++step) {
    EXPECT_GT(perStep[step], 140U) << "step " << step;  // 200 expected; binomial sd 12.6
    EXPECT_LT(perStep[step], 260U) << "step " << step;
  }
}

// One epoch with far more evidence than the size limit allows ends the recording as the limit is
// passed, within a chunk of it, not at the epoch's end.
TEST_F(RecorderTest, TheSizeLimitEndsARecordingWithinTheEpochThatPassesIt) {
  RecorderLimits l = limits();
  l.maxBytes = 4096;
  Recorder rec(l);
  ASSERT_TRUE(rec.start(8, "big", nullptr, 0, 0).ok());
  std::vector<AccessEvidence> many;
  for (uint64_t i = 0; i < 200000; ++i) many.push_back(evidence(8, 0x10000000 + i * 4096 * 7, 1, AccessKind::Load));
  rec.onEvidence(batch(std::move(many)), 0, 1 * kS);
  const auto all = rec.list();  // before endEpoch
  ASSERT_EQ(all.size(), 1U);
  EXPECT_FALSE(all[0].active);
  EXPECT_EQ(all[0].ended, "size limit");
  EXPECT_EQ(all[0].accesses, 65536U);  // the first chunk passed the limit
  EXPECT_EQ(all[0].bytes, fs::file_size(all[0].path));
}

TEST_F(RecorderTest, RefusesASecondRecordingOfOneProcessAndMoreThanTheLimit) {
  Recorder rec(limits());
  ASSERT_TRUE(rec.start(1, "a", nullptr, 0, 0).ok());
  auto again = rec.start(1, "a", nullptr, 0, 0);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code, EEXIST);
  ASSERT_TRUE(rec.start(2, "b", nullptr, 0, 0).ok());
  auto third = rec.start(3, "c", nullptr, 0, 0);
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.error().code, EBUSY);
  auto notRecording = rec.stop(3, 0);
  ASSERT_FALSE(notRecording.ok());
  EXPECT_EQ(notRecording.error().code, ENOENT);
  EXPECT_EQ(rec.list().size(), 2U);
}

TEST_F(RecorderTest, NeverWritesThroughAPlantedSymlinkOrOverAnExistingFile) {
  // Two recordings of one pid in the same second get distinct names; a symlink planted at the
  // next name is neither followed nor replaced.
  Recorder rec(limits());
  auto first = rec.start(7, "x", nullptr, 0, 0);
  ASSERT_TRUE(first.ok()) << first.error().message();
  ASSERT_TRUE(rec.stop(7, 0).ok());
  const std::string victim = dir_ + "/victim";
  { std::ofstream(victim) << "keep me"; }
  const std::string planted = first->path.substr(0, first->path.size() - 8) + "-1.tttrace";
  fs::create_symlink(victim, planted);
  auto second = rec.start(7, "x", nullptr, 0, 0);
  ASSERT_TRUE(second.ok()) << second.error().message();
  EXPECT_NE(second->path, first->path);
  EXPECT_NE(second->path, planted);
  std::ifstream in(victim);
  std::string content;
  std::getline(in, content);
  EXPECT_EQ(content, "keep me");
  EXPECT_TRUE(fs::is_symlink(planted));
}

TEST_F(RecorderTest, EndsAtTheTimeLimitTheSizeLimitAndProcessExit) {
  RecorderLimits l = limits();
  l.maxBytes = 4096;
  l.maxRecordings = 4;
  Recorder rec(l);
  ASSERT_TRUE(rec.start(1, "timed", nullptr, 0, 5).ok());   // asks for 5 s
  ASSERT_TRUE(rec.start(2, "big", nullptr, 0, 0).ok());
  ASSERT_TRUE(rec.start(3, "exits", nullptr, 0, 0).ok());
  std::vector<AccessEvidence> many;
  for (uint64_t i = 0; i < 4096; ++i) many.push_back(evidence(2, 0x10000000 + i * 4096 * 7, 1, AccessKind::Load));
  rec.onEvidence(batch(std::move(many)), 0, 1 * kS);
  rec.endEpoch(1 * kS);
  rec.onProcessExit(3, 2 * kS);
  rec.endEpoch(4 * kS);
  EXPECT_EQ(rec.list().size(), 3U);
  EXPECT_TRUE(rec.list().front().active);  // pid 1 runs until 5 s
  rec.endEpoch(5 * kS);
  std::map<pid_t, std::string> ended;
  for (const auto& r : rec.list()) {
    EXPECT_FALSE(r.active);
    ended[r.tgid] = r.ended;
  }
  EXPECT_EQ(ended[1], "time limit");
  EXPECT_EQ(ended[2], "size limit");
  EXPECT_EQ(ended[3], "process exited");
  // The size-limited file is complete and readable.
  for (const auto& r : rec.list())
    if (r.tgid == 2) {
      EXPECT_GE(r.bytes, 4096U);
      std::ifstream in(r.path, std::ios::binary);
      char magic[8] = {};
      in.read(magic, 8);
      EXPECT_EQ(std::string(magic, 8), "TTTRACE1");
    }
}

TEST_F(RecorderTest, AnUncreatableDirectoryIsAnErrorNotACrash) {
  RecorderLimits l = limits();
  { std::ofstream(dir_ + "/file") << "x"; }
  l.directory = dir_ + "/file/traces";  // a path through a regular file
  Recorder rec(l);
  auto r = rec.start(1, "a", nullptr, 0, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("trace directory"), std::string::npos) << r.error().message();
  EXPECT_TRUE(rec.list().empty());
}

TEST_F(RecorderTest, RecordingCanBeTurnedOff) {
  RecorderLimits l = limits();
  l.maxRecordings = 0;
  Recorder rec(l);
  auto r = rec.start(1, "a", nullptr, 0, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("recording is off"), std::string::npos) << r.error().message();
}

// A full disk (here: a file size limit) mid-recording: the file is cut back to its last complete
// chunk, nothing more is appended (not even by close), and the reader still reads it.
TEST_F(RecorderTest, AFailedWriteLeavesAReadableFile) {
  const std::string path = dir_ + "/full.tttrace";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::signal(SIGXFSZ, SIG_IGN);  // writes past the limit fail with EFBIG instead of killing us
    TraceWriter w;
    TraceWriter::Header h;
    h.name = "full";
    h.regions = {RegionInfo{1, 1, 0x10000000, 1 << 20, RegionKind::Weight, "w", 0}};
    if (!w.open(path, h).ok()) std::_Exit(2);
    const rlimit lim{4096, 4096};
    if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) std::_Exit(3);
    bool failed = false;
    for (uint64_t chunk = 0; chunk < 100 && !failed; ++chunk) {
      for (uint64_t i = 0; i < 64; ++i)
        if (!w.addAccess(chunk * 100 + i, 0x10000000 + ((chunk * 64 + i) % 256) * 4096, 64, false).ok()) failed = true;
      if (!w.flush().ok()) failed = true;
    }
    if (!failed) std::_Exit(4);
    (void)w.close();
    std::_Exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0) << "2: open failed, 3: setrlimit failed, 4: no write ever failed";
  EXPECT_LE(fs::file_size(path), 4096U);
  auto trace = tiersim::readTraceFile(path);
  ASSERT_TRUE(trace.ok()) << trace.error().message();
  EXPECT_GT(trace->accesses.size(), 0U);
  EXPECT_EQ(trace->accesses.size() % 64, 0U);  // whole chunks only
}

// A write that fails ends the recording at once, also in the middle of a block: none of the
// block's remaining pages, nor any later block, is counted as recorded.
TEST_F(RecorderTest, AFailedWriteInTheMiddleOfABlockEndsTheRecordingThere) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::signal(SIGXFSZ, SIG_IGN);  // writes past the limit fail with EFBIG instead of killing us
    Recorder rec(limits());
    if (!rec.start(5, "full", nullptr, 0, 0).ok()) std::_Exit(2);
    const rlimit lim{8192, 8192};
    if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) std::_Exit(3);
    // 130 full blocks: the writer flushes (and fails) at its 65536th access, inside block 128.
    EvidenceBatch batch;
    for (uint64_t c = 0; c < 130; ++c) {
      EvidenceBlock& b = batch.blocks.emplace_back();
      b.tgid = 5;
      b.base = 0x7f0000000000ULL + c * kBlockBytes;
      b.counts.fill(1);
    }
    rec.onEvidence(batch, 0, 1 * kS);
    const auto all = rec.list();
    if (all.size() != 1) std::_Exit(4);
    if (all[0].ended.rfind("write error", 0) != 0) std::_Exit(5);
    if (all[0].accesses != 65535) std::_Exit(all[0].accesses > 65535 ? 6 : 7);
    std::_Exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: start failed, 3: setrlimit failed, 4: not listed, 5: not ended by the "
                                       "write error, 6: pages after the failure were counted, 7: fewer recorded";
}

// Retention removes only what the recorder itself names; everything else in the directory is
// someone else's.
TEST(RecorderName, RecognizesOnlyItsOwnFileNames) {
  EXPECT_TRUE(isRecordingFileName("train.py-4242-20261121T130318Z.tttrace"));
  EXPECT_TRUE(isRecordingFileName("a-b-c-1-20200101T000000Z.tttrace"));  // '-' in the client name
  EXPECT_TRUE(isRecordingFileName("x-7-20200101T000000Z-3.tttrace"));    // second recording, same second
  EXPECT_TRUE(isRecordingFileName(sanitizeName("../../etc/passwd") + "-1-20200101T000000Z.tttrace"));
  for (const char* foreign :
       {"notes.txt", "x-7-20200101T000000Z.tttrace.bak", "x-7-20200101T000000Z.tttrace~", "x-7-20200101T000000Z",
        "-7-20200101T000000Z.tttrace",          // no name
        ".x-7-20200101T000000Z.tttrace",        // sanitizeName never leaves a leading dot
        "my trace-7-20200101T000000Z.tttrace",  // nor a space
        "x-07-20200101T000000Z.tttrace",        // nor a pid with a leading zero
        "x--20200101T000000Z.tttrace", "x-7-2020010T000000Z.tttrace", "x-7-20200101-000000Z.tttrace",
        "x-7-20200101T000000.tttrace", "x-7-20200101T000000Z-0.tttrace", "x-7-20200101T000000Z-10.tttrace",
        "x-7-20200101T000000Z.TTTRACE", ".tttrace"})
    EXPECT_FALSE(isRecordingFileName(foreign)) << foreign;
  EXPECT_FALSE(isRecordingFileName(std::string(33, 'a') + "-1-20200101T000000Z.tttrace"));  // longer than a name
}

// Retention against a real directory: the oldest recordings beyond trace_keep_files go, nothing
// else in the directory does (foreign names, a directory, symlinks named like recordings, and
// what the symlinks point to).
TEST_F(RecorderTest, RemovesTheOldestRecordingsBeyondTheKeepBoundAndNothingElse) {
  RecorderLimits l = limits();
  l.keepFiles = 3;
  const std::string dir = l.directory;
  fs::create_directories(dir);
  auto touch = [](const std::string& path) { std::ofstream(path) << "x"; };
  // Four old recordings (sorted by their UTC time, then the -N of one second).
  for (const char* old : {"old-1-20200101T000000Z.tttrace", "old-2-20210101T000000Z.tttrace",
                          "old-2-20210101T000000Z-1.tttrace", "old-3-20220101T000000Z.tttrace"})
    touch(dir + "/" + old);
  // Foreign files, all "older" than any recording if they were taken for one.
  const std::vector<std::string> foreign = {"notes.txt", "old-4-20190101T000000Z.tttrace.bak",
                                            "Old Name-5-20190101T000000Z.tttrace"};
  for (const auto& f : foreign) touch(dir + "/" + f);
  fs::create_directory(dir + "/dir-6-20190101T000000Z.tttrace");
  const std::string victim = dir_ + "/victim.tttrace";
  touch(victim);
  fs::create_symlink(victim, dir + "/link-7-20180101T000000Z.tttrace");
  fs::create_symlink(dir + "/old-3-20220101T000000Z.tttrace", dir + "/link-8-20180101T000000Z.tttrace");

  Recorder rec(l);
  auto started = rec.start(100, "new", nullptr, 0, 0);
  ASSERT_TRUE(started.ok()) << started.error().message();
  // 4 old + the new one = 5 recordings, keep 3: the two oldest go.
  EXPECT_FALSE(fs::exists(dir + "/old-1-20200101T000000Z.tttrace"));
  EXPECT_FALSE(fs::exists(dir + "/old-2-20210101T000000Z.tttrace"));
  EXPECT_TRUE(fs::exists(dir + "/old-2-20210101T000000Z-1.tttrace"));
  EXPECT_TRUE(fs::exists(dir + "/old-3-20220101T000000Z.tttrace"));
  EXPECT_TRUE(fs::exists(started->path));
  for (const auto& f : foreign) EXPECT_TRUE(fs::exists(dir + "/" + f)) << f;
  EXPECT_TRUE(fs::is_directory(dir + "/dir-6-20190101T000000Z.tttrace"));
  EXPECT_TRUE(fs::is_symlink(dir + "/link-7-20180101T000000Z.tttrace"));
  EXPECT_TRUE(fs::is_symlink(dir + "/link-8-20180101T000000Z.tttrace"));
  EXPECT_TRUE(fs::is_regular_file(victim));
}

TEST_F(RecorderTest, NeverRemovesARunningRecording) {
  RecorderLimits l = keepOneOfFour();
  Recorder rec(l);
  auto a = rec.start(1, "a", nullptr, 0, 0);
  ASSERT_TRUE(a.ok()) << a.error().message();
  auto b = rec.start(2, "b", nullptr, 0, 0);
  ASSERT_TRUE(b.ok()) << b.error().message();
  // Keep 1, but both run: both stay.
  EXPECT_TRUE(fs::exists(a->path));
  EXPECT_TRUE(fs::exists(b->path));
  ASSERT_TRUE(rec.stop(1, 0).ok());
  auto c = rec.start(3, "c", nullptr, 0, 0);
  ASSERT_TRUE(c.ok()) << c.error().message();
  // a ended: it goes; b still runs: it stays, as does the new c.
  EXPECT_FALSE(fs::exists(a->path));
  EXPECT_TRUE(fs::exists(b->path));
  EXPECT_TRUE(fs::exists(c->path));
  // b keeps recording into its file, which is still whole.
  rec.onEvidence(batch({evidence(2, 0x10000000, 1, AccessKind::Load)}), 0, 1 * kS);
  rec.endEpoch(1 * kS);
  auto stoppedB = rec.stop(2, 2 * kS);
  ASSERT_TRUE(stoppedB.ok());
  EXPECT_EQ(stoppedB->accesses, 1U);
  EXPECT_EQ(stoppedB->bytes, fs::file_size(b->path));
}

// A reload may name the same directory differently (here with a trailing slash): a recording that
// started under the old spelling is still running, and still not removed.
TEST_F(RecorderTest, ARunningRecordingIsKeptWhenTheDirectoryIsSpelledDifferently) {
  RecorderLimits l = keepOneOfFour();
  Recorder rec(l);
  auto a = rec.start(1, "a", nullptr, 0, 0);
  ASSERT_TRUE(a.ok()) << a.error().message();
  l.directory += "/";
  rec.setLimits(l);
  auto b = rec.start(2, "b", nullptr, 0, 0);
  ASSERT_TRUE(b.ok()) << b.error().message();
  EXPECT_TRUE(fs::exists(a->path)) << "the running recording was removed";
  EXPECT_TRUE(fs::exists(b->path));
}

TEST_F(RecorderTest, KeepsAtMostKeepFilesRecordingsOverManyStarts) {
  RecorderLimits l = limits();
  l.keepFiles = 3;
  Recorder rec(l);
  std::vector<std::string> paths;
  auto recordings = [&] {
    size_t n = 0;
    for (const auto& entry : fs::directory_iterator(l.directory)) n += entry.path().extension() == ".tttrace";
    return n;
  };
  for (pid_t pid = 1; pid <= 7; ++pid) {
    auto r = rec.start(pid, "r", nullptr, 0, 0);
    ASSERT_TRUE(r.ok()) << r.error().message();
    paths.push_back(r->path);
    EXPECT_EQ(recordings(), std::min<size_t>(static_cast<size_t>(pid), 3)) << "after start " << pid;
    ASSERT_TRUE(rec.stop(pid, 0).ok());
  }
  // The newest three are the ones left.
  for (size_t i = 0; i < paths.size(); ++i) EXPECT_EQ(fs::exists(paths[i]), i >= paths.size() - 3) << paths[i];
}

// ---- the recorder against a fake directory: what it asks of the file system, and its errors ----

// Files are really created (the writer needs a descriptor) in a temp directory, without a group
// (no root needed); what the recorder asked for and what it removes is recorded, failures injected.
class FakeTraceDirectory final : public sys::TraceDirectory {
 public:
  struct Log {
    std::vector<std::optional<gid_t>> directoryGroups;
    std::vector<std::optional<gid_t>> fileGroups;
    std::vector<std::string> removed;
  };
  explicit FakeTraceDirectory(std::shared_ptr<Log> log) : log_(std::move(log)) {}

  Result<void> ensureDirectory(const std::string& directory, std::optional<gid_t> group) override {
    log_->directoryGroups.push_back(group);
    return real_.ensureDirectory(directory, std::nullopt);
  }
  Result<int> createFile(const std::string& directory, const std::string& name, std::optional<gid_t> group) override {
    log_->fileGroups.push_back(group);
    if (failGroup) return systemError(EPERM, "give trace file " + directory + "/" + name + " the admin group");
    return real_.createFile(directory, name, std::nullopt);
  }
  Result<std::vector<std::string>> listOwnFiles(const std::string& directory) override {
    if (failList) return systemError(EIO, "list trace directory " + directory);
    return real_.listOwnFiles(directory);
  }
  Result<void> removeOwnFile(const std::string& directory, const std::string& name) override {
    if (failRemove.count(name) != 0) return systemError(EBUSY, "remove " + directory + "/" + name);
    log_->removed.push_back(name);
    return real_.removeOwnFile(directory, name);
  }

  bool failGroup = false;
  bool failList = false;
  std::set<std::string> failRemove;

 private:
  std::shared_ptr<Log> log_;
  sys::LinuxTraceDirectory real_;
};

// A trace directory made by someone else is used only if nobody but the daemon's user can write
// to it: recordings of other users' processes go there.
TEST_F(RecorderTest, RefusesAnExistingDirectoryOthersCanWriteTo) {
  const std::string traces = dir_ + "/traces";
  ASSERT_EQ(::mkdir(traces.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(traces.c_str(), 0777), 0);
  Recorder rec(limits());
  auto refused = rec.start(1, "a", nullptr, 0, 0);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, EPERM);
  EXPECT_NE(refused.error().message().find("mode 0777"), std::string::npos) << refused.error().message();
  EXPECT_TRUE(fs::is_empty(traces)) << "nothing written there";
  ASSERT_EQ(::chmod(traces.c_str(), 0770), 0);  // the group may write: refused too
  EXPECT_FALSE(rec.start(1, "a", nullptr, 0, 0).ok());
  ASSERT_EQ(::chmod(traces.c_str(), 0755), 0);  // readable by all is the operator's choice
  auto started = rec.start(1, "a", nullptr, 0, 0);
  ASSERT_TRUE(started.ok()) << started.error().message();
  EXPECT_EQ(fs::path(started->path).parent_path(), fs::path(traces));

  // A parent anyone can write to (and not sticky, as /tmp is): the directory could be renamed away
  // and replaced after the checks, so neither an existing one nor a new one is used below it.
  const std::string open = dir_ + "/open";
  ASSERT_EQ(::mkdir(open.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(open.c_str(), 0777), 0);
  RecorderLimits below = limits();
  below.directory = open + "/traces";
  Recorder fresh(below);
  auto refusedNew = fresh.start(2, "b", nullptr, 0, 0);
  ASSERT_FALSE(refusedNew.ok());
  EXPECT_NE(refusedNew.error().message().find("parent " + open), std::string::npos) << refusedNew.error().message();
  EXPECT_FALSE(fs::exists(below.directory)) << "the new directory is removed again";
  ASSERT_EQ(::mkdir(below.directory.c_str(), 0750), 0);
  EXPECT_FALSE(fresh.start(2, "b", nullptr, 0, 0).ok()) << "an existing one below it too";
  ASSERT_EQ(::chmod(open.c_str(), 01777), 0);  // sticky: others cannot rename what is ours
  auto sticky = fresh.start(2, "b", nullptr, 0, 0);
  EXPECT_TRUE(sticky.ok()) << sticky.error().message();
}

TEST_F(RecorderTest, GivesTheDirectoryAndEachFileTheConfiguredGroup) {
  auto log = std::make_shared<FakeTraceDirectory::Log>();
  RecorderLimits l = limits();
  l.group = 4242;
  Recorder rec(l, std::make_unique<FakeTraceDirectory>(log));
  ASSERT_TRUE(rec.start(1, "a", nullptr, 0, 0).ok());
  l.group.reset();  // admin_group emptied by a reload: the daemon's own group from then on
  rec.setLimits(l);
  ASSERT_TRUE(rec.start(2, "b", nullptr, 0, 0).ok());
  EXPECT_EQ(log->directoryGroups, (std::vector<std::optional<gid_t>>{4242, std::nullopt}));
  EXPECT_EQ(log->fileGroups, (std::vector<std::optional<gid_t>>{4242, std::nullopt}));
}

TEST_F(RecorderTest, AFileThatCannotGetItsGroupFailsTheStartOnly) {
  auto log = std::make_shared<FakeTraceDirectory::Log>();
  RecorderLimits l = limits();
  l.group = 4242;
  auto files = std::make_unique<FakeTraceDirectory>(log);
  files->failGroup = true;
  Recorder rec(l, std::move(files));
  auto r = rec.start(1, "a", nullptr, 0, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, EPERM);
  EXPECT_NE(r.error().message().find("admin group"), std::string::npos) << r.error().message();
  EXPECT_TRUE(rec.list().empty());
  EXPECT_EQ(log->fileGroups.size(), 1U);  // not retried under another name: only EEXIST is
}

TEST_F(RecorderTest, ARetentionFailureIsLoggedAndTheRecordingStillStarts) {
  auto log = std::make_shared<FakeTraceDirectory::Log>();
  RecorderLimits l = limits();
  l.keepFiles = 2;
  fs::create_directories(l.directory);
  for (const char* old : {"o-1-20200101T000000Z.tttrace", "o-2-20200102T000000Z.tttrace", "o-3-20200103T000000Z.tttrace"})
    std::ofstream(l.directory + "/" + old) << "x";
  auto files = std::make_unique<FakeTraceDirectory>(log);
  auto* fake = files.get();
  fake->failRemove = {"o-1-20200101T000000Z.tttrace"};
  Recorder rec(l, std::move(files));
  // 3 old + new, keep 2: two must go; the oldest cannot, so the next two oldest go instead.
  auto first = rec.start(1, "a", nullptr, 0, 0);
  ASSERT_TRUE(first.ok()) << first.error().message();
  EXPECT_EQ(log->removed, (std::vector<std::string>{"o-2-20200102T000000Z.tttrace", "o-3-20200103T000000Z.tttrace"}));
  EXPECT_TRUE(fs::exists(l.directory + "/o-1-20200101T000000Z.tttrace"));
  fake->failList = true;
  ASSERT_TRUE(rec.stop(1, 0).ok());
  auto second = rec.start(2, "b", nullptr, 0, 0);
  ASSERT_TRUE(second.ok()) << second.error().message();
  EXPECT_EQ(log->removed.size(), 2U);
}

TEST(RecorderName, SanitizesClientNamesForFileNames) {
  EXPECT_EQ(sanitizeName("train.py"), "train.py");
  EXPECT_EQ(sanitizeName("../../etc/passwd"), "_.._etc_passwd");
  EXPECT_EQ(sanitizeName(""), "process");
  EXPECT_EQ(sanitizeName("..."), "process");
  EXPECT_EQ(sanitizeName(std::string(100, 'a')).size(), 32U);
}

}  // namespace
}  // namespace tt::trace
