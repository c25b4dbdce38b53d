// Length-delimited frames: a little-endian uint32 byte count, then that many bytes of one
// serialized protobuf message (protocol.proto).
//
// The decoder takes bytes as they arrive (any split: a frame over several reads, several frames in
// one read) and hands out whole frames. Its buffer is reused, so steady traffic allocates nothing.
#pragma once

#include <google/protobuf/message_lite.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace tt::ipc {

inline constexpr size_t kFrameHeaderBytes = 4;

class FrameDecoder {
 public:
  enum class Status {
    NeedMore,  // no whole frame buffered yet
    Frame,     // `frame` holds one message's bytes (valid until the next call)
    TooLarge,  // the announced length exceeds the limit: the stream cannot be resynchronised
  };

  void append(const char* data, size_t size);
  // The next whole frame, if one is buffered. After TooLarge the decoder stays in that state.
  [[nodiscard]] Status next(uint32_t maxFrameBytes, std::string_view& frame);
  // Length the oversized frame announced (for the error message).
  [[nodiscard]] uint32_t announcedLength() const { return announced_; }
  [[nodiscard]] size_t buffered() const { return buffer_.size() - offset_; }
  [[nodiscard]] size_t capacity() const { return buffer_.capacity(); }
  // Capacity kept once everything buffered has been consumed; more is released.
  static constexpr size_t kIdleCapacity = 65536;

 private:
  std::string buffer_;
  size_t offset_ = 0;  // start of unconsumed bytes
  uint32_t announced_ = 0;
  bool broken_ = false;
};

// Appends one frame holding `message` to `out`. False if the message cannot be serialised.
[[nodiscard]] bool appendFrame(const google::protobuf::MessageLite& message, std::string& out);

// The header of a frame of `length` bytes.
void appendFrameHeader(uint32_t length, std::string& out);

}  // namespace tt::ipc
