#include "Wire.h"

#include <cstring>

namespace tt::client::wire {
namespace {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// ClientMessage / DaemonMessage field numbers (protocol.proto).
constexpr uint32_t kSeq = 1;
constexpr uint32_t kClientHello = 2, kClientRegister = 3, kClientUnregister = 4, kClientMark = 5, kClientQuery = 6,
                   kClientMbindResult = 7;
constexpr uint32_t kDaemonHelloReply = 2, kDaemonRegisterReply = 3, kDaemonAck = 4, kDaemonPlacement = 5,
                   kDaemonMbindRequest = 6, kDaemonError = 7;

void putVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void putTag(std::string& out, uint32_t field, WireType type) { putVarint(out, (uint64_t{field} << 3) | type); }

// proto3: scalar fields at their default are not written.
void putUint(std::string& out, uint32_t field, uint64_t v) {
  if (v == 0) return;
  putTag(out, field, kVarint);
  putVarint(out, v);
}

// int32 is sign-extended to 64 bits on the wire (negative values take ten bytes).
void putInt32(std::string& out, uint32_t field, int32_t v) {
  if (v == 0) return;
  putTag(out, field, kVarint);
  putVarint(out, static_cast<uint64_t>(static_cast<int64_t>(v)));
}

void putBytes(std::string& out, uint32_t field, std::string_view bytes) {
  putTag(out, field, kLengthDelimited);
  putVarint(out, bytes.size());
  out.append(bytes);
}

void putString(std::string& out, uint32_t field, std::string_view s) {
  if (!s.empty()) putBytes(out, field, s);
}

// A ClientMessage with seq and one body submessage (always written: it selects the oneof case).
std::string frame(uint64_t seq, uint32_t bodyField, const std::string& body) {
  std::string msg;
  putUint(msg, kSeq, seq);
  putBytes(msg, bodyField, body);
  std::string out(kHeaderBytes, '\0');
  const auto n = static_cast<uint32_t>(msg.size());
  for (size_t i = 0; i < kHeaderBytes; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += msg;
  return out;
}

class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  [[nodiscard]] bool done() const { return pos_ >= data_.size(); }
  [[nodiscard]] bool failed() const { return failed_; }

  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= data_.size()) return fail();
      const auto byte = static_cast<uint8_t>(data_[pos_++]);
      v |= uint64_t{byte & 0x7fu} << shift;
      if ((byte & 0x80) == 0) return v;
    }
    return fail();
  }
  uint64_t fixed64() {
    if (data_.size() - pos_ < 8) return fail();
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(data_[pos_ + static_cast<size_t>(i)]);
    pos_ += 8;
    return v;
  }
  std::string_view bytes() {
    const uint64_t n = varint();
    if (failed_ || n > data_.size() - pos_) {
      fail();
      return {};
    }
    auto s = data_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  void skip(uint32_t type) {
    switch (type) {
      case kVarint: (void)varint(); break;
      case kFixed64: (void)fixed64(); break;
      case kLengthDelimited: (void)bytes(); break;
      case kFixed32:
        if (data_.size() - pos_ < 4) fail();
        else pos_ += 4;
        break;
      default: fail();
    }
  }
  // Reads a tag; false at the end or on error.
  bool next(uint32_t& field, uint32_t& type) {
    if (done() || failed_) return false;
    const uint64_t tag = varint();
    field = static_cast<uint32_t>(tag >> 3);
    type = static_cast<uint32_t>(tag & 7);
    return !failed_ && field != 0;
  }
  // Repeated scalar, packed (length-delimited) or not.
  template <class F>
  void repeatedVarint(uint32_t type, F&& each) {
    if (type == kLengthDelimited) {
      Reader packed(bytes());
      while (!packed.done() && !packed.failed()) each(packed.varint());
      if (packed.failed()) fail();
    } else if (type == kVarint) {
      each(varint());
    } else {
      fail();
    }
  }
  uint64_t fail() {
    failed_ = true;
    pos_ = data_.size();
    return 0;
  }

 private:
  std::string_view data_;
  size_t pos_ = 0;
  bool failed_ = false;
};

