// tensortier-probe: what the machine offers tensortier, checked for real.
//
//   tensortier-probe topology [--json]       nodes, tiers, memory, distances
//   tensortier-probe roundtrip [--size 64M]  moves a buffer fast -> slow -> fast with move_pages(2)
//                                            and verifies every byte and every page's node
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/Log.h"
#include "core/Parse.h"
#include "sys/MemPolicy.h"
#include "sys/PageMover.h"
#include "topology/Topology.h"

namespace {

using Clock = std::chrono::steady_clock;

int usage() {
  std::fprintf(stderr,
               "usage: tensortier-probe topology [--json]\n"
               "       tensortier-probe roundtrip [--size BYTES] (e.g. 64M; default 64M)\n");
  return 2;
}

tt::Result<tt::topology::Topology> discover() {
  return tt::topology::discover(tt::sys::Fs("/sys"), tensortier::v1::TopologyConfig{});
}

int cmdTopology(bool json) {
  auto topo = discover();
  if (!topo) {
    TT_LOG(Error) << topo.error().message();
    return 1;
  }
  std::fputs(json ? (tt::topology::formatJson(*topo) + "\n").c_str() : tt::topology::formatTable(*topo).c_str(),
             stdout);
  return 0;
}

// Byte i of the buffer holds a function of i, so corruption anywhere is detected without a copy.
uint8_t patternByte(size_t i) { return static_cast<uint8_t>((i * 2654435761u) >> 13); }

bool verifyPattern(const uint8_t* buf, size_t size) {
  for (size_t i = 0; i < size; ++i)
    if (buf[i] != patternByte(i)) {
      TT_LOG(Error) << "byte " << i << " corrupted: " << int{buf[i]} << " != " << int{patternByte(i)};
      return false;
    }
  return true;
}

// Moves every page to `node`, then checks each one reports it. Returns seconds taken by the move.
tt::Result<double> moveAll(tt::sys::PageMover& mover, std::vector<void*>& pages, int node) {
  std::vector<int> nodes(pages.size(), node), status(pages.size(), 0);
  const auto start = Clock::now();
  auto moved = mover.movePages(0, pages, nodes, status, false);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (!moved) return moved.error();
  if (*moved != 0) return tt::logicError(std::to_string(*moved) + " pages not migrated to node " + std::to_string(node));
  if (auto q = mover.queryPages(0, pages, status); !q) return q.error();
  for (size_t i = 0; i < pages.size(); ++i)
    if (status[i] != node)
      return tt::logicError("page " + std::to_string(i) + " is on node " + std::to_string(status[i]) +
                            ", expected " + std::to_string(node));
  return seconds;
}

int cmdRoundtrip(size_t size) {
  auto topo = discover();
  if (!topo) {
    TT_LOG(Error) << topo.error().message();
    return 1;
  }
  const auto fast = topo->nodesInTier(tt::topology::Tier::Fast);
  const auto slow = topo->nodesInTier(tt::topology::Tier::Slow);
  if (fast.empty() || slow.empty()) {
    TT_LOG(Error) << "roundtrip needs a fast and a slow NUMA node; this machine has " << topo->nodes.size()
                  << " node(s) with memory. Run it inside the VM test bed: tests/e2e/vm/ttvm run -- "
                  << "build/tools/probe/tensortier-probe roundtrip";
    return 1;
  }
  const int fastNode = fast.front();
  const int slowNode = *topo->nearestInTier(fastNode, tt::topology::Tier::Slow);
  const size_t pageSize = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  size = (size + pageSize - 1) / pageSize * pageSize;

  void* mem = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    TT_LOG(Error) << tt::errnoError("mmap " + std::to_string(size)).message();
    return 1;
  }
  // 4 KiB pages only: this run checks the base-page path; THP handling belongs to the engine.
  (void)madvise(mem, size, MADV_NOHUGEPAGE);
  if (auto b = tt::sys::bindToNode(mem, size, fastNode, tt::sys::BindMove::FutureOnly); !b) {
    TT_LOG(Error) << b.error().message();
    return 1;
  }
  auto* buf = static_cast<uint8_t*>(mem);
  for (size_t i = 0; i < size; ++i) buf[i] = patternByte(i);
  std::vector<void*> pages(size / pageSize);
  for (size_t i = 0; i < pages.size(); ++i) pages[i] = buf + i * pageSize;

  tt::sys::LinuxPageMover mover;
  std::printf("buffer: %zu MiB, %zu pages of %zu B; fast node %d, slow node %d\n", size >> 20, pages.size(),
              pageSize, fastNode, slowNode);
  int rc = 0;
  for (int target : {slowNode, fastNode}) {
    auto seconds = moveAll(mover, pages, target);
    if (!seconds) {
      TT_LOG(Error) << seconds.error().message();
      rc = 1;
      break;
    }
    const bool intact = verifyPattern(buf, size);
    std::printf("moved to node %d: %zu pages in %.3f s (%.1f MiB/s), every page on node %d, data %s\n", target,
                pages.size(), *seconds, static_cast<double>(size >> 20) / *seconds, target,
                intact ? "intact" : "CORRUPTED");
    if (!intact) {
      rc = 1;
      break;
    }
  }
  munmap(mem, size);
  std::printf("roundtrip: %s\n", rc == 0 ? "ok" : "FAILED");
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string cmd = argv[1];
  if (cmd == "topology") {
    if (argc == 2) return cmdTopology(false);
    if (argc == 3 && std::strcmp(argv[2], "--json") == 0) return cmdTopology(true);
    return usage();
  }
  if (cmd == "roundtrip") {
    size_t size = 64ULL << 20;
    if (argc == 4 && std::strcmp(argv[2], "--size") == 0) {
      auto parsed = tt::parseSize(argv[3]);
      if (!parsed || *parsed == 0) {
        std::fprintf(stderr, "%s\n", parsed ? "size must be > 0" : parsed.error().message().c_str());
        return 2;
      }
      size = *parsed;
    } else if (argc != 2) {
      return usage();
    }
    return cmdRoundtrip(size);
  }
  return usage();
}
