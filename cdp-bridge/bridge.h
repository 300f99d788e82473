// CDP WebSocket bridge: forwards a client's WebSocket upgrade to Chromium through a tunnel, then
// pumps bytes both ways without parsing CDP messages (only where Chromium's frames end, so that a
// close frame can go in at shutdown).
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on
#include <boost/asio/awaitable.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <chrono>
#include <string>

#include "common/pump.h"
#include "common/result.h"

namespace cabin::cdp {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

using ClientSocket = net::ip::tcp::socket;
using TunnelSocket = net::generic::stream_protocol::socket;

// Header fields of a client upgrade that travel to the browser; everything else (cookies,
// Authorization, Origin, forwarding headers) stays on the host.
http::request<http::empty_body> make_upstream_upgrade(const http::request_header<>& client,
                                                      const std::string& path, int port);

// Checks the browser's answer and builds the one sent to the client.
Result<http::response<http::empty_body>> make_client_answer(const http::response_header<>& upstream);

// Sends the client's upgrade to the browser over the tunnel and reads its answer; returns the
// answer to give the client. Nothing is written to the client here. A browser that has not
// answered within `timeout` gets its tunnel closed (the answer is then an error).
net::awaitable<Result<http::response<http::empty_body>>> upstream_handshake(
    TunnelSocket& tunnel, beast::flat_buffer& tunnel_buffer,
    const http::request_header<>& client_request, const std::string& path, int port,
    std::chrono::milliseconds timeout);

// Gives the client its answer, forwards bytes either side sent early, then pumps until both
// directions end, counting the bytes relayed in `counts`. Client: any stream the byte pump takes
// (plain TCP, TLS).
template <typename Client>
net::awaitable<void> splice(Client client, beast::flat_buffer client_buffer,
                            http::response<http::empty_body> answer, TunnelSocket tunnel,
                            beast::flat_buffer tunnel_buffer, RelayCounts counts = {}) {
  boost::system::error_code ec;
  co_await http::async_write(client, answer, net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return;
  if (client_buffer.size() > 0) {
    const size_t n = co_await net::async_write(tunnel, client_buffer.data(),
                                               net::redirect_error(net::use_awaitable, ec));
    count_bytes(counts.up, n);
  }
  if (ec) co_return;
  // Chromium's first frames, read with its answer, go down through the pump's frame tracking.
  co_await pump_websocket(std::move(client), std::move(tunnel), counts,
                          beast::buffers_to_string(tunnel_buffer.data()));
}

}  // namespace cabin::cdp
