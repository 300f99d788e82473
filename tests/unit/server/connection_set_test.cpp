// ConnectionSet and the pump threads: a connection moved to a pump thread stays in the set, a
// closer taken before the move still reaches it, and shutdown's wait has a deadline.
// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include "server/http/connection_set.h"

#include <sys/socket.h>

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

#include "common/pump.h"
#include "common/ws_frames.h"
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

TEST_CASE("go_away_all ends a connection moved to a pump thread, on that thread") {
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

  set.go_away_all();
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

TEST_CASE("a connection that joins after go_away_all is asked to close at once") {
  net::io_context io(1);
  ConnectionSet set(io.get_executor());
  set.go_away_all();
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

// A relayed WebSocket (the CDP bridge's, a preview's) between a blocking client and a blocking
// "browser", its pump running on `io` in a thread of its own.
struct Relay {
  Relay() : cp(io), bp(io), set(io.get_executor()) {
    timeval tv{10, 0};  // a read that would hang fails the test instead
    setsockopt(cp.client.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ClientStream client(beast::tcp_stream(std::move(*cp.server)), &set);
    net::co_spawn(io, pump_websocket(std::move(client), std::move(bp.client)),
                  [this](std::exception_ptr) { ended.set_value(); });
    runner = std::thread([this] { io.run(); });
  }
  ~Relay() {
    boost::system::error_code ec;
    cp.client.close(ec);
    (*bp.server).close(ec);
    (void)ended_future.wait_for(10s);
    io.stop();
    runner.join();
  }
  // Asks the connections to go away and waits until the request has run on `io`.
  void go_away() {
    set.go_away_all();
    std::promise<void> ran;
    net::post(io, [&] { ran.set_value(); });
    REQUIRE(ran.get_future().wait_for(10s) == std::future_status::ready);
  }
  void browser_sends(const std::string& bytes) { net::write(*bp.server, net::buffer(bytes)); }
  std::string client_reads(size_t n) {
    std::string got(n, '\0');
    net::read(cp.client, net::buffer(got));
    return got;
  }
  // Everything until the connection ends; `ec` how it ended.
  std::string client_reads_to_end(boost::system::error_code& ec) {
    std::string all;
    std::array<char, 4096> buf;
    for (;;) {
      const size_t n = cp.client.read_some(net::buffer(buf), ec);
      if (ec) return all;
      all.append(buf.data(), n);
    }
  }

  net::io_context io{1};
  Pair cp;  // client
  Pair bp;  // browser: .client is the relay's side
  ConnectionSet set;
  std::promise<void> ended;
  std::future<void> ended_future = ended.get_future();
  std::thread runner;
};

std::string ws_frame(uint8_t first, const std::string& payload) {
  std::string f(1, static_cast<char>(first));
  if (payload.size() < 126) {
    f += static_cast<char>(payload.size());
  } else {
    f += static_cast<char>(126);
    f += static_cast<char>(payload.size() >> 8);
    f += static_cast<char>(payload.size() & 0xff);
  }
  return f + payload;
}

const std::string kGoingAway = std::string("\x88\x16\x03\xe9", 4) + "server shutting down";

TEST_CASE("going away puts a 1001 close frame after the relayed frame in progress") {
  Relay r;
  const std::string big = ws_frame(0x82, std::string(500, 'a') + std::string(500, 'b'));
  r.browser_sends(big.substr(0, 504));
  CHECK(r.client_reads(504) == big.substr(0, 504));
  r.go_away();
  // The frame's rest goes down, then the close frame; the browser's next frame does not.
  r.browser_sends(big.substr(504) + ws_frame(0x81, "next"));
  boost::system::error_code ec;
  CHECK(r.client_reads_to_end(ec) == big.substr(504) + kGoingAway);
  CHECK(ec == net::error::eof);
  // The client's answer (here: its side closed) ends the relay.
  r.cp.client.shutdown(tcp::socket::shutdown_send);
  REQUIRE(r.ended_future.wait_for(10s) == std::future_status::ready);
}

TEST_CASE("going away between frames sends the close frame at once") {
  Relay r;
  r.browser_sends(ws_frame(0x81, "hello"));
  CHECK(r.client_reads(7) == ws_frame(0x81, "hello"));
  r.go_away();
  boost::system::error_code ec;
  CHECK(r.client_reads_to_end(ec) == kGoingAway);
  CHECK(ec == net::error::eof);
  // What the client sends on (its close frame) still reaches the browser.
  net::write(r.cp.client, net::buffer("\x88\x80\x01\x02\x03\x04", 6));
  std::string up(6, '\0');
  net::read(*r.bp.server, net::buffer(up));
  CHECK(up == std::string("\x88\x80\x01\x02\x03\x04", 6));
}

TEST_CASE("a relayed stream that is no WebSocket is cut when going away") {
  Relay r;
  r.browser_sends("HTTP/1.1 200 OK\r\n");
  CHECK(r.client_reads(17) == "HTTP/1.1 200 OK\r\n");
  r.go_away();
  boost::system::error_code ec;
  CHECK(r.client_reads_to_end(ec).empty());
  CHECK((ec == net::error::eof || ec == net::error::connection_reset));
  REQUIRE(r.ended_future.wait_for(10s) == std::future_status::ready);
}

TEST_CASE("a relayed frame that never ends is cut after the grace time") {
  Relay r;
  r.browser_sends(ws_frame(0x82, std::string(1000, 'x')).substr(0, 14));
  CHECK(r.client_reads(14).size() == 14);
  const auto t0 = std::chrono::steady_clock::now();
  r.go_away();
  boost::system::error_code ec;
  CHECK(r.client_reads_to_end(ec).empty());
  CHECK((ec == net::error::eof || ec == net::error::connection_reset));
  CHECK(std::chrono::steady_clock::now() - t0 >= ws::kGoingAwayGrace - 100ms);
  REQUIRE(r.ended_future.wait_for(10s) == std::future_status::ready);
}

}  // namespace

