#include "ipc/FrameCodec.h"

#include <limits>

namespace tt::ipc {

void FrameDecoder::append(const char* data, size_t size) {
  if (broken_) return;
  // Compact before growing: consumed bytes at the front are dead.
  if (offset_ > 0 && (offset_ == buffer_.size() || offset_ > buffer_.capacity() / 2)) {
    buffer_.erase(0, offset_);
    offset_ = 0;
  }
  buffer_.append(data, size);
}

FrameDecoder::Status FrameDecoder::next(uint32_t maxFrameBytes, std::string_view& frame) {
  if (broken_) return Status::TooLarge;
  // Everything consumed (the last frame handed out is void from this call on): a buffer grown by a
  // large frame goes, so that an idle connection holds no more than a small one.
  if (offset_ == buffer_.size() && buffer_.capacity() > kIdleCapacity) {
    std::string().swap(buffer_);
    offset_ = 0;
  }
  if (buffered() < kFrameHeaderBytes) return Status::NeedMore;
  const auto* p = reinterpret_cast<const unsigned char*>(buffer_.data() + offset_);
  const uint32_t length = static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
                          static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
  if (length > maxFrameBytes) {
    announced_ = length;
    broken_ = true;
    buffer_.clear();
    buffer_.shrink_to_fit();
    offset_ = 0;
    return Status::TooLarge;
  }
  if (buffered() < kFrameHeaderBytes + length) return Status::NeedMore;
  frame = std::string_view(buffer_.data() + offset_ + kFrameHeaderBytes, length);
  offset_ += kFrameHeaderBytes + length;
  return Status::Frame;
}

void appendFrameHeader(uint32_t length, std::string& out) {
  const char header[4] = {static_cast<char>(length & 0xff), static_cast<char>((length >> 8) & 0xff),
                          static_cast<char>((length >> 16) & 0xff), static_cast<char>((length >> 24) & 0xff)};
  out.append(header, 4);
}

bool appendFrame(const google::protobuf::MessageLite& message, std::string& out) {
  const size_t size = message.ByteSizeLong();
  if (size > std::numeric_limits<uint32_t>::max()) return false;
  appendFrameHeader(static_cast<uint32_t>(size), out);
  const size_t at = out.size();
  out.resize(at + size);
  return message.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(out.data() + at)) != nullptr || size == 0;
}

}  // namespace tt::ipc
