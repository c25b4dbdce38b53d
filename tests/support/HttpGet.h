// One HTTP/1.1 GET on loopback, for tests of the metrics exporter (unit) and the daemon's
// /metrics page (privileged). Header-only: its users link Boost.Asio (tt_asio) themselves, and
// the rest of the test support stays free of it.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <cstdint>
#include <string>

namespace tt::test {

// The whole response, headers and all, read until the server closes; empty when nothing accepts
// the connection.
inline std::string httpGetLoopback(uint16_t port, const std::string& target) {
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket s(io);
  boost::system::error_code ec;
  s.connect({boost::asio::ip::address_v4::loopback(), port}, ec);
  if (ec) return std::string();
  const std::string req = "GET " + target + " HTTP/1.1\r\nHost: localhost\r\n\r\n";
  boost::asio::write(s, boost::asio::buffer(req), ec);
  std::string out;
  char buf[8192];
  for (;;) {
    const size_t n = s.read_some(boost::asio::buffer(buf), ec);
    out.append(buf, n);
    if (ec) break;
  }
  return out;
}

}  // namespace tt::test
