#include "fakes/client/FakeDaemon.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "tensortier/v1/protocol.pb.h"

namespace tt::fake {

namespace pb = tensortier::v1;

struct FakeDaemon::Connection {
  int fd = -1;
  uint64_t session = 0;  // 0 until Hello
  std::string inbuf;
};

namespace {

std::string frameOf(const std::string& payload) {
  std::string out(4, '\0');
  const auto n = static_cast<uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + payload;
}

// Blocking write of a whole frame on a non-blocking socket (tests: the peer always reads).
void writeFully(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      pollfd p{fd, POLLOUT, 0};
      if (poll(&p, 1, 5000) <= 0) return;
    } else {
      return;
    }
  }
}

constexpr uint64_t kPage = 4096;
uint64_t pageStart(uint64_t a) { return a & ~(kPage - 1); }
uint64_t pageEnd(uint64_t a) { return (a + kPage - 1) & ~(kPage - 1); }

std::string errorReply(uint64_t seq, pb::ErrorCode code, const std::string& message) {
  pb::DaemonMessage r;
  r.set_seq(seq);
  r.mutable_error()->set_code(code);
  r.mutable_error()->set_message(message);
  return r.SerializeAsString();
}

}  // namespace

FakeDaemon::FakeDaemon(std::string socketPath) : FakeDaemon(std::move(socketPath), Options{}) {}

FakeDaemon::FakeDaemon(std::string socketPath, Options options)
    : path_(std::move(socketPath)), options_(std::move(options)) {}

FakeDaemon::~FakeDaemon() { stop(); }

tt::Result<void> FakeDaemon::start() {
  if (running()) return tt::logicError("fake daemon already running on " + path_);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path_.size() >= sizeof addr.sun_path) return tt::logicError("socket path too long: " + path_);
  std::memcpy(addr.sun_path, path_.data(), path_.size());
  (void)unlink(path_.c_str());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return tt::errnoError("socket");
  if (bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 || listen(fd, 256) != 0) {
    auto e = tt::errnoError("bind/listen " + path_);
    close(fd);
    return e;
  }
  const int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    close(fd);
    return tt::errnoError("eventfd");
  }
  {
    std::lock_guard lock(mu_);
    listenFd_ = fd;
    wakeFd_ = wake;
    stopping_ = false;
    nextRegionId_ = 1;  // a restarted daemon hands out ids from the start again
  }
  thread_ = std::thread([this] { serve(); });
  return {};
}

bool FakeDaemon::running() const {
  std::lock_guard lock(mu_);
  return listenFd_ >= 0;
}

