// The Unix-socket server on the daemon's Boost.Asio event loop: accepts connections (from a
// socket it binds or one systemd passed), reads frames, hands requests to the ProtocolHandler,
// queues replies; watches client processes through pidfds; carries MbindRequests to clients.
//
// A bad client never takes the daemon down: a frame that does not parse gets BAD_REQUEST and the
// connection stays; an oversized frame gets FRAME_TOO_LARGE and the connection closes (the
// stream cannot be resynchronised); a client that stops reading is dropped when its queued
// replies pass max_send_queue_bytes.
//
// Threads: everything runs on the thread that runs the io_context, except requestMbind(), which
// any thread may call (it posts onto the loop), and the parts of client requests that may wait on
// the client's own process (ProtocolHandler::begin gives them as OffLoop), which run on
// RequestWorkers; the connection reads nothing more until the answer is back on the loop.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "core/Result.h"
#include "ipc/Protocol.h"
#include "ipc/RequestWorkers.h"
#include "sys/service/Pidfd.h"

namespace tt::ipc {

struct ServerOptions {
  uint32_t maxFrameBytes = 1 << 20;
  uint32_t maxSendQueueBytes = 8 << 20;
  std::chrono::milliseconds mbindTimeout{5000};
  // No Hello this long after accept, or part of a frame held this long: closed.
  std::chrono::milliseconds stalledConnection{30000};
  // RequestWorkers: threads, and at most this many of them for one uid at once. Taken at
  // construction (setOptions does not change them).
  unsigned requestThreads = 4;
  unsigned requestThreadsPerUid = 2;
};

struct MbindCall {
  pid_t pid = 0;
  uint64_t regionId = 0;
  uint64_t address = 0;
  uint64_t length = 0;
  int node = 0;
};

class Server final : public ProcessLifetime {
 public:
  using ProcessExitCallback = std::function<void(pid_t pid)>;
  using MbindDone = std::function<void(int errnoValue)>;  // 0 = done; ENOTCONN, ETIMEDOUT, ...

  Server(boost::asio::io_context& io, registry::Registry& registry, ProtocolHandler& handler, ServerOptions options);
  ~Server() override;

  // Binds `path` (after removing a stale socket file), listens. Access bits are set by the caller.
  [[nodiscard]] Result<void> listen(const std::string& path);
  // Serves an already listening socket (systemd socket activation).
  [[nodiscard]] Result<void> adopt(int listeningFd);
  // Stops accepting and closes every connection (pending mbinds fail with ECANCELED).
  void stop();

  void setOptions(const ServerOptions& options) { options_ = options; }
  // Called on the loop after a watched process exited and its regions were removed.
  void onProcessExit(ProcessExitCallback callback) { onExit_ = std::move(callback); }

  // Thread-safe. Asks a connection of `call.pid` that accepts mbind to bind the range; `done`
  // runs on the loop thread exactly once.
  void requestMbind(const MbindCall& call, MbindDone done);
  // Whether some connection of `pid` accepts MbindRequest (loop thread).
  [[nodiscard]] bool acceptsMbind(pid_t pid) const;

  [[nodiscard]] size_t connectionCount() const { return connections_.size(); }
  // Client requests' work on the request workers: waiting for a thread, and running. Any thread.
  struct RequestLoad {
    size_t queued = 0;
    size_t running = 0;
  };
  [[nodiscard]] RequestLoad requestLoad() const { return {workers_.queued(), workers_.running()}; }

  // Frames of one connection handled in one turn of the loop before the others get theirs.
  static constexpr size_t kFramesPerTurn = 64;

  // ProcessLifetime (loop thread).
  bool exited(pid_t pid) override;
  bool watch(pid_t pid) override;
  void unwatch(pid_t pid) override;
  void forget(pid_t pid) override {
    processExited(pid);
    execed_[pid] = kExecWatchSweeps;  // dropped for an exec or a refusal: old-id connections go once ids show
  }

 private:
  class Connection;
  struct ProcessWatch {
    sys::Pidfd pidfd;
    std::unique_ptr<boost::asio::posix::stream_descriptor> descriptor;
  };
  struct PendingMbind {
    uint64_t connectionId = 0;
    MbindDone done;
    std::unique_ptr<boost::asio::steady_timer> timer;
  };

  void accept();
  void awaitExit(pid_t pid);  // of a watched process
  void connectionClosed(uint64_t id);
  void processExited(pid_t pid);
  // Every kIdSweep: drops the registered processes that run with other ids than they registered
  // under (a setid exec), with the connections of the old ids, also when those stay silent; and
  // those that ran exec keeping their ids (their regions describe the program before).
  void sweepChangedIds();
  // Closes the connections of `pid` (but `except`) opened with other ids than it runs with now.
  void closeStaleConnections(pid_t pid, uint64_t except);
  void mbindResult(const Session& session, uint64_t requestId, int errnoValue);
  void finishMbind(uint64_t requestId, int errnoValue);

  boost::asio::io_context& io_;
  registry::Registry& registry_;
  ProtocolHandler& handler_;
  ServerOptions options_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
  boost::asio::steady_timer acceptRetry_;  // after a failed accept (EMFILE: out of descriptors)
  static constexpr std::chrono::milliseconds kAcceptRetry{100};
  boost::asio::steady_timer idSweep_;
  static constexpr std::chrono::milliseconds kIdSweep{1000};  // ~7 us a registered process
  std::unordered_map<uint64_t, std::shared_ptr<Connection>> connections_;
  std::unordered_map<pid_t, ProcessWatch> watches_;
  // Pids dropped for an exec or a refusal whose connections of old ids the sweep still closes,
  // with the sweeps left: 300, five minutes, longer than the teardown of any address space here
  // (1.6 s at 8 GiB here) before an exec commits its ids.
  static constexpr int kExecWatchSweeps = 300;
  std::unordered_map<pid_t, int> execed_;
  std::unordered_map<uint64_t, PendingMbind> pendingMbinds_;
  uint64_t nextMbindId_ = 1;
  ProcessExitCallback onExit_;
  bool stopped_ = false;
  RequestWorkers workers_;  // last: stopped (joined) first, in stop()
};

}  // namespace tt::ipc
