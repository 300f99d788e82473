// WebSocket: a Beast WebSocket stream over a ClientStream, compiled once (websocket.cpp). Beast's
// WebSocket is the heaviest template in the server; the frame viewers, the RFB bridge and
// vnc-forward share this one instantiation rather than each compiling their own.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/awaitable.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/websocket/rfc6455.hpp>
#include <boost/beast/websocket/stream_base.hpp>
#include <boost/beast/websocket/stream_fwd.hpp>
#include <cstddef>
#include <memory>
#include <string_view>

#include "server/http/client_stream.h"

namespace cabin::http_api {

namespace websocket = beast::websocket;

class WebSocket {
 public:
  using executor_type = ClientStream::executor_type;
  using next_layer_type = ClientStream;
  // What every operation completes with: `net::redirect_error(net::use_awaitable, ec)`, so that
  // code written against Beast's stream reads the same against this one.
  using Token = net::redirect_error_t<net::use_awaitable_t<>>;

  explicit WebSocket(ClientStream s);
  WebSocket(WebSocket&&) noexcept;
  WebSocket& operator=(WebSocket&&) noexcept;
  ~WebSocket();

  executor_type get_executor();
  // Beast's get_lowest_layer() finds the connection through this.
  ClientStream& next_layer();

  void set_option(const websocket::stream_base::timeout& t);
  void set_option(websocket::stream_base::decorator d);
  void read_message_max(std::size_t n);
  void binary(bool on);
  void text(bool on);
  void auto_fragment(bool on);

  // Server side: answers the upgrade request.
  net::awaitable<void> async_accept(const http::request<http::string_body>& req, Token t);
  // Client side: `res` receives the server's answer, also when it refuses.
  net::awaitable<void> async_handshake(websocket::response_type& res, std::string_view host,
                                       std::string_view target, Token t);
  // One whole message into `buffer`; answers pings and the close handshake meanwhile.
  net::awaitable<std::size_t> async_read(beast::flat_buffer& buffer, Token t);
  net::awaitable<std::size_t> async_write(net::const_buffer data, Token t);
  net::awaitable<void> async_close(websocket::close_reason reason, Token t);

 private:
  std::unique_ptr<websocket::stream<ClientStream>> ws_;
};

}  // namespace cabin::http_api