void FakeDaemon::stop() {
  {
    std::lock_guard lock(mu_);
    if (listenFd_ < 0) return;
    stopping_ = true;
  }
  const uint64_t one = 1;
  (void)!write(wakeFd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  std::lock_guard lock(mu_);
  closeAll();
  close(listenFd_);
  close(wakeFd_);
  listenFd_ = wakeFd_ = -1;
  (void)unlink(path_.c_str());
  regions_.clear();
  byStart_.clear();
  cv_.notify_all();
}

void FakeDaemon::closeAll() {
  for (auto& [fd, c] : connections_) close(fd);
  connections_.clear();
}

void FakeDaemon::serve() {
  std::vector<pollfd> fds;
  for (;;) {
    fds.clear();
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      fds.push_back({wakeFd_, POLLIN, 0});
      fds.push_back({listenFd_, POLLIN, 0});
      for (auto& [fd, c] : connections_) fds.push_back({fd, POLLIN, 0});
    }
    if (poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return;
    std::lock_guard lock(mu_);
    if (stopping_) return;
    if (fds[1].revents & POLLIN) {
      for (int c; (c = accept4(listenFd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0;) {
        auto conn = std::make_unique<Connection>();
        conn->fd = c;
        connections_[c] = std::move(conn);
      }
    }
    for (size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      auto it = connections_.find(fds[i].fd);
      if (it == connections_.end()) continue;
      Connection& c = *it->second;
      char buf[65536];
      bool closed = false;
      for (;;) {
        const ssize_t n = read(c.fd, buf, sizeof buf);
        if (n > 0) {
          c.inbuf.append(buf, static_cast<size_t>(n));
          continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
        closed = true;
        break;
      }
      size_t off = 0;
      while (c.inbuf.size() - off >= 4) {
        uint32_t len = 0;
        for (int b = 0; b < 4; ++b) len |= uint32_t{static_cast<uint8_t>(c.inbuf[off + static_cast<size_t>(b)])} << (8 * b);
        if (c.inbuf.size() - off < 4 + len) break;
        handleFrame(c, c.inbuf.substr(off + 4, len));
        off += 4 + len;
      }
      c.inbuf.erase(0, off);
      if (closed) {
        const uint64_t session = c.session;
        close(c.fd);
        connections_.erase(it);
        for (auto r = regions_.begin(); r != regions_.end();) {
          if (r->second.session != session) {
            ++r;
            continue;
          }
          byStart_.erase({session, pageStart(r->second.address)});
          r = regions_.erase(r);
        }
      }
    }
    cv_.notify_all();
  }
}

void FakeDaemon::sendTo(Connection& c, const std::string& serialized) { writeFully(c.fd, frameOf(serialized)); }

void FakeDaemon::handleFrame(Connection& c, const std::string& payload) {
  ++frames_;
  pb::ClientMessage m;
  if (!m.ParseFromString(payload)) return sendTo(c, errorReply(0, pb::BAD_REQUEST, "unparsable ClientMessage"));
  pb::DaemonMessage r;
  r.set_seq(m.seq());
  if (c.session == 0 && !m.has_hello()) return sendTo(c, errorReply(m.seq(), pb::NOT_REGISTERED, "Hello first"));
  switch (m.body_case()) {
    case pb::ClientMessage::kHello: {
      uint32_t best = 0;
      for (uint32_t v : m.hello().versions())
        if (std::find(options_.versions.begin(), options_.versions.end(), v) != options_.versions.end())
          best = std::max(best, v);
      if (best == 0) return sendTo(c, errorReply(m.seq(), pb::UNSUPPORTED_VERSION, "no common protocol version"));
      c.session = nextSession_++;
      Hello h;
      h.session = c.session;
      h.versions.assign(m.hello().versions().begin(), m.hello().versions().end());
      h.clientName = m.hello().client_name();
      h.acceptsMbind = m.hello().accepts_mbind();
      hellos_.push_back(h);
      r.mutable_hello_reply()->set_version(best);
      r.mutable_hello_reply()->set_daemon_version(options_.daemonVersion);
      r.mutable_hello_reply()->set_session_id(c.session);
      return sendTo(c, r.SerializeAsString());
    }
    case pb::ClientMessage::kRegisterRegion: {
      const auto& q = m.register_region();
      if (silent_) return;
      if (q.length() == 0) return sendTo(c, errorReply(m.seq(), pb::BAD_REQUEST, "length must be > 0"));
      // Like tensortierd: a region covers whole pages, and regions of a process may not share a
      // page. Regions do not overlap each other, so only the neighbours by start matter.
      const uint64_t first = pageStart(q.address()), end = pageEnd(q.address() + q.length());
      auto next = byStart_.lower_bound({c.session, first});
      std::vector<uint64_t> near;
      if (next != byStart_.end() && next->first.first == c.session) near.push_back(next->second);
      if (next != byStart_.begin() && std::prev(next)->first.first == c.session) near.push_back(std::prev(next)->second);
      for (uint64_t id : near) {
        const Region& x = regions_.at(id);
        if (first < pageEnd(x.address + x.length) && pageStart(x.address) < end)
          return sendTo(c, errorReply(m.seq(), pb::REGION_OVERLAPS, "overlaps region " + std::to_string(id)));
      }
      Region reg;
      reg.id = nextRegionId_++;
      reg.session = c.session;
      reg.address = q.address();
      reg.length = q.length();
      reg.name = q.name();
      reg.kind = q.kind();
      reg.expectedLifetimeSteps = q.hints().expected_lifetime_steps();
      reg.clientTag = q.client_tag();
      regions_[reg.id] = reg;
      byStart_[{reg.session, pageStart(reg.address)}] = reg.id;
      r.mutable_register_region_reply()->set_region_id(reg.id);
      r.mutable_register_region_reply()->set_client_tag(q.client_tag());
      return sendTo(c, r.SerializeAsString());
    }
    case pb::ClientMessage::kUnregisterRegion: {
      if (silent_) return;
      auto it = regions_.find(m.unregister_region().region_id());
      if (it == regions_.end() || it->second.session != c.session)
        return sendTo(c, errorReply(m.seq(), pb::NO_SUCH_REGION, "no such region"));
      byStart_.erase({it->second.session, pageStart(it->second.address)});
      regions_.erase(it);
      ++unregisters_;
      r.mutable_ack();
      return sendTo(c, r.SerializeAsString());
    }
    case pb::ClientMessage::kIterationMark: {
      Mark mk;
      mk.session = c.session;
      mk.type = m.iteration_mark().type();
      mk.step = m.iteration_mark().step();
      mk.phase = m.iteration_mark().phase();
      marks_.push_back(mk);
      return;
    }
    case pb::ClientMessage::kQueryPlacement: {
      if (silent_) return;
      const auto& ids = m.query_placement().region_ids();
      auto* out = r.mutable_placement();
      for (const auto& [id, x] : regions_) {
        if (x.session != c.session) continue;
        if (!ids.empty() && std::find(ids.begin(), ids.end(), id) == ids.end()) continue;
        auto* p = out->add_regions();
        p->set_region_id(id);
        p->set_name(x.name);
        p->set_kind(static_cast<pb::RegionKind>(x.kind));
        p->set_address(x.address);
        p->set_length(x.length);
        // Synthetic placement: the fake does not look at pages; it says "all on node 0".
        auto* nb = p->add_bytes_per_node();
        nb->set_node(0);
        nb->set_bytes(x.length);
        p->set_heat(0.5 * static_cast<double>(id));
      }
      return sendTo(c, r.SerializeAsString());
    }
    case pb::ClientMessage::kMbindResult:
      mbindResults_[m.mbind_result().request_id()] = m.mbind_result().errno_value();
      return;
    default: return sendTo(c, errorReply(m.seq(), pb::BAD_REQUEST, "unknown request"));
  }
}

std::vector<FakeDaemon::Hello> FakeDaemon::hellos() const {
  std::lock_guard lock(mu_);
  return hellos_;
}

std::vector<FakeDaemon::Region> FakeDaemon::regions() const {
  std::lock_guard lock(mu_);
  std::vector<Region> out;
  for (const auto& [id, r] : regions_) out.push_back(r);
  return out;
}

std::vector<FakeDaemon::Mark> FakeDaemon::marks() const {
  std::lock_guard lock(mu_);
  return marks_;
}

size_t FakeDaemon::liveSessions() const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (const auto& [fd, c] : connections_) n += c->session != 0 ? 1 : 0;
  return n;
}

uint64_t FakeDaemon::unregisterCount() const {
  std::lock_guard lock(mu_);
  return unregisters_;
}

uint64_t FakeDaemon::framesReceived() const {
  std::lock_guard lock(mu_);
  return frames_;
}

void FakeDaemon::setSilent(bool silent) {
  std::lock_guard lock(mu_);
  silent_ = silent;
}

bool FakeDaemon::waitFor(const std::function<bool(const FakeDaemon&)>& done, std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (done(*this)) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(5));
  }
}

std::optional<int32_t> FakeDaemon::mbind(uint64_t regionId, uint64_t address, uint64_t length, int32_t node,
                                         std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  auto reg = regions_.find(regionId);
  const uint64_t session = reg == regions_.end() ? (connections_.empty() ? 0 : connections_.begin()->second->session)
                                                 : reg->second.session;
  Connection* target = nullptr;
  for (auto& [fd, c] : connections_)
    if (c->session == session && session != 0) target = c.get();
  if (target == nullptr) return std::nullopt;
  const uint64_t requestId = nextRequestId_++;
  pb::DaemonMessage r;
  r.set_seq(0);
  auto* q = r.mutable_mbind_request();
  q->set_request_id(requestId);
  q->set_region_id(regionId);
  q->set_address(address);
  q->set_length(length);
  q->set_node(node);
  sendTo(*target, r.SerializeAsString());
  if (!cv_.wait_for(lock, timeout, [&] { return mbindResults_.contains(requestId); })) return std::nullopt;
  return mbindResults_[requestId];
}

}  // namespace tt::fake
