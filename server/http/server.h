// HttpServer: the one listener; one coroutine per connection reads requests with bounded headers
// and bodies, routes them and hands WebSocket upgrades to the Api.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "common/result.h"
#include "server/handlers/api.h"
#include "server/http/client_stream.h"
#include "server/http/connection_set.h"
#include "server/preview/preview_proxy.h"

namespace boost::asio::ssl {
class context;
}

namespace cabin::http_api {

inline constexpr size_t kMaxHeaderBytes = 16 * 1024;
inline constexpr size_t kMaxBodyBytes = 1024 * 1024;
inline constexpr std::chrono::seconds kReadTimeout{30};   // a request must arrive whole by then
// A new connection's first request head must arrive by then: idle sockets cost descriptors.
inline constexpr std::chrono::seconds kFirstRequestTimeout{10};
// After accept fails for want of descriptors or memory: how long to wait before trying again.
inline constexpr std::chrono::milliseconds kAcceptBackoff{100};
// Keep-alive between requests: a connection that served none for this long (up to twice this,
// as a per-connection watch checks it) is closed.
inline constexpr std::chrono::seconds kIdleTimeout{120};
// After refusing a request whose body is still arriving: how long and how much to drain.
inline constexpr std::chrono::seconds kLingerTimeout{5};
inline constexpr size_t kMaxLingerBytes = 64 * 1024 * 1024;
inline constexpr std::chrono::seconds kTlsHandshakeTimeout{10};
// A connection over a cap is told so within this (its TLS, the answer, reading what it sent),
// and at most this many at once; past that it is closed without a word.
inline constexpr std::chrono::seconds kRefusalTimeout{2};
inline constexpr size_t kMaxRefusing = 64;

// Client connections open at once: a connection over either is closed as soon as it is accepted.
struct ConnectionLimits {
  size_t max_total = 4096;
  size_t max_per_peer = 256;
};

class HttpServer {
 public:
  // tls: serve HTTPS with this context; null: plain HTTP.
  HttpServer(net::any_io_executor ex, Api& api, preview::PreviewProxy& previews,
             std::shared_ptr<net::ssl::context> tls = nullptr, ConnectionLimits limits = {})
      : ex_(std::move(ex)),
        api_(api),
        previews_(previews),
        tls_(std::move(tls)),
        limits_(limits),
        acceptor_(ex_),
        connections_(ex_) {}

  // Binds and listens; port 0 picks a free port (see port()).
  Result<void> listen(const std::string& host, uint16_t port);
  uint16_t port() const { return acceptor_.local_endpoint().port(); }
  net::awaitable<void> run();
  // Stops accepting and asks every open connection to go away, taken-over ones included (a
  // WebSocket with a close frame, 1001); then connections().wait_empty() waits for them.
  void stop();
  ConnectionSet& connections() { return connections_; }

 private:
  // Holds one connection's place in the counts from accept until its coroutine ends, whether
  // the request loop or a handler that took the connection over (CDP, VNC, frames, previews).
  struct Counts {
    size_t total = 0;                             // accepted and not yet ended
    std::map<net::ip::address, size_t> per_peer;  // the same, by client address
    size_t refusing = 0;                          // over a cap, being told so
  };
  // Shares the counts, not the server: a coroutine frame may be destroyed after the server.
  class Slot {
   public:
    Slot(std::shared_ptr<Counts> counts, net::ip::address peer);
    Slot(Slot&& o) noexcept = default;
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    Slot& operator=(Slot&&) = delete;
    ~Slot();

   private:
    std::shared_ptr<Counts> counts_;
    net::ip::address peer_;
  };
  // Logs a failed or refused accept at most once a second, with how many there were.
  void note_accept_problem(const std::string& what);

  net::awaitable<void> accept_tls(net::ip::tcp::socket socket, Slot slot);
  // A connection over a cap: told so (`answer`, with Retry-After and Connection: close) within a
  // short deadline, then closed; past kMaxRefusing at once, closed without a word.
  net::awaitable<void> refuse(net::ip::tcp::socket socket, Response answer);
  net::awaitable<void> serve(ClientStream stream, Slot slot);

  net::any_io_executor ex_;
  Api& api_;
  preview::PreviewProxy& previews_;
  std::shared_ptr<net::ssl::context> tls_;
  ConnectionLimits limits_;
  net::ip::tcp::acceptor acceptor_;
  // Every connection, from accept to its end, whoever holds it then.
  ConnectionSet connections_;
  std::shared_ptr<Counts> counts_ = std::make_shared<Counts>();
  std::chrono::steady_clock::time_point problem_logged_{};
  size_t problems_unlogged_ = 0;
  bool stopping_ = false;
};

}  // namespace cabin::http_api
