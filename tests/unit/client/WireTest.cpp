// The client library's hand-written codec against protoc's generated code for protocol.proto.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "Wire.h"
#include "tensortier/v1/protocol.pb.h"

namespace {

namespace pb = tensortier::v1;
namespace wire = tt::client::wire;

// Checks the 4-byte little-endian header and parses the payload with libprotobuf.
pb::ClientMessage parseFrame(const std::string& frame) {
  pb::ClientMessage m;
  EXPECT_GE(frame.size(), 4u);
  EXPECT_EQ(wire::frameLength(frame.data()), frame.size() - 4);
  EXPECT_TRUE(m.ParseFromString(frame.substr(4)));
  return m;
}

TEST(ClientWire, HelloMatchesSchema) {
  const uint32_t versions[] = {1, 3};
  const auto m = parseFrame(wire::encodeHello(9, versions, "train.py", true));
  EXPECT_EQ(m.seq(), 9u);
  ASSERT_TRUE(m.has_hello());
  ASSERT_EQ(m.hello().versions_size(), 2);
  EXPECT_EQ(m.hello().versions(0), 1u);
  EXPECT_EQ(m.hello().versions(1), 3u);
  EXPECT_EQ(m.hello().client_name(), "train.py");
  EXPECT_TRUE(m.hello().accepts_mbind());
}

TEST(ClientWire, RegisterRegionMatchesSchema) {
  const auto m = parseFrame(
      wire::encodeRegisterRegion(1ull << 40, 0x7f0000001234ull, 3ull << 30, "layer1.weight", 3, 17, 42));
  EXPECT_EQ(m.seq(), 1ull << 40);
  ASSERT_TRUE(m.has_register_region());
  const auto& r = m.register_region();
  EXPECT_EQ(r.address(), 0x7f0000001234ull);
  EXPECT_EQ(r.length(), 3ull << 30);
  EXPECT_EQ(r.name(), "layer1.weight");
  EXPECT_EQ(r.kind(), pb::OPTIMIZER_STATE);
  EXPECT_EQ(r.hints().expected_lifetime_steps(), 17u);
  EXPECT_EQ(r.client_tag(), 42u);
}

TEST(ClientWire, EmptyBodiesStillSelectTheirOneofCase) {
  // A QueryPlacement with no ids ("all regions") has an empty body; it must still be sent.
  const auto q = parseFrame(wire::encodeQueryPlacement(5, {}));
  EXPECT_TRUE(q.has_query_placement());
  EXPECT_EQ(q.query_placement().region_ids_size(), 0);
  const auto u = parseFrame(wire::encodeUnregisterRegion(6, 0));
  EXPECT_TRUE(u.has_unregister_region());
}

TEST(ClientWire, QueryPlacementCarriesIds) {
  const uint64_t ids[] = {3, 1ull << 63, 7};
  const auto m = parseFrame(wire::encodeQueryPlacement(2, ids));
  ASSERT_EQ(m.query_placement().region_ids_size(), 3);
  EXPECT_EQ(m.query_placement().region_ids(1), 1ull << 63);
  EXPECT_EQ(m.query_placement().region_ids(2), 7u);
}

TEST(ClientWire, IterationMarkHasSeqZero) {
  const auto m = parseFrame(wire::encodeIterationMark(wire::MarkType::PhaseBegin, 123, "backward"));
  EXPECT_EQ(m.seq(), 0u);
  ASSERT_TRUE(m.has_iteration_mark());
  EXPECT_EQ(m.iteration_mark().type(), pb::IterationMark::PHASE_BEGIN);
  EXPECT_EQ(m.iteration_mark().step(), 123u);
  EXPECT_EQ(m.iteration_mark().phase(), "backward");
}

TEST(ClientWire, MbindResultCarriesNegativeAndPositiveErrno) {
  auto m = parseFrame(wire::encodeMbindResult(77, 22));
  ASSERT_TRUE(m.has_mbind_result());
  EXPECT_EQ(m.mbind_result().request_id(), 77u);
  EXPECT_EQ(m.mbind_result().errno_value(), 22);
  m = parseFrame(wire::encodeMbindResult(78, -1));
  EXPECT_EQ(m.mbind_result().errno_value(), -1);
}

wire::DaemonMessage decode(const pb::DaemonMessage& m) {
  auto d = wire::decodeDaemonMessage(m.SerializeAsString());
  EXPECT_TRUE(d.ok()) << (d.ok() ? "" : d.error().message());
  return d.ok() ? *d : wire::DaemonMessage{};
}

TEST(ClientWire, DecodesHelloReplyRegisterReplyAckAndError) {
  pb::DaemonMessage m;
  m.set_seq(4);
  m.mutable_hello_reply()->set_version(1);
  m.mutable_hello_reply()->set_daemon_version("0.1.0");
  m.mutable_hello_reply()->set_session_id(99);
  auto d = decode(m);
  EXPECT_EQ(d.body, wire::DaemonMessage::Body::HelloReply);
  EXPECT_EQ(d.seq, 4u);
  EXPECT_EQ(d.version, 1u);
  EXPECT_EQ(d.daemonVersion, "0.1.0");
  EXPECT_EQ(d.sessionId, 99u);

  m.Clear();
  m.set_seq(5);
  m.mutable_register_region_reply()->set_region_id(1234567);
  m.mutable_register_region_reply()->set_client_tag(8);
  d = decode(m);
  EXPECT_EQ(d.body, wire::DaemonMessage::Body::RegisterRegionReply);
  EXPECT_EQ(d.regionId, 1234567u);
  EXPECT_EQ(d.clientTag, 8u);

  m.Clear();
  m.set_seq(6);
  m.mutable_ack();
  EXPECT_EQ(decode(m).body, wire::DaemonMessage::Body::Ack);

  m.Clear();
  m.set_seq(7);
  m.mutable_error()->set_code(pb::REGION_OVERLAPS);
  m.mutable_error()->set_message("overlaps 3");
  d = decode(m);
  EXPECT_EQ(d.body, wire::DaemonMessage::Body::Error);
  EXPECT_EQ(d.errorCode, pb::REGION_OVERLAPS);
  EXPECT_EQ(d.errorMessage, "overlaps 3");
}

TEST(ClientWire, DecodesPlacementWithNodesAndHeat) {
  pb::DaemonMessage m;
  m.set_seq(8);
  for (int i = 0; i < 2; ++i) {
    auto* r = m.mutable_placement()->add_regions();
    r->set_region_id(10 + static_cast<uint64_t>(i));
    r->set_name("r" + std::to_string(i));
    r->set_kind(pb::GRADIENT);
    r->set_address(4096u * static_cast<uint64_t>(i + 1));
    r->set_length(8192);
    auto* a = r->add_bytes_per_node();
    a->set_node(0);
    a->set_bytes(4096);
    auto* b = r->add_bytes_per_node();
    b->set_node(2);
    b->set_bytes(0);  // a default value: not on the wire at all
    r->set_unmapped_bytes(4096);
    r->set_heat(0.125 + i);
    if (i == 1) r->set_sample_stride(3);  // the first: as from a daemon that does not send it
  }
  const auto d = decode(m);
  ASSERT_EQ(d.body, wire::DaemonMessage::Body::Placement);
  ASSERT_EQ(d.placements.size(), 2u);
  const auto& r1 = d.placements[1];
  EXPECT_EQ(r1.regionId, 11u);
  EXPECT_EQ(r1.name, "r1");
  EXPECT_EQ(r1.kind, pb::GRADIENT);
  EXPECT_EQ(r1.address, 8192u);
  EXPECT_EQ(r1.length, 8192u);
  ASSERT_EQ(r1.bytesPerNode.size(), 2u);
  EXPECT_EQ(r1.bytesPerNode[0].node, 0);
  EXPECT_EQ(r1.bytesPerNode[0].bytes, 4096u);
  EXPECT_EQ(r1.bytesPerNode[1].node, 2);
  EXPECT_EQ(r1.bytesPerNode[1].bytes, 0u);
  EXPECT_EQ(r1.unmappedBytes, 4096u);
  EXPECT_DOUBLE_EQ(r1.heat, 1.125);
  EXPECT_EQ(r1.sampleStride, 3u);
  EXPECT_EQ(d.placements[0].sampleStride, 1u) << "no stride on the wire means every page was asked";
}

TEST(ClientWire, DecodesMbindRequestWithNegativeNode) {
  pb::DaemonMessage m;
  auto* q = m.mutable_mbind_request();
  q->set_request_id(5);
  q->set_region_id(6);
  q->set_address(0x1000);
  q->set_length(0x2000);
  q->set_node(-1);
  const auto d = decode(m);
  ASSERT_EQ(d.body, wire::DaemonMessage::Body::MbindRequest);
  EXPECT_EQ(d.seq, 0u);
  EXPECT_EQ(d.requestId, 5u);
  EXPECT_EQ(d.regionId, 6u);
  EXPECT_EQ(d.address, 0x1000u);
  EXPECT_EQ(d.length, 0x2000u);
  EXPECT_EQ(d.node, -1);
}

TEST(ClientWire, SkipsUnknownFieldsOfEveryWireType) {
  pb::DaemonMessage m;
  m.set_seq(3);
  m.mutable_ack();
  std::string bytes = m.SerializeAsString();
  // field 100 varint, field 101 fixed64, field 102 length-delimited, field 103 fixed32
  bytes += std::string("\xa0\x06\x01", 3) + std::string("\xa9\x06", 2) + std::string(8, '\x01') +
           std::string("\xb2\x06\x02zz", 5) + std::string("\xbd\x06", 2) + std::string(4, '\x02');
  auto d = wire::decodeDaemonMessage(bytes);
  ASSERT_TRUE(d.ok()) << d.error().message();
  EXPECT_EQ(d->seq, 3u);
  EXPECT_EQ(d->body, wire::DaemonMessage::Body::Ack);
}

TEST(ClientWire, TruncatedMessageIsAnError) {
  pb::DaemonMessage m;
  m.set_seq(3);
  m.mutable_error()->set_message("a long enough message");
  const std::string bytes = m.SerializeAsString();
  EXPECT_FALSE(wire::decodeDaemonMessage(bytes.substr(0, bytes.size() - 5)).ok());
  EXPECT_FALSE(wire::decodeDaemonMessage(std::string("\x08\xff", 2)).ok());  // varint runs off the end
}

}  // namespace
