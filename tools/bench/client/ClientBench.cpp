// tt_bench_client: the client library against a daemon, measured from the client side.
//
//   tt_bench_client --daemon PATH/tensortierd [--config FILE]   real daemon (spawned here)
//   tt_bench_client --fake PATH/tt_fake_client_daemon            the test fake (labelled as such)
//   tt_bench_client --daemon ... --compare-fake PATH/tt_fake_client_daemon
//       also runs the round trip against the fake, interleaved in blocks with the daemon's, so the
//       ratio daemon/fake (the daemon's own cost over a minimal server) comes from one run.
//
// The daemon is started on a private socket; the bench measures
//   1. registration round trip: register + unregister of one page, sequential (p50/p99/max);
//   2. cost of an iteration mark (fire-and-forget) as seen by the caller;
//   3. 100k registered regions: the daemon's VmRSS (/proc/PID/status) before and after;
//   4. 64 client processes at once, each registering regions: all served? latency p50/p99.
//   5. a client that execs while it holds --exec-gib GiB (a child keeps its connection and goes on
//      registering): the round trips of another connection meanwhile. Opening the exec'ing
//      process's /proc/PID/maps waits while the exec tears the old address space down; on the
//      event loop that wait was everybody's (--exec-gib 0 skips it).
// Absolute numbers on this 2-core shared machine are noisy; compare ratios within one run.
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tensortier/client.hpp"
#include "tensortier/v1/protocol.pb.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

double usSince(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

long rssKiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  return -1;
}

struct Daemon {
  pid_t pid = -1;
  int stdinFd = -1;  // the fake exits when its stdin closes
};

Daemon spawnDaemon(const std::string& exe, bool fake, const std::string& config, const std::string& socket) {
  int in[2];
  if (pipe2(in, O_CLOEXEC) != 0) std::exit(1);
  Daemon d;
  d.pid = fork();
  if (d.pid == 0) {
    dup2(in[0], 0);
    const int devnull = open("/dev/null", O_WRONLY);
    if (fake) dup2(devnull, 1);  // the fake's JSON lines are not needed here
    if (fake) {
      execl(exe.c_str(), exe.c_str(), "--socket", socket.c_str(), static_cast<char*>(nullptr));
    } else {
      execl(exe.c_str(), exe.c_str(), "--config", config.c_str(), "--socket", socket.c_str(), "--foreground",
            static_cast<char*>(nullptr));
    }
    std::perror("exec daemon");
    _exit(127);
  }
  close(in[0]);
  d.stdinFd = in[1];
  return d;
}

void stopDaemon(Daemon& d) {
  close(d.stdinFd);
  kill(d.pid, SIGTERM);
  int status = 0;
  waitpid(d.pid, &status, 0);
}

tensortier::ClientOptions optionsFor(const std::string& socket, const std::string& name) {
  tensortier::ClientOptions o;
  o.socketPath = socket;
  o.clientName = name;
  o.callTimeout = 5s;
  o.connectTimeout = 2s;
  return o;
}

// Raw protocol frames (a 4-byte little-endian length, then the message) on a blocking socket, for
// the exec measurement: its connection is used by a child of the process that opened it, which the
// client library does not do.
class RawConnection {
 public:
  explicit RawConnection(const std::string& socket) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, socket.c_str(), sizeof addr.sun_path - 1);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~RawConnection() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool call(const tensortier::v1::ClientMessage& m, tensortier::v1::DaemonMessage& reply) {
    std::string body;
    if (fd_ < 0 || !m.SerializeToString(&body)) return false;
    const auto n = static_cast<uint32_t>(body.size());
    std::string frame{static_cast<char>(n & 0xff), static_cast<char>((n >> 8) & 0xff),
                      static_cast<char>((n >> 16) & 0xff), static_cast<char>(n >> 24)};
    frame += body;
    if (!all(frame.data(), frame.size(), true)) return false;
    unsigned char head[4];
    if (!all(reinterpret_cast<char*>(head), 4, false)) return false;
    std::string in(static_cast<size_t>(head[0] | head[1] << 8 | head[2] << 16 | head[3] << 24), '\0');
    return all(in.data(), in.size(), false) && reply.ParseFromString(in);
  }

 private:
  bool all(char* p, size_t n, bool out) {
    while (n > 0) {
      const ssize_t k = out ? ::write(fd_, p, n) : ::read(fd_, p, n);
      if (k <= 0) return false;
      p += k;
      n -= static_cast<size_t>(k);
    }
    return true;
  }
  int fd_ = -1;
};

