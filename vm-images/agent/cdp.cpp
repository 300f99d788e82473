#include "vm-images/agent/cdp.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

namespace cabin::agent {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;

net::awaitable<nlohmann::json> devtools_get(net::any_io_executor ex, uint16_t port,
                                            const char* target, size_t body_limit) {
  beast::tcp_stream stream(ex);
  stream.expires_after(std::chrono::seconds(2));
  boost::system::error_code ec;
  co_await stream.async_connect(net::ip::tcp::endpoint(net::ip::address_v4::loopback(), port),
                                net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return nlohmann::json::value_t::discarded;
  http::request<http::empty_body> req{http::verb::get, target, 11};
  req.set(http::field::host, "127.0.0.1:" + std::to_string(port));
  co_await http::async_write(stream, req, net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return nlohmann::json::value_t::discarded;
  beast::flat_buffer buf;
  http::response_parser<http::string_body> parser;
  parser.body_limit(body_limit);
  co_await http::async_read(stream, buf, parser, net::redirect_error(net::use_awaitable, ec));
  if (ec || parser.get().result() != http::status::ok) co_return nlohmann::json::value_t::discarded;
  co_return nlohmann::json::parse(parser.get().body(), nullptr, false);
}

std::string debugger_path(const nlohmann::json& target, std::string_view prefix) {
  if (!target.is_object() || !target.contains("webSocketDebuggerUrl") ||
      !target["webSocketDebuggerUrl"].is_string()) {
    return {};
  }
  const auto& url = target["webSocketDebuggerUrl"].get_ref<const std::string&>();
  const auto at = url.find(prefix);
  return at == std::string::npos ? std::string() : url.substr(at);
}

net::awaitable<nlohmann::json> cdp_call(CdpSocket& ws, int id, const char* method,
                                        nlohmann::json params, const CdpEvents* on_event,
                                        std::string* why) {
  const std::string call =
      nlohmann::json{{"id", id}, {"method", method}, {"params", std::move(params)}}.dump();
  boost::system::error_code ec;
  co_await ws.async_write(net::buffer(call), net::redirect_error(net::use_awaitable, ec));
  if (ec) {
    if (why) *why = "the call was not sent: " + ec.message();
    co_return nlohmann::json::value_t::discarded;
  }
  for (;;) {
    beast::flat_buffer buf;
    co_await ws.async_read(buf, net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      if (why) *why = "no answer: " + ec.message();
      co_return nlohmann::json::value_t::discarded;
    }
    auto j = nlohmann::json::parse(beast::buffers_to_string(buf.data()), nullptr, false);
    if (!j.is_object()) continue;
    if (j.value("id", 0) != id) {  // an event, or another answer
      if (on_event && j.contains("method")) (*on_event)(j);
      continue;
    }
    if (!j.contains("result") || !j["result"].is_object()) {
      if (why) {
        const auto& e = j.contains("error") && j["error"].is_object() ? j["error"] : j;
        *why = "an error: " + e.value("message", std::string("(none)")).substr(0, 200);
      }
      co_return nlohmann::json::value_t::discarded;
    }
    co_return std::move(j["result"]);
  }
}

net::awaitable<bool> cdp_open(CdpSocket& ws, uint16_t port, const std::string& path,
                              std::chrono::seconds within) {
  beast::get_lowest_layer(ws).expires_after(within);
  boost::system::error_code ec;
  co_await beast::get_lowest_layer(ws).async_connect(
      net::ip::tcp::endpoint(net::ip::address_v4::loopback(), port),
      net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return false;
  co_await ws.async_handshake("127.0.0.1:" + std::to_string(port), path,
                              net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return false;
  ws.read_message_max(4 * 1024 * 1024);
  co_return true;
}

net::awaitable<void> cdp_close(CdpSocket& ws) {
  beast::get_lowest_layer(ws).expires_after(std::chrono::seconds(1));
  boost::system::error_code ec;
  co_await ws.async_close(websocket::close_code::normal,
                          net::redirect_error(net::use_awaitable, ec));
}

net::awaitable<nlohmann::json> cdp_call_once(net::any_io_executor ex, uint16_t port,
                                             const std::string& path, const char* method,
                                             nlohmann::json params, std::chrono::seconds within) {
  CdpSocket ws(ex);
  if (!co_await cdp_open(ws, port, path, within)) co_return nlohmann::json::value_t::discarded;
  auto result = co_await cdp_call(ws, 1, method, std::move(params));
  co_await cdp_close(ws);
  co_return result;
}

}  // namespace cabin::agent
