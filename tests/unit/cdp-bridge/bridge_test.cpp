// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <sys/socket.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <nlohmann/json.hpp>

#include "cdp-bridge/bridge.h"
#include "cdp-bridge/discovery.h"
#include "tests/unit/run_sync.h"

using namespace cabin;
using namespace std::chrono_literals;
using namespace cabin::cdp;
using nlohmann::json;

TEST_CASE("json/version points clients at cabind") {
  auto out = rewrite_version(
      R"({"Browser":"Chrome/156","Protocol-Version":"1.3","User-Agent":"UA","V8-Version":"1",
          "WebKit-Version":"2","webSocketDebuggerUrl":"ws://127.0.0.1:9222/devtools/browser/x",
          "extra":{"nested":true}})",
      "ws://cabin:8080/v1/sessions/s/cdp?token=t");
  REQUIRE(out);
  auto j = json::parse(*out);
  CHECK(j["webSocketDebuggerUrl"] == "ws://cabin:8080/v1/sessions/s/cdp?token=t");
  CHECK(j["Browser"] == "Chrome/156");
  CHECK_FALSE(j.contains("extra"));
  CHECK(out->find("9222") == std::string::npos);
  CHECK_FALSE(rewrite_version("[]", "x"));
  CHECK_FALSE(rewrite_version("not json", "x"));
  CHECK_FALSE(rewrite_version(std::string(kMaxDiscoveryBody + 1, ' '), "x"));
}

TEST_CASE("json/version copies the guest's text fields as text, whatever they hold") {
  auto out = rewrite_version(R"({"Android-Package":"ws://127.0.0.1:9222/devtools/browser/x"})",
                             "ws://cabin/v1/sessions/s/cdp");
  REQUIRE(out);
  auto j = json::parse(*out);
  CHECK(j["Android-Package"] == "ws://127.0.0.1:9222/devtools/browser/x");
  CHECK(j["webSocketDebuggerUrl"] == "ws://cabin/v1/sessions/s/cdp");
}

TEST_CASE("json/list rewrites every target and drops what cannot be addressed") {
  auto out = rewrite_list(
      R"([{"id":"AB12","type":"page","title":"T","url":"about:blank",
           "devtoolsFrontendUrl":"/devtools/inspector.html?ws=127.0.0.1:9222/devtools/page/AB12",
           "webSocketDebuggerUrl":"ws://127.0.0.1:9222/devtools/page/AB12"},
          {"id":"../x","type":"page","webSocketDebuggerUrl":"ws://127.0.0.1:9222/x"},
          {"id":7}, "junk",
          {"id":"CD34","type":"service_worker","title":"W"}])",
      "ws://cabin/v1/sessions/s/devtools/page/", "?token=t");
  REQUIRE(out);
  auto j = json::parse(*out);
  REQUIRE(j.size() == 2);
  CHECK(j[0]["webSocketDebuggerUrl"] == "ws://cabin/v1/sessions/s/devtools/page/AB12?token=t");
  CHECK_FALSE(j[0].contains("devtoolsFrontendUrl"));
  CHECK(j[1]["id"] == "CD34");
  CHECK_FALSE(j[1].contains("webSocketDebuggerUrl"));
  CHECK(out->find("9222") == std::string::npos);
  CHECK_FALSE(rewrite_list("{}", "p", ""));
}

TEST_CASE("the upgrade sent to the browser carries only WebSocket fields") {
  http::request_header<> client;
  client.method(http::verb::get);
  client.target("/v1/sessions/s/cdp?token=secret");
  client.set(http::field::host, "cabin.example:8080");
  client.set(http::field::upgrade, "websocket");
  client.set(http::field::connection, "Upgrade");
  client.set(http::field::sec_websocket_key, "dGhlIHNhbXBsZSBub25jZQ==");
  client.set(http::field::sec_websocket_version, "13");
  client.set(http::field::sec_websocket_extensions, "permessage-deflate");
  client.set(http::field::origin, "https://evil.example");
  client.set(http::field::cookie, "a=b");
  client.set(http::field::authorization, "Bearer key");
  auto up = make_upstream_upgrade(client, "/devtools/browser/abc", 9222);
  CHECK(up.target() == "/devtools/browser/abc");
  CHECK(up[http::field::host] == "127.0.0.1:9222");
  CHECK(up[http::field::sec_websocket_key] == "dGhlIHNhbXBsZSBub25jZQ==");
  CHECK(up[http::field::sec_websocket_extensions] == "permessage-deflate");
  CHECK(up.find(http::field::origin) == up.end());
  CHECK(up.find(http::field::cookie) == up.end());
  CHECK(up.find(http::field::authorization) == up.end());
}

TEST_CASE("the browser's answer is checked before the client sees it") {
  http::response_header<> up;
  up.result(http::status::switching_protocols);
  up.set(http::field::sec_websocket_accept, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
  up.set(http::field::set_cookie, "x=y");
  auto ok = make_client_answer(up);
  REQUIRE(ok);
  CHECK(ok->result() == http::status::switching_protocols);
  CHECK((*ok)[http::field::sec_websocket_accept] == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
  CHECK(ok->find(http::field::set_cookie) == ok->end());

  http::response_header<> refused;
  refused.result(http::status::forbidden);
  auto r = make_client_answer(refused);
  REQUIRE_FALSE(r);
  CHECK(r.error().errc == Errc::kBadGateway);

  http::response_header<> no_accept;
  no_accept.result(http::status::switching_protocols);
  CHECK_FALSE(make_client_answer(no_accept));
}

TEST_CASE("a browser that never answers the upgrade is given up on") {
  net::io_context io;
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
  const net::generic::stream_protocol unix_stream(AF_UNIX, 0);
  TunnelSocket tunnel(io, unix_stream, fds[0]);
  TunnelSocket browser(io, unix_stream, fds[1]);  // reads nothing, answers nothing
  beast::flat_buffer buffer;
  http::request_header<> client;
  client.method(http::verb::get);
  client.set(http::field::sec_websocket_key, "dGhlIHNhbXBsZSBub25jZQ==");
  const auto t0 = std::chrono::steady_clock::now();
  auto answer = cabin::testing::run_sync(
      io, upstream_handshake(tunnel, buffer, client, "/devtools/browser/abc", 9222, 300ms), 10s);
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  REQUIRE_FALSE(answer);
  CHECK(answer.error().code == "browser_handshake");
  CHECK(answer.error().message.find("did not answer") != std::string::npos);
}
