// A small blocking client of the daemon's protocol: connect, Hello, request/reply. tensortierctl
// uses it; so do the service's privileged tests, which also send raw (malformed, oversized) bytes.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "core/Result.h"
#include "tensortier/v1/protocol.pb.h"

namespace tt::ctl {

namespace pb = tensortier::v1;

// $TENSORTIER_SOCKET, else /run/tensortier/tensortier.sock.
[[nodiscard]] std::string defaultSocketPath();

class CtlClient {
 public:
  CtlClient();
  ~CtlClient();
  CtlClient(const CtlClient&) = delete;
  CtlClient& operator=(const CtlClient&) = delete;

  [[nodiscard]] Result<void> connect(const std::string& socketPath);
  // Hello with version 1; returns the reply (an error reply is returned as an error).
  [[nodiscard]] Result<pb::HelloReply> hello(const std::string& clientName, bool acceptsMbind = false);
  // Sends `request` with the next seq and waits for the reply with that seq (skipping
  // daemon-initiated messages, which are kept for nextMessage()).
  [[nodiscard]] Result<pb::DaemonMessage> call(pb::ClientMessage request);
  // Sends without waiting (IterationMark with seq 0).
  [[nodiscard]] Result<void> post(const pb::ClientMessage& message);
  [[nodiscard]] Result<void> sendRaw(std::string_view bytes);
  // The next frame from the daemon, whatever it is; ETIMEDOUT after `timeout`; EPIPE/ECONNRESET
  // or a zero-length read (ENOTCONN) when the daemon closed the connection.
  [[nodiscard]] Result<pb::DaemonMessage> nextMessage(std::chrono::milliseconds timeout = std::chrono::seconds(10));
  void close();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  uint64_t seq_ = 0;
};

}  // namespace tt::ctl
