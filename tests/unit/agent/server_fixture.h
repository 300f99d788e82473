// ServerFixture: cabin-agent's HTTP server on a temp UNIX socket, run on its own thread, with the
// supervisor replaced by direct writes to AgentState.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <catch2/catch.hpp>
#include <functional>
#include <future>
#include <memory>
#include <thread>

#include "tests/unit/agent/test_util.h"
#include "vm-images/agent/agent_state.h"
#include "vm-images/agent/http_server.h"

namespace cabin::agent::testing {

inline constexpr const char* kSecret = "s3cret-for-tests";

struct ServerFixture {
  explicit ServerFixture(int width = 1280, int height = 800,
                         const std::function<void(HttpServerOptions&)>& tweak = {})
      : state(io.get_executor(), width, height) {
    HttpServerOptions o;
    o.listen.kind = ListenAddress::Kind::kUnix;
    o.listen.path = dir.path() + "/agent.sock";
    o.secret = kSecret;
    o.read_timeout = std::chrono::seconds(5);
    if (tweak) tweak(o);
    server = std::make_unique<HttpServer>(io.get_executor(), o, state);
    REQUIRE(server->start().ok());
    thread = std::thread([this] { io.run(); });
  }
  ~ServerFixture() {
    net::post(io, [this] { server->stop(); });
    work.reset();
    io.stop();
    thread.join();
  }
  ServerFixture(const ServerFixture&) = delete;
  ServerFixture& operator=(const ServerFixture&) = delete;

  // Runs `f` on the server's thread and waits for it.
  template <typename F>
  void on_server(F f) {
    std::promise<void> done;
    net::post(io, [&] {
      f();
      done.set_value();
    });
    done.get_future().wait();
  }
  net::local::stream_protocol::socket connect() {
    net::local::stream_protocol::socket s(client_io);
    s.connect(net::local::stream_protocol::endpoint(dir.path() + "/agent.sock"));
    return s;
  }

  TempDir dir;
  net::io_context io;
  net::executor_work_guard<net::io_context::executor_type> work{io.get_executor()};
  AgentState state;
  std::unique_ptr<HttpServer> server;
  std::thread thread;
  net::io_context client_io;
};

}  // namespace cabin::agent::testing
