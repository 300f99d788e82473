// MetricsServer: the --metrics-listen address. Plain HTTP that answers GET /metrics without
// credentials and 404 to everything else, for a Prometheus inside the operator's network; it
// shares nothing with the API listener but the registry.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <string>

#include "common/result.h"

namespace cabin::http_api {

namespace net = boost::asio;

// A scraper keeps one connection; a few more allow for a second Prometheus and a person's curl.
inline constexpr size_t kMaxMetricsConnections = 16;
inline constexpr size_t kMaxMetricsHeaderBytes = 8 * 1024;
// A request must arrive whole within this, and a kept-alive connection may idle this long (a
// scrape interval is usually 15 to 60 s).
inline constexpr std::chrono::seconds kMetricsReadTimeout{10};
inline constexpr std::chrono::seconds kMetricsIdleTimeout{120};

class MetricsServer {
 public:
  // Runs on `ex`, which must be the thread that answers scrapes on the API listener too: the
  // registry's scrape-time gauges read the session manager.
  explicit MetricsServer(net::any_io_executor ex) : ex_(std::move(ex)), acceptor_(ex_) {}
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Binds and listens; port 0 picks a free port (see port()).
  Result<void> listen(const std::string& host, uint16_t port);
  uint16_t port() const { return acceptor_.local_endpoint().port(); }
  net::awaitable<void> run();
  // Stops accepting and closes every open connection.
  void stop();

 private:
  using Open = std::list<boost::beast::tcp_stream>;
  // Shares the list, not the server: a coroutine frame may be destroyed after the server.
  static net::awaitable<void> serve(std::shared_ptr<Open> open, Open::iterator it);

  net::any_io_executor ex_;
  net::ip::tcp::acceptor acceptor_;
  // Open connections, closed by stop(); each is erased by its own coroutine.
  std::shared_ptr<Open> open_ = std::make_shared<Open>();
  bool stopping_ = false;
};

}  // namespace cabin::http_api
