// HttpServer: the one listener; one coroutine per connection reads requests with bounded headers
// and bodies, routes them and hands WebSocket upgrades to the Api.
#pragma once

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <chrono>
#include <memory>
#include <set>

#include "common/result.h"
#include "server/http/api.h"
#include "server/http/client_stream.h"
#include "server/preview/preview_proxy.h"

namespace boost::asio::ssl {
class context;
}

namespace cabin::http_api {

inline constexpr size_t kMaxHeaderBytes = 16 * 1024;
inline constexpr size_t kMaxBodyBytes = 1024 * 1024;
inline constexpr std::chrono::seconds kReadTimeout{30};   // a request must arrive whole by then
// Keep-alive between requests: a connection that served none for this long (up to twice this,
// as a per-connection watch checks it) is closed.
inline constexpr std::chrono::seconds kIdleTimeout{120};
// After refusing a request whose body is still arriving: how long and how much to drain.
inline constexpr std::chrono::seconds kLingerTimeout{5};
inline constexpr size_t kMaxLingerBytes = 64 * 1024 * 1024;
inline constexpr std::chrono::seconds kTlsHandshakeTimeout{10};

class HttpServer {
 public:
  // tls: serve HTTPS with this context; null: plain HTTP.
  HttpServer(net::any_io_executor ex, Api& api, preview::PreviewProxy& previews,
             std::shared_ptr<net::ssl::context> tls = nullptr)
      : ex_(std::move(ex)), api_(api), previews_(previews), tls_(std::move(tls)), acceptor_(ex_) {}

  // Binds and listens; port 0 picks a free port (see port()).
  Result<void> listen(const std::string& host, uint16_t port);
  uint16_t port() const { return acceptor_.local_endpoint().port(); }
  net::awaitable<void> run();
  // Stops accepting and closes every open connection.
  void stop();

 private:
  net::awaitable<void> accept_tls(net::ip::tcp::socket socket);
  net::awaitable<void> serve(ClientStream stream);

  net::any_io_executor ex_;
  Api& api_;
  preview::PreviewProxy& previews_;
  std::shared_ptr<net::ssl::context> tls_;
  net::ip::tcp::acceptor acceptor_;
  // Live connections, so stop() can close them; entries remove themselves.
  std::set<std::shared_ptr<net::ip::tcp::socket>> open_;
  bool stopping_ = false;
};

}  // namespace cabin::http_api
