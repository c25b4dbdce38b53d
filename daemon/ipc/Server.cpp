#include "ipc/Server.h"

#include <algorithm>
#include <array>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <deque>
#include <variant>

#include "core/Log.h"
#include "ipc/FrameCodec.h"
#include "sys/service/PeerCred.h"
#include "sys/Fs.h"
#include "sys/service/SocketFile.h"

namespace tt::ipc {

namespace asio = boost::asio;
using local = asio::local::stream_protocol;
using boost::system::error_code;

class Server::Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(Server& server, local::socket socket, Session initial)
      : session(std::move(initial)), server_(server), socket_(std::move(socket)), stall_(socket_.get_executor()) {}

  Session session;
  bool counted = false;  // holds a slot in the registry's connection limits

  void start() {
    watchStall();
    read();
  }

  // Whether the process that opened the connection has exited (its pidfd says so).
  [[nodiscard]] bool peerGone() const {
    if (!peer_.valid()) return false;
    auto gone = sys::pidfdExited(peer_);
    return gone.ok() && *gone;
  }

  // The connection speaks for the process that connected, and for no other: once it has exited,
  // a child holding the socket, or a process given its pid since, must not act under that pid.
  // The connection is closed when the peer's pidfd says it exited.
  void watchPeer(sys::Pidfd pidfd) {
    peer_ = std::move(pidfd);
    peerWatch_ = std::make_unique<asio::posix::stream_descriptor>(socket_.get_executor(), peer_.fd());
    awaitPeerExit();
  }

  // Queues one message. Returns false (and closes) when the client stopped reading.
  bool send(const pb::DaemonMessage& message) {
    if (closed_) return false;
    std::string frame;
    if (!appendFrame(message, frame)) {
      TT_LOG(Error) << "cannot serialise a reply for session " << session.id;
      return false;
    }
    // A reply larger than the whole send queue may hold (a listing of very many regions) would
    // close the connection as if the client had stopped reading: it gets an error instead.
    if (frame.size() > server_.options_.maxSendQueueBytes) {
      TT_LOG(Warn) << "pid " << session.peer.pid << ": a " << frame.size() << "-byte reply exceeds max_send_queue_bytes ("
                   << server_.options_.maxSendQueueBytes << "): LIMIT_EXCEEDED sent instead";
      pb::DaemonMessage refusal;
      refusal.set_seq(message.seq());
      setError(refusal, pb::LIMIT_EXCEEDED,
               "the reply would be " + std::to_string(frame.size()) + " bytes, over the daemon's send limit (" +
                   std::to_string(server_.options_.maxSendQueueBytes) +
                   " bytes, service.max_send_queue_bytes): ask for fewer regions at a time");
      frame.clear();
      if (!appendFrame(refusal, frame)) return false;
    }
    queued_ += frame.size();
    if (queued_ > server_.options_.maxSendQueueBytes) {
      TT_LOG(Warn) << "pid " << session.peer.pid << " does not read its replies (" << queued_
                   << " bytes queued): disconnecting";
      close();
      return false;
    }
    queue_.push_back(std::move(frame));
    if (!writing_) write();
    return true;
  }

  // Sends what is queued, then closes (after FRAME_TOO_LARGE, refused connections).
  void closeAfterFlush() {
    closing_ = true;
    if (!writing_) close();
  }

  void close() {
    if (closed_) return;
    auto keep = shared_from_this();  // the cancelled work below may hold the last other reference
    closed_ = true;
    abandoned_->store(true);
    if (ticket_ != 0) {
      // Work still queued is dropped now: a peer that exits right after its request must not
      // leave it (and this connection) queued behind its uid's slow work.
      if (server_.workers_.cancel(session.peer.uid, ticket_)) busy_ = false;
      ticket_ = 0;
    }
    error_code ignored;
    socket_.shutdown(local::socket::shutdown_both, ignored);
    socket_.close(ignored);
    if (peerWatch_) {
      peerWatch_->cancel(ignored);
      (void)peerWatch_->release();  // peer_ owns the descriptor
    }
    stall_.cancel();
    server_.connectionClosed(session.id);
  }

