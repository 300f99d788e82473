#include "server/http/websocket.h"

#include <boost/beast/websocket.hpp>

namespace cabin::http_api {

WebSocket::WebSocket(ClientStream s)
    : ws_(std::make_unique<websocket::stream<ClientStream>>(std::move(s))) {}
WebSocket::WebSocket(WebSocket&&) noexcept = default;
WebSocket& WebSocket::operator=(WebSocket&&) noexcept = default;
WebSocket::~WebSocket() = default;

WebSocket::executor_type WebSocket::get_executor() { return ws_->get_executor(); }
ClientStream& WebSocket::next_layer() { return ws_->next_layer(); }

void WebSocket::set_option(const websocket::stream_base::timeout& t) { ws_->set_option(t); }
void WebSocket::set_option(websocket::stream_base::decorator d) { ws_->set_option(std::move(d)); }
void WebSocket::read_message_max(std::size_t n) { ws_->read_message_max(n); }
void WebSocket::binary(bool on) { ws_->binary(on); }
void WebSocket::text(bool on) { ws_->text(on); }
void WebSocket::auto_fragment(bool on) { ws_->auto_fragment(on); }

net::awaitable<void> WebSocket::async_accept(const http::request<http::string_body>& req, Token t) {
  co_await ws_->async_accept(req, net::redirect_error(net::use_awaitable, t.ec_));
}

net::awaitable<void> WebSocket::async_handshake(websocket::response_type& res,
                                                std::string_view host, std::string_view target,
                                                Token t) {
  co_await ws_->async_handshake(res, host, target, net::redirect_error(net::use_awaitable, t.ec_));
}

net::awaitable<std::size_t> WebSocket::async_read(beast::flat_buffer& buffer, Token t) {
  co_return co_await ws_->async_read(buffer, net::redirect_error(net::use_awaitable, t.ec_));
}

net::awaitable<std::size_t> WebSocket::async_write(net::const_buffer data, Token t) {
  co_return co_await ws_->async_write(data, net::redirect_error(net::use_awaitable, t.ec_));
}

net::awaitable<void> WebSocket::async_close(websocket::close_reason reason, Token t) {
  co_await ws_->async_close(reason, net::redirect_error(net::use_awaitable, t.ec_));
}

}  // namespace cabin::http_api
