// tensortier::Client: one Unix-socket session with tensortierd, kept alive across daemon restarts.
//
// Threads (each client owns two):
//  - io thread: owns the socket's incoming side. Connects (with backoff) and says Hello, reads
//    every frame, hands replies to the waiting caller (by seq), binds registration replies to
//    handles, validates MbindRequests and queues them for the worker, and on EOF/error drops the
//    session: every live region goes back to "unbound", waiting calls fail fast, and it reconnects.
//    Only this thread closes the socket (under writeMu, so a writer never sees a reused fd).
//  - worker thread: carries out MbindRequests (mbind can copy gigabytes; the io thread must keep
//    reading meanwhile), sends MbindResults and the re-registration of all unbound regions after
//    a (re)connect, in chunks, so that the io thread keeps draining the daemon's replies.
// Caller threads send their own requests under writeMu and wait on a condition variable with a
// deadline. Iteration marks never wait: if the socket is busy the mark is queued for whoever
// holds writeMu (flushed after unlock); if the socket is full it is dropped and counted.
//
// Lock order: writeMu before mu. mu guards regions, waiters and sequence numbers.
#include <fcntl.h>
#include <linux/mempolicy.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>

#include "Wire.h"
#include "core/Log.h"
#include "tensortier/client.hpp"

namespace tensortier {
namespace {

namespace wire = tt::client::wire;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr std::array<uint32_t, 1> kProtocolVersions = {1};
constexpr const char* kDefaultSocket = "/run/tensortier/tensortier.sock";
constexpr int kMaxMbindNodes = 1024;
// Marks queued while another thread holds the socket; beyond this they are dropped.
constexpr size_t kMaxPendingMarks = 4096;
// Re-registration is sent in chunks of whole frames of about this size.
constexpr size_t kReregisterChunkBytes = 64 * 1024;

int pollTimeoutMs(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
}

std::string errnoText(int e) { return std::strerror(e); }

const char* daemonErrorName(int32_t code) {
  static const char* const names[] = {"ERROR_CODE_UNSPECIFIED", "BAD_REQUEST",     "UNSUPPORTED_VERSION",
                                      "NOT_REGISTERED",         "NO_SUCH_REGION",  "REGION_NOT_MAPPED",
                                      "REGION_OVERLAPS",        "LIMIT_EXCEEDED",  "PERMISSION_DENIED",
                                      "FRAME_TOO_LARGE",        "INTERNAL",        "STARTING"};
  return code >= 0 && code <= 11 ? names[code] : "UNKNOWN_ERROR_CODE";
}

Status daemonStatus(const wire::DaemonMessage& m, const std::string& what) {
  return Status(TENSORTIER_ERR_DAEMON_BASE + std::clamp(m.errorCode, 0, 99),
                what + ": tensortierd: " + daemonErrorName(m.errorCode) +
                    (m.errorMessage.empty() ? "" : ": " + m.errorMessage));
}

uintptr_t pageSize() {
  static const auto size = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  return size;
}

// mbind(2) the pages covering [start, end) to `node`, moving the pages already there.
int bindToNode(uintptr_t start, uintptr_t end, int32_t node) {
  if (node < 0 || node >= kMaxMbindNodes) return EINVAL;
  constexpr size_t kBits = 8 * sizeof(unsigned long);
  std::array<unsigned long, kMaxMbindNodes / kBits> mask{};
  mask[static_cast<size_t>(node) / kBits] |= 1UL << (static_cast<size_t>(node) % kBits);
  // maxnode counts one more than the bits the kernel reads (it decrements it first).
  const long rc = syscall(SYS_mbind, start, end - start, MPOL_BIND, mask.data(),
                          static_cast<unsigned long>(kMaxMbindNodes + 1), static_cast<unsigned>(MPOL_MF_MOVE));
  return rc == 0 ? 0 : errno;
}

// A mutex whose acquisition can be bounded by a deadline (Lockable and TimedLockable). Not
// std::timed_mutex: its try_lock_until goes through pthread_mutex_clocklock, which ThreadSanitizer
// (GCC 12) does not intercept, so every access the socket lock protects would be reported as a
// race. Built from a mutex and a condition variable, the locking stays checkable.
class DeadlineMutex {
 public:
  void lock() {
    std::unique_lock g(m_);
    cv_.wait(g, [&] { return !held_; });
    held_ = true;
  }
  bool try_lock() {
    std::lock_guard g(m_);
    if (held_) return false;
    held_ = true;
    return true;
  }
  template <class C, class D>
  bool try_lock_until(const std::chrono::time_point<C, D>& deadline) {
    std::unique_lock g(m_);
    if (!cv_.wait_until(g, deadline, [&] { return !held_; })) return false;
    held_ = true;
    return true;
  }
  void unlock() {
    {
      std::lock_guard g(m_);
      held_ = false;
    }
    cv_.notify_one();
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool held_ = false;
};

// --- logging: the library's (hidden) copy of tt::log forwards to the user's handler.
std::mutex g_logMutex;
std::function<void(LogLevel, std::string_view)> g_logHandler;

void forwardingSink(tt::log::Level level, std::string_view line) {
  std::function<void(LogLevel, std::string_view)> handler;
  {
    std::lock_guard lock(g_logMutex);
    handler = g_logHandler;
  }
  if (handler) handler(static_cast<LogLevel>(static_cast<int>(level)), line);
}

void applyLogLevelFromEnvironment() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (const char* env = std::getenv("TENSORTIER_LOG_LEVEL"); env != nullptr)
      if (auto level = tt::log::parseLevel(env)) tt::log::setLevel(*level);
  });
}

}  // namespace

