// The frame codec: frames split across reads, several in one read, oversized announcements,
// garbage, and the encoder's byte layout.
#include <gtest/gtest.h>

#include <string>

#include "ipc/FrameCodec.h"
#include "tensortier/v1/protocol.pb.h"

namespace {

using tt::ipc::FrameDecoder;
namespace pb = tensortier::v1;

std::string frameOf(uint64_t seq) {
  pb::ClientMessage m;
  m.set_seq(seq);
  m.mutable_hello()->add_versions(1);
  std::string out;
  EXPECT_TRUE(tt::ipc::appendFrame(m, out));
  return out;
}

uint64_t seqOf(std::string_view frame) {
  pb::ClientMessage m;
  EXPECT_TRUE(m.ParseFromArray(frame.data(), static_cast<int>(frame.size())));
  return m.seq();
}

TEST(FrameCodec, HeaderIsLittleEndianLength) {
  std::string out;
  tt::ipc::appendFrameHeader(0x01020304, out);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(static_cast<unsigned char>(out[0]), 0x04);
  EXPECT_EQ(static_cast<unsigned char>(out[3]), 0x01);
  const std::string f = frameOf(7);
  EXPECT_EQ(static_cast<size_t>(static_cast<unsigned char>(f[0])), f.size() - 4);
}

TEST(FrameCodec, FrameSplitByteByByteArrivesWhole) {
  const std::string f = frameOf(42);
  FrameDecoder d;
  std::string_view frame;
  for (size_t i = 0; i + 1 < f.size(); ++i) {
    d.append(&f[i], 1);
    EXPECT_EQ(d.next(1024, frame), FrameDecoder::Status::NeedMore) << "after " << i + 1 << " bytes";
  }
  d.append(&f.back(), 1);
  ASSERT_EQ(d.next(1024, frame), FrameDecoder::Status::Frame);
  EXPECT_EQ(seqOf(frame), 42u);
  EXPECT_EQ(d.next(1024, frame), FrameDecoder::Status::NeedMore);
  EXPECT_EQ(d.buffered(), 0u);
}

TEST(FrameCodec, SeveralFramesInOneReadComeOutInOrder) {
  const std::string all = frameOf(1) + frameOf(2) + frameOf(3) + frameOf(4).substr(0, 3);
  FrameDecoder d;
  d.append(all.data(), all.size());
  std::string_view frame;
  for (uint64_t want = 1; want <= 3; ++want) {
    ASSERT_EQ(d.next(1024, frame), FrameDecoder::Status::Frame);
    EXPECT_EQ(seqOf(frame), want);
  }
  EXPECT_EQ(d.next(1024, frame), FrameDecoder::Status::NeedMore);
  const std::string tail = frameOf(4).substr(3);
  d.append(tail.data(), tail.size());
  ASSERT_EQ(d.next(1024, frame), FrameDecoder::Status::Frame);
  EXPECT_EQ(seqOf(frame), 4u);
}

TEST(FrameCodec, OversizedAnnouncementIsRejectedWithoutBuffering) {
  std::string header;
  tt::ipc::appendFrameHeader(5000, header);
  FrameDecoder d;
  d.append(header.data(), header.size());
  std::string_view frame;
  EXPECT_EQ(d.next(4096, frame), FrameDecoder::Status::TooLarge);
  EXPECT_EQ(d.announcedLength(), 5000u);
  // The stream cannot be resynchronised: the decoder stays broken and keeps nothing.
  const std::string more = frameOf(1);
  d.append(more.data(), more.size());
  EXPECT_EQ(d.next(4096, frame), FrameDecoder::Status::TooLarge);
  EXPECT_EQ(d.buffered(), 0u);
}

TEST(FrameCodec, LimitIsInclusive) {
  std::string f;
  tt::ipc::appendFrameHeader(16, f);
  f += std::string(16, 'x');
  FrameDecoder d;
  d.append(f.data(), f.size());
  std::string_view frame;
  EXPECT_EQ(d.next(16, frame), FrameDecoder::Status::Frame);
  EXPECT_EQ(frame.size(), 16u);
}

TEST(FrameCodec, GarbagePayloadIsFramedButDoesNotParse) {
  std::string f;
  tt::ipc::appendFrameHeader(6, f);
  f += "\xff\xff\xff\xff\xff\xff";
  FrameDecoder d;
  d.append(f.data(), f.size());
  std::string_view frame;
  ASSERT_EQ(d.next(1024, frame), FrameDecoder::Status::Frame);
  pb::ClientMessage m;
  EXPECT_FALSE(m.ParseFromArray(frame.data(), static_cast<int>(frame.size())));
}

TEST(FrameCodec, ZeroLengthFrameIsAnEmptyMessage) {
  std::string f;
  tt::ipc::appendFrameHeader(0, f);
  FrameDecoder d;
  d.append(f.data(), f.size());
  std::string_view frame;
  ASSERT_EQ(d.next(1024, frame), FrameDecoder::Status::Frame);
  EXPECT_TRUE(frame.empty());
}

// A large frame's buffer is released once it has been consumed: a connection that sent one and
// sits idle holds no more than a small one.
TEST(FrameCodec, ALargeFramesBufferGoesOnceItIsConsumed) {
  FrameDecoder d;
  std::string_view frame;
  std::string big;
  tt::ipc::appendFrameHeader(1 << 20, big);
  big.append(1 << 20, 'x');
  d.append(big.data(), big.size());
  ASSERT_EQ(d.next(2 << 20, frame), FrameDecoder::Status::Frame);
  EXPECT_EQ(frame.size(), 1u << 20);
  EXPECT_GE(d.capacity(), 1u << 20);
  ASSERT_EQ(d.next(2 << 20, frame), FrameDecoder::Status::NeedMore);
  EXPECT_LE(d.capacity(), FrameDecoder::kIdleCapacity) << "the consumed 1 MiB buffer is still held";
  const std::string small = frameOf(9);
  d.append(small.data(), small.size());
  ASSERT_EQ(d.next(1024, frame), FrameDecoder::Status::Frame);
  EXPECT_EQ(seqOf(frame), 9u) << "the decoder does not work after the release";
}

TEST(FrameCodec, BufferIsReusedAcrossManyFrames) {
  FrameDecoder d;
  std::string_view frame;
  const std::string f = frameOf(9);
  for (int i = 0; i < 10000; ++i) {
    d.append(f.data(), f.size());
    ASSERT_EQ(d.next(1024, frame), FrameDecoder::Status::Frame);
  }
  EXPECT_EQ(d.buffered(), 0u);
}

}  // namespace