 private:
  // Stalled: no Hello yet, or part of a frame buffered. The deadline runs from accept until Hello,
  // and after Hello from when part of a frame was first held, or from the last whole frame (a
  // client streaming marks often ends a read mid-frame); it is dropped when the connection no
  // longer is stalled.
  // Not while a request is out on the workers: nothing more is read until its answer is back.
  [[nodiscard]] bool stalled() const { return !busy_ && (!session.hello || decoder_.buffered() > 0); }
  void watchStall(bool progressed = false) {
    // Frames restart the deadline only after Hello: frames that never get to Hello (bad requests,
    // admin queries) do not keep a connection open past it.
    if (progressed && session.hello && stallArmed_) {
      stall_.cancel();
      stallArmed_ = false;
    }
    if (!stalled()) {
      if (stallArmed_) stall_.cancel();
      stallArmed_ = false;
      return;
    }
    if (stallArmed_) return;
    stallArmed_ = true;
    const uint64_t armed = ++stallArms_;  // a wait that had expired before a cancel still runs
    stall_.expires_after(server_.options_.stalledConnection);
    stall_.async_wait([self = shared_from_this(), armed](error_code ec) {
      if (ec == asio::error::operation_aborted || self->closed_ || !self->stallArmed_ || armed != self->stallArms_) return;
      self->stallArmed_ = false;
      if (!self->stalled()) return;
      TT_LOG(Info) << "pid " << self->session.peer.pid << ": connection (session " << self->session.id << ") "
                   << (self->session.hello ? "held part of a frame" : "did not say Hello") << " for "
                   << self->server_.options_.stalledConnection.count() << " ms: closed";
      self->close();
    });
  }

  void awaitPeerExit() {
    peerWatch_->async_wait(asio::posix::stream_descriptor::wait_read, [self = shared_from_this()](error_code ec) {
      if (ec == asio::error::operation_aborted || self->closed_) return;
      // Readable means exited; a wake-up the pidfd does not confirm waits again. (Seen on 6.18:
      // connections accepted together, some of whose peers had closed already, each had one
      // such wake-up for a live peer.)
      if (auto gone = sys::pidfdExited(self->peer_); gone.ok() && !*gone) {
        TT_LOG(Debug) << "session " << self->session.id << ": pidfd of pid " << self->session.peer.pid
                      << " woke without an exit (" << ec.message() << "): waiting again";
        self->awaitPeerExit();
        return;
      }
      TT_LOG(Info) << "pid " << self->session.peer.pid << " exited: its connection (session " << self->session.id
                   << ") is closed, whoever holds it now";
      self->close();
    });
  }

  void read() {
    socket_.async_read_some(asio::buffer(buffer_), [self = shared_from_this()](error_code ec, size_t n) {
      self->onRead(ec, n);
    });
  }

  void onRead(error_code ec, size_t n) {
    if (closed_) return;
    if (ec) {
      close();
      return;
    }
    decoder_.append(buffer_.data(), n);
    handleFrames(false);
  }

  // Handles the whole frames buffered, at most kFramesPerTurn in one turn of the loop: one 64 KiB
  // read can hold ~2000 small requests, and every other connection (and the loop's timers) would
  // wait while they were all served. Past that, the rest is posted behind whatever else is ready,
  // and the next read waits for it (the client's own backpressure).
  void handleFrames(bool progressed) {
    std::string_view frame;
    for (size_t handled = 0;; ++handled) {
      if (handled == kFramesPerTurn) {
        watchStall(progressed);  // frames were handled: a deadline armed for a held frame restarts
        asio::post(socket_.get_executor(), [self = shared_from_this()] {
          if (!self->closed_ && !self->closing_ && !self->busy_) self->handleFrames(false);
        });
        return;
      }
      const auto status = decoder_.next(server_.options_.maxFrameBytes, frame);
      if (status == FrameDecoder::Status::NeedMore) break;
      if (status == FrameDecoder::Status::TooLarge) {
        TT_LOG(Warn) << "pid " << session.peer.pid << " sent a " << decoder_.announcedLength()
                     << "-byte frame (limit " << server_.options_.maxFrameBytes << "): closing the connection";
        reply_.Clear();
        setError(reply_, pb::FRAME_TOO_LARGE,
                 "frame of " + std::to_string(decoder_.announcedLength()) + " bytes exceeds the limit of " +
                     std::to_string(server_.options_.maxFrameBytes));
        send(reply_);
        closeAfterFlush();
        return;
      }
      progressed = true;
      if (!request_.ParseFromArray(frame.data(), static_cast<int>(frame.size()))) {
        reply_.Clear();
        setError(reply_, pb::BAD_REQUEST, "frame does not parse as a ClientMessage");
        if (!send(reply_)) return;
        continue;
      }
      auto begun = server_.handler_.begin(session, request_, reply_);
      if (auto* off = std::get_if<OffLoop>(&begun)) {
        handOff(std::move(*off));
        return;
      }
      if (!replied(std::get<bool>(begun))) return;
    }
    watchStall(progressed);
    if (!closing_) read();
  }

