#include "server/preview/proxy_head.h"

#include <catch2/catch.hpp>

using namespace cabin::preview;

namespace {

bool has_line(const std::string& head, const std::string& line) {
  return head.find("\r\n" + line + "\r\n") != std::string::npos;
}

http::request_header<> client_request() {
  http::request_header<> h;
  h.method(http::verb::post);
  h.target("/preview/prv_x/upload?a=1");
  h.version(11);
  h.set(http::field::host, "cabin.test:8443");
  h.set(http::field::connection, "keep-alive, X-Secret-Hop");
  h.set("X-Secret-Hop", "drop me");
  h.set(http::field::keep_alive, "timeout=5");
  h.set(http::field::te, "trailers");
  h.set(http::field::transfer_encoding, "chunked");
  h.set(http::field::content_length, "12");
  h.set(http::field::cookie, "cabin_preview=secret; app=1");
  h.set(http::field::expect, "100-continue");
  h.set(http::field::forwarded, "for=6.6.6.6");
  h.set("x-forwarded-for", "6.6.6.6");
  h.set("X-Real-IP", "6.6.6.6");
  h.set(http::field::authorization, "Bearer cabin_apikey");
  h.set(http::field::user_agent, "test/1");
  h.set("X-App-Header", "kept");
  return h;
}

}  // namespace

TEST_CASE("the app's request head: hop-by-hop, forged and Cabin's own fields never pass") {
  std::vector<std::string> cookies{"app=1"};
  UpstreamRequest r{.target = "/upload?a=1",
                    .port = 8000,
                    .client_ip = "10.0.0.7",
                    .original_host = "cabin.test:8443",
                    .tls = true,
                    .prefix = "/preview/prv_x",
                    .cookies = &cookies,
                    .framing = Framing::kLength,
                    .length = 12};
  std::string head;
  write_request_head(head, client_request(), r);
  CHECK(head.rfind("POST /upload?a=1 HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n", 0) == 0);
  CHECK(head.size() >= 4);
  CHECK(head.substr(head.size() - 4) == "\r\n\r\n");
  for (const char* gone :
       {"X-Secret-Hop", "Keep-Alive", "TE:", "Transfer-Encoding", "Expect", "cabin_preview",
        "6.6.6.6", "cabin.test:8443\r\nConnection", "Authorization", "cabin_apikey"}) {
    INFO(gone);
    CHECK(head.find(gone) == std::string::npos);
  }
  CHECK(has_line(head, "User-Agent: test/1"));
  CHECK(has_line(head, "X-App-Header: kept"));
  CHECK(has_line(head, "Cookie: app=1"));
  CHECK(has_line(head, "Content-Length: 12"));
  CHECK(has_line(head, "X-Forwarded-For: 10.0.0.7"));
  CHECK(has_line(head, "X-Forwarded-Proto: https"));
  CHECK(has_line(head, "X-Forwarded-Host: cabin.test:8443"));
  CHECK(has_line(head, "X-Forwarded-Prefix: /preview/prv_x"));
  CHECK(has_line(head, "Forwarded: for=\"10.0.0.7\";host=\"cabin.test:8443\";proto=https"));
  CHECK(head.find("Connection") == std::string::npos);
  CHECK(head.find("Host:") == head.find("Host: 127.0.0.1:8000"));

  head.clear();
  r.prefix = {};  // host-based: the same fields are left out
  write_request_head(head, client_request(), r);
  CHECK(head.find("cabin_apikey") == std::string::npos);

  head.clear();
  r.framing = Framing::kChunked;
  r.websocket = true;
  r.prefix = {};
  write_request_head(head, client_request(), r);
  CHECK(has_line(head, "Transfer-Encoding: chunked"));
  CHECK(head.find("Content-Length") == std::string::npos);
  CHECK(head.find("X-Forwarded-Prefix") == std::string::npos);
  CHECK(has_line(head, "Connection: Upgrade"));
  CHECK(has_line(head, "Upgrade: websocket"));
}

