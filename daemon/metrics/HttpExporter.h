// Serves the metrics registry as Prometheus text on http://127.0.0.1:<port>/metrics (Boost.Beast),
// on the daemon's Asio event loop. Loopback only: the numbers describe other users' processes.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cstdint>
#include <memory>

#include "core/Result.h"
#include "metrics/Metrics.h"

namespace tt::metrics {

class HttpExporter {
 public:
  HttpExporter(boost::asio::io_context& io, const Registry& registry);
  ~HttpExporter();

  // Binds 127.0.0.1:port (0 picks a free port, for tests) and starts accepting. Returns the port.
  [[nodiscard]] Result<uint16_t> start(uint16_t port);
  void stop();

 private:
  void accept();

  boost::asio::io_context& io_;
  const Registry& registry_;
  boost::asio::ip::tcp::acceptor acceptor_;
};

}  // namespace tt::metrics
