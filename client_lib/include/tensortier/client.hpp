// tensortier client library: the C++ API.
//
//   auto client = tensortier::Client::create({.clientName = "train"});
//   auto weights = client->registerRegion(buf, bytes, "fc1.weight", tensortier::RegionKind::Weight);
//   client->stepBegin(step); client->phaseBegin(step, "forward"); ... client->stepEnd(step);
//
// Same semantics as the C ABI in tensortier.h (which is the stable interface; this header is
// source-compatible across 1.x but C++ types cross it, so build against the headers you link).
// No exception leaves the library: fallible calls return Status / Expected<T>.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "tensortier/tensortier.h"

namespace tensortier {

enum class RegionKind : int32_t {
  Unspecified = TENSORTIER_KIND_UNSPECIFIED,
  Weight = TENSORTIER_KIND_WEIGHT,
  Gradient = TENSORTIER_KIND_GRADIENT,
  OptimizerState = TENSORTIER_KIND_OPTIMIZER_STATE,
  Activation = TENSORTIER_KIND_ACTIVATION,
  Workspace = TENSORTIER_KIND_WORKSPACE,
  Other = TENSORTIER_KIND_OTHER,
};

// Codes are the C ABI's tensortier_status values.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(int code, std::string message) : code_(code), message_(std::move(message)) {}
  [[nodiscard]] bool ok() const { return code_ == TENSORTIER_OK; }
  explicit operator bool() const { return ok(); }
  [[nodiscard]] int code() const { return code_; }
  [[nodiscard]] const std::string& message() const { return message_; }

 private:
  int code_ = TENSORTIER_OK;
  std::string message_;
};

template <class T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}           // NOLINT: implicit like std::expected
  Expected(Status error) : v_(std::move(error)) {}      // NOLINT
  [[nodiscard]] bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  [[nodiscard]] T& value() & { return std::get<0>(v_); }
  [[nodiscard]] const T& value() const& { return std::get<0>(v_); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  // The failure; an ok Status when there is a value.
  [[nodiscard]] Status status() const { return ok() ? Status() : std::get<1>(v_); }

 private:
  std::variant<T, Status> v_;
};

using RegionHandle = tensortier_region;

struct RegionHints {
  uint64_t expectedLifetimeSteps = 0;  // 0 = unknown / whole run
};

struct ClientOptions {
  std::string socketPath;  // empty: $TENSORTIER_SOCKET, else defaultSocketPath()
  std::string clientName;  // empty: "pid N"
  std::chrono::milliseconds callTimeout{2000};
  std::chrono::milliseconds connectTimeout{500};
  std::chrono::milliseconds reconnectInitial{100};
  std::chrono::milliseconds reconnectMax{5000};
  bool acceptsMbind = true;
};

struct NodeBytes {
  int32_t node = 0;
  uint64_t bytes = 0;
};

struct RegionPlacement {
  RegionHandle handle = 0;  // 0 when the region is not one of this client's handles
  uint64_t regionId = 0;
  std::string name;
  RegionKind kind = RegionKind::Unspecified;
  uint64_t address = 0;
  uint64_t length = 0;
  std::vector<NodeBytes> bytesPerNode;
  uint64_t unmappedBytes = 0;
  double heat = 0;
  // 1: every page was asked where it is; N: every Nth, each counted for N (the query was over the
  // daemon's per-request page budget, so the bytes are an estimate).
  uint32_t sampleStride = 1;
};

struct ClientStats {
  bool connected = false;
  uint64_t connects = 0, disconnects = 0;
  uint64_t regionsLive = 0, regionsBound = 0, registrationsSent = 0;
  uint64_t marksSent = 0, marksDropped = 0;
  uint64_t mbindDone = 0, mbindFailed = 0;
};

// $TENSORTIER_SOCKET if set and non-empty, else /run/tensortier/tensortier.sock.
TENSORTIER_API std::string defaultSocketPath();

enum class LogLevel : int { Debug = 0, Info = 1, Warn = 2, Error = 3 };
// Process-wide; nullptr/empty restores stderr. May be called from the library's threads.
TENSORTIER_API void setLogHandler(std::function<void(LogLevel, std::string_view)> handler);
TENSORTIER_API void setLogLevel(LogLevel level);

class TENSORTIER_API Client {
 public:
  // Never fails for lack of a daemon: the client then works in the background to connect.
  static std::unique_ptr<Client> create(const ClientOptions& options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // See tensortier_register_region: errors only for bad arguments or a daemon rejection.
  Expected<RegionHandle> registerRegion(const void* address, size_t length, std::string_view name,
                                        RegionKind kind, RegionHints hints = {});
  Status unregisterRegion(RegionHandle handle);

  // Fire-and-forget: never wait. false when the mark was dropped (not connected / socket full).
  bool stepBegin(uint64_t step);
  bool stepEnd(uint64_t step);
  bool phaseBegin(uint64_t step, std::string_view phase);

  // Empty span: all of this client's regions.
  Expected<std::vector<RegionPlacement>> queryPlacement(std::span<const RegionHandle> handles = {});

  [[nodiscard]] bool connected() const;
  [[nodiscard]] uint32_t protocolVersion() const;  // 0 while disconnected
  [[nodiscard]] ClientStats stats() const;

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tensortier
