#include "vnc/rfb_bridge.h"

#include <array>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/websocket.hpp>
#include <memory>
#include <span>

#include "vnc/rfb_bridge_link.h"

namespace cabin::vnc {

using tcp = net::ip::tcp;
using namespace bridge_detail;

bool offers_binary(std::string_view protocols) {
  while (!protocols.empty()) {
    const size_t comma = protocols.find(',');
    std::string_view item = protocols.substr(0, comma);
    protocols = comma == std::string_view::npos ? std::string_view() : protocols.substr(comma + 1);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (item == kRfbSubprotocol) return true;
  }
  return false;
}

net::awaitable<Result<WsStream>> dial_rfb_websocket(std::string host, uint16_t port,
                                                    std::string target, std::string api_key) {
  auto ex = co_await net::this_coro::executor;
  boost::system::error_code ec;
  tcp::resolver resolver(ex);
  auto endpoints = co_await resolver.async_resolve(host, std::to_string(port),
                                                   net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return make_error(Errc::kUnavailable, "resolve_failed", host + ": " + ec.message());
  tcp::socket sock(ex);
  co_await net::async_connect(sock, endpoints, net::redirect_error(net::use_awaitable, ec));
  if (ec) {
    co_return make_error(
        Errc::kUnavailable, "connect_failed",
        "cannot connect to " + host + ":" + std::to_string(port) + ": " + ec.message());
  }
  sock.set_option(tcp::no_delay(true), ec);
  WsStream ws(std::move(sock));
  websocket::stream_base::timeout t{};
  t.handshake_timeout = kHandshakeTimeout;
  t.idle_timeout = kIdleTimeout;
  t.keep_alive_pings = true;
  ws.set_option(t);
  ws.set_option(
      websocket::stream_base::decorator([key = std::move(api_key)](websocket::request_type& req) {
        req.set(http::field::authorization, "Bearer " + key);
        req.set(http::field::sec_websocket_protocol, kRfbSubprotocol);
      }));
  ws.read_message_max(kMaxWsMessage * 16);  // server-to-client updates can be large
  ws.binary(true);
  ws.auto_fragment(false);
  websocket::response_type res;
  co_await ws.async_handshake(res, host + ":" + std::to_string(port), target,
                              net::redirect_error(net::use_awaitable, ec));
  if (ec) {
    std::string detail =
        res.result_int() != 0 ? "HTTP " + std::to_string(res.result_int()) : ec.message();
    if (!res.body().empty()) detail += ": " + res.body().substr(0, 512);
    co_return make_error(Errc::kUnavailable, "upgrade_refused", "the server refused: " + detail);
  }
  co_return std::move(ws);
}

net::awaitable<void> forward_rfb(tcp::socket client, WsStream ws) {
  boost::system::error_code ec;
  client.set_option(tcp::no_delay(true), ec);
  // Here the WebSocket is the server and the TCP connection the native client: bytes from the
  // WebSocket go to the client unchanged (the server filters what the client sends).
  auto l = std::make_shared<Link<WsStream, tcp::socket>>(std::move(ws), std::move(client));
  co_await run_link(
      l, std::string(),
      [](std::span<const uint8_t> in, std::string& out) -> Result<void> {
        out.append(reinterpret_cast<const char*>(in.data()), in.size());
        return {};
      },
      std::function<void()>());
}

}  // namespace cabin::vnc