std::string defaultSocketPath() {
  const char* env = std::getenv("TENSORTIER_SOCKET");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(kDefaultSocket);
}

void setLogHandler(std::function<void(LogLevel, std::string_view)> handler) {
  const bool set = static_cast<bool>(handler);
  {
    std::lock_guard lock(g_logMutex);
    g_logHandler = std::move(handler);
  }
  tt::log::setSink(set ? forwardingSink : nullptr);
}

void setLogLevel(LogLevel level) { tt::log::setLevel(static_cast<tt::log::Level>(static_cast<int>(level))); }

struct Client::Impl {
  struct Region {
    uintptr_t address = 0;
    uint64_t length = 0;
    std::string name;
    int32_t kind = 0;
    uint64_t expectedLifetimeSteps = 0;
    uint64_t daemonId = 0;    // 0: the current session does not know the region (yet)
    uint64_t pendingSeq = 0;  // seq of the RegisterRegion in flight, 0 if none
    bool unregisterWhenBound = false;
  };
  struct Waiter {
    bool done = false;
    bool lost = false;  // the session ended before the reply
    wire::DaemonMessage reply;
  };
  struct Session {
    int fd = -1;
    uint32_t version = 0;
    std::string daemonVersion;
    uint64_t sessionId = 0;
    std::string leftover;  // bytes read past the HelloReply
  };
  struct Task {
    enum class Kind { Mbind, Reregister, Send } kind = Kind::Send;
    uint64_t requestId = 0, generation = 0;  // generation: the session the task belongs to
    uintptr_t start = 0, end = 0;
    int32_t node = 0;
    int refusal = 0;  // non-zero: answer this errno without binding
    std::string frame;
  };
  enum class SendOutcome { Sent, NotConnected, Timeout, Broken };

  ClientOptions opts;
  std::string socketPath;
  std::string clientName;
  pid_t owner = getpid();

  DeadlineMutex writeMu;
  std::atomic<int> fd{-1};
  std::atomic<bool> ready{false};
  std::atomic<uint32_t> version{0};
  // The session a frame belongs to: region ids and request ids are per session, so a request
  // built for one session must never go out on the next (a restarted daemon reuses ids).
  std::atomic<uint64_t> sessionGen{0};

  std::mutex mu;
  std::condition_variable cv;
  uint64_t generation = 0;
  uint64_t nextSeq = 1;
  RegionHandle nextHandle = 1;
  std::map<RegionHandle, Region> regions;
  std::unordered_map<uint64_t, RegionHandle> byDaemonId;
  std::unordered_map<uint64_t, RegionHandle> registerSeqs;
  std::unordered_map<uint64_t, Waiter*> waiters;
  bool warnedUnavailable = false;
  std::string abandonReason;  // why this side ended the session, if it did

  std::mutex marksMu;
  std::vector<std::string> pendingMarks;

  std::mutex workMu;
  std::condition_variable workCv;
  std::deque<Task> work;
  bool workStop = false;

  int wakeFd = -1;
  std::atomic<bool> stopping{false};
  bool initialConnectFailed = false;
  std::string inbuf;  // io thread only
  std::thread io, worker;

  std::atomic<uint64_t> connects{0}, disconnects{0}, registrationsSent{0}, marksSent{0}, marksDropped{0},
      mbindDone{0}, mbindFailed{0};

  [[nodiscard]] bool forked() const { return getpid() != owner; }

  // ---------------------------------------------------------------- connection
  [[nodiscard]] tt::Result<Session> connectOnce() {
    const auto deadline = Clock::now() + opts.connectTimeout;
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (socketPath.empty() || socketPath.size() >= sizeof addr.sun_path)
      return tt::logicError("socket path '" + socketPath + "' is empty or too long for a Unix socket");
    std::memcpy(addr.sun_path, socketPath.data(), socketPath.size());
    const int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return tt::errnoError("socket(AF_UNIX)");
    Session session;
    session.fd = s;
    auto fail = [&](tt::Error e) {
      close(s);
      return tt::Result<Session>(std::move(e));
    };
    // connect() on a Unix socket blocks only when the listen backlog is full; bound it.
    const auto ms = opts.connectTimeout.count();
    timeval tv{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>((ms % 1000) * 1000)};
    (void)setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(s, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0)
      return fail(tt::errnoError("connect " + socketPath));
    if (fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK) != 0) return fail(tt::errnoError("fcntl O_NONBLOCK"));

