// The RFB bridge's relay, as templates over the client's WebSocket type: cabind serves plain and
// TLS clients through its own (server/http/websocket.h); vnc-forward dials cabind with it too.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <array>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/websocket/rfc6455.hpp>
#include <boost/beast/websocket/stream_base.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <span>

#include "common/byte_count.h"
#include "common/ws_frames.h"
#include "vnc/rfb_bridge.h"

namespace cabin::vnc {
namespace bridge_detail {

inline constexpr size_t kReadChunk = 64 * 1024;
// A client that neither sends nor answers pings for this long is gone.
inline constexpr auto kIdleTimeout = std::chrono::seconds(60);
inline constexpr auto kHandshakeTimeout = std::chrono::seconds(30);

// The client's WebSocket and the other side's byte stream, and who has finished.
template <typename Ws, typename Stream>
struct Link {
  Link(Ws w, Stream s) : ws(std::move(w)), stream(std::move(s)), done(ws.get_executor()) {
    done.expires_at(net::steady_timer::time_point::max());
  }
  Ws ws;
  Stream stream;
  net::steady_timer done;
  bool stream_side_done = false;
  bool closing = false;
  BridgeStats stats;
  RelayCounts counts;  // up: client messages after the filter; down: the sandbox's bytes

  // Sends a close frame once, whichever side asks first.
  net::awaitable<void> close_ws(websocket::close_reason reason) {
    if (closing) co_return;
    closing = true;
    boost::system::error_code ec;
    co_await ws.async_close(reason, net::redirect_error(net::use_awaitable, ec));
  }
};

// Stream -> WebSocket, one binary message per read; sends a normal close at the stream's end.
template <typename Ws, typename Stream>
net::awaitable<void> stream_to_ws(std::shared_ptr<Link<Ws, Stream>> l, std::string first) {
  boost::system::error_code ec;
  if (!first.empty()) {
    co_await l->ws.async_write(net::buffer(first), net::redirect_error(net::use_awaitable, ec));
    l->stats.bytes_to_client += first.size();
    count_bytes(l->counts.down, first.size());
  }
  auto buf = std::make_unique<std::array<char, kReadChunk>>();
  while (!ec) {
    const size_t n = co_await l->stream.async_read_some(
        net::buffer(*buf), net::redirect_error(net::use_awaitable, ec));
    if (ec) break;
    co_await l->ws.async_write(net::buffer(buf->data(), n),
                               net::redirect_error(net::use_awaitable, ec));
    l->stats.bytes_to_client += n;
    count_bytes(l->counts.down, n);
  }
  if (l->stats.close_reason.empty()) l->stats.close_reason = "sandbox side ended";
  co_await l->close_ws(websocket::close_code::normal);
}

// WebSocket -> stream through `transform` (false: protocol error, close with 1008) until either
// side ends; then waits for the other direction.
template <typename Ws, typename Stream, typename Transform>
net::awaitable<void> ws_to_stream(std::shared_ptr<Link<Ws, Stream>> l, Transform transform,
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
    count_bytes(l->counts.up, out.size());
  }
  boost::system::error_code ignored;
  l->stream.close(ignored);  // ends stream_to_ws's read
  if (!l->stream_side_done) {
    co_await l->done.async_wait(net::redirect_error(net::use_awaitable, ignored));
  }
  l->ws.next_layer().close(ignored);
}

// Cabind is shutting down: the client hears so (1001) and the relay ends with its answer.
template <typename Ws, typename Stream>
net::awaitable<void> go_away(std::shared_ptr<Link<Ws, Stream>> l) {
  if (l->stats.close_reason.empty()) l->stats.close_reason = ws::kGoingAwayReason;
  co_await l->close_ws(websocket::close_reason(websocket::close_code::going_away,
                                               ws::kGoingAwayReason));
}

template <typename Ws, typename Stream, typename Transform>
net::awaitable<BridgeStats> run_link(std::shared_ptr<Link<Ws, Stream>> l, std::string first,
                                     Transform transform, std::function<void()> alive) {
  auto ex = co_await net::this_coro::executor;
  // A client of cabind's connection set (not vnc-forward's own dial) hears of a shutdown.
  if constexpr (requires(Ws& w) { w.next_layer().on_going_away(std::function<void()>{}); }) {
    l->ws.next_layer().on_going_away([weak = std::weak_ptr<Link<Ws, Stream>>(l), ex] {
      if (auto l = weak.lock()) net::co_spawn(ex, go_away(l), net::detached);
    });
  }
  net::co_spawn(ex, stream_to_ws(l, std::move(first)), [l](std::exception_ptr) {
    l->stream_side_done = true;
    l->done.cancel();
  });
  co_await ws_to_stream(l, std::move(transform), std::move(alive));
  co_return l->stats;
}

}  // namespace bridge_detail

// Completes the WebSocket handshake for `req` (answering "binary" when offered), then carries
// bytes until either side ends. `sandbox_buffer` holds bytes already read from the sandbox.
// A malformed client message closes the WebSocket with 1008 (policy) and the reason. The
// `alive` callback runs for every client message, for activity tracking; may be empty.
// `Ws` is a WebSocket stream type over the accepted connection `client`, with Beast's interface.
// The bytes relayed are counted in `counts`.
template <typename Ws, typename Client>
net::awaitable<BridgeStats> serve_rfb_websocket(Client client, http::request<http::string_body> req,
                                                SandboxStream sandbox,
                                                beast::flat_buffer sandbox_buffer, RfbAccess access,
                                                std::function<void()> alive,
                                                RelayCounts counts = {}) {
  using namespace bridge_detail;
  auto l = std::make_shared<Link<Ws, SandboxStream>>(Ws(std::move(client)), std::move(sandbox));
  l->counts = counts;
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

}  // namespace cabin::vnc