  // After a request was handled: sends the reply if there is one. False when the connection is
  // done with (closed, or closing because its process no longer runs as its peer).
  bool replied(bool send) {
    if (send && !this->send(reply_)) return false;
    if (closed_) return false;
    if (session.revoked) {
      TT_LOG(Warn) << "session " << session.id << ": pid " << session.peer.pid << " no longer runs as uid "
                   << session.peer.uid << " gid " << session.peer.gid << ", which opened it: closing the connection";
      closeAfterFlush();
      server_.closeStaleConnections(session.peer.pid, session.id);
      return false;
    }
    return true;
  }

  // The request's work runs on the server's workers; its answer comes back to the loop, and the
  // frames read after it are handled then. (A request that waits on its own process holds up its
  // own connection only.)
  void handOff(OffLoop off) {
    busy_ = true;
    watchStall();
    auto shared = std::make_shared<OffLoop>(std::move(off));
    // Taken here: the worker touches nothing of the connection's but these.
    auto loop = socket_.get_executor();
    auto abandoned = abandoned_;
    ticket_ = server_.workers_.submit(session.peer.uid, [self = shared_from_this(), shared, loop, abandoned] {
      if (abandoned->load()) {  // closed after this was taken off the queue: nobody to answer
        asio::post(loop, [self] {});  // the connection goes on the loop, not here
        return;
      }
      bool threw = false;
      try {
        shared->work();
      } catch (const std::exception& e) {
        TT_LOG(Error) << "request work threw: " << e.what();
        threw = true;
      } catch (...) {
        TT_LOG(Error) << "request work threw";
        threw = true;
      }
      asio::post(loop, [self, shared, threw] { self->handedBack(*shared, threw); });
    });
    if (ticket_ == 0) close();  // the server is stopping
  }

  void handedBack(OffLoop& off, bool threw) {
    busy_ = false;
    ticket_ = 0;
    if (threw) {
      close();
      return;
    }
    if (closed_) {
      // Nobody to answer, but what the answer does besides still happens: an exec found drops
      // the old program's regions (the probe has forgotten its pinned address space already).
      if (!server_.stopped_) {
        pb::DaemonMessage discarded;
        (void)off.finish(session, discarded);
      }
      return;
    }
    if (!replied(off.finish(session, reply_))) return;
    if (closing_) return;
    handleFrames(true);
  }

  void write() {
    writing_ = true;
    asio::async_write(socket_, asio::buffer(queue_.front()), [self = shared_from_this()](error_code ec, size_t) {
      self->writing_ = false;
      if (self->closed_) return;
      if (ec) {
        self->close();
        return;
      }
      self->queued_ -= self->queue_.front().size();
      self->queue_.pop_front();
      if (!self->queue_.empty()) self->write();
      else if (self->closing_) self->close();
    });
  }

