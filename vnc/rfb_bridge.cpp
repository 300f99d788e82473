#include "vnc/rfb_bridge.h"

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

#include <array>
#include <memory>
#include <span>

namespace cabin::vnc {
namespace {

using tcp = net::ip::tcp;

constexpr size_t kReadChunk = 64 * 1024;
// A client that neither sends nor answers pings for this long is gone.
constexpr auto kIdleTimeout = std::chrono::seconds(60);
constexpr auto kHandshakeTimeout = std::chrono::seconds(30);

// The client's WebSocket and the other side's byte stream, and who has finished.
template <typename Stream>
struct Link {
  Link(WsStream w, Stream s) : ws(std::move(w)), stream(std::move(s)), done(ws.get_executor()) {
    done.expires_at(net::steady_timer::time_point::max());
  }
  WsStream ws;
  Stream stream;
  net::steady_timer done;
  bool stream_side_done = false;
  bool closing = false;
  BridgeStats stats;

  // Sends a close frame once, whichever side asks first.
  net::awaitable<void> close_ws(websocket::close_reason reason) {
    if (closing) co_return;
    closing = true;
    boost::system::error_code ec;
    co_await ws.async_close(reason, net::redirect_error(net::use_awaitable, ec));
  }
};

// Stream -> WebSocket, one binary message per read; sends a normal close at the stream's end.
template <typename Stream>
net::awaitable<void> stream_to_ws(std::shared_ptr<Link<Stream>> l, std::string first) {
  boost::system::error_code ec;
  if (!first.empty()) {
    co_await l->ws.async_write(net::buffer(first), net::redirect_error(net::use_awaitable, ec));
    l->stats.bytes_to_client += first.size();
  }
  auto buf = std::make_unique<std::array<char, kReadChunk>>();
  while (!ec) {
    const size_t n = co_await l->stream.async_read_some(net::buffer(*buf),
                                                        net::redirect_error(net::use_awaitable, ec));
    if (ec) break;
    co_await l->ws.async_write(net::buffer(buf->data(), n),
                               net::redirect_error(net::use_awaitable, ec));
    l->stats.bytes_to_client += n;
  }
  if (l->stats.close_reason.empty()) l->stats.close_reason = "sandbox side ended";
  co_await l->close_ws(websocket::close_code::normal);
}

// WebSocket -> stream through `transform` (false: protocol error, close with 1008) until either
// side ends; then waits for the other direction.
template <typename Stream, typename Transform>
net::awaitable<void> ws_to_stream(std::shared_ptr<Link<Stream>> l, Transform transform,
                                  std::function<void()> alive) {
  beast::flat_buffer in;
  std::string out;
  boost::system::error_code ec;
  for (;;) {
    co_await l->ws.async_read(in, net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      if (l->stats.close_reason.empty()) l->stats.close_reason = "client: " + ec.message();
      break;
    }
    if (alive) alive();
    out.clear();
    const auto* p = static_cast<const uint8_t*>(in.data().data());
    auto r = transform(std::span<const uint8_t>(p, in.size()), out);
    in.consume(in.size());
    if (!r) {
      l->stats.close_reason = r.error().message;
      boost::system::error_code ignored;
      l->stream.close(ignored);
      websocket::close_reason why(websocket::close_code::policy_error);
      why.reason = r.error().message.substr(0, 120);
      co_await l->close_ws(why);
      break;
    }
    if (out.empty()) continue;
    co_await net::async_write(l->stream, net::buffer(out),
                              net::redirect_error(net::use_awaitable, ec));
    if (ec) break;
    l->stats.bytes_to_sandbox += out.size();
  }
  boost::system::error_code ignored;
  l->stream.close(ignored);  // ends stream_to_ws's read
  if (!l->stream_side_done) {
    co_await l->done.async_wait(net::redirect_error(net::use_awaitable, ignored));
  }
  l->ws.next_layer().close(ignored);
}

template <typename Stream, typename Transform>
net::awaitable<BridgeStats> run_link(std::shared_ptr<Link<Stream>> l, std::string first,
                                     Transform transform, std::function<void()> alive) {
  auto ex = co_await net::this_coro::executor;
  net::co_spawn(ex, stream_to_ws(l, std::move(first)), [l](std::exception_ptr) {
    l->stream_side_done = true;
    l->done.cancel();
  });
  co_await ws_to_stream(l, std::move(transform), std::move(alive));
  co_return l->stats;
}

}  // namespace

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

net::awaitable<BridgeStats> serve_rfb_websocket(tcp::socket client,
                                                http::request<http::string_body> req,
                                                SandboxStream sandbox,
                                                beast::flat_buffer sandbox_buffer,
                                                RfbAccess access, std::function<void()> alive) {
  auto l = std::make_shared<Link<SandboxStream>>(WsStream(std::move(client)), std::move(sandbox));
  websocket::stream_base::timeout t{};
  t.handshake_timeout = kHandshakeTimeout;
  t.idle_timeout = kIdleTimeout;
  t.keep_alive_pings = true;
  l->ws.set_option(t);
  const auto proto = req.find(http::field::sec_websocket_protocol);
  const bool binary = proto != req.end() && offers_binary(proto->value());
  l->ws.set_option(websocket::stream_base::decorator([binary](websocket::response_type& res) {
    res.set(http::field::server, "cabind");
    if (binary) res.set(http::field::sec_websocket_protocol, kRfbSubprotocol);
  }));
  l->ws.read_message_max(kMaxWsMessage);
  l->ws.binary(true);
  l->ws.auto_fragment(false);
  boost::system::error_code ec;
  co_await l->ws.async_accept(req, net::redirect_error(net::use_awaitable, ec));
  if (ec) {
    BridgeStats s;
    s.close_reason = "WebSocket handshake: " + ec.message();
    co_return s;
  }
  std::string first = beast::buffers_to_string(sandbox_buffer.data());
  auto filter = std::make_shared<RfbClientFilter>(access);
  auto stats = co_await run_link(
      l, std::move(first),
      [filter](std::span<const uint8_t> in, std::string& out) { return filter->feed(in, out); },
      std::move(alive));
  stats.messages = filter->messages();
  stats.dropped = filter->dropped();
  co_return stats;
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
    co_return make_error(Errc::kUnavailable, "connect_failed",
                         "cannot connect to " + host + ":" + std::to_string(port) + ": " +
                             ec.message());
  }
  sock.set_option(tcp::no_delay(true), ec);
  WsStream ws(std::move(sock));
  websocket::stream_base::timeout t{};
  t.handshake_timeout = kHandshakeTimeout;
  t.idle_timeout = kIdleTimeout;
  t.keep_alive_pings = true;
  ws.set_option(t);
  ws.set_option(websocket::stream_base::decorator([key = std::move(api_key)](
                                                      websocket::request_type& req) {
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
    std::string detail = res.result_int() != 0 ? "HTTP " + std::to_string(res.result_int())
                                               : ec.message();
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
  auto l = std::make_shared<Link<tcp::socket>>(std::move(ws), std::move(client));
  co_await run_link(
      l, std::string(),
      [](std::span<const uint8_t> in, std::string& out) -> Result<void> {
        out.append(reinterpret_cast<const char*>(in.data()), in.size());
        return {};
      },
      std::function<void()>());
}

}  // namespace cabin::vnc
