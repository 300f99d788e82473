#include "server/http/metrics_server.h"

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

#include "common/cloexec.h"
#include "common/log.h"
#include "common/spawn.h"
#include "server/api/errors.h"
#include "server/http/responses.h"
#include "server/metrics/metrics.h"

namespace cabin::http_api {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;

const auto& metrics_log() {
  static auto l = logger("metrics");
  return l;
}

Response answer(const http::request_header<>& req) {
  std::string_view target = req.target();
  target = target.substr(0, target.find('?'));
  if (req.method() != http::verb::get || target != "/metrics") {
    return error_response(api::errors::not_found_endpoint());
  }
  Response res{http::status::ok, 11};
  res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
  res.body() = metrics::registry().exposition();
  return res;
}

}  // namespace

Result<void> MetricsServer::listen(const std::string& host, uint16_t port) {
  boost::system::error_code ec;
  auto addr = net::ip::make_address(host, ec);
  if (ec) return make_error(Errc::kInvalidArgument, "bad_listen", "not an IP address: " + host);
  net::ip::tcp::endpoint ep(addr, port);
  open_cloexec(acceptor_, ep.protocol(), ec);
  if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return make_error(
        Errc::kUnavailable, "listen_failed",
        "cannot listen on " + host + ":" + std::to_string(port) + ": " + ec.message());
  }
  return {};
}

net::awaitable<void> MetricsServer::run() {
  for (;;) {
    boost::system::error_code ec;
    net::ip::tcp::socket socket(ex_);
    co_await acceptor_.async_accept(socket, net::redirect_error(net::use_awaitable, ec));
    if (stopping_) co_return;
    if (ec) {
      // Out of descriptors: the API listener's backoff speaks for the process; this one only
      // keeps its loop from spinning.
      metrics_log()->warn("accept: {}", ec.message());
      net::steady_timer wait(ex_, std::chrono::milliseconds(100));
      co_await wait.async_wait(net::redirect_error(net::use_awaitable, ec));
      if (stopping_) co_return;
      continue;
    }
    if (!set_cloexec(socket.native_handle())) continue;
    if (open_->size() >= kMaxMetricsConnections) continue;  // closed with `socket`
    open_->emplace_front(std::move(socket));
    cabin::spawn(ex_, serve(open_, open_->begin()), "metrics connection");
  }
}

net::awaitable<void> MetricsServer::serve(std::shared_ptr<Open> open, Open::iterator it) {
  struct Erase {
    Open& open;
    Open::iterator it;
    ~Erase() { open.erase(it); }
  } erase{*open, it};
  beast::tcp_stream& stream = *it;
  beast::flat_buffer buffer;
  boost::system::error_code ec;
  for (bool first = true;; first = false) {
    http::request_parser<http::empty_body> parser;
    parser.header_limit(kMaxMetricsHeaderBytes);
    stream.expires_after(first ? kMetricsReadTimeout : kMetricsIdleTimeout);
    co_await http::async_read(stream, buffer, parser, net::redirect_error(net::use_awaitable, ec));
    if (ec) break;  // gone, idle, malformed, or a body: nothing here takes one
    const auto& req = parser.get();
    Response res = answer(req);
    res.keep_alive(req.keep_alive());
    res.prepare_payload();
    stream.expires_after(kMetricsReadTimeout);
    co_await http::async_write(stream, res, net::redirect_error(net::use_awaitable, ec));
    if (ec || !res.keep_alive()) break;
  }
  stream.socket().shutdown(net::socket_base::shutdown_both, ec);
}

void MetricsServer::stop() {
  stopping_ = true;
  boost::system::error_code ec;
  acceptor_.close(ec);
  for (auto& s : *open_) s.close();
}

}  // namespace cabin::http_api