TEST_CASE("the client's answer head: framing, Cabin's cookie and paths under the prefix") {
  http::response_header<> h;
  h.result(http::status::found);
  h.version(10);
  h.set(http::field::connection, "close, X-Hop");
  h.set("X-Hop", "1");
  h.set(http::field::transfer_encoding, "chunked");
  h.set(http::field::content_length, "99");
  h.set(http::field::location, "/next");
  h.insert(http::field::set_cookie, "cabin_preview=forged; Path=/");
  h.insert(http::field::set_cookie, "sid=1; Path=/app");
  h.set(http::field::content_type, "text/plain");

  std::string head;
  write_response_head(
      head, h,
      {.prefix = "/preview/prv_x", .port = 8000, .framing = Framing::kChunked, .keep_alive = true});
  CHECK(head.rfind("HTTP/1.1 302 Found\r\n", 0) == 0);
  CHECK(head.find("cabin_preview") == std::string::npos);
  CHECK(head.find("X-Hop") == std::string::npos);
  CHECK(head.find("Content-Length") == std::string::npos);
  CHECK(head.find("Connection") == std::string::npos);
  CHECK(has_line(head, "Transfer-Encoding: chunked"));
  CHECK(has_line(head, "Location: /preview/prv_x/next"));
  CHECK(has_line(head, "Set-Cookie: sid=1; Path=/preview/prv_x/app"));
  CHECK(has_line(head, "Content-Type: text/plain"));

  head.clear();
  write_response_head(head, h, {.framing = Framing::kLength, .length = 5, .keep_alive = false});
  CHECK(has_line(head, "Location: /next"));
  CHECK(has_line(head, "Set-Cookie: sid=1; Path=/app"));
  CHECK(has_line(head, "Content-Length: 5"));
  CHECK(has_line(head, "Connection: close"));
  CHECK(head.find("Transfer-Encoding") == std::string::npos);

  head.clear();
  http::response_header<> up;
  up.result(http::status::switching_protocols);
  up.set(http::field::connection, "upgrade");
  up.set(http::field::upgrade, "WebSocket");
  up.set(http::field::sec_websocket_accept, "abc=");
  write_response_head(head, up, {.websocket = true});
  CHECK(head ==
        "HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Accept: abc=\r\n"
        "Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n");
}

TEST_CASE("the client's answer head: no service worker above the app, a sandbox under the prefix") {
  http::response_header<> h;
  h.result(http::status::ok);
  h.set("Service-Worker-Allowed", "/");
  h.set("Content-Security-Policy", "default-src 'self'");

  const std::string csp = "Content-Security-Policy: " + std::string(kPathPreviewCsp);
  std::string head;
  write_response_head(head, h, {.prefix = "/preview/prv_x", .framing = Framing::kLength});
  CHECK(head.find("Service-Worker-Allowed") == std::string::npos);
  // The app's own policy stays beside Cabin's: both apply.
  CHECK(has_line(head, "Content-Security-Policy: default-src 'self'"));
  CHECK(has_line(head, csp));
  CHECK(csp.find("allow-same-origin") == std::string::npos);

  head.clear();
  write_response_head(head, h, {.framing = Framing::kLength});  // host-based
  CHECK(head.find("Service-Worker-Allowed") == std::string::npos);
  CHECK(has_line(head, "Content-Security-Policy: default-src 'self'"));
  CHECK(head.find("sandbox") == std::string::npos);
}

TEST_CASE("the client's answer head: the app's cookies lose their Domain, Cabin's are dropped") {
  http::response_header<> h;
  h.result(http::status::ok);
  h.insert(http::field::set_cookie, "sid=1; Domain=preview.test; Path=/; domain=.x");
  h.insert(http::field::set_cookie, "__Host-cabin_preview=forged; Path=/; Secure");
  h.insert(http::field::set_cookie, "plain=2; Secure");

  std::string head;
  write_response_head(head, h, {.prefix = "/preview/prv_x", .framing = Framing::kLength});
  CHECK(head.find("forged") == std::string::npos);
  CHECK(has_line(head, "Set-Cookie: sid=1; Path=/preview/prv_x/"));
  CHECK(has_line(head, "Set-Cookie: plain=2; Secure; Path=/preview/prv_x/"));

  head.clear();
  write_response_head(head, h, {.framing = Framing::kLength});  // host-based
  CHECK(head.find("forged") == std::string::npos);
  CHECK(head.find("omain") == std::string::npos);
  CHECK(has_line(head, "Set-Cookie: sid=1; Path=/"));
  CHECK(has_line(head, "Set-Cookie: plain=2; Secure"));
}
