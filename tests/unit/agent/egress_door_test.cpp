// The microVM's door out: guest connections to the egress port, each handed to one connection
// cabind keeps waiting at the agent, through the real HTTP server.
// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include "vm-images/agent/egress_door.h"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <catch2/catch.hpp>
#include <future>
#include <string>
#include <thread>

#include "common/agent_protocol.h"
#include "tests/unit/agent/test_util.h"
#include "vm-images/agent/agent_state.h"
#include "vm-images/agent/http_server.h"

using namespace cabin::agent;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using unix_socket = net::local::stream_protocol::socket;

namespace {

constexpr const char* kDoorSecret = "door-secret";

struct DoorFixture {
  DoorFixture() : state(io.get_executor(), 1280, 800), door(io.get_executor(), 0) {
    REQUIRE(door.start());
    HttpServerOptions o;
    o.listen.kind = ListenAddress::Kind::kUnix;
    o.listen.path = dir.path() + "/agent.sock";
    o.secret = kDoorSecret;
    o.egress_door = &door;
    server = std::make_unique<HttpServer>(io.get_executor(), o, state);
    REQUIRE(server->start().ok());
    thread = std::thread([this] { io.run(); });
  }
  ~DoorFixture() {
    std::promise<void> done;
    net::post(io, [&] {
      server->stop();
      door.stop();
      done.set_value();
    });
    done.get_future().wait();
    work.reset();
    io.stop();
    thread.join();
  }
  // cabind's side: a connection that asks to wait.
  unix_socket wait(const std::string& secret = kDoorSecret) {
    unix_socket s(client_io);
    s.connect(net::local::stream_protocol::endpoint(dir.path() + "/agent.sock"));
    const std::string req = "GET " + std::string(cabin::agent_protocol::kEgressWaitPath) +
                            " HTTP/1.1\r\nHost: agent\r\nX-Cabin-Agent-Secret: " + secret +
                            "\r\n\r\n";
    net::write(s, net::buffer(req));
    return s;
  }
  tcp::socket guest() {
    tcp::socket s(client_io);
    s.connect({net::ip::address_v4::loopback(), door.port()});
    return s;
  }
  template <typename S>
  static std::string read_n(S& s, size_t n) {
    std::string out(n, '\0');
    net::read(s, net::buffer(out));
    return out;
  }

  cabin::agent::testing::TempDir dir;
  net::io_context io;
  net::executor_work_guard<net::io_context::executor_type> work{io.get_executor()};
  AgentState state;
  EgressDoor door;
  std::unique_ptr<HttpServer> server;
  std::thread thread;
  net::io_context client_io;
};

const std::string kPaired(cabin::agent_protocol::kEgressPaired);

}  // namespace

TEST_CASE("egress door: a guest connection and a waiting one are paired, either coming first") {
  DoorFixture f;
  // The guest first: it waits in the queue until cabind's connection comes.
  auto g1 = f.guest();
  auto w1 = f.wait();
  CHECK(DoorFixture::read_n(w1, kPaired.size()) == kPaired);
  net::write(g1, net::buffer(std::string("CONNECT a:443")));
  CHECK(DoorFixture::read_n(w1, 13) == "CONNECT a:443");
  net::write(w1, net::buffer(std::string("HTTP/1.1 200")));
  CHECK(DoorFixture::read_n(g1, 12) == "HTTP/1.1 200");

  // cabind first: its connection waits until a guest program connects.
  auto w2 = f.wait();
  auto w3 = f.wait();
  auto g2 = f.guest();
  CHECK(DoorFixture::read_n(w2, kPaired.size()) == kPaired);  // the oldest waiter
  net::write(g2, net::buffer(std::string("two")));
  CHECK(DoorFixture::read_n(w2, 3) == "two");
  auto g3 = f.guest();
  CHECK(DoorFixture::read_n(w3, kPaired.size()) == kPaired);
  net::write(w3, net::buffer(std::string("three")));
  CHECK(DoorFixture::read_n(g3, 5) == "three");

  // One end closing ends the other.
  g2.close();
  boost::system::error_code ec;
  char c;
  net::read(w2, net::buffer(&c, 1), ec);
  CHECK(ec == net::error::eof);
}

TEST_CASE("egress door: a wait without the agent secret is refused, and pairs nothing") {
  DoorFixture f;
  auto bad = f.wait("wrong");
  std::string head(12, '\0');
  net::read(bad, net::buffer(head));
  CHECK(head == "HTTP/1.1 401");
  auto g = f.guest();
  auto good = f.wait();
  CHECK(DoorFixture::read_n(good, kPaired.size()) == kPaired);
}
