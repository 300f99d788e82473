#include <openssl/bio.h>
#include <openssl/ssl.h>

#include <catch2/catch.hpp>
#include <memory>
#include <vector>

#include "server/egress/client_hello.h"
#include "server/egress/proxy_request.h"

using namespace cabin::egress;

namespace {

// The first flight of a real OpenSSL client, with `sni` as its server name (empty: none).
std::vector<uint8_t> openssl_client_hello(const std::string& sni) {
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_client_method()),
                                                        SSL_CTX_free);
  REQUIRE(ctx);
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(ctx.get()), SSL_free);
  BIO* in = BIO_new(BIO_s_mem());
  BIO* out = BIO_new(BIO_s_mem());
  SSL_set_bio(ssl.get(), in, out);  // the SSL owns both now
  if (!sni.empty()) SSL_set_tlsext_host_name(ssl.get(), sni.c_str());
  SSL_set_connect_state(ssl.get());
  REQUIRE(SSL_do_handshake(ssl.get()) <= 0);  // waits for the server's answer
  std::vector<uint8_t> bytes(static_cast<size_t>(BIO_pending(out)));
  REQUIRE(!bytes.empty());
  REQUIRE(BIO_read(out, bytes.data(), static_cast<int>(bytes.size())) ==
          static_cast<int>(bytes.size()));
  return bytes;
}

// The same handshake message cut into records of at most `chunk` bytes.
std::vector<uint8_t> refragment(const std::vector<uint8_t>& record, size_t chunk) {
  const std::vector<uint8_t> message(record.begin() + 5, record.end());
  std::vector<uint8_t> out;
  for (size_t i = 0; i < message.size(); i += chunk) {
    const size_t n = std::min(chunk, message.size() - i);
    out.insert(out.end(), {22, 3, 1, static_cast<uint8_t>(n >> 8), static_cast<uint8_t>(n)});
    out.insert(out.end(), message.begin() + static_cast<long>(i),
               message.begin() + static_cast<long>(i + n));
  }
  return out;
}

std::vector<uint8_t> bytes_of(std::string_view s) { return {s.begin(), s.end()}; }

}  // namespace

TEST_CASE("parse_client_hello reads the server name of a real OpenSSL ClientHello") {
  const auto hello = openssl_client_hello("site.test");
  auto h = parse_client_hello(hello);
  REQUIRE(h.status == ClientHello::Status::kDone);
  CHECK(h.server_name == "site.test");
  CHECK(h.length == hello.size());
  auto more = hello;
  more.insert(more.end(), {23, 3, 3, 0, 1, 0});  // the next record does not change the answer
  CHECK(parse_client_hello(more).length == hello.size());

  auto none = parse_client_hello(openssl_client_hello(""));
  REQUIRE(none.status == ClientHello::Status::kDone);
  CHECK_FALSE(none.server_name);

  // Every proper prefix asks for more; none is mistaken for a whole hello.
  for (size_t n = 0; n < hello.size(); ++n) {
    INFO(n);
    CHECK(parse_client_hello(std::span(hello).first(n)).status == ClientHello::Status::kNeedMore);
  }
  // Cut into records of 100 and of 1 byte: the same answer.
  for (size_t chunk : {100, 1}) {
    INFO(chunk);
    auto split = refragment(hello, chunk);
    auto s = parse_client_hello(split);
    REQUIRE(s.status == ClientHello::Status::kDone);
    CHECK(s.server_name == "site.test");
  }
}

TEST_CASE("parse_client_hello refuses what is not a ClientHello, and oversized ones") {
  auto http = parse_client_hello(bytes_of("GET / HTTP/1.1\r\nHost: a\r\n\r\n"));
  CHECK(http.status == ClientHello::Status::kInvalid);
  CHECK(http.error == "not a TLS handshake record");
  CHECK(parse_client_hello(bytes_of("\x16\x02")).status == ClientHello::Status::kInvalid);
  auto hello = openssl_client_hello("site.test");
  auto bad_type = hello;
  bad_type[5] = 2;  // a ServerHello
  CHECK(parse_client_hello(bad_type).status == ClientHello::Status::kInvalid);
  auto huge = hello;
  huge[6] = 0x01;  // handshake length above 64 KiB
  CHECK(parse_client_hello(huge).error == "the ClientHello is larger than 16 KiB");
  auto short_ext = hello;
  short_ext.pop_back();  // the record length says so, the handshake length does not
  const size_t record_len = (size_t{short_ext[3]} << 8 | short_ext[4]) - 1;
  short_ext[3] = static_cast<uint8_t>(record_len >> 8);
  short_ext[4] = static_cast<uint8_t>(record_len);
  CHECK(parse_client_hello(short_ext).status != ClientHello::Status::kDone);
  // A record after another record type (alert) is not a ClientHello.
  auto alert = hello;
  alert[0] = 21;
  CHECK(parse_client_hello(alert).status == ClientHello::Status::kInvalid);
}

