// Free memory of a NUMA node, read before every batch to a fast node (the capacity guard).
#pragma once

#include "core/Result.h"
#include "sys/Fs.h"
#include "topology/Topology.h"

namespace tt::migrate {

class FreeMemoryReader {
 public:
  virtual ~FreeMemoryReader() = default;
  [[nodiscard]] virtual Result<topology::NodeMemory> read(int node) = 0;
};

// node/nodeN/meminfo through sysfs (tt::topology::readNodeMemory).
class SysfsFreeMemoryReader final : public FreeMemoryReader {
 public:
  explicit SysfsFreeMemoryReader(sys::Fs sysfs) : sysfs_(std::move(sysfs)) {}
  Result<topology::NodeMemory> read(int node) override { return topology::readNodeMemory(sysfs_, node); }

 private:
  sys::Fs sysfs_;
};

}  // namespace tt::migrate
