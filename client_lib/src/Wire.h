// The client side of proto/tensortier/v1/protocol.proto, encoded and decoded by hand.
//
// Why not protoc's generated code: the library is loaded into training processes that often carry
// their own libprotobuf (PyTorch, TensorFlow, ONNX), and generated code registers
// "tensortier/v1/protocol.proto" in libprotobuf's global descriptor pool, so a second copy in the
// same process (a framework plugin, or a test that links the daemon's tt_proto next to this
// library) aborts at load. The client needs only a handful of flat messages, so the library encodes
// them itself and depends on no protobuf at all. The unit tests check every message against
// protoc's generated code (tests/unit/client/WireTest.cpp), so the schema stays the one contract.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/Result.h"

namespace tt::client::wire {

// Frame header: little-endian uint32 payload length.
inline constexpr size_t kHeaderBytes = 4;
// Largest daemon frame the client accepts (a PlacementReply for ~1M regions fits).
inline constexpr uint32_t kMaxDaemonFrame = 256u << 20;

// Mirrors of the schema's enums (same numbers).
enum class MarkType : uint32_t { StepBegin = 1, StepEnd = 2, PhaseBegin = 3 };

// Each encoder returns a whole frame: header + serialized ClientMessage.
[[nodiscard]] std::string encodeHello(uint64_t seq, std::span<const uint32_t> versions, std::string_view clientName,
                                      bool acceptsMbind);
[[nodiscard]] std::string encodeRegisterRegion(uint64_t seq, uint64_t address, uint64_t length, std::string_view name,
                                               int32_t kind, uint64_t expectedLifetimeSteps, uint64_t clientTag);
[[nodiscard]] std::string encodeUnregisterRegion(uint64_t seq, uint64_t regionId);
[[nodiscard]] std::string encodeIterationMark(MarkType type, uint64_t step, std::string_view phase);
[[nodiscard]] std::string encodeQueryPlacement(uint64_t seq, std::span<const uint64_t> regionIds);
[[nodiscard]] std::string encodeMbindResult(uint64_t requestId, int32_t errnoValue);

struct NodeBytes {
  int32_t node = 0;
  uint64_t bytes = 0;
};

struct RegionPlacement {
  uint64_t regionId = 0;
  std::string name;
  int32_t kind = 0;
  uint64_t address = 0;
  uint64_t length = 0;
  std::vector<NodeBytes> bytesPerNode;
  uint64_t unmappedBytes = 0;
  double heat = 0;
  uint32_t sampleStride = 1;  // field 9; a daemon without it sends none: every page was asked
};

// One decoded DaemonMessage; only the fields of `body` are meaningful.
struct DaemonMessage {
  enum class Body { None, HelloReply, RegisterRegionReply, Ack, Placement, MbindRequest, Error };
  Body body = Body::None;
  uint64_t seq = 0;
  // HelloReply
  uint32_t version = 0;
  std::string daemonVersion;
  uint64_t sessionId = 0;
  // RegisterRegionReply
  uint64_t regionId = 0;
  uint64_t clientTag = 0;
  // PlacementReply
  std::vector<RegionPlacement> placements;
  // MbindRequest (regionId above is the request's region_id)
  uint64_t requestId = 0;
  uint64_t address = 0;
  uint64_t length = 0;
  int32_t node = 0;
  // Error
  int32_t errorCode = 0;
  std::string errorMessage;
};

// Decodes one frame's payload (header stripped). Unknown fields are skipped (newer daemons).
[[nodiscard]] tt::Result<DaemonMessage> decodeDaemonMessage(std::string_view payload);

// Payload length from a 4-byte header.
[[nodiscard]] uint32_t frameLength(const char* header);

}  // namespace tt::client::wire
