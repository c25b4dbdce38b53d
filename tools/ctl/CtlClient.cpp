#include "ctl/CtlClient.h"

#include <poll.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/write.hpp>
#include <cstdlib>
#include <deque>

#include "ipc/FrameCodec.h"

namespace tt::ctl {

namespace asio = boost::asio;
using local = asio::local::stream_protocol;

std::string defaultSocketPath() {
  const char* env = std::getenv("TENSORTIER_SOCKET");
  return env && *env ? env : "/run/tensortier/tensortier.sock";
}

struct CtlClient::Impl {
  asio::io_context io;
  local::socket socket{io};
  ipc::FrameDecoder decoder;
  std::deque<pb::DaemonMessage> stash;  // daemon-initiated messages seen while waiting for a reply
};

CtlClient::CtlClient() : impl_(std::make_unique<Impl>()) {}
CtlClient::~CtlClient() = default;

Result<void> CtlClient::connect(const std::string& socketPath) {
  boost::system::error_code ec;
  impl_->socket.connect(local::endpoint(socketPath), ec);
  if (ec) return systemError(ec.value(), "connect to tensortierd at " + socketPath);
  return {};
}

void CtlClient::close() {
  boost::system::error_code ignored;
  impl_->socket.close(ignored);
}

Result<void> CtlClient::sendRaw(std::string_view bytes) {
  boost::system::error_code ec;
  asio::write(impl_->socket, asio::buffer(bytes.data(), bytes.size()), ec);
  if (ec) return systemError(ec.value(), "send to tensortierd");
  return {};
}

Result<void> CtlClient::post(const pb::ClientMessage& message) {
  std::string frame;
  if (!ipc::appendFrame(message, frame)) return logicError("cannot serialise the request");
  return sendRaw(frame);
}

Result<pb::DaemonMessage> CtlClient::nextMessage(std::chrono::milliseconds timeout) {
  if (!impl_->stash.empty()) {
    pb::DaemonMessage m = std::move(impl_->stash.front());
    impl_->stash.pop_front();
    return m;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    std::string_view frame;
    const auto status = impl_->decoder.next(64u << 20, frame);
    if (status == ipc::FrameDecoder::Status::Frame) {
      pb::DaemonMessage m;
      if (!m.ParseFromArray(frame.data(), static_cast<int>(frame.size())))
        return logicError("the daemon sent a frame that does not parse");
      return m;
    }
    if (status == ipc::FrameDecoder::Status::TooLarge) return logicError("the daemon sent an oversized frame");
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return systemError(ETIMEDOUT, "waiting for tensortierd");
    pollfd p{impl_->socket.native_handle(), POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno != EINTR) return errnoError("poll");
    if (n <= 0) continue;
    char buf[65536];
    boost::system::error_code ec;
    const size_t got = impl_->socket.read_some(asio::buffer(buf), ec);
    if (ec == asio::error::eof) return systemError(ENOTCONN, "tensortierd closed the connection");
    if (ec) return systemError(ec.value(), "read from tensortierd");
    impl_->decoder.append(buf, got);
  }
}

Result<pb::DaemonMessage> CtlClient::call(pb::ClientMessage request) {
  request.set_seq(++seq_);
  if (auto r = post(request); !r) return r.error();
  for (;;) {
    auto m = nextMessage();
    if (!m) return m.error();
    if (m->seq() == request.seq()) return m;
    // seq 0 replies that are errors concern the connection itself (refused, malformed frame).
    if (m->seq() == 0 && m->has_error()) return m;
    impl_->stash.push_back(std::move(*m));
  }
}

Result<pb::HelloReply> CtlClient::hello(const std::string& clientName, bool acceptsMbind) {
  pb::ClientMessage m;
  auto* h = m.mutable_hello();
  h->add_versions(1);
  h->set_client_name(clientName);
  h->set_accepts_mbind(acceptsMbind);
  auto reply = call(std::move(m));
  if (!reply) return reply.error();
  if (reply->has_error()) return logicError("Hello refused: " + reply->error().message());
  if (!reply->has_hello_reply()) return logicError("unexpected reply to Hello");
  return reply->hello_reply();
}

}  // namespace tt::ctl