// Reads a varint field or skips a field of an unexpected wire type (the schema may evolve).
bool readVarintField(Reader& r, uint32_t type, uint64_t& out) {
  if (type != kVarint) {
    r.skip(type);
    return false;
  }
  out = r.varint();
  return true;
}

template <class T>
void varintInto(Reader& r, uint32_t type, T& out) {
  uint64_t v = 0;
  if (readVarintField(r, type, v)) out = static_cast<T>(v);
}

void stringInto(Reader& r, uint32_t type, std::string& out) {
  if (type != kLengthDelimited) return r.skip(type);
  out = std::string(r.bytes());
}

bool decodeNodeBytes(std::string_view data, NodeBytes& out) {
  Reader r(data);
  uint32_t f = 0, t = 0;
  while (r.next(f, t)) {
    if (f == 1) varintInto(r, t, out.node);
    else if (f == 2) varintInto(r, t, out.bytes);
    else r.skip(t);
  }
  return !r.failed();
}

bool decodeRegionPlacement(std::string_view data, RegionPlacement& out) {
  Reader r(data);
  uint32_t f = 0, t = 0;
  while (r.next(f, t)) {
    switch (f) {
      case 1: varintInto(r, t, out.regionId); break;
      case 2: stringInto(r, t, out.name); break;
      case 3: varintInto(r, t, out.kind); break;
      case 4: varintInto(r, t, out.address); break;
      case 5: varintInto(r, t, out.length); break;
      case 6: {
        if (t != kLengthDelimited) {
          r.skip(t);
          break;
        }
        NodeBytes nb;
        if (!decodeNodeBytes(r.bytes(), nb)) return false;
        out.bytesPerNode.push_back(nb);
        break;
      }
      case 7: varintInto(r, t, out.unmappedBytes); break;
      case 8: {
        if (t != kFixed64) {
          r.skip(t);
          break;
        }
        const uint64_t bits = r.fixed64();
        std::memcpy(&out.heat, &bits, sizeof bits);
        break;
      }
      case 9: varintInto(r, t, out.sampleStride); break;
      default: r.skip(t);
    }
  }
  return !r.failed();
}

bool decodeBody(uint32_t field, std::string_view data, DaemonMessage& m) {
  Reader r(data);
  uint32_t f = 0, t = 0;
  switch (field) {
    case kDaemonHelloReply:
      m.body = DaemonMessage::Body::HelloReply;
      while (r.next(f, t)) {
        if (f == 1) varintInto(r, t, m.version);
        else if (f == 2) stringInto(r, t, m.daemonVersion);
        else if (f == 3) varintInto(r, t, m.sessionId);
        else r.skip(t);
      }
      break;
    case kDaemonRegisterReply:
      m.body = DaemonMessage::Body::RegisterRegionReply;
      while (r.next(f, t)) {
        if (f == 1) varintInto(r, t, m.regionId);
        else if (f == 2) varintInto(r, t, m.clientTag);
        else r.skip(t);
      }
      break;
    case kDaemonAck:
      m.body = DaemonMessage::Body::Ack;
      while (r.next(f, t)) r.skip(t);
      break;
    case kDaemonPlacement:
      m.body = DaemonMessage::Body::Placement;
      m.placements.clear();
      while (r.next(f, t)) {
        if (f == 1 && t == kLengthDelimited) {
          RegionPlacement p;
          if (!decodeRegionPlacement(r.bytes(), p)) return false;
          m.placements.push_back(std::move(p));
        } else {
          r.skip(t);
        }
      }
      break;
    case kDaemonMbindRequest:
      m.body = DaemonMessage::Body::MbindRequest;
      while (r.next(f, t)) {
        if (f == 1) varintInto(r, t, m.requestId);
        else if (f == 2) varintInto(r, t, m.regionId);
        else if (f == 3) varintInto(r, t, m.address);
        else if (f == 4) varintInto(r, t, m.length);
        else if (f == 5) varintInto(r, t, m.node);
        else r.skip(t);
      }
      break;
    case kDaemonError:
      m.body = DaemonMessage::Body::Error;
      while (r.next(f, t)) {
        if (f == 1) varintInto(r, t, m.errorCode);
        else if (f == 2) stringInto(r, t, m.errorMessage);
        else r.skip(t);
      }
      break;
    default: return true;  // a body this client does not know: left as Body::None
  }
  return !r.failed();
}

}  // namespace

