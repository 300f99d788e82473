// ClientStream: one accepted client connection, plain TCP or TLS, behind a single type so the
// server, the bridges and the preview proxy are written once for both.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/role.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <memory>
#include <optional>

#include "server/http/responses.h"

namespace cabin::http_api {

namespace net = boost::asio;
namespace beast = boost::beast;

class ClientStream {
 public:
  using executor_type = net::any_io_executor;
  using Plain = beast::tcp_stream;
  using Tls = beast::ssl_stream<beast::tcp_stream>;

  explicit ClientStream(Plain s) : plain_(std::move(s)) {}
  // The handshake has been done.
  explicit ClientStream(std::unique_ptr<Tls> s) : tls_(std::move(s)) {}
  ClientStream(ClientStream&&) = default;
  ClientStream& operator=(ClientStream&&) = default;

  executor_type get_executor() { return tcp().get_executor(); }
  bool is_tls() const { return tls_ != nullptr; }

  // The TCP layer: timeouts (expires_after/never apply to TLS records too) and the socket.
  beast::tcp_stream& tcp() { return tls_ ? tls_->next_layer() : *plain_; }
  net::ip::tcp::socket& socket() { return tcp().socket(); }

  template <typename MutableBufferSequence, typename Token>
  auto async_read_some(const MutableBufferSequence& buffers, Token&& token) {
    return net::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
        [this](auto handler, const MutableBufferSequence& b) {
          if (tls_) {
            tls_->async_read_some(b, std::move(handler));
          } else {
            plain_->async_read_some(b, std::move(handler));
          }
        },
        token, buffers);
  }

  template <typename ConstBufferSequence, typename Token>
  auto async_write_some(const ConstBufferSequence& buffers, Token&& token) {
    return net::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
        [this](auto handler, const ConstBufferSequence& b) {
          if (tls_) {
            tls_->async_write_some(b, std::move(handler));
          } else {
            plain_->async_write_some(b, std::move(handler));
          }
        },
        token, buffers);
  }

  // For the byte pump. Half-closing a TLS stream shuts the TCP side down without a close_notify:
  // the tunnelled protocol (WebSocket, HTTP framing) already delimits its end.
  void shutdown(net::socket_base::shutdown_type what, boost::system::error_code& ec) {
    socket().shutdown(what, ec);
  }
  void close(boost::system::error_code& ec) { socket().close(ec); }

 private:
  std::optional<Plain> plain_;
  std::unique_ptr<Tls> tls_;
};

// Answers `res` on a connection a handler took over, then closes it: how such handlers refuse.
inline net::awaitable<void> refuse_connection(ClientStream& s, Response res) {
  res.keep_alive(false);
  boost::system::error_code ec;
  co_await http::async_write(s, res, net::redirect_error(net::use_awaitable, ec));
  s.shutdown(net::socket_base::shutdown_both, ec);
  s.close(ec);
}

// Beast's timeouts close the lowest layer through this (found by ADL).
inline void beast_close_socket(ClientStream& s) {
  boost::system::error_code ec;
  s.close(ec);
}

// WebSocket streams over a ClientStream end it through these (Beast finds them by ADL). The
// WebSocket close handshake has already happened; TLS ends without a close_notify, as above.
inline void teardown(beast::role_type, ClientStream& s, boost::system::error_code& ec) {
  s.shutdown(net::socket_base::shutdown_both, ec);
  s.close(ec);
}

template <typename TeardownHandler>
void async_teardown(beast::role_type, ClientStream& s, TeardownHandler&& handler) {
  boost::system::error_code ec;
  s.shutdown(net::socket_base::shutdown_both, ec);
  s.close(ec);
  net::post(s.get_executor(),
            [h = std::forward<TeardownHandler>(handler), ec]() mutable { h(ec); });
}

}  // namespace cabin::http_api