  Server& server_;
  local::socket socket_;
  sys::Pidfd peer_;
  std::unique_ptr<asio::posix::stream_descriptor> peerWatch_;
  asio::steady_timer stall_;
  bool stallArmed_ = false;
  uint64_t stallArms_ = 0;
  FrameDecoder decoder_;
  std::array<char, 65536> buffer_{};
  std::deque<std::string> queue_;
  size_t queued_ = 0;
  bool writing_ = false;
  bool busy_ = false;  // a request is out on the workers
  uint64_t ticket_ = 0;  // its ticket while it may still be queued
  // Set by close(); read by the worker that runs this connection's work.
  std::shared_ptr<std::atomic<bool>> abandoned_ = std::make_shared<std::atomic<bool>>(false);
  bool closing_ = false;
  bool closed_ = false;
  pb::ClientMessage request_;  // reused: no per-message allocation of the top-level objects
  pb::DaemonMessage reply_;
};

Server::Server(asio::io_context& io, registry::Registry& registry, ProtocolHandler& handler, ServerOptions options)
    : io_(io), registry_(registry), handler_(handler), options_(options), acceptor_(io), acceptRetry_(io), idSweep_(io),
      workers_(options.requestThreads, options.requestThreadsPerUid) {
  handler_.setProcessLifetime(this);
  handler_.setMbindResultSink(
      [this](const Session& s, uint64_t requestId, int errnoValue) { mbindResult(s, requestId, errnoValue); });
}

Server::~Server() { stop(); }

Result<void> Server::listen(const std::string& path) {
  if (auto dir = sys::ensureParentDirectory(path); !dir) return dir.error();
  if (auto stale = sys::removeStaleSocket(path); !stale) return stale.error();
  error_code ec;
  acceptor_.open(local(), ec);
  if (!ec) acceptor_.bind(local::endpoint(path), ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    error_code ignored;
    acceptor_.close(ignored);
    return systemError(ec.value(), "listen on " + path);
  }
  accept();
  sweepChangedIds();
  return {};
}

Result<void> Server::adopt(int listeningFd) {
  error_code ec;
  acceptor_.assign(local(), listeningFd, ec);
  if (ec) return systemError(ec.value(), "adopt activation socket fd " + std::to_string(listeningFd));
  accept();
  sweepChangedIds();
  return {};
}

void Server::stop() {
  if (stopped_) return;
  stopped_ = true;
  error_code ignored;
  acceptor_.close(ignored);
  acceptRetry_.cancel();
  idSweep_.cancel();
  auto connections = connections_;  // close() erases from the map
  for (auto& [id, c] : connections) c->close();
  workers_.stop();  // waits for requests that are running (their answers find the connections closed)
  for (auto& [id, pending] : pendingMbinds_) {
    pending.timer->cancel();
    if (pending.done) pending.done(ECANCELED);
  }
  pendingMbinds_.clear();
  for (auto& [pid, w] : watches_) (void)w.descriptor->release();
  watches_.clear();
}

void Server::accept() {
  acceptor_.async_accept([this](error_code ec, local::socket socket) {
    if (ec == asio::error::operation_aborted || stopped_) return;
    if (ec) {
      // EMFILE and friends: log, and accept again after a pause. At once would spin: the pending
      // connection keeps the socket readable and the accept failing.
      TT_LOG(Warn) << "accept: " << ec.message() << " (accepting again in " << kAcceptRetry.count() << " ms)";
      acceptRetry_.expires_after(kAcceptRetry);
      acceptRetry_.async_wait([this](error_code wait) {
        if (!wait && !stopped_) accept();
      });
      return;
    }
    Session session;
    session.id = handler_.nextSessionId();
    auto cred = sys::peerCredentials(socket.native_handle());
    if (!cred) {
      TT_LOG(Warn) << cred.error().message();
      accept();
      return;
    }
    session.peer = {cred->pid, cred->uid, cred->gid};
    auto pidfd = sys::peerPidfd(socket.native_handle(), cred->pid);
    if (!pidfd) {
      // ESRCH: it connected and exited before the accept; nobody is left to serve.
      TT_LOG(Debug) << "connection from pid " << cred->pid << " dropped: " << pidfd.error().message();
      accept();
      return;
    }
    auto connection = std::make_shared<Connection>(*this, std::move(socket), session);
    connection->watchPeer(std::move(*pidfd));
    connections_.emplace(session.id, connection);
    if (auto slot = registry_.openConnection(cred->uid); !slot) {
      pb::DaemonMessage refusal;
      setError(refusal, pb::LIMIT_EXCEEDED, slot.error().message());
      connection->send(refusal);
      connection->closeAfterFlush();
    } else {
      connection->counted = true;
      connection->start();
    }
    accept();
  });
}

