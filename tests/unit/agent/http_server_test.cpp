#include "vm-images/agent/http_server.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <catch2/catch.hpp>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/unit/agent/server_fixture.h"
#include "tests/unit/agent/test_util.h"

using namespace cabin::agent;
using cabin::agent::testing::kSecret;
using cabin::agent::testing::ServerFixture;
using cabin::agent::testing::TempDir;
namespace beast = boost::beast;
namespace http = beast::http;
using local = net::local::stream_protocol;
using tcp = net::ip::tcp;
using json = nlohmann::json;

namespace {

http::response<http::string_body> roundtrip(local::socket& s, beast::flat_buffer& buf,
                                            const std::string& raw) {
  net::write(s, net::buffer(raw));
  http::response<http::string_body> res;
  http::read(s, buf, res);
  return res;
}

std::string request(const std::string& method, const std::string& target,
                    const std::string& body = "", bool with_secret = true) {
  std::string r = method + " " + target + " HTTP/1.1\r\nHost: agent\r\n";
  if (with_secret) r += std::string("X-Cabin-Agent-Secret: ") + kSecret + "\r\n";
  if (!body.empty() || method == "POST") {
    r +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  return r + "\r\n" + body;
}

bool peer_closed(local::socket& s, beast::flat_buffer& buf) {
  boost::system::error_code ec;
  http::response<http::string_body> res;
  http::read(s, buf, res, ec);
  return ec == http::error::end_of_stream || ec == net::error::eof ||
         ec == net::error::connection_reset;
}

std::string error_code_of(const http::response<http::string_body>& res) {
  return json::parse(res.body())["error"]["code"].get<std::string>();
}

// A TCP echo server on 127.0.0.1 that mirrors a half-close.
net::awaitable<void> echo_session(tcp::socket s) {
  char buf[4096];
  for (;;) {
    boost::system::error_code ec;
    size_t n =
        co_await s.async_read_some(net::buffer(buf), net::redirect_error(net::use_awaitable, ec));
    if (n)
      co_await net::async_write(s, net::buffer(buf, n),
                                net::redirect_error(net::use_awaitable, ec));
    if (ec) break;
  }
  boost::system::error_code ignored;
  s.shutdown(tcp::socket::shutdown_send, ignored);
}

net::awaitable<void> echo_server(tcp::acceptor& acc) {
  for (;;) {
    boost::system::error_code ec;
    tcp::socket s(acc.get_executor());
    co_await acc.async_accept(s, net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return;
    net::co_spawn(acc.get_executor(), echo_session(std::move(s)), net::detached);
  }
}

}  // namespace

TEST_CASE("http: missing or wrong secret is 401 and closes", "[agent][http]") {
  ServerFixture f;
  for (bool with_header : {false, true}) {
    auto s = f.connect();
    beast::flat_buffer buf;
    std::string raw = request("GET", "/agent/v1/health", "", false);
    if (with_header) raw.insert(raw.size() - 2, "X-Cabin-Agent-Secret: wrong\r\n");
    auto res = roundtrip(s, buf, raw);
    CHECK(res.result_int() == 401);
    CHECK(error_code_of(res) == "unauthenticated");
    CHECK(peer_closed(s, buf));
  }
  // A CONNECT without the secret never reaches the tunnel.
  auto s = f.connect();
  beast::flat_buffer buf;
  auto res = roundtrip(s, buf, "CONNECT 127.0.0.1:1 HTTP/1.1\r\n\r\n");
  CHECK(res.result_int() == 401);
}

TEST_CASE("http: a restored VM's agent takes its own secret, and the snapshot's opens nothing",
          "[agent][http]") {
  const std::string mine(64, 'b');
  cabin::agent_protocol::RestoredRequest sent;
  sent.secret = mine;
  sent.unix_ns = 1796300000000000000;
  sent.seed_hex = std::string(128, 'c');
  sent.machine_id = std::string(32, 'd');
  std::vector<cabin::agent_protocol::RestoredRequest> applied;
  bool helper_ok = false;
  ServerFixture f(1280, 800, [&](HttpServerOptions& o) {
    o.restored = [&](const cabin::agent_protocol::RestoredRequest& r)
        -> net::awaitable<cabin::Result<void>> {
      applied.push_back(r);
      if (!helper_ok)
        co_return cabin::make_error(cabin::Errc::kInternal, "restore_failed", "no clock");
      co_return cabin::Result<void>{};
    };
  });
  const std::string body = cabin::agent_protocol::to_json(sent).dump();
  {
    // The helper failed: the snapshot's secret still holds, the new one does not.
    auto s = f.connect();
    beast::flat_buffer buf;
    auto res = roundtrip(s, buf, request("POST", "/agent/v1/restored", body));
    CHECK(res.result_int() == 500);
    CHECK(roundtrip(s, buf, request("GET", "/agent/v1/health")).result_int() == 200);
  }
  helper_ok = true;
  {
    auto s = f.connect();
    beast::flat_buffer buf;
    CHECK(roundtrip(s, buf, request("POST", "/agent/v1/restored", "{}")).result_int() == 400);
    CHECK(roundtrip(s, buf, request("POST", "/agent/v1/restored", body)).result_int() == 200);
    REQUIRE(applied.size() == 2);
    CHECK(applied.back().machine_id == sent.machine_id);
    CHECK(applied.back().unix_ns == sent.unix_ns);
  }
  auto old_secret = f.connect();
  beast::flat_buffer buf;
  CHECK(roundtrip(old_secret, buf, request("GET", "/agent/v1/health")).result_int() == 401);
  auto s = f.connect();
  beast::flat_buffer buf2;
  std::string raw = request("GET", "/agent/v1/health", "", false);
  raw.insert(raw.size() - 2, "X-Cabin-Agent-Secret: " + mine + "\r\n");
  CHECK(roundtrip(s, buf2, raw).result_int() == 200);
}

TEST_CASE("http: an agent not in a VM refuses restored", "[agent][http]") {
  ServerFixture f;
  auto s = f.connect();
  beast::flat_buffer buf;
  auto res = roundtrip(s, buf, request("POST", "/agent/v1/restored", "{}"));
  CHECK(res.result_int() == 503);
  CHECK(error_code_of(res) == "not_supported");
}

TEST_CASE("http: bad requests get JSON errors on a kept-alive connection", "[agent][http]") {
  ServerFixture f;
  auto s = f.connect();
  beast::flat_buffer buf;

  auto bad_json = roundtrip(s, buf, request("POST", "/agent/v1/exec", "{not json"));
  CHECK(bad_json.result_int() == 400);
  CHECK(error_code_of(bad_json) == "invalid_json");

  auto unknown = roundtrip(s, buf, request("POST", "/agent/v1/exec", R"({"argv":["true"],"x":1})"));
  CHECK(unknown.result_int() == 400);
  CHECK_THAT(unknown.body(), Catch::Contains("unknown field"));

  auto not_found = roundtrip(s, buf, request("GET", "/agent/v1/nope"));
  CHECK(not_found.result_int() == 404);

  auto wrong_method = roundtrip(s, buf, request("POST", "/agent/v1/health", "{}"));
  CHECK(wrong_method.result_int() == 405);

  auto spawn = roundtrip(s, buf, request("POST", "/agent/v1/exec", R"({"argv":["/no/such"]})"));
  CHECK(spawn.result_int() == 400);
  CHECK(error_code_of(spawn) == "spawn_failed");

  auto bad_query = roundtrip(s, buf, request("GET", "/agent/v1/health?wait_ms=99999"));
  CHECK(bad_query.result_int() == 400);
}

TEST_CASE("http: header and body limits", "[agent][http]") {
  ServerFixture f;
  {
    auto s = f.connect();
    beast::flat_buffer buf;
    std::string raw = request("GET", "/agent/v1/health");
    raw.insert(raw.size() - 2, "X-Big: " + std::string(17 * 1024, 'a') + "\r\n");
    auto res = roundtrip(s, buf, raw);
    CHECK(res.result_int() == 431);
    CHECK(peer_closed(s, buf));
  }
  {
    auto s = f.connect();
    beast::flat_buffer buf;
    // Refused on the declared length, before the body is sent.
    std::string raw = request("POST", "/agent/v1/exec");
    raw.replace(raw.find("Content-Length: 0"), 17,
                "Content-Length: " + std::to_string(HttpServerOptions{}.body_limit + 1));
    auto res = roundtrip(s, buf, raw);
    CHECK(res.result_int() == 413);
  }
}

TEST_CASE("http: exec round trip", "[agent][http]") {
  ServerFixture f;
  auto s = f.connect();
  beast::flat_buffer buf;
  auto res = roundtrip(
      s, buf,
      request("POST", "/agent/v1/exec", R"({"argv":["sh","-c","cat; exit 7"],"stdin":"in"})"));
  REQUIRE(res.result_int() == 200);
  auto j = json::parse(res.body());
  CHECK(j["stdout"] == "in");
  CHECK(j["exit_code"] == 7);
  CHECK(j["timed_out"] == false);
}

TEST_CASE("http: health long-poll wakes on a state change", "[agent][http]") {
  ServerFixture f;
  auto s = f.connect();
  beast::flat_buffer buf;

  auto now = roundtrip(s, buf, request("GET", "/agent/v1/health"));
  REQUIRE(now.result_int() == 200);
  auto j = json::parse(now.body());
  CHECK(j["state"] == "starting");
  CHECK(j["width"] == 1280);
  CHECK_FALSE(j.contains("devtools"));

  // A short wait that nothing ends returns "starting" after the wait.
  auto t0 = std::chrono::steady_clock::now();
  auto waited = roundtrip(s, buf, request("GET", "/agent/v1/health?wait_ms=50"));
  CHECK(json::parse(waited.body())["state"] == "starting");
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(50));

  // A long wait returns as soon as the state changes.
  net::write(s, net::buffer(request("GET", "/agent/v1/health?wait_ms=60000")));
  f.on_server([&] {
    f.state.set_display(":5");
    f.state.set_ready({9222, "/devtools/browser/abc"});
  });
  http::response<http::string_body> ready;
  http::read(s, buf, ready);
  auto r = json::parse(ready.body());
  CHECK(r["state"] == "ready");
  CHECK(r["display"] == ":5");
  CHECK(r["devtools"]["port"] == 9222);
  CHECK(r["devtools"]["browser_path"] == "/devtools/browser/abc");

  f.on_server([&] { f.state.set_failed("chromium exited with status 1"); });
  auto failed = json::parse(roundtrip(s, buf, request("GET", "/agent/v1/health")).body());
  CHECK(failed["state"] == "failed");
  CHECK(failed["error"] == "chromium exited with status 1");
  CHECK_FALSE(failed.contains("devtools"));
}

TEST_CASE("http: CONNECT tunnels to a loopback echo server", "[agent][http][tunnel]") {
  ServerFixture f;
  tcp::acceptor acc(f.io, tcp::endpoint(net::ip::address_v4::loopback(), 0));
  const uint16_t port = acc.local_endpoint().port();
  f.on_server([&] { net::co_spawn(f.io, echo_server(acc), net::detached); });

  auto s = f.connect();
  // Bytes sent right behind the CONNECT request must reach the target first.
  std::string raw = "CONNECT 127.0.0.1:" + std::to_string(port) + " HTTP/1.1\r\nHost: x\r\n" +
                    "X-Cabin-Agent-Secret: " + kSecret + "\r\n\r\nearly|";
  net::write(s, net::buffer(raw));
  std::string in;
  size_t head = net::read_until(s, net::dynamic_buffer(in), "\r\n\r\n");
  CHECK(in.substr(0, head) == "HTTP/1.1 200 Connection Established\r\n\r\n");
  in.erase(0, head);
  if (in.size() < 6) {
    std::string more(6 - in.size(), '\0');
    net::read(s, net::buffer(more));
    in += more;
  }
  CHECK(in == "early|");

  std::string big(200 * 1024, 'z');  // larger than one pump buffer
  net::write(s, net::buffer(big));
  std::string back(big.size(), '\0');
  net::read(s, net::buffer(back));
  CHECK(back == big);

  // Half-close passes through: the echo server sees EOF, closes, and so do we.
  s.shutdown(local::socket::shutdown_send);
  char c;
  boost::system::error_code ec;
  s.read_some(net::buffer(&c, 1), ec);
  CHECK(ec == net::error::eof);

  f.on_server([&] { acc.close(); });
}

TEST_CASE("http: CONNECT refusals", "[agent][http][tunnel]") {
  ServerFixture f;
  auto connect_status = [&](const std::string& target) {
    auto s = f.connect();
    beast::flat_buffer buf;
    auto res = roundtrip(
        s, buf, "CONNECT " + target + " HTTP/1.1\r\nX-Cabin-Agent-Secret: " + kSecret + "\r\n\r\n");
    return res.result_int();
  };
  CHECK(connect_status("10.0.0.1:80") == 403);
  CHECK(connect_status("169.254.169.254:80") == 403);
  CHECK(connect_status("example.com:443") == 403);
  CHECK(connect_status("127.0.0.1:0") == 403);
  CHECK(connect_status("127.0.0.1:65536") == 403);

  // A port with nobody listening: bind one, then close it.
  uint16_t closed_port;
  {
    tcp::acceptor a(f.client_io, tcp::endpoint(net::ip::address_v4::loopback(), 0));
    closed_port = a.local_endpoint().port();
  }
  CHECK(connect_status("127.0.0.1:" + std::to_string(closed_port)) == 502);
}