TEST_CASE("parse_authority: a port, brackets for IPv6, no userinfo, no escapes") {
  auto a = parse_authority("EXAMPLE.com:443");
  REQUIRE(a);
  CHECK(a->host.name == "example.com");
  CHECK(a->port == 443);
  CHECK(a->to_string() == "example.com:443");
  auto v6 = parse_authority("[2001:DB8::1]:8443");
  REQUIRE(v6);
  CHECK(v6->to_string() == "[2001:db8::1]:8443");
  auto ip = parse_authority("0x7f.1:80");
  REQUIRE(ip);
  CHECK(ip->to_string() == "127.0.0.1:80");
  auto dflt = parse_authority("example.com", 80);
  REQUIRE(dflt);
  CHECK(dflt->port == 80);
  for (const char* bad :
       {"example.com", "example.com:", "example.com:0", "example.com:65536", "example.com:+443",
        "example.com:0443", "u:p@example.com:443", "example.com:443/", "ex%61mple.com:443",
        "2001:db8::1:443", "[2001:db8::1]443", "[2001:db8::1", "example.com :443", ":443",
        "example.com\r\nX: y:443", "example.com:443#"}) {
    INFO(bad);
    CHECK_FALSE(parse_authority(bad));
  }
}

TEST_CASE("parse_proxy_target: CONNECT and absolute-form requests, with their Host") {
  auto c = parse_proxy_target("CONNECT", "example.com:443", "example.com:443");
  REQUIRE(c);
  CHECK(c->tunnel);
  CHECK(c->authority.to_string() == "example.com:443");
  CHECK(parse_proxy_target("CONNECT", "example.com:443", ""));
  CHECK_FALSE(parse_proxy_target("CONNECT", "example.com:443", "other.test:443"));
  CHECK_FALSE(parse_proxy_target("CONNECT", "example.com", ""));
  CHECK_FALSE(parse_proxy_target("CONNECT", "http://example.com:443/", ""));

  auto g = parse_proxy_target("GET", "http://Example.com/a/b?q=1", "example.com");
  REQUIRE(g);
  CHECK_FALSE(g->tunnel);
  CHECK(g->authority.to_string() == "example.com:80");
  CHECK(g->origin_target == "/a/b?q=1");
  auto bare = parse_proxy_target("HEAD", "HTTP://example.com:8080", "example.com:8080");
  REQUIRE(bare);
  CHECK(bare->origin_target == "/");
  auto query = parse_proxy_target("GET", "http://example.com?x", "example.com:80");
  REQUIRE(query);
  CHECK(query->origin_target == "/?x");
  // Host must name the URL's authority: no fronting a second host behind an allowed one.
  CHECK_FALSE(parse_proxy_target("GET", "http://example.com/", "evil.test"));
  CHECK_FALSE(parse_proxy_target("GET", "http://example.com/", "example.com:81"));
  CHECK_FALSE(parse_proxy_target("GET", "http://example.com/", ""));
  CHECK_FALSE(parse_proxy_target("GET", "/index.html", "example.com"));
  CHECK_FALSE(parse_proxy_target("OPTIONS", "*", "example.com"));
  CHECK_FALSE(parse_proxy_target("GET", "https://example.com/", "example.com"));
  CHECK_FALSE(parse_proxy_target("GET", "ftp://example.com/", "example.com"));
  CHECK_FALSE(parse_proxy_target("GET", "http://u:p@example.com/", "example.com"));
  CHECK_FALSE(parse_proxy_target("GET", "http://example.com/#frag", "example.com"));
  CHECK_FALSE(parse_proxy_target("GET", "http://example.com/a b", "example.com"));
  CHECK_FALSE(parse_proxy_target("G T", "http://example.com/", "example.com"));
  CHECK_FALSE(parse_proxy_target("GET", "http://example.com/" + std::string(kMaxProxyTarget, 'a'),
                                 "example.com"));
}