void Server::connectionClosed(uint64_t id) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  auto connection = it->second;
  connections_.erase(it);
  if (connection->counted) registry_.closeConnection(connection->session.peer.uid);
  handler_.sessionClosed(connection->session);
  std::vector<uint64_t> failed;
  for (const auto& [requestId, pending] : pendingMbinds_)
    if (pending.connectionId == id) failed.push_back(requestId);
  for (uint64_t requestId : failed) finishMbind(requestId, ECONNRESET);
}

bool Server::exited(pid_t pid) {
  auto it = watches_.find(pid);
  if (it == watches_.end()) return false;
  auto gone = sys::pidfdExited(it->second.pidfd);
  return gone.ok() && *gone;
}

bool Server::watch(pid_t pid) {
  if (auto old = watches_.find(pid); old != watches_.end()) {
    (void)old->second.descriptor->release();
    watches_.erase(old);
  }
  auto pidfd = sys::openPidfd(pid);
  if (!pidfd) {
    TT_LOG(Warn) << pidfd.error().message();
    return false;
  }
  ProcessWatch w;
  w.descriptor = std::make_unique<asio::posix::stream_descriptor>(io_, pidfd->fd());
  w.pidfd = std::move(*pidfd);
  watches_.emplace(pid, std::move(w));
  awaitExit(pid);
  return true;
}

void Server::awaitExit(pid_t pid) {
  ProcessWatch& w = watches_.at(pid);
  const int fd = w.pidfd.fd();
  w.descriptor->async_wait(asio::posix::stream_descriptor::wait_read, [this, pid, fd](error_code ec) {
    if (ec == asio::error::operation_aborted) return;
    // The watch may have been replaced (pid reuse): act only if it is still this pidfd.
    auto it = watches_.find(pid);
    if (it == watches_.end() || it->second.pidfd.fd() != fd) return;
    // Only an exit the pidfd confirms drops the process (see Connection::awaitPeerExit).
    if (auto gone = sys::pidfdExited(it->second.pidfd); gone.ok() && !*gone) {
      TT_LOG(Debug) << "pidfd of pid " << pid << " woke without an exit (" << ec.message() << "): waiting again";
      awaitExit(pid);
      return;
    }
    processExited(pid);
  });
}

void Server::unwatch(pid_t pid) {
  if (auto it = watches_.find(pid); it != watches_.end()) {
    (void)it->second.descriptor->release();
    watches_.erase(it);
  }
}

void Server::sweepChangedIds() {
  idSweep_.expires_after(kIdSweep);
  idSweep_.async_wait([this](error_code ec) {
    if (ec || stopped_) return;
    for (pid_t pid : registry_.processesWithChangedIds()) {
      TT_LOG(Warn) << "pid " << pid << " runs with other ids than it registered under, or is no longer dumpable "
                   << "(a setuid, setgid or file-capability exec?): "
                   << "dropping its regions and the connections of the old ids";
      processExited(pid);
      closeStaleConnections(pid, 0);
    }
    // An exec: the regions, which describe the program before, go. The connections may stay if
    // the ids do, which is known only once the exec has committed them (it drops the old address
    // space first), so the pid is watched until then.
    for (pid_t pid : registry_.processesThatExeced()) {
      TT_LOG(Info) << "pid " << pid << " ran exec since its regions were registered: dropping them";
      processExited(pid);
      execed_[pid] = kExecWatchSweeps;
    }
    // Connections of the old ids of a process dropped since (an exec, or a refusal elsewhere) are
    // closed once its new ids show; watched while any connection of the pid is left, for at most
    // kExecWatchSweeps sweeps (a plain exec's connections stay, and are not checked for ever).
    for (auto it = execed_.begin(); it != execed_.end();) {
      closeStaleConnections(it->first, 0);
      const pid_t pid = it->first;
      const bool left = std::any_of(connections_.begin(), connections_.end(),
                                    [pid](const auto& c) { return c.second->session.peer.pid == pid; });
      it = left && --it->second > 0 ? std::next(it) : execed_.erase(it);
    }
    sweepChangedIds();
  });
}

