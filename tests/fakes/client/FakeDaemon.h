// An in-process stand-in for tensortierd's client-facing side: a Unix socket server that speaks
// proto/tensortier/v1/protocol.proto with protoc's generated code (so every client test also checks
// the client library's hand-written codec against the schema). It keeps what clients sent
// (Hellos, regions, marks), answers requests, and lets a test send MbindRequests, stop and restart
// the "daemon", or hold replies back to exercise timeouts.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/Result.h"

namespace tt::fake {

class FakeDaemon {
 public:
  struct Options {
    std::vector<uint32_t> versions{1};  // protocol versions this fake speaks
    std::string daemonVersion = "fake-tensortierd";
  };
  struct Hello {
    uint64_t session = 0;
    std::vector<uint32_t> versions;
    std::string clientName;
    bool acceptsMbind = false;
  };
  struct Region {
    uint64_t id = 0;
    uint64_t session = 0;
    uint64_t address = 0;
    uint64_t length = 0;
    std::string name;
    int32_t kind = 0;
    uint64_t expectedLifetimeSteps = 0;
    uint64_t clientTag = 0;
  };
  struct Mark {
    uint64_t session = 0;
    int32_t type = 0;  // IterationMark::Type
    uint64_t step = 0;
    std::string phase;
  };

  explicit FakeDaemon(std::string socketPath);
  FakeDaemon(std::string socketPath, Options options);
  ~FakeDaemon();
  FakeDaemon(const FakeDaemon&) = delete;
  FakeDaemon& operator=(const FakeDaemon&) = delete;

  // Binds and listens on the socket (removing a stale one) and starts serving.
  [[nodiscard]] tt::Result<void> start();
  // Closes the listener and every connection and forgets all regions, as a daemon exit would.
  void stop();
  [[nodiscard]] bool running() const;
  [[nodiscard]] const std::string& socketPath() const { return path_; }

  // Snapshots of what clients sent. Regions are the live ones (unregistered ones are removed).
  [[nodiscard]] std::vector<Hello> hellos() const;
  [[nodiscard]] std::vector<Region> regions() const;
  [[nodiscard]] std::vector<Mark> marks() const;
  [[nodiscard]] size_t liveSessions() const;
  [[nodiscard]] uint64_t unregisterCount() const;
  [[nodiscard]] uint64_t framesReceived() const;

  // Waits until `done()` holds (checked whenever the fake receives something) or the timeout.
  bool waitFor(const std::function<bool(const FakeDaemon&)>& done,
               std::chrono::milliseconds timeout = std::chrono::seconds(5)) const;

  // Sends an MbindRequest to the session that registered `regionId` and waits for its
  // MbindResult; the errno the client reported, or nullopt when none came in time.
  std::optional<int32_t> mbind(uint64_t regionId, uint64_t address, uint64_t length, int32_t node,
                               std::chrono::milliseconds timeout = std::chrono::seconds(10));

  // While true the fake reads requests but answers none (marks and MbindResults still count).
  void setSilent(bool silent);

 private:
  struct Connection;
  void serve();
  void handleFrame(Connection& c, const std::string& payload);
  void sendTo(Connection& c, const std::string& serializedDaemonMessage);
  void closeAll();

  std::string path_;
  Options options_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  int listenFd_ = -1;
  int wakeFd_ = -1;
  bool stopping_ = false;
  bool silent_ = false;
  std::thread thread_;
  std::map<int, std::unique_ptr<Connection>> connections_;  // by fd; serve thread adds/removes
  uint64_t nextSession_ = 1;
  uint64_t nextRegionId_ = 1;
  uint64_t nextRequestId_ = 1;
  uint64_t unregisters_ = 0;
  uint64_t frames_ = 0;
  std::vector<Hello> hellos_;
  std::map<uint64_t, Region> regions_;
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> byStart_;  // (session, first page) -> id: overlap checks
  std::vector<Mark> marks_;
  std::map<uint64_t, int32_t> mbindResults_;
};

}  // namespace tt::fake