    uint64_t seq = 0;
    {
      std::lock_guard lock(mu);
      seq = nextSeq++;
    }
    const std::string hello = wire::encodeHello(seq, kProtocolVersions, clientName, opts.acceptsMbind);
    if (auto sent = writeAll(s, hello, deadline); sent != SendOutcome::Sent)
      return fail(tt::logicError("sending Hello to " + socketPath + " failed or timed out"));
    std::string buf;
    for (;;) {
      pollfd p{s, POLLIN, 0};
      const int rc = poll(&p, 1, pollTimeoutMs(deadline));
      if (rc == 0) return fail(tt::logicError("no HelloReply from " + socketPath + " within the connect timeout"));
      if (rc < 0 && errno != EINTR) return fail(tt::errnoError("poll"));
      char tmp[4096];
      const ssize_t n = read(s, tmp, sizeof tmp);
      if (n == 0) return fail(tt::logicError("tensortierd closed the connection during Hello"));
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) continue;
        return fail(tt::errnoError("read from " + socketPath));
      }
      buf.append(tmp, static_cast<size_t>(n));
      while (buf.size() >= wire::kHeaderBytes) {
        const uint32_t len = wire::frameLength(buf.data());
        if (len > wire::kMaxDaemonFrame) return fail(tt::logicError("oversized frame during Hello"));
        if (buf.size() < wire::kHeaderBytes + len) break;
        auto msg = wire::decodeDaemonMessage(std::string_view(buf).substr(wire::kHeaderBytes, len));
        buf.erase(0, wire::kHeaderBytes + len);
        if (!msg) return fail(tt::withContext(msg.error(), "reading HelloReply"));
        if (msg->seq != seq) continue;  // nothing else is expected before the reply
        if (msg->body == wire::DaemonMessage::Body::Error)
          return fail(tt::logicError(std::string("tensortierd refused Hello: ") + daemonErrorName(msg->errorCode) +
                                     ": " + msg->errorMessage));
        if (msg->body != wire::DaemonMessage::Body::HelloReply)
          return fail(tt::logicError("tensortierd answered Hello with an unexpected message"));
        if (std::find(kProtocolVersions.begin(), kProtocolVersions.end(), msg->version) == kProtocolVersions.end())
          return fail(tt::logicError("tensortierd chose protocol version " + std::to_string(msg->version) +
                                     ", which this library does not speak"));
        session.version = msg->version;
        session.daemonVersion = msg->daemonVersion;
        session.sessionId = msg->sessionId;
        session.leftover = std::move(buf);
        return session;
      }
    }
  }

  void publish(Session session) {
    uint64_t gen = 0;
    {
      std::lock_guard wl(writeMu);
      std::lock_guard lock(mu);
      fd.store(session.fd);
      version.store(session.version);
      ready.store(true);
      gen = ++generation;
      sessionGen.store(gen);
      warnedUnavailable = false;
    }
    inbuf = std::move(session.leftover);
    connects.fetch_add(1);
    TT_LOG(Info) << "connected to tensortierd " << session.daemonVersion << " at " << socketPath << " (protocol "
                 << session.version << ", session " << session.sessionId << ")";
    Task t;
    t.kind = Task::Kind::Reregister;
    t.generation = gen;
    enqueue(std::move(t));
  }

  void noteUnavailable(const std::string& why) {
    bool warn = false;
    {
      std::lock_guard lock(mu);
      warn = !warnedUnavailable;
      warnedUnavailable = true;
    }
    if (warn) {
      TT_LOG(Warn) << "tensortierd is not reachable (" << why
                   << "); retrying in the background: regions registered meanwhile are sent once it answers, "
                      "iteration marks are dropped and placement queries fail until then";
    } else {
      TT_LOG(Debug) << "reconnect to tensortierd failed: " << why;
    }
  }

  // A daemon that does not answer within the call timeout is treated as gone: later calls must not
  // each wait the timeout again. The session is ended; the io thread reconnects and registers
  // everything again, and calls meanwhile are queued or dropped at no cost.
  void abandonSession(uint64_t gen, const std::string& why) {
    {
      std::lock_guard lock(mu);
      if (gen != generation || !ready.load()) return;
      abandonReason = why;
    }
    if (const int f = fd.load(); f >= 0) (void)shutdown(f, SHUT_RDWR);
  }

  void dropConnection(std::string reason) {
    const int f = fd.load();
    if (f < 0) return;
    (void)shutdown(f, SHUT_RDWR);  // fails any writer blocked on it right away
    size_t live = 0;
    {
      std::lock_guard wl(writeMu);
      std::lock_guard lock(mu);
      if (!abandonReason.empty()) reason = std::exchange(abandonReason, {});
      close(f);
      fd.store(-1);
      ready.store(false);
      version.store(0);
      for (auto it = regions.begin(); it != regions.end();) {
        if (it->second.unregisterWhenBound) {
          it = regions.erase(it);
          continue;
        }
        it->second.daemonId = 0;
        it->second.pendingSeq = 0;
        ++it;
      }
      live = regions.size();
      byDaemonId.clear();
      registerSeqs.clear();
      for (auto& [seq, w] : waiters) w->lost = w->done = true;
      waiters.clear();
      warnedUnavailable = true;  // this warning below covers the retries that follow
    }
    cv.notify_all();
    {
      // Marks queued for the old session would reach the next one out of place.
      std::lock_guard lock(marksMu);
      marksDropped.fetch_add(pendingMarks.size());
      pendingMarks.clear();
    }
    inbuf.clear();
    if (!stopping.load()) {
      TT_LOG(Warn) << "lost the connection to tensortierd at " << socketPath << " (" << reason << "); " << live
                   << " region(s) will be registered again when it is back";
    }
    disconnects.fetch_add(1);  // after the warning: observers that see the count see the warning
  }

  // Waits for the wake eventfd up to `d`; false when the client is closing.
  bool sleepFor(milliseconds d) {
    pollfd p{wakeFd, POLLIN, 0};
    (void)poll(&p, 1, static_cast<int>(d.count()));
    return !stopping.load();
  }

  void ioLoop() {
    auto backoff = opts.reconnectInitial;
    bool retryNow = !initialConnectFailed;
    while (!stopping.load()) {
      if (fd.load() < 0) {
        if (!retryNow && !sleepFor(backoff)) break;
        retryNow = false;
        auto session = connectOnce();
        if (!session) {
          noteUnavailable(session.error().message());
          backoff = std::min(backoff * 2, opts.reconnectMax);
          continue;
        }
        backoff = opts.reconnectInitial;
        publish(std::move(*session));
      }
      const std::string reason = readUntilClosed();
      dropConnection(reason);
      retryNow = false;  // the first attempt after a lost session also waits the backoff
    }
  }

  // Reads and dispatches frames until the session ends; returns why it ended.
  std::string readUntilClosed() {
    const int f = fd.load();
    std::array<pollfd, 2> p{pollfd{f, POLLIN, 0}, pollfd{wakeFd, POLLIN, 0}};
    std::string why;
    for (;;) {
      if (!drainFrames(why)) return why;
      const int rc = poll(p.data(), p.size(), -1);
      if (stopping.load()) return "client closing";
      if (rc < 0) {
        if (errno == EINTR) continue;
        return "poll: " + errnoText(errno);
      }
      if (p[0].revents == 0) continue;
      char tmp[65536];
      const ssize_t n = read(f, tmp, sizeof tmp);
      if (n == 0) return "tensortierd closed the connection";
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) continue;
        return "read: " + errnoText(errno);
      }
      inbuf.append(tmp, static_cast<size_t>(n));
    }
  }

  bool drainFrames(std::string& why) {
    size_t off = 0;
    while (inbuf.size() - off >= wire::kHeaderBytes) {
      const uint32_t len = wire::frameLength(inbuf.data() + off);
      if (len > wire::kMaxDaemonFrame) {
        why = "tensortierd sent a frame of " + std::to_string(len) + " bytes, over the limit";
        return false;
      }
      if (inbuf.size() - off < wire::kHeaderBytes + len) break;
      auto msg = wire::decodeDaemonMessage(std::string_view(inbuf).substr(off + wire::kHeaderBytes, len));
      off += wire::kHeaderBytes + len;
      if (!msg) {
        why = msg.error().message();
        return false;
      }
      dispatch(std::move(*msg));
    }
    inbuf.erase(0, off);
    return true;
  }

  void dispatch(wire::DaemonMessage msg) {
    using Body = wire::DaemonMessage::Body;
    if (msg.body == Body::MbindRequest) return acceptMbind(msg);
    std::unique_lock lock(mu);
    if (auto it = registerSeqs.find(msg.seq); it != registerSeqs.end()) {
      const RegionHandle h = it->second;
      registerSeqs.erase(it);
      auto rit = regions.find(h);
      if (rit != regions.end() && rit->second.pendingSeq == msg.seq) {
        Region& r = rit->second;
        r.pendingSeq = 0;
        if (msg.body == Body::RegisterRegionReply) {
          if (r.unregisterWhenBound) {
            Task t;
            t.generation = generation;
            t.frame = wire::encodeUnregisterRegion(nextSeq++, msg.regionId);
            regions.erase(rit);
            enqueue(std::move(t));
          } else {
            r.daemonId = msg.regionId;
            byDaemonId[msg.regionId] = h;
          }
        } else {
          if (!waiters.contains(msg.seq)) {
            TT_LOG(Warn) << "tensortierd rejected region '" << r.name << "' (" << r.length
                         << " bytes): " << daemonErrorName(msg.errorCode) << ": " << msg.errorMessage;
          }
          regions.erase(rit);
        }
      }
    }
    if (auto wit = waiters.find(msg.seq); wit != waiters.end()) {
      wit->second->reply = std::move(msg);
      wit->second->done = true;
      waiters.erase(wit);
      lock.unlock();
      cv.notify_all();
      return;
    }
    if (msg.body == Body::Error && msg.seq == 0) {
      TT_LOG(Warn) << "tensortierd: " << daemonErrorName(msg.errorCode) << ": " << msg.errorMessage;
    }
  }

  // An MbindRequest is carried out only on a range inside a region this client registered in this
  // session: the daemon never gets to move arbitrary memory of the process.
  void acceptMbind(const wire::DaemonMessage& msg) {
    Task t;
    t.kind = Task::Kind::Mbind;
    t.generation = sessionGen.load();
    t.requestId = msg.requestId;
    t.node = msg.node;
    const uintptr_t page = pageSize();
    t.start = static_cast<uintptr_t>(msg.address) & ~(page - 1);
    t.end = (static_cast<uintptr_t>(msg.address + msg.length) + page - 1) & ~(page - 1);
    if (!opts.acceptsMbind) {
      t.refusal = EPERM;
    } else if (msg.length == 0) {
      t.refusal = EINVAL;
    } else {
      std::lock_guard lock(mu);
      auto it = byDaemonId.find(msg.regionId);
      if (it == byDaemonId.end()) {
        t.refusal = ENOENT;
      } else {
        const Region& r = regions.at(it->second);
        const uintptr_t rs = r.address & ~(page - 1);
        const uintptr_t re = (r.address + r.length + page - 1) & ~(page - 1);
        if (t.start < rs || t.end > re || t.end <= t.start) t.refusal = EFAULT;
      }
    }
    enqueue(std::move(t));
  }

  // ---------------------------------------------------------------- worker
  void enqueue(Task t) {
    {
      std::lock_guard lock(workMu);
      work.push_back(std::move(t));
    }
    workCv.notify_one();
  }

  void workerLoop() {
    for (;;) {
      Task t;
      {
        std::unique_lock lock(workMu);
        workCv.wait(lock, [&] { return workStop || !work.empty(); });
        if (workStop) return;
        t = std::move(work.front());
        work.pop_front();
      }
      switch (t.kind) {
        case Task::Kind::Mbind: {
          const int err = t.refusal != 0 ? t.refusal : bindToNode(t.start, t.end, t.node);
          (err == 0 ? mbindDone : mbindFailed).fetch_add(1);
          if (err != 0) {
            TT_LOG(Warn) << "MbindRequest " << t.requestId << " (" << (t.end - t.start) << " bytes to node "
                         << t.node << ") " << (t.refusal != 0 ? "refused" : "failed") << ": " << errnoText(err);
          }
          (void)sendFrame(wire::encodeMbindResult(t.requestId, err), Clock::now() + opts.callTimeout, t.generation);
          break;
        }
        case Task::Kind::Send: (void)sendFrame(t.frame, Clock::now() + opts.callTimeout, t.generation); break;
        case Task::Kind::Reregister: reregister(t.generation); break;
      }
    }
  }

  // Registers every region the current session does not know: the ones queued while disconnected
  // and, after a daemon restart, all live ones.
  void reregister(uint64_t gen) {
    std::vector<std::string> chunks;
    size_t count = 0;
    {
      std::lock_guard lock(mu);
      if (gen != generation || !ready.load()) return;
      std::string chunk;
      for (auto& [h, r] : regions) {
        if (r.daemonId != 0 || r.pendingSeq != 0 || r.unregisterWhenBound) continue;
        r.pendingSeq = nextSeq++;
        registerSeqs[r.pendingSeq] = h;
        chunk += wire::encodeRegisterRegion(r.pendingSeq, r.address, r.length, r.name, r.kind,
                                            r.expectedLifetimeSteps, h);
        ++count;
        if (chunk.size() >= kReregisterChunkBytes) chunks.push_back(std::move(chunk)), chunk.clear();
      }
      if (!chunk.empty()) chunks.push_back(std::move(chunk));
    }
    for (const auto& chunk : chunks) {
      if (sendFrame(chunk, Clock::now() + opts.callTimeout, gen) != SendOutcome::Sent) {
        // Some registrations may be half-sent: start the session over; the next one retries all.
        if (const int f = fd.load(); f >= 0) (void)shutdown(f, SHUT_RDWR);
        return;
      }
    }
    registrationsSent.fetch_add(count);
    if (count > 0) {
      TT_LOG(Info) << "registered " << count << " region(s) with tensortierd";
    }
  }

  // ---------------------------------------------------------------- sending
  // Writes all of `data` to `s` by `deadline`. Timeout only when nothing was written; a partial
  // write that cannot finish breaks the framing, so the connection is shut down.
  static SendOutcome writeAll(int s, std::string_view data, Clock::time_point deadline) {
    size_t off = 0;
    while (off < data.size()) {
      const ssize_t n = send(s, data.data() + off, data.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        off += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        const int wait = pollTimeoutMs(deadline);
        pollfd p{s, POLLOUT, 0};
        if (wait > 0 && poll(&p, 1, wait) >= 0) continue;
        if (off == 0) return SendOutcome::Timeout;
      }
      (void)shutdown(s, SHUT_RDWR);
      return SendOutcome::Broken;
    }
    return SendOutcome::Sent;
  }

  // gen: the session the frame was built for (0: any, for frames without ids).
  SendOutcome sendFrame(std::string_view frame, Clock::time_point deadline, uint64_t gen) {
    std::unique_lock lock(writeMu, std::defer_lock);
    if (!lock.try_lock_until(deadline)) return SendOutcome::Timeout;
    const int f = fd.load();
    if (f < 0 || (gen != 0 && sessionGen.load() != gen)) return SendOutcome::NotConnected;
    const SendOutcome out = writeAll(f, frame, deadline);
    lock.unlock();
    flushPendingMarks();
    return out;
  }

  // Called with writeMu held. Never waits for room in the socket.
  bool writeMarkLocked(const std::string& frame) {
    const int f = fd.load();
    if (f < 0) {
      marksDropped.fetch_add(1);
      return false;
    }
    const ssize_t n = send(f, frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n == static_cast<ssize_t>(frame.size())) {
      marksSent.fetch_add(1);
      return true;
    }
    if (n > 0) {  // rare: finish the frame or the stream is corrupt
      if (writeAll(f, std::string_view(frame).substr(static_cast<size_t>(n)), Clock::now() + milliseconds(100)) ==
          SendOutcome::Sent) {
        marksSent.fetch_add(1);
        return true;
      }
    }
    marksDropped.fetch_add(1);
    return false;
  }

  // Marks queued by threads that found writeMu busy: the holder, or anyone, flushes them after
  // unlocking, so none is stranded.
  void flushPendingMarks() {
    for (;;) {
      {
        std::lock_guard lock(marksMu);
        if (pendingMarks.empty()) return;
      }
      std::unique_lock wl(writeMu, std::try_to_lock);
      if (!wl.owns_lock()) return;  // the holder flushes after it unlocks
      std::vector<std::string> batch;
      {
        std::lock_guard lock(marksMu);
        batch.swap(pendingMarks);
      }
      for (const auto& frame : batch) (void)writeMarkLocked(frame);
    }
  }

  bool mark(wire::MarkType type, uint64_t step, std::string_view phase) {
    if (forked() || !ready.load(std::memory_order_relaxed)) {
      marksDropped.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    std::string frame = wire::encodeIterationMark(type, step, phase);
    std::unique_lock wl(writeMu, std::try_to_lock);
    if (wl.owns_lock()) {
      const bool ok = writeMarkLocked(frame);
      wl.unlock();
      flushPendingMarks();
      return ok;
    }
    {
      std::lock_guard lock(marksMu);
      if (pendingMarks.size() >= kMaxPendingMarks) {
        marksDropped.fetch_add(1);
        return false;
      }
      pendingMarks.push_back(std::move(frame));
    }
    flushPendingMarks();
    return true;
  }

  // Sends a request registered in `waiters` under `seq` and waits for its reply.
  // `wasSent` tells a timeout with nothing written apart from one waiting for the reply.
  Expected<wire::DaemonMessage> awaitReply(uint64_t seq, uint64_t gen, Waiter& w, const std::string& frame,
                                           const std::string& what, bool* wasSent = nullptr) {
    const auto deadline = Clock::now() + opts.callTimeout;
    const SendOutcome sent = sendFrame(frame, deadline, gen);
    if (wasSent != nullptr) *wasSent = sent == SendOutcome::Sent;
    std::unique_lock lock(mu);
    if (sent != SendOutcome::Sent) {
      waiters.erase(seq);
      if (sent == SendOutcome::Timeout)
        return Status(TENSORTIER_ERR_TIMEOUT, what + ": the socket stayed busy past the call timeout");
      return Status(TENSORTIER_ERR_UNAVAILABLE, what + ": not connected to tensortierd");
    }
    if (!cv.wait_until(lock, deadline, [&] { return w.done; })) {
      waiters.erase(seq);
      lock.unlock();
      const std::string why = what + ": no reply from tensortierd within " + std::to_string(opts.callTimeout.count()) + " ms";
      abandonSession(gen, why);
      return Status(TENSORTIER_ERR_TIMEOUT, why);
    }
    if (w.lost) return Status(TENSORTIER_ERR_UNAVAILABLE, what + ": the connection to tensortierd was lost");
    if (w.reply.body == wire::DaemonMessage::Body::Error) return daemonStatus(w.reply, what);
    return std::move(w.reply);
  }

  void stop() {
    stopping.store(true);
    const uint64_t one = 1;
    if (write(wakeFd, &one, sizeof one) < 0) {
      TT_LOG(Debug) << "eventfd write: " << errnoText(errno);
    }
    if (io.joinable()) io.join();
    dropConnection("client closing");  // no-op unless the io thread never ran
    {
      std::lock_guard lock(workMu);
      workStop = true;
    }
    workCv.notify_all();
    if (worker.joinable()) worker.join();
    close(wakeFd);
  }
};

