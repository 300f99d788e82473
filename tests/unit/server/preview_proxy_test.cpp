// The preview proxy's stages on their own: the relay stages over Beast's test streams, failing at
// every operation in turn (a fail-count loop), and the checks (locate, check_origin, admit)
// against a fake sandbox's session. The whole proxy runs in the integration suite.
// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include "server/preview/preview_proxy.h"

#include <boost/asio/io_context.hpp>
#include <boost/beast/_experimental/test/fail_count.hpp>
#include <boost/beast/_experimental/test/stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <catch2/catch.hpp>
#include <optional>
#include <string>

#include "server/preview/preview_request.h"
#include "server/preview/relay.h"
#include "tests/unit/run_sync.h"
#include "tests/unit/server/fake_manager.h"

namespace {

using namespace cabin;
using cabin::testing::run_sync;
namespace beast = boost::beast;
namespace http = beast::http;
using TestStream = beast::test::stream;

// A stream whose reads give `input` and then end, as a peer that sent it and closed.
struct Source {
  Source(net::io_context& io, beast::test::fail_count& fc, const std::string& input)
      : in(io, fc), peer(io) {
    in.connect(peer);
    peer.write_some(net::buffer(input));
    peer.close();
  }
  TestStream in;
  TestStream peer;
};

// What a sink's peer received.
struct Sink {
  Sink(net::io_context& io, beast::test::fail_count& fc) : out(io, fc), peer(io) {
    out.connect(peer);
  }
  TestStream out;
  TestStream peer;
};

// Parses the head from `in`, then relays the body to `out` with `head` before it.
template <bool isRequest>
net::awaitable<boost::system::error_code> relay_message(TestStream& in, TestStream& out,
                                                        std::string head,
                                                        preview::Framing framing) {
  beast::flat_buffer buf;
  http::parser<isRequest, http::buffer_body> p;
  boost::system::error_code ec;
  co_await http::async_read_header(in, buf, p, net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return ec;
  std::string chunk(preview::kRelayChunk, '\0');
  co_return co_await preview::relay(in, buf, p, out, head, framing, chunk.data(), nullptr);
}

// Runs the relay failing at its n-th operation for n = 0, 1, …: each failure must come back as
// the test failure, without a crash or a leak, until a run passes every operation; returns what
// that run sent.
template <bool isRequest>
std::string relay_with_failures(const std::string& input, const std::string& head,
                                preview::Framing framing) {
  for (size_t n = 0; n < 200; ++n) {
    net::io_context io;
    beast::test::fail_count fc(n);
    Source src(io, fc, input);
    Sink sink(io, fc);
    auto ec = run_sync(io, relay_message<isRequest>(src.in, sink.out, head, framing));
    if (ec == beast::test::error::test_failure) continue;
    REQUIRE_FALSE(ec);
    return std::string(sink.peer.str());
  }
  FAIL("the relay never got through");
  return {};
}

TEST_CASE("a request body of known length is relayed as it is, after the new head", "[preview]") {
  const std::string sent = relay_with_failures<true>(
      "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\nhello world", "HEAD\r\n\r\n",
      preview::Framing::kLength);
  CHECK(sent == "HEAD\r\n\r\nhello world");
}

TEST_CASE("a chunked answer goes on chunked, with its chunks' bytes intact", "[preview]") {
  const std::string sent = relay_with_failures<false>(
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
      "H\r\n\r\n", preview::Framing::kChunked);
  // Pieces may be cut differently; what they carry may not.
  REQUIRE(sent.starts_with("H\r\n\r\n"));
  REQUIRE(sent.ends_with("0\r\n\r\n"));
  std::string body;
  std::string_view rest = std::string_view(sent).substr(5);
  while (!rest.starts_with("0\r\n")) {
    const size_t eol = rest.find("\r\n");
    REQUIRE(eol != std::string_view::npos);
    const size_t n = std::stoul(std::string(rest.substr(0, eol)), nullptr, 16);
    body += rest.substr(eol + 2, n);
    REQUIRE(rest.substr(eol + 2 + n, 2) == "\r\n");
    rest.remove_prefix(eol + 2 + n + 2);
  }
  CHECK(body == "hello world");
}

TEST_CASE("an answer that ends with the app's connection is chunked towards the client",
          "[preview]") {
  const std::string sent =
      relay_with_failures<false>("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nstreamed until EOF",
                                 "H\r\n\r\n", preview::Framing::kChunked);
  CHECK(sent.starts_with("H\r\n\r\n"));
  CHECK(sent.find("streamed until EOF") != std::string::npos);
  CHECK(sent.ends_with("0\r\n\r\n"));
}

TEST_CASE("the answer head passes over interim answers, but not a 101", "[preview]") {
  for (size_t n = 0; n < 50; ++n) {
    net::io_context io;
    beast::test::fail_count fc(n);
    Source src(io, fc,
               "HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n"
               "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    beast::flat_buffer buf;
    std::optional<http::response_parser<http::buffer_body>> parsed;
    auto ec = run_sync(io, preview::read_answer_head(src.in, buf, parsed, false));
    if (ec == beast::test::error::test_failure) continue;
    REQUIRE_FALSE(ec);
    CHECK(parsed->get().result_int() == 200);
    CHECK(parsed->content_length().value_or(0) == 2);
    break;
  }
  net::io_context io;
  beast::test::fail_count never(1000);
  Source ws(io, never, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\nframes");
  beast::flat_buffer buf;
  std::optional<http::response_parser<http::buffer_body>> parsed;
  REQUIRE_FALSE(run_sync(io, preview::read_answer_head(ws.in, buf, parsed, false)));
  CHECK(parsed->get().result_int() == 101);
}

// The proxy's checks, against a live session of a fake sandbox with one preview of port 3000.
struct Checks : cabin::testing::FakeManager {
  Checks() : session(create_ok()) {
    auto g = previews.create(session->id(), 3000, clock.unix_seconds() + 3600, nullptr);
    REQUIRE(g.ok());
    grant = *g;
    token = tokens.issue(session->id(), auth::preview_scope(3000, grant.id),
                         clock.unix_seconds() + 600, session->token_generation());
    config.preview_domain = "preview.test";
  }

  http::request_header<> request(http::verb method, const std::string& target,
                                 const std::string& host = "127.0.0.1:8080") {
    http::request_header<> h;
    h.method(method);
    h.target(target);
    h.version(11);
    h.set(http::field::host, host);
    return h;
  }
  std::string path(const std::string& rest = "/") { return "/preview/" + grant.id + rest; }
  std::string host_name(int port = 3000) const {
    return preview::preview_host(port, session->id(), "preview.test");
  }

  ServerConfig config;
  auth::TokenService tokens{{{"k1", std::string(64, 'a')}}, clock};
  auth::TokenConnections connections{io.get_executor()};
  preview::Previews previews{clock};
  preview::PreviewProxy proxy{config, *manager, tokens, connections, previews};
  sessions::SessionPtr session;
  preview::Grant grant;
  std::string token;
  preview::ConnectionState state;
};

std::string code_of(const http_api::Response& r) {
  auto j = nlohmann::json::parse(r.body(), nullptr, false);
  return j.is_object() ? j["error"].value("code", "") : "";
}

TEST_CASE("locate finds the grant by path or by host, and refuses what names none", "[preview]") {
  Checks c;
  bool path_based = false;
  auto by_path = c.proxy.locate(c.request(http::verb::get, c.path("/a?b=1")), path_based);
  REQUIRE(std::holds_alternative<preview::PreviewTarget>(by_path));
  CHECK(path_based);
  CHECK(std::get<preview::PreviewTarget>(by_path).upstream_target == "/a?b=1");
  CHECK(std::get<preview::PreviewTarget>(by_path).grant.id == c.grant.id);

  path_based = false;
  auto by_host = c.proxy.locate(c.request(http::verb::get, "/x", c.host_name()), path_based);
  REQUIRE(std::holds_alternative<preview::PreviewTarget>(by_host));
  CHECK_FALSE(path_based);
  CHECK(std::get<preview::PreviewTarget>(by_host).by_host);

  auto bare =
      c.proxy.locate(c.request(http::verb::get, "/preview/" + c.grant.id + "?q"), path_based);
  REQUIRE(std::holds_alternative<http_api::Response>(bare));
  CHECK(std::get<http_api::Response>(bare).result() == http::status::permanent_redirect);
  CHECK(std::get<http_api::Response>(bare)[http::field::location] == c.path("/?q"));

  auto none =
      c.proxy.locate(c.request(http::verb::get, "/preview/pv_nonexistent0000000/"), path_based);
  REQUIRE(std::holds_alternative<http_api::Response>(none));
  CHECK(std::get<http_api::Response>(none).result() != http::status::ok);

  auto rebound = c.proxy.locate(c.request(http::verb::get, c.path(), "evil.example"), path_based);
  REQUIRE(std::holds_alternative<http_api::Response>(rebound));
  CHECK(code_of(std::get<http_api::Response>(rebound)) == "unknown_host");

  auto worker = c.request(http::verb::get, c.path("/sw.js"));
  worker.set("Service-Worker", "script");
  auto refused = c.proxy.locate(worker, path_based);
  REQUIRE(std::holds_alternative<http_api::Response>(refused));
  CHECK(code_of(std::get<http_api::Response>(refused)) == "service_worker_refused");
}

TEST_CASE("check_origin lets a host-based preview's own pages change state, and no sibling",
          "[preview]") {
  Checks c;
  bool path_based = false;
  auto post = c.request(http::verb::post, "/form", c.host_name());
  auto t = std::get<preview::PreviewTarget>(c.proxy.locate(post, path_based));
  post.set(http::field::origin, "http://" + c.host_name());
  CHECK_FALSE(c.proxy.check_origin(post, t, false).has_value());
  post.set(http::field::origin, "http://" + c.host_name(3001));
  auto refused = c.proxy.check_origin(post, t, false);
  REQUIRE(refused.has_value());
  CHECK(code_of(*refused) == "cross_origin");
  // Reading is not changing state.
  auto get = c.request(http::verb::get, "/", c.host_name());
  get.set(http::field::origin, "http://elsewhere.test");
  CHECK_FALSE(c.proxy.check_origin(get, t, false).has_value());
}

TEST_CASE("admit turns a URL token into a cookie, then lets the cookie in until revocation",
          "[preview]") {
  Checks c;
  bool path_based = false;
  auto first = c.request(http::verb::get, c.path("/page?cabin_token=" + c.token + "&x=1"));
  auto t = std::get<preview::PreviewTarget>(c.proxy.locate(first, path_based));
  auto redirected = c.proxy.admit(first, t, *c.session, c.state, false);
  REQUIRE(std::holds_alternative<http_api::Response>(redirected));
  const auto& res = std::get<http_api::Response>(redirected);
  CHECK(res.result() == http::status::found);
  CHECK(res[http::field::location].find("cabin_token") == std::string_view::npos);
  const std::string cookie(res[http::field::set_cookie]);
  CHECK(cookie.find("HttpOnly") != std::string::npos);
  CHECK(cookie.find("Path=" + c.path("/")) != std::string::npos);

  auto without = c.request(http::verb::get, c.path("/page"));
  auto refused = c.proxy.admit(without, t, *c.session, c.state, false);
  REQUIRE(std::holds_alternative<http_api::Response>(refused));
  CHECK(code_of(std::get<http_api::Response>(refused)) == "unauthenticated");

  auto with = c.request(http::verb::get, c.path("/page"));
  with.set(http::field::cookie, "theme=dark; " + cookie.substr(0, cookie.find(';')));
  auto in = c.proxy.admit(with, t, *c.session, c.state, false);
  REQUIRE(std::holds_alternative<preview::Admission>(in));
  CHECK(std::get<preview::Admission>(in).kept_cookies == std::vector<std::string>{"theme=dark"});

  REQUIRE(c.manager->revoke_tokens(c.session->id()).ok());
  auto after = c.proxy.admit(with, t, *c.session, c.state, false);
  REQUIRE(std::holds_alternative<http_api::Response>(after));
  CHECK(code_of(std::get<http_api::Response>(after)) == "token_revoked");
}

}  // namespace