void Server::closeStaleConnections(pid_t pid, uint64_t except) {
  std::vector<std::shared_ptr<Connection>> stale;
  for (auto& [id, c] : connections_)
    if (c->session.peer.pid == pid && id != except) {
      auto runs = registry_.checkRunsAs(c->session.peer);
      if (!runs && runs.error().code == EKEYREVOKED) stale.push_back(c);
    }
  for (auto& c : stale) c->close();
}

void Server::processExited(pid_t pid) {
  unwatch(pid);
  const size_t regions = registry_.removeProcess(pid);
  TT_LOG(Info) << "pid " << pid << " exited or changed ids: dropped its " << regions << " region(s)";
  // Connections it leaked to children no longer speak for a registered process, and are closed now
  // rather than when their own pidfd event comes: a request on one before that would attach it to
  // whatever process has the pid by then.
  std::vector<std::shared_ptr<Connection>> gone;
  for (auto& [id, c] : connections_) {
    if (c->session.peer.pid != pid) continue;
    c->session.attached = false;
    if (c->peerGone()) gone.push_back(c);
  }
  for (auto& c : gone) c->close();
  if (onExit_) onExit_(pid);
}

bool Server::acceptsMbind(pid_t pid) const {
  for (const auto& [id, c] : connections_)
    if (c->session.peer.pid == pid && c->session.hello && c->session.acceptsMbind) return true;
  return false;
}

void Server::requestMbind(const MbindCall& call, MbindDone done) {
  asio::post(io_, [this, call, done = std::move(done)]() mutable {
    if (stopped_) {
      done(ECANCELED);
      return;
    }
    // Only a connection that may still act on the process is told its region's address: one of
    // ids the process no longer runs with (a child holding it across a setid exec) is not.
    std::shared_ptr<Connection> target;
    for (const auto& [id, c] : connections_)
      if (c->session.peer.pid == call.pid && c->session.hello && c->session.acceptsMbind && !c->session.revoked &&
          registry_.checkRunsAs(c->session.peer).ok()) {
        target = c;
        break;
      }
    if (!target) {
      done(ENOTCONN);
      return;
    }
    const uint64_t requestId = nextMbindId_++;
    pb::DaemonMessage message;
    auto* m = message.mutable_mbind_request();
    m->set_request_id(requestId);
    m->set_region_id(call.regionId);
    m->set_address(call.address);
    m->set_length(call.length);
    m->set_node(call.node);
    PendingMbind pending;
    pending.connectionId = target->session.id;
    pending.done = std::move(done);
    pending.timer = std::make_unique<asio::steady_timer>(io_, options_.mbindTimeout);
    pending.timer->async_wait([this, requestId](error_code ec) {
      if (!ec) finishMbind(requestId, ETIMEDOUT);
    });
    pendingMbinds_.emplace(requestId, std::move(pending));
    if (!target->send(message)) finishMbind(requestId, ECONNRESET);
  });
}

void Server::mbindResult(const Session& session, uint64_t requestId, int errnoValue) {
  auto it = pendingMbinds_.find(requestId);
  // Only the connection the request went to may answer it.
  if (it == pendingMbinds_.end() || it->second.connectionId != session.id) {
    TT_LOG(Debug) << "session " << session.id << " answered unknown mbind request " << requestId;
    return;
  }
  finishMbind(requestId, errnoValue);
}

void Server::finishMbind(uint64_t requestId, int errnoValue) {
  auto it = pendingMbinds_.find(requestId);
  if (it == pendingMbinds_.end()) return;
  PendingMbind pending = std::move(it->second);
  pendingMbinds_.erase(it);
  pending.timer->cancel();
  if (pending.done) pending.done(errnoValue);
}

}  // namespace tt::ipc
