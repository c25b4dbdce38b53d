#include "metrics/HttpExporter.h"

#include <boost/asio/ip/address_v4.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "core/Log.h"

namespace tt::metrics {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

// One HTTP exchange: read a request, answer it, close. Scrapes are rare; keep-alive is not worth it.
class Exchange : public std::enable_shared_from_this<Exchange> {
 public:
  Exchange(tcp::socket socket, const Registry& registry) : socket_(std::move(socket)), registry_(registry) {}

  void run() {
    parser_.body_limit(8192);
    parser_.header_limit(8192);
    http::async_read(socket_, buffer_, parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (!ec) self->respond();
    });
  }

 private:
  void respond() {
    const auto& req = parser_.get();
    response_.version(req.version());
    response_.keep_alive(false);
    response_.set(http::field::server, "tensortierd");
    if (req.method() != http::verb::get && req.method() != http::verb::head) {
      response_.result(http::status::method_not_allowed);
      response_.body() = "GET /metrics\n";
    } else if (req.target() != "/metrics" && req.target() != "/") {
      response_.result(http::status::not_found);
      response_.body() = "GET /metrics\n";
    } else {
      response_.result(http::status::ok);
      response_.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
      if (req.method() == http::verb::get) response_.body() = registry_.render();
    }
    response_.prepare_payload();
    http::async_write(socket_, response_, [self = shared_from_this()](beast::error_code, size_t) {
      beast::error_code ignored;
      self->socket_.shutdown(tcp::socket::shutdown_both, ignored);
    });
  }

  tcp::socket socket_;
  const Registry& registry_;
  beast::flat_buffer buffer_;
  http::request_parser<http::empty_body> parser_;
  http::response<http::string_body> response_;
};

}  // namespace

HttpExporter::HttpExporter(asio::io_context& io, const Registry& registry)
    : io_(io), registry_(registry), acceptor_(io) {}

HttpExporter::~HttpExporter() { stop(); }

Result<uint16_t> HttpExporter::start(uint16_t port) {
  beast::error_code ec;
  const tcp::endpoint endpoint(asio::ip::address_v4::loopback(), port);
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    beast::error_code ignored;
    acceptor_.close(ignored);
    return systemError(ec.value(), "metrics listener on 127.0.0.1:" + std::to_string(port));
  }
  accept();
  return acceptor_.local_endpoint().port();
}

void HttpExporter::stop() {
  beast::error_code ignored;
  if (acceptor_.is_open()) acceptor_.close(ignored);
}

void HttpExporter::accept() {
  acceptor_.async_accept(io_, [this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;
    if (!ec) std::make_shared<Exchange>(std::move(socket), registry_)->run();
    if (acceptor_.is_open()) accept();
  });
}

}  // namespace tt::metrics