tensortier::v1::ClientMessage helloFrame(const char* name) {
  tensortier::v1::ClientMessage m;
  m.set_seq(1);
  m.mutable_hello()->add_versions(1);
  m.mutable_hello()->set_client_name(name);
  return m;
}

tensortier::v1::ClientMessage registerFrame(uint64_t seq, const void* address, size_t length) {
  tensortier::v1::ClientMessage m;
  m.set_seq(seq);
  m.mutable_register_region()->set_address(reinterpret_cast<uint64_t>(address));
  m.mutable_register_region()->set_length(length);
  m.mutable_register_region()->set_kind(tensortier::v1::WEIGHT);
  return m;
}

void printLine(const char* what, const std::vector<double>& us);

double nowUs() { return std::chrono::duration<double, std::micro>(Clock::now().time_since_epoch()).count(); }

// 5. While a client execs out of a big address space, a child that holds its connection goes on
// registering (each request of it probes the exec'ing process), and another connection sends
// iteration marks with a seq (answered on the event loop) and times them.
void measureExecStall(const std::string& socket, size_t gib) {
  struct Shared {
    double childMaxUs, childStartUs, childEndUs;
    int childRequests;
  };
  auto* shared = static_cast<Shared*>(mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  int ready[2], go[2];
  if (shared == MAP_FAILED || pipe2(ready, O_CLOEXEC) != 0 || pipe2(go, O_CLOEXEC) != 0) return;
  constexpr double kWindowUs = 4e6;
  const pid_t execer = fork();
  if (execer == 0) {
    RawConnection conn(socket);
    tensortier::v1::DaemonMessage reply;
    if (!conn.call(helloFrame("bench-exec"), reply)) _exit(3);
    const size_t bytes = gib << 30;
    auto* big = static_cast<char*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (big == MAP_FAILED) _exit(4);
    std::memset(big, 1, bytes);
    if (!conn.call(registerFrame(2, big, 1 << 20), reply) || !reply.has_register_region_reply()) _exit(5);
    if (fork() == 0) {  // the child that keeps the connection
      char b = 0;
      if (read(go[0], &b, 1) != 1) _exit(6);
      shared->childStartUs = nowUs();
      double worst = 0;
      int n = 0;
      for (uint64_t seq = 3; nowUs() - shared->childStartUs < kWindowUs; ++seq, ++n) {
        const double t0 = nowUs();
        if (!conn.call(registerFrame(seq, big + (seq % 64) * 4096, 4096), reply)) break;  // closed: the exec'd program exited
        worst = std::max(worst, nowUs() - t0);
      }
      shared->childMaxUs = worst;
      shared->childRequests = n;
      shared->childEndUs = nowUs();
      _exit(0);
    }
    if (write(ready[1], "r", 1) != 1) _exit(7);
    if (write(go[1], "g", 1) != 1) _exit(8);
    execl("/bin/sleep", "sleep", "6", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(ready[1]);
  close(go[0]);
  close(go[1]);
  RawConnection other(socket);
  tensortier::v1::DaemonMessage reply;
  if (!other.call(helloFrame("bench-other"), reply)) return;
  char b = 0;
  if (read(ready[0], &b, 1) != 1) {
    std::printf("5. exec while registered: the exec'ing client did not get ready\n");
    return;
  }
  std::vector<std::pair<double, double>> marks;  // start, latency (us)
  tensortier::v1::ClientMessage mark;
  mark.mutable_iteration_mark()->set_type(tensortier::v1::IterationMark::STEP_BEGIN);
  const double start = nowUs();
  for (uint64_t seq = 2; nowUs() - start < kWindowUs + 1e6; ++seq) {
    mark.set_seq(seq);
    const double t0 = nowUs();
    if (!other.call(mark, reply)) break;
    marks.emplace_back(t0, nowUs() - t0);
    std::this_thread::sleep_for(1ms);
  }
  waitpid(execer, nullptr, 0);
  for (int i = 0; i < 100 && shared->childEndUs == 0; ++i) std::this_thread::sleep_for(50ms);
  std::vector<double> during;
  for (const auto& [t0, us] : marks)
    if (t0 >= shared->childStartUs && t0 <= shared->childEndUs) during.push_back(us);
  std::printf("5. a client execs out of %zu GiB while its child keeps registering on its connection\n", gib);
  std::printf("  the child: %d requests in %.2f s, slowest %.1f ms (waits on the exec)\n", shared->childRequests,
              (shared->childEndUs - shared->childStartUs) / 1e6, shared->childMaxUs / 1000);
  printLine("another connection's IterationMark -> Ack", during);
}

void printLine(const char* what, const std::vector<double>& us) {
  std::printf("  %-44s n=%-7zu p50 %8.1f us   p99 %8.1f us   max %8.1f us\n", what, us.size(), percentile(us, 50),
              percentile(us, 99), us.empty() ? 0.0 : *std::max_element(us.begin(), us.end()));
}

}  // namespace

int main(int argc, char** argv) {
  std::string exe, config, compareFake;
  bool fake = false;
  size_t roundTrips = 10000, manyRegions = 100000, clients = 64, perClient = 200, execGib = 4;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--daemon") exe = next();
    else if (a == "--fake") exe = next(), fake = true;
    else if (a == "--config") config = next();
    else if (a == "--compare-fake") compareFake = next();
    else if (a == "--round-trips") roundTrips = std::stoul(next());
    else if (a == "--regions") manyRegions = std::stoul(next());
    else if (a == "--clients") clients = std::stoul(next());
    else if (a == "--per-client") perClient = std::stoul(next());
    else if (a == "--exec-gib") execGib = std::stoul(next());
    else {
      std::fprintf(stderr,
                   "usage: tt_bench_client (--daemon TENSORTIERD [--config FILE] | --fake TT_FAKE_CLIENT_DAEMON)\n"
                   "       [--round-trips N] [--regions N] [--clients N] [--per-client N] [--exec-gib N]\n");
      return 2;
    }
  }
  if (exe.empty()) {
    std::fprintf(stderr, "tt_bench_client: pass --daemon or --fake\n");
    return 2;
  }
  char tmpl[] = "/tmp/tt-bench-client-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return 1;
  const std::string dir = tmpl, socket = dir + "/tensortier.sock";
  if (!fake && config.empty()) {
    config = dir + "/tensortierd.conf";
    std::ofstream(config) << "# built-in defaults\n";
  }
  signal(SIGPIPE, SIG_IGN);
  tensortier::setLogLevel(tensortier::LogLevel::Warn);

  Daemon daemon = spawnDaemon(exe, fake, config, socket);
  std::unique_ptr<tensortier::Client> client;
  for (int i = 0; i < 200 && !(client && client->connected()); ++i) {
    std::this_thread::sleep_for(50ms);
    client = tensortier::Client::create(optionsFor(socket, "bench"));
  }
  if (!client || !client->connected()) {
    std::fprintf(stderr, "tt_bench_client: %s did not come up on %s\n", exe.c_str(), socket.c_str());
    stopDaemon(daemon);
    return 1;
  }
  std::printf("tt_bench_client against %s (%s), pid %d\n", exe.c_str(), fake ? "FAKE daemon, not tensortierd" : "tensortierd",
              daemon.pid);

  const size_t page = static_cast<size_t>(getpagesize());
  const size_t mapPages = std::max({roundTrips, manyRegions, perClient}) + 1;
  auto* buf = static_cast<char*>(mmap(nullptr, mapPages * page, PROT_READ | PROT_WRITE,
                                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
  if (buf == MAP_FAILED) return 1;

  // 1. registration round trip
  std::vector<double> reg, unreg, fakeReg, fakeUnreg;
  size_t failures = 0;
  auto roundTrip = [&](tensortier::Client& cl, size_t i, std::vector<double>& r, std::vector<double>& u) {
    auto t0 = Clock::now();
    auto h = cl.registerRegion(buf + i * page, page, "rt", tensortier::RegionKind::Activation);
    r.push_back(usSince(t0));
    if (!h.ok()) {
      ++failures;
      return;
    }
    t0 = Clock::now();
    if (!cl.unregisterRegion(*h).ok()) ++failures;
    u.push_back(usSince(t0));
  };
  Daemon fakeDaemon;
  std::unique_ptr<tensortier::Client> fakeClient;
  if (!compareFake.empty()) {
    const std::string fakeSocket = dir + "/fake.sock";
    fakeDaemon = spawnDaemon(compareFake, true, "", fakeSocket);
    for (int i = 0; i < 200 && !(fakeClient && fakeClient->connected()); ++i) {
      std::this_thread::sleep_for(50ms);
      fakeClient = tensortier::Client::create(optionsFor(fakeSocket, "bench-fake"));
    }
    if (!fakeClient->connected()) {
      std::fprintf(stderr, "tt_bench_client: the fake did not come up\n");
      return 1;
    }
  }
  // Daemon and fake take turns (which goes first flips every block), so both see the same load.
  constexpr size_t kBlock = 500;
  for (size_t i = 0; i < roundTrips; ++i) {
    const bool fakeFirst = fakeClient && (i / kBlock) % 2 == 1;
    if (fakeFirst) roundTrip(*fakeClient, i, fakeReg, fakeUnreg);
    roundTrip(*client, i, reg, unreg);
    if (fakeClient && !fakeFirst) roundTrip(*fakeClient, i, fakeReg, fakeUnreg);
  }
  std::printf("1. registration round trip (one page, sequential, loopback Unix socket)\n");
  printLine("RegisterRegion -> reply", reg);
  printLine("UnregisterRegion -> Ack", unreg);
  if (fakeClient) {
    printLine("RegisterRegion -> reply (FAKE daemon)", fakeReg);
    printLine("UnregisterRegion -> Ack (FAKE daemon)", fakeUnreg);
    std::printf("  tensortierd / fake, RegisterRegion: p50 x%.2f, p99 x%.2f\n",
                percentile(reg, 50) / percentile(fakeReg, 50), percentile(reg, 99) / percentile(fakeReg, 99));
    fakeClient.reset();
    stopDaemon(fakeDaemon);
  }
  std::printf("  failures: %zu\n", failures);

  // 2. iteration marks
  std::vector<double> marks;
  for (uint64_t i = 0; i < 20000; ++i) {
    const auto t0 = Clock::now();
    (void)(i % 2 == 0 ? client->stepBegin(i) : client->phaseBegin(i, "forward"));
    marks.push_back(usSince(t0));
  }
  std::printf("2. iteration marks (fire-and-forget)\n");
  printLine("stepBegin / phaseBegin call", marks);

  // 3. many regions
  std::this_thread::sleep_for(200ms);
  const long before = rssKiB(daemon.pid);
  failures = 0;
  auto t0 = Clock::now();
  std::vector<tensortier::RegionHandle> handles;
  handles.reserve(manyRegions);
  for (size_t i = 0; i < manyRegions; ++i) {
    auto h = client->registerRegion(buf + i * page, page, "region." + std::to_string(i),
                                    tensortier::RegionKind::Activation);
    if (h.ok()) handles.push_back(*h);
    else ++failures;
  }
  const double secs = usSince(t0) / 1e6;
  std::this_thread::sleep_for(200ms);
  const long afterKiB = rssKiB(daemon.pid);
  const auto beforeMiB = static_cast<double>(before) / 1024.0, afterMiB = static_cast<double>(afterKiB) / 1024.0;
  std::printf("3. %zu registered regions (one page each): %.2f s (%.0f registrations/s), failures %zu\n", manyRegions,
              secs, static_cast<double>(manyRegions) / secs, failures);
  std::printf("  daemon VmRSS %.1f MiB -> %.1f MiB: growth %.1f MiB (%.0f bytes/region)\n", beforeMiB, afterMiB,
              afterMiB - beforeMiB,
              manyRegions ? (afterMiB - beforeMiB) * 1048576.0 / static_cast<double>(manyRegions) : 0.0);
  t0 = Clock::now();
  auto placement = client->queryPlacement();
  std::printf("  QueryPlacement (all): %s, %zu regions, %.1f ms\n", placement.ok() ? "ok" : placement.status().message().c_str(),
              placement.ok() ? placement->size() : 0, usSince(t0) / 1000);
  client.reset();  // closing the session frees them in the daemon

  // 4. concurrent client processes
  struct Slot {
    int ok;
    int served;
    double us[1];
  };
  const size_t slotBytes = sizeof(Slot) + sizeof(double) * perClient;
  auto* shared = static_cast<char*>(
      mmap(nullptr, slotBytes * clients, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  int go[2];
  if (shared == MAP_FAILED || pipe(go) != 0) return 1;
  std::vector<pid_t> kids;
  for (size_t c = 0; c < clients; ++c) {
    const pid_t pid = fork();
    if (pid == 0) {
      close(go[1]);
      auto* slot = reinterpret_cast<Slot*>(shared + c * slotBytes);
      auto cl = tensortier::Client::create(optionsFor(socket, "bench-" + std::to_string(c)));
      char b = 0;
      if (read(go[0], &b, 1) < 0) _exit(3);  // all start together when the pipe closes
      slot->ok = cl->connected() ? 1 : 0;
      auto* mine = static_cast<char*>(mmap(nullptr, perClient * page, PROT_READ | PROT_WRITE,
                                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
      int served = 0;
      for (size_t i = 0; i < perClient; ++i) {
        const auto s0 = Clock::now();
        auto h = cl->registerRegion(mine + i * page, page, "c", tensortier::RegionKind::Weight);
        slot->us[i] = usSince(s0);
        if (h.ok() && cl->stats().regionsBound == static_cast<uint64_t>(served + 1)) ++served;
      }
      slot->served = served;
      cl.reset();
      _exit(0);
    }
    kids.push_back(pid);
  }
  close(go[0]);
  std::this_thread::sleep_for(500ms);
  t0 = Clock::now();
  close(go[1]);
  for (pid_t k : kids) waitpid(k, nullptr, 0);
  const double wall = usSince(t0) / 1e6;
  std::vector<double> lat;
  size_t connected = 0, fullyServed = 0;
  for (size_t c = 0; c < clients; ++c) {
    auto* slot = reinterpret_cast<Slot*>(shared + c * slotBytes);
    connected += slot->ok ? 1 : 0;
    fullyServed += static_cast<size_t>(slot->served) == perClient ? 1 : 0;
    for (size_t i = 0; i < perClient; ++i) lat.push_back(slot->us[i]);
  }
  std::printf("4. %zu client processes at once, %zu registrations each: %.2f s wall\n", clients, perClient, wall);
  std::printf("  connected %zu/%zu, all registrations bound %zu/%zu\n", connected, clients, fullyServed, clients);
  printLine("RegisterRegion under load", lat);

  if (execGib > 0 && !fake) measureExecStall(socket, execGib);

  stopDaemon(daemon);
  std::filesystem::remove_all(dir);
  return 0;
}
