// A scripted Source for tests of code that consumes sources (SourceSet, the service's epoch loop).
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "sources/Source.h"

namespace tt::fakes {

class FakeSource final : public sources::Source {
 public:
  FakeSource(std::string name, bool available, std::string detail = "fake")
      : name_(std::move(name)), status_{available, std::move(detail)} {}

  std::string_view name() const override { return name_; }
  const sources::SourceStatus& status() const override { return status_; }
  Result<void> addProcess(pid_t tgid) override {
    if (failAdd) return logicError("scripted add failure");
    tracked.insert(tgid);
    return {};
  }
  Result<void> removeProcess(pid_t tgid) override {
    tracked.erase(tgid);
    return {};
  }
  // Emits `next` and `nextBlocks` for tracked tgids only, like a source that filters as it reads,
  // or with drainsEveryTgid for every tgid, like a kernel drain, which still holds the last counts
  // of a process untracked since the previous drain.
  Result<void> collect(EvidenceBatch& out) override {
    ++collects;
    if (failCollect) return logicError(collectError);
    for (const auto& e : next)
      if (drainsEveryTgid || tracked.contains(e.tgid)) out.records.push_back(e);
    for (const auto& b : nextBlocks)
      if (drainsEveryTgid || tracked.contains(b.tgid)) out.blocks.push_back(b);
    return {};
  }
  Result<void> setSamplingLimits(const sources::SamplingLimits& l) override {
    if (failTune) return logicError("scripted tune failure");
    limits = l;
    return {};
  }
  void takeKernelMoves(std::vector<sources::KernelMove>& out) override {
    out.insert(out.end(), moves.begin(), moves.end());
    moves.clear();
  }
  std::optional<sources::SystemMigrations> systemMigrations() const override { return migrations; }
  sources::SourceCounters counters() const override { return reported; }

  std::set<pid_t> tracked;
  std::vector<AccessEvidence> next;
  std::vector<EvidenceBlock> nextBlocks;
  std::vector<sources::KernelMove> moves;
  std::optional<sources::SystemMigrations> migrations;  // what systemMigrations() reports
  sources::SourceCounters reported;                     // what counters() reports
  bool drainsEveryTgid = false;
  bool failAdd = false;
  bool failCollect = false;
  std::string collectError = "scripted collect failure";
  bool failTune = false;
  int collects = 0;
  std::optional<sources::SamplingLimits> limits;  // the last setSamplingLimits()

 private:
  std::string name_;
  sources::SourceStatus status_;
};


}  // namespace tt::fakes
