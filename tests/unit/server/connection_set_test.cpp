// ConnectionSet and the pump threads: a connection moved to a pump thread stays in the set, a
// closer taken before the move still reaches it, and shutdown's wait has a deadline.
// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include "server/http/connection_set.h"

#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <catch2/catch.hpp>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "server/http/client_stream.h"
#include "server/http/io_pool.h"
#include "tests/unit/run_sync.h"

namespace {

using namespace cabin;
using namespace std::chrono_literals;
using cabin::testing::run_sync;
using http_api::ClientStream;
using http_api::ConnectionSet;
using http_api::IoPool;
using tcp = net::ip::tcp;
namespace beast = boost::beast;

// A loopback connection: the server's end accepted on `io`, the client's end blocking.
struct Pair {
  explicit Pair(net::io_context& io) : client(io) {
    tcp::acceptor acceptor(io, {net::ip::address_v4::loopback(), 0});
    client.connect(acceptor.local_endpoint());
    server.emplace(acceptor.accept());
  }
  tcp::socket client;
  std::optional<tcp::socket> server;
};

// Reads from `s` on its own executor until it fails; returns that error and the thread it ran on.
struct ReadEnd {
  boost::system::error_code ec;
  std::thread::id thread;
  // Cancelled while pending, or shut down before the next read began.
  bool closed() const { return ec == net::error::operation_aborted || ec == net::error::eof; }
};
net::awaitable<void> read_until_error(ClientStream& s, std::promise<ReadEnd>& done) {
  std::array<char, 256> buf;
  boost::system::error_code ec;
  while (!ec) {
    co_await s.async_read_some(net::buffer(buf), net::redirect_error(net::use_awaitable, ec));
  }
  done.set_value({ec, std::this_thread::get_id()});
}

// Destroys `s` on `ex`, where it runs, and waits for that: a socket goes before its context.
void destroy_on(const net::any_io_executor& ex, ClientStream s) {
  std::promise<void> gone;
  net::post(ex, [m = std::make_shared<ClientStream>(std::move(s)), &gone]() mutable {
    m.reset();
    gone.set_value();
  });
  REQUIRE(gone.get_future().wait_for(10s) == std::future_status::ready);
}

TEST_CASE("close_all ends a connection moved to a pump thread, on that thread") {
  net::io_context io(1);
  ConnectionSet set(io.get_executor());
  IoPool pool(1);
  Pair p(io);
  const int fd = p.server->native_handle();
  ClientStream control_side(beast::tcp_stream(std::move(*p.server)), &set);
  REQUIRE(set.size() == 1);
  auto ex = pool.next();
  auto moved = std::move(control_side).moved_to(ex);
  CHECK(moved.socket().native_handle() == fd);
  CHECK(set.size() == 1);

  // Bytes flow on the pump thread.
  std::promise<ReadEnd> done;
  auto ended = done.get_future();
  net::co_spawn(ex, read_until_error(moved, done), net::detached);
  net::write(p.client, net::buffer("hello", 5));

  set.close_all();
  REQUIRE(ended.wait_for(10s) == std::future_status::ready);
  auto end = ended.get();
  CHECK(end.closed());
  CHECK(end.thread != std::this_thread::get_id());
  // The client sees the connection end.
  std::array<char, 16> buf;
  boost::system::error_code ec;
  p.client.read_some(net::buffer(buf), ec);
  CHECK(ec == net::error::eof);
  destroy_on(ex, std::move(moved));
  CHECK(set.size() == 0);
  pool.stop();
}

TEST_CASE("a closer taken before the move still reaches the connection") {
  net::io_context io(1);
  ConnectionSet set(io.get_executor());
  IoPool pool(1);
  Pair p(io);
  ClientStream s(beast::tcp_stream(std::move(*p.server)), &set);
  auto close = s.closer();
  auto ex = pool.next();
  auto moved = std::move(s).moved_to(ex);
  std::promise<ReadEnd> done;
  auto ended = done.get_future();
  net::co_spawn(ex, read_until_error(moved, done), net::detached);
  close();
  REQUIRE(ended.wait_for(10s) == std::future_status::ready);
  CHECK(ended.get().closed());
  destroy_on(ex, std::move(moved));
  pool.stop();
}

TEST_CASE("a closer of a connection that ended does nothing") {
  net::io_context io(1);
  ConnectionSet set(io.get_executor());
  Pair p(io);
  std::function<void()> close;
  {
    ClientStream s(beast::tcp_stream(std::move(*p.server)), &set);
    close = s.closer();
  }
  CHECK(set.size() == 0);
  close();
  io.restart();
  CHECK(io.poll() == 0);  // nothing was posted
}

TEST_CASE("a connection that joins after close_all is asked to close at once") {
  net::io_context io(1);
  ConnectionSet set(io.get_executor());
  set.close_all();
  Pair p(io);
  ClientStream s(beast::tcp_stream(std::move(*p.server)), &set);
  std::promise<ReadEnd> done;
  auto ended = done.get_future();
  net::co_spawn(io, read_until_error(s, done), net::detached);
  io.restart();
  io.run_for(2s);
  REQUIRE(ended.wait_for(0s) == std::future_status::ready);
  CHECK(ended.get().closed());
}

TEST_CASE("wait_empty ends when the last connection leaves, or at its deadline") {
  net::io_context io(1);
  ConnectionSet set(io.get_executor());
  CHECK(run_sync(io, set.wait_empty(std::chrono::steady_clock::now() + 10s)));

  Pair p(io);
  auto s = std::make_unique<ClientStream>(beast::tcp_stream(std::move(*p.server)), &set);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_FALSE(run_sync(io, set.wait_empty(t0 + 50ms)));
  CHECK(std::chrono::steady_clock::now() - t0 >= 50ms);

  net::post(io, [&] { s.reset(); });
  CHECK(run_sync(io, set.wait_empty(std::chrono::steady_clock::now() + 30s)));
  CHECK(set.size() == 0);
}

}  // namespace
