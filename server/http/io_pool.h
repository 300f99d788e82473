// IoPool: the threads that carry the byte pumps (--threads), one io_context each. The control
// plane (sessions, the agent calls, tokens, the store, HTTP handlers) stays on the main
// io_context; a pump moves its two sockets onto one of these contexts and runs there.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <memory>
#include <thread>
#include <vector>

#include "server/http/client_stream.h"

namespace cabin::http_api {

namespace net = boost::asio;

class IoPool {
 public:
  explicit IoPool(size_t threads);
  IoPool(const IoPool&) = delete;
  IoPool& operator=(const IoPool&) = delete;
  ~IoPool() { stop(); }

  // The executor for the next pump, round robin.
  net::any_io_executor next();
  size_t size() const { return contexts_.size(); }
  // Stops the threads, joins them and destroys what was still queued on them (the frames of
  // coroutines that never finished). Idempotent.
  void stop();

 private:
  using Guard = net::executor_work_guard<net::io_context::executor_type>;
  std::vector<std::unique_ptr<net::io_context>> contexts_;
  std::vector<Guard> guards_;
  std::vector<std::thread> threads_;
  std::atomic<size_t> next_{0};
};

// `s` run by `ex` from now on: a socket of another context is carried over by its descriptor. No
// operation may be pending on it. One whose endpoint cannot be read stays where it is.
template <typename Socket>
Socket moved_to(Socket s, const net::any_io_executor& ex) {
  boost::system::error_code ec;
  const auto local = s.local_endpoint(ec);
  if (ec) return s;
  const auto fd = s.release(ec);
  if (ec) return s;
  Socket moved(ex);
  moved.assign(local.protocol(), fd, ec);
  if (ec) {
    boost::system::error_code ignored;
    s.assign(local.protocol(), fd, ignored);  // stays where it was rather than be lost
    return s;
  }
  return moved;
}

// Runs `make()` (a callable returning an awaitable) on `ex` and waits for it where the caller
// runs: how a handler on the control executor hands its pump to a pump thread.
template <typename Make>
auto run_on(const net::any_io_executor& ex, Make make) {
  return net::co_spawn(ex, std::move(make), net::use_awaitable);
}

// Runs `pump(client, upstream)` (returning an awaitable) on a pool thread, both sockets moved
// there, and waits for it where the caller runs; without a pool, or for a client that cannot move
// (TLS), runs it here.
template <typename Upstream, typename Pump>
auto run_pump(IoPool* pool, ClientStream client, Upstream upstream, Pump pump)
    -> decltype(pump(std::move(client), std::move(upstream))) {
  if (!pool || !client.movable()) co_return co_await pump(std::move(client), std::move(upstream));
  auto ex = pool->next();
  // Named, not a temporary of the co_await expression: GCC 12 destroys those twice.
  auto run = [c = std::move(client).moved_to(ex), u = moved_to(std::move(upstream), ex),
              pump = std::move(pump)]() mutable { return pump(std::move(c), std::move(u)); };
  co_return co_await run_on(ex, std::move(run));
}

}  // namespace cabin::http_api
