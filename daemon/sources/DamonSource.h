// DAMON source: the kernel's access monitor (vaddr) through sysfs, one kdamond per tracked
// process. Each epoch the regions DAMON saw accessed (nr_accesses > 0) become Access evidence on
// each of their pages, weight nr_accesses (up to 255), as evidence blocks: a region is usually
// many pages of equal weight, which a block per 2 MiB carries in 528 bytes where records take 24
// bytes a page. DAMON relies on page-table accessed bits: inside a TCG VM they are unreliable
// (docs/architecture.md, sources).
//
// Asking a kdamond to refresh what it saw blocks until the end of its aggregation interval (100 ms
// by default), for each process. So the requests run on a thread of the source's own: collect()
// reads what the previous epoch's requests refreshed and starts the next ones, and never waits for
// a kdamond. The requests go one at a time: the kernel's DAMON sysfs takes one command at a time
// (a global lock, taken with trylock: a second writer gets EBUSY), so the source's own writes
// (requests, and addProcess/removeProcess starting and stopping kdamonds) are serialised by a
// mutex of its own. addProcess and removeProcess do not wait for the request in flight (up to two
// aggregation intervals a kdamond, which may be seconds: the epoch thread that calls them also
// sends the watchdog's keep-alives): when it holds the mutex, a process to add waits for the next
// collect (as one refused a slot does) and a removed process's kdamond is stopped there (as one
// that would not stop is). The evidence is one epoch late; an epoch in which the requests have not
// finished yet (processes x aggregation interval longer than the epoch) has none.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "sources/Source.h"
#include "sys/access/DamonSysfs.h"

namespace tt::sources {

// Appends `regions` (sorted by start, not overlapping) of `tgid` as blocks, at most `maxPages`
// pages with evidence, the most accessed regions first (ties: the lower address); returns the
// pages appended.
uint64_t appendRegionBlocks(pid_t tgid, const std::vector<sys::DamonRegion>& regions, uint64_t maxPages,
                            std::vector<EvidenceBlock>& out);

class DamonSource final : public Source {
 public:
  // `stateFile` (sources.damon.state_file; empty: none) lists the kdamonds this daemon runs, so
  // that the next run can tell its own, left running by a run that died, from another tool's.
  DamonSource(sys::DamonSysfs damon, sys::DamonAttrs attrs, uint64_t maxPagesPerEpoch, std::string stateFile = {});
  void open();

  std::string_view name() const override { return "damon"; }
  const SourceStatus& status() const override { return status_; }
  Result<void> addProcess(pid_t tgid) override;
  Result<void> removeProcess(pid_t tgid) override;
  Result<void> collect(EvidenceBatch& out) override;
  SourceCounters counters() const override { return counters_; }
  ~DamonSource() override;

 private:
  void refreshLoop();

  sys::DamonSysfs damon_;
  sys::DamonAttrs attrs_;
  uint64_t maxPages_;
  SourceStatus status_;
  SourceCounters counters_;
  std::map<pid_t, uint32_t> slots_;  // tgid -> kdamond slot
  // Slots of removed processes whose kdamond would not stop (EBUSY from another DAMON sysfs
  // writer, say): not handed out again, and stopped again at each collect until they are.
  std::vector<uint32_t> stopping_slots_;
  // Slots found running at open that the state file does not list for the pid they monitor:
  // another tool's (damo's default is kdamond 0), never touched, handed out only once they stop by
  // themselves (a kdamond stops when its process exits). Those it lists are this daemon's, left by
  // a run that died: stopped at open, whether or not their process is tracked again.
  std::vector<uint32_t> busy_slots_;
  // The kdamonds this source started and has not seen stop (slot -> pid), as saved in the state
  // file after every change; under sysfsMutex_.
  std::string stateFile_;
  std::map<uint32_t, pid_t> owned_;
  // Whether stopLeftovers has read the state file: until then it may list a dead run's kdamonds,
  // which saving this source's (none) would forget, as when open fails before reading it.
  bool leftoversRead_ = false;
  void saveOwned();
  // At open: stops the kdamonds the state file says a run that died left running.
  void stopLeftovers();
  // Processes refused for want of a free slot (or whose every free slot failed to start): given
  // the next slot that frees, at a collect.
  std::set<pid_t> waiting_;
  [[nodiscard]] bool slotTaken(uint32_t slot) const;
  // Starts a kdamond for `tgid` on the first free slot that starts; what failed is appended to
  // `failed`. Called with sysfsMutex_ held.
  [[nodiscard]] bool startFor(pid_t tgid, std::string& failed);
  // Gives the waiting processes the slots that freed, unless a request holds DAMON's sysfs.
  void startWaiting();
  // Retries the stuck stops and frees the busy slots that stopped, once per collect.
  void reviewSlots();

  std::mutex sysfsMutex_;  // every write to DAMON's sysfs (see above)
  // The refresher thread and what it shares with collect(), under mutex_.
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::pair<pid_t, uint32_t>> requested_;  // the slots of the requests in flight
  bool pending_ = false;    // requests posted and not yet read
  bool refreshed_ = false;  // ... and all of them answered
  std::vector<std::pair<std::pair<pid_t, uint32_t>, std::string>> refreshErrors_;  // per (tgid, slot)
  bool stopping_ = false;
  std::thread refresher_;
};

}  // namespace tt::sources