std::string encodeHello(uint64_t seq, std::span<const uint32_t> versions, std::string_view clientName,
                        bool acceptsMbind) {
  std::string body;
  if (!versions.empty()) {
    std::string packed;
    for (uint32_t v : versions) putVarint(packed, v);
    putBytes(body, 1, packed);
  }
  putString(body, 2, clientName);
  putUint(body, 3, acceptsMbind ? 1 : 0);
  return frame(seq, kClientHello, body);
}

std::string encodeRegisterRegion(uint64_t seq, uint64_t address, uint64_t length, std::string_view name,
                                 int32_t kind, uint64_t expectedLifetimeSteps, uint64_t clientTag) {
  std::string body;
  putUint(body, 1, address);
  putUint(body, 2, length);
  putString(body, 3, name);
  putInt32(body, 4, kind);
  if (expectedLifetimeSteps != 0) {
    std::string hints;
    putUint(hints, 1, expectedLifetimeSteps);
    putBytes(body, 5, hints);
  }
  putUint(body, 6, clientTag);
  return frame(seq, kClientRegister, body);
}

std::string encodeUnregisterRegion(uint64_t seq, uint64_t regionId) {
  std::string body;
  putUint(body, 1, regionId);
  return frame(seq, kClientUnregister, body);
}

std::string encodeIterationMark(MarkType type, uint64_t step, std::string_view phase) {
  std::string body;
  putUint(body, 1, static_cast<uint32_t>(type));
  putUint(body, 2, step);
  putString(body, 3, phase);
  return frame(0, kClientMark, body);
}

std::string encodeQueryPlacement(uint64_t seq, std::span<const uint64_t> regionIds) {
  std::string body;
  if (!regionIds.empty()) {
    std::string packed;
    for (uint64_t id : regionIds) putVarint(packed, id);
    putBytes(body, 1, packed);
  }
  return frame(seq, kClientQuery, body);
}

std::string encodeMbindResult(uint64_t requestId, int32_t errnoValue) {
  std::string body;
  putUint(body, 1, requestId);
  putInt32(body, 2, errnoValue);
  return frame(0, kClientMbindResult, body);
}

uint32_t frameLength(const char* header) {
  uint32_t n = 0;
  for (size_t i = 0; i < kHeaderBytes; ++i) n |= uint32_t{static_cast<uint8_t>(header[i])} << (8 * i);
  return n;
}

tt::Result<DaemonMessage> decodeDaemonMessage(std::string_view payload) {
  DaemonMessage m;
  Reader r(payload);
  uint32_t f = 0, t = 0;
  while (r.next(f, t)) {
    if (f == kSeq) {
      varintInto(r, t, m.seq);
    } else if (f >= kDaemonHelloReply && f <= kDaemonError && t == kLengthDelimited) {
      if (!decodeBody(f, r.bytes(), m) || r.failed())
        return tt::logicError("malformed DaemonMessage body (field " + std::to_string(f) + ")");
    } else {
      r.skip(t);
    }
  }
  if (r.failed()) return tt::logicError("malformed DaemonMessage (" + std::to_string(payload.size()) + " bytes)");
  return m;
}

}  // namespace tt::client::wire