std::unique_ptr<Client> Client::create(const ClientOptions& options) {
  applyLogLevelFromEnvironment();
  auto impl = std::make_unique<Impl>();
  impl->opts = options;
  impl->opts.callTimeout = std::max(impl->opts.callTimeout, milliseconds(1));
  impl->opts.connectTimeout = std::max(impl->opts.connectTimeout, milliseconds(1));
  impl->opts.reconnectInitial = std::max(impl->opts.reconnectInitial, milliseconds(1));
  impl->opts.reconnectMax = std::max(impl->opts.reconnectMax, impl->opts.reconnectInitial);
  impl->socketPath = options.socketPath.empty() ? defaultSocketPath() : options.socketPath;
  impl->clientName = options.clientName.empty()
                         ? std::string(program_invocation_short_name) + " pid " + std::to_string(getpid())
                         : options.clientName;
  impl->wakeFd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (impl->wakeFd < 0) {
    TT_LOG(Error) << "eventfd: " << errnoText(errno) << "; the client cannot be stopped cleanly";
  }
  if (auto session = impl->connectOnce()) {
    impl->publish(std::move(*session));
  } else {
    impl->initialConnectFailed = true;
    impl->noteUnavailable(session.error().message());
  }
  Impl* raw = impl.get();
  raw->worker = std::thread([raw] { raw->workerLoop(); });
  raw->io = std::thread([raw] { raw->ioLoop(); });
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Client::~Client() {
  if (!impl_) return;
  // In a fork()ed child the threads and the session belong to the parent: touch nothing.
  if (impl_->forked()) {
    (void)impl_.release();
    return;
  }
  impl_->stop();
}

Expected<RegionHandle> Client::registerRegion(const void* address, size_t length, std::string_view name,
                                              RegionKind kind, RegionHints hints) {
  Impl& d = *impl_;
  if (d.forked()) return Status(TENSORTIER_ERR_UNAVAILABLE, "client used in a fork()ed child");
  const auto k = static_cast<int32_t>(kind);
  if (address == nullptr || length == 0 || k < TENSORTIER_KIND_UNSPECIFIED || k > TENSORTIER_KIND_OTHER)
    return Status(TENSORTIER_ERR_INVALID_ARGUMENT, "register region '" + std::string(name) +
                                                       "': needs a non-null address, a length > 0 and a known kind");
  Impl::Region r;
  r.address = reinterpret_cast<uintptr_t>(address);
  r.length = length;
  r.name = std::string(name);
  r.kind = k;
  r.expectedLifetimeSteps = hints.expectedLifetimeSteps;
  Impl::Waiter w;
  uint64_t seq = 0, gen = 0;
  RegionHandle h = 0;
  {
    std::lock_guard lock(d.mu);
    h = d.nextHandle++;
    gen = d.generation;
    if (d.ready.load()) {
      seq = d.nextSeq++;
      r.pendingSeq = seq;
      d.registerSeqs[seq] = h;
      d.waiters[seq] = &w;
    }
    d.regions.emplace(h, r);
  }
  if (seq == 0) return h;  // queued: registered when the daemon is reachable
  bool sent = false;
  auto reply = d.awaitReply(seq, gen, w,
                            wire::encodeRegisterRegion(seq, r.address, r.length, r.name, r.kind,
                                                       r.expectedLifetimeSteps, h),
                            "register region '" + r.name + "'", &sent);
  if (sent) d.registrationsSent.fetch_add(1);
  if (reply.ok()) return h;
  const int code = reply.status().code();
  if (code >= TENSORTIER_ERR_DAEMON_BASE) return reply.status();  // rejected: the io thread dropped it
  if (code == TENSORTIER_ERR_TIMEOUT && !sent) {
    // The socket stayed busy: nothing went out. The worker's registration pass sends it.
    {
      std::lock_guard lock(d.mu);
      if (auto it = d.regions.find(h); it != d.regions.end() && it->second.pendingSeq == seq) {
        it->second.pendingSeq = 0;
        d.registerSeqs.erase(seq);
      }
    }
    Impl::Task t;
    t.kind = Impl::Task::Kind::Reregister;
    t.generation = gen;
    d.enqueue(std::move(t));
  }
  // Sent but not answered in time: the handle stays and a late reply binds it.
  return h;
}

Status Client::unregisterRegion(RegionHandle handle) {
  Impl& d = *impl_;
  if (d.forked()) return Status(TENSORTIER_ERR_UNAVAILABLE, "client used in a fork()ed child");
  Impl::Waiter w;
  uint64_t seq = 0, id = 0, gen = 0;
  {
    std::lock_guard lock(d.mu);
    gen = d.generation;
    auto it = d.regions.find(handle);
    if (it == d.regions.end() || it->second.unregisterWhenBound)
      return Status(TENSORTIER_ERR_NO_SUCH_HANDLE, "unregister: " + std::to_string(handle) + " is not a live region");
    if (it->second.daemonId == 0) {
      if (it->second.pendingSeq != 0) it->second.unregisterWhenBound = true;  // reply in flight
      else d.regions.erase(it);
      return Status();
    }
    id = it->second.daemonId;
    d.byDaemonId.erase(id);
    d.regions.erase(it);
    seq = d.nextSeq++;
    d.waiters[seq] = &w;
  }
  auto reply =
      d.awaitReply(seq, gen, w, wire::encodeUnregisterRegion(seq, id), "unregister region " + std::to_string(id));
  // Unavailable: the session is gone, and with it the daemon's copy of the region.
  if (!reply.ok() && reply.status().code() != TENSORTIER_ERR_UNAVAILABLE) return reply.status();
  return Status();
}

bool Client::stepBegin(uint64_t step) { return impl_->mark(wire::MarkType::StepBegin, step, {}); }
bool Client::stepEnd(uint64_t step) { return impl_->mark(wire::MarkType::StepEnd, step, {}); }
bool Client::phaseBegin(uint64_t step, std::string_view phase) {
  return impl_->mark(wire::MarkType::PhaseBegin, step, phase);
}

Expected<std::vector<RegionPlacement>> Client::queryPlacement(std::span<const RegionHandle> handles) {
  Impl& d = *impl_;
  if (d.forked()) return Status(TENSORTIER_ERR_UNAVAILABLE, "client used in a fork()ed child");
  Impl::Waiter w;
  std::vector<uint64_t> ids;
  uint64_t seq = 0, gen = 0;
  {
    std::lock_guard lock(d.mu);
    gen = d.generation;
    for (RegionHandle h : handles) {
      auto it = d.regions.find(h);
      if (it == d.regions.end())
        return Status(TENSORTIER_ERR_NO_SUCH_HANDLE, "query placement: " + std::to_string(h) + " is not a live region");
      if (it->second.daemonId != 0) ids.push_back(it->second.daemonId);
    }
    if (!d.ready.load()) return Status(TENSORTIER_ERR_UNAVAILABLE, "query placement: not connected to tensortierd");
    if (!handles.empty() && ids.empty()) return std::vector<RegionPlacement>{};  // none known to the daemon yet
    seq = d.nextSeq++;
    d.waiters[seq] = &w;
  }
  auto reply = d.awaitReply(seq, gen, w, wire::encodeQueryPlacement(seq, ids), "query placement");
  if (!reply.ok()) return reply.status();
  if (reply->body != wire::DaemonMessage::Body::Placement)
    return Status(TENSORTIER_ERR_PROTOCOL, "query placement: tensortierd answered with another message");
  std::vector<RegionPlacement> out;
  out.reserve(reply->placements.size());
  std::lock_guard lock(d.mu);
  for (auto& p : reply->placements) {
    RegionPlacement rp;
    auto it = d.byDaemonId.find(p.regionId);
    rp.handle = it == d.byDaemonId.end() ? 0 : it->second;
    rp.regionId = p.regionId;
    rp.name = std::move(p.name);
    rp.kind = static_cast<RegionKind>(p.kind);
    rp.address = p.address;
    rp.length = p.length;
    for (const auto& nb : p.bytesPerNode) rp.bytesPerNode.push_back({nb.node, nb.bytes});
    rp.unmappedBytes = p.unmappedBytes;
    rp.heat = p.heat;
    rp.sampleStride = p.sampleStride;
    out.push_back(std::move(rp));
  }
  return out;
}

bool Client::connected() const { return impl_->ready.load(); }
uint32_t Client::protocolVersion() const { return impl_->version.load(); }

ClientStats Client::stats() const {
  Impl& d = *impl_;
  ClientStats s;
  s.connected = d.ready.load();
  s.connects = d.connects.load();
  s.disconnects = d.disconnects.load();
  {
    std::lock_guard lock(d.mu);
    for (const auto& [h, r] : d.regions) s.regionsLive += r.unregisterWhenBound ? 0 : 1;
    s.regionsBound = d.byDaemonId.size();
  }
  s.registrationsSent = d.registrationsSent.load();
  s.marksSent = d.marksSent.load();
  s.marksDropped = d.marksDropped.load();
  s.mbindDone = d.mbindDone.load();
  s.mbindFailed = d.mbindFailed.load();
  return s;
}

}  // namespace tensortier
