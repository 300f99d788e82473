#include "cdp-bridge/bridge.h"

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

#include "common/deadline.h"
#include "common/pump.h"

namespace cabin::cdp {
namespace {

constexpr size_t kMaxUpstreamHeader = 16 * 1024;

bool token68(std::string_view v, size_t max) {
  if (v.empty() || v.size() > max) return false;
  for (char c : v) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
  }
  return true;
}

Error bad_upstream(std::string message) {
  return make_error(Errc::kBadGateway, "browser_handshake", std::move(message));
}

}  // namespace

http::request<http::empty_body> make_upstream_upgrade(const http::request_header<>& client,
                                                      const std::string& path, int port) {
  http::request<http::empty_body> req{http::verb::get, path, 11};
  req.set(http::field::host, "127.0.0.1:" + std::to_string(port));
  req.set(http::field::upgrade, "websocket");
  req.set(http::field::connection, "Upgrade");
  for (auto f : {http::field::sec_websocket_key, http::field::sec_websocket_version,
                 http::field::sec_websocket_extensions, http::field::sec_websocket_protocol}) {
    if (auto it = client.find(f); it != client.end()) req.set(f, it->value());
  }
  return req;
}

Result<http::response<http::empty_body>> make_client_answer(const http::response_header<>& up) {
  if (up.result() != http::status::switching_protocols) {
    return bad_upstream("browser refused the WebSocket upgrade (" +
                        std::to_string(up.result_int()) + ")");
  }
  auto accept = up.find(http::field::sec_websocket_accept);
  if (accept == up.end() || !token68(accept->value(), 64)) {
    return bad_upstream("browser answer lacks Sec-WebSocket-Accept");
  }
  http::response<http::empty_body> res{http::status::switching_protocols, 11};
  res.set(http::field::upgrade, "websocket");
  res.set(http::field::connection, "Upgrade");
  res.set(http::field::sec_websocket_accept, accept->value());
  for (auto f : {http::field::sec_websocket_extensions, http::field::sec_websocket_protocol}) {
    if (auto it = up.find(f); it != up.end() && token68(it->value(), 256)) {
      res.set(f, it->value());
    }
  }
  return res;
}

net::awaitable<Result<http::response<http::empty_body>>> upstream_handshake(
    TunnelSocket& tunnel, beast::flat_buffer& tunnel_buffer,
    const http::request_header<>& client_request, const std::string& path, int port,
    std::chrono::milliseconds timeout) {
  // A client that gave up leaves nothing waiting here for good.
  Deadline deadline(tunnel, timeout);
  boost::system::error_code ec;
  auto upgrade = make_upstream_upgrade(client_request, path, port);
  co_await http::async_write(tunnel, upgrade, net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return bad_upstream("writing upgrade: " + ec.message());
  http::response_parser<http::empty_body> parser;
  parser.header_limit(kMaxUpstreamHeader);
  co_await http::async_read_header(tunnel, tunnel_buffer, parser,
                                   net::redirect_error(net::use_awaitable, ec));
  if (ec && deadline.expired()) {
    co_return bad_upstream("the browser did not answer the upgrade within " +
                           std::to_string(timeout.count() / 1000) + " s");
  }
  if (ec) co_return bad_upstream("reading upgrade answer: " + ec.message());
  co_return make_client_answer(parser.get());
}

}  // namespace cabin::cdp
