// The egress proxy end to end on loopback: real sockets, a real OpenSSL ClientHello, upstreams
// on 127.0.0.1 (opened to the policy as --egress-allow-host-cidr 127.0.0.0/8 opens it).
// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <openssl/bio.h>
#include <openssl/ssl.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "server/egress/proxy.h"
#include "server/egress/session_ca.h"
#include "server/egress/upstream.h"
#include "tests/unit/run_sync.h"

using namespace cabin::egress;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using cabin::testing::run_sync;
using cabin::testing::run_until;

namespace {

const auto kLoopback = net::ip::make_address("127.0.0.1");

std::string client_hello(const std::string& sni) {
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_client_method()),
                                                        SSL_CTX_free);
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(ctx.get()), SSL_free);
  BIO* out = BIO_new(BIO_s_mem());
  SSL_set_bio(ssl.get(), BIO_new(BIO_s_mem()), out);
  if (!sni.empty()) SSL_set_tlsext_host_name(ssl.get(), sni.c_str());
  SSL_set_connect_state(ssl.get());
  SSL_do_handshake(ssl.get());
  std::string bytes(static_cast<size_t>(BIO_pending(out)), '\0');
  BIO_read(out, bytes.data(), static_cast<int>(bytes.size()));
  return bytes;
}

// Accepts on `a` until it closes; each connection gets a coroutine of its own, `serve(socket)`.
template <typename Serve>
net::awaitable<void> accept_each(tcp::acceptor& a, Serve serve) {
  boost::system::error_code ec;
  for (;;) {
    auto s = std::make_shared<tcp::socket>(
        co_await a.async_accept(net::redirect_error(net::use_awaitable, ec)));
    if (ec) co_return;
    net::co_spawn(a.get_executor(), serve(s), net::detached);
  }
}

// Echoes every byte it gets; counts them.
struct EchoServer {
  explicit EchoServer(net::io_context& io) : acceptor(io, {kLoopback, 0}) {
    net::co_spawn(io, run(), net::detached);
  }
  net::awaitable<void> run() {
    return accept_each(acceptor, [this](std::shared_ptr<tcp::socket> s) { return echo(s); });
  }
  net::awaitable<void> echo(std::shared_ptr<tcp::socket> s) {
    std::array<char, 4096> buf;
    boost::system::error_code ec;
    for (;;) {
      const size_t n = co_await s->async_read_some(net::buffer(buf),
                                                   net::redirect_error(net::use_awaitable, ec));
      if (ec) co_return;
      received += n;
      co_await net::async_write(*s, net::buffer(buf.data(), n),
                                net::redirect_error(net::use_awaitable, ec));
    }
  }
  uint16_t port() const { return acceptor.local_endpoint().port(); }
  tcp::acceptor acceptor;
  size_t received = 0;
};

// Answers each request with 200 and the request head it got as the body, then closes.
struct HttpServer {
  explicit HttpServer(net::io_context& io) : acceptor(io, {kLoopback, 0}) {
    net::co_spawn(io, run(), net::detached);
  }
  net::awaitable<void> run() {
    boost::system::error_code ec;
    for (;;) {
      tcp::socket s = co_await acceptor.async_accept(net::redirect_error(net::use_awaitable, ec));
      if (ec) co_return;
      std::string in;
      const size_t n = co_await net::async_read_until(s, net::dynamic_buffer(in), "\r\n\r\n",
                                                      net::redirect_error(net::use_awaitable, ec));
      if (ec) continue;
      heads.push_back(in.substr(0, n));
      const std::string out =
          "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(n) + "\r\n\r\n" + heads.back();
      co_await net::async_write(s, net::buffer(out), net::redirect_error(net::use_awaitable, ec));
    }
  }
  uint16_t port() const { return acceptor.local_endpoint().port(); }
  tcp::acceptor acceptor;
  std::vector<std::string> heads;
};

// Says its banner first and closes, as SMTP or SSH servers speak first.
struct BannerServer {
  explicit BannerServer(net::io_context& io) : acceptor(io, {kLoopback, 0}) {
    net::co_spawn(io, run(), net::detached);
  }
  net::awaitable<void> run() {
    boost::system::error_code ec;
    for (;;) {
      tcp::socket s = co_await acceptor.async_accept(net::redirect_error(net::use_awaitable, ec));
      if (ec) co_return;
      static constexpr std::string_view kBanner = "220 banner\r\n";
      co_await net::async_write(s, net::buffer(kBanner),
                                net::redirect_error(net::use_awaitable, ec));
    }
  }
  uint16_t port() const { return acceptor.local_endpoint().port(); }
  tcp::acceptor acceptor;
};

// A UDP "name server" that answers nothing and counts what it is asked.
struct SilentDns {
  explicit SilentDns(net::io_context& io) : socket(io, {kLoopback, 0}) {
    net::co_spawn(io, run(), net::detached);
  }
  net::awaitable<void> run() {
    std::array<char, 1500> buf;
    net::ip::udp::endpoint from;
    boost::system::error_code ec;
    for (;;) {
      co_await socket.async_receive_from(net::buffer(buf), from,
                                         net::redirect_error(net::use_awaitable, ec));
      if (ec) co_return;
      ++queries;
    }
  }
  net::ip::udp::socket socket;
  int queries = 0;
};

// An HTTPS site on 127.0.0.1 with a certificate for site.test from a CA of its own (as the
// operator's --extra-ca-file would name it). Keeps each request it got; answers 200 with
// "ok <n>" on the same connection until the client ends it.
struct TlsSite {
  explicit TlsSite(net::io_context& io)
      : acceptor(io, {kLoopback, 0}), ca(*SessionCa::create("site-ca")) {
    net::co_spawn(io, run(), net::detached);
  }
  net::awaitable<void> run() {
    return accept_each(acceptor, [this](std::shared_ptr<tcp::socket> s) {
      ++connections;
      return serve(s);
    });
  }
  net::awaitable<void> serve(std::shared_ptr<tcp::socket> s) {
    namespace http = boost::beast::http;
    auto ctx = *ca->server_context("site.test");
    net::ssl::stream<tcp::socket&> tls(*s, *ctx);
    boost::system::error_code ec;
    co_await tls.async_handshake(net::ssl::stream_base::server,
                                 net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return;
    boost::beast::flat_buffer buf;
    for (;;) {
      http::request<http::string_body> req;
      co_await http::async_read(tls, buf, req, net::redirect_error(net::use_awaitable, ec));
      if (ec) co_return;
      requests.push_back(req);
      http::response<http::string_body> res{http::status::ok, 11};
      res.body() = "ok " + std::to_string(requests.size());
      res.prepare_payload();
      co_await http::async_write(tls, res, net::redirect_error(net::use_awaitable, ec));
      if (ec) co_return;
      if (close_after_each) co_return;  // as a host's idle timeout would, keep-alive said or not
    }
  }
  uint16_t port() const { return acceptor.local_endpoint().port(); }
  // The CA's certificate in a file, as --extra-ca-file takes it.
  std::filesystem::path ca_file() {
    auto p = std::filesystem::temp_directory_path() /
             ("cabin-test-ca-" + std::to_string(::getpid()) + ".pem");
    std::ofstream(p) << ca->certificate_pem();
    return p;
  }
  tcp::acceptor acceptor;
  std::shared_ptr<SessionCa> ca;
  std::vector<boost::beast::http::request<boost::beast::http::string_body>> requests;
  int connections = 0;
  bool close_after_each = false;
};

struct Fixture {
  Fixture() : echo(io), web(io), dns(io) {}

  void start(const std::string& policy_text, ProxyLimits limits = {}) {
    Boundary b;
    b.open_host_cidrs.push_back(*parse_cidr("127.0.0.0/8"));
    ResolverConfig rc;
    rc.servers = {dns.socket.local_endpoint()};
    rc.timeout = std::chrono::milliseconds(200);
    rc.pinned["site.test"] = {kLoopback};
    rc.pinned["other.test"] = {kLoopback};
    rc.pinned["private.test"] = {net::ip::make_address("10.0.0.1")};
    proxy = std::make_shared<EgressProxy>("ses_test", policy(policy_text), b,
                                          std::make_shared<Resolver>(rc), limits,
                                          [this](EgressRecord r) { records.push_back(r); });
    tcp::acceptor a(io, {kLoopback, 0});
    proxy_port = a.local_endpoint().port();
    net::co_spawn(io, proxy->serve(std::move(a)), net::detached);
  }
  std::shared_ptr<const Policy> policy(const std::string& text) {
    std::string t = text;
    for (auto [key, port] : {std::pair{"ECHO", echo.port()}, std::pair{"WEB", web.port()},
                             std::pair{"TLS", tls_port}}) {
      for (size_t at; (at = t.find(key)) != std::string::npos;)
        t.replace(at, strlen(key), std::to_string(port));
    }
    auto p = parse_policy(nlohmann::json::parse(t));
    REQUIRE(p);
    return std::make_shared<const Policy>(std::move(*p));
  }

  // A connection to the proxy that sends `out` and then reads to the end or `stop_after`.
  struct Client {
    tcp::socket s;
    std::string got;
  };
  Client connect() {
    Client c{tcp::socket(io), {}};
    c.s.connect({kLoopback, proxy_port});
    return c;
  }
  void send(Client& c, const std::string& out) { net::write(c.s, net::buffer(out)); }
  // Reads until `until` appears in what came (or the end, when empty).
  void read(Client& c, const std::string& until = "") {
    run_sync(io, read_until(c.s, c.got, until), std::chrono::seconds(10));
  }
  static net::awaitable<void> read_until(tcp::socket& s, std::string& got, std::string until) {
    boost::system::error_code ec;
    std::array<char, 4096> buf;
    while (until.empty() || got.find(until) == std::string::npos) {
      const size_t n =
          co_await s.async_read_some(net::buffer(buf), net::redirect_error(net::use_awaitable, ec));
      if (ec) break;
      got.append(buf.data(), n);
    }
  }
  void wait_records(size_t n) {
    run_until(
        io, [&] { return records.size() >= n; }, std::chrono::seconds(10));
    REQUIRE(records.size() == n);
  }
  std::string connect_line(const std::string& authority) {
    return "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n\r\n";
  }

  net::io_context io;
  EchoServer echo;
  HttpServer web;
  SilentDns dns;
  std::shared_ptr<EgressProxy> proxy;
  uint16_t proxy_port = 0;
  uint16_t tls_port = 0;  // a TlsSite's, for "TLS" in policies
  std::vector<EgressRecord> records;
};

}  // namespace

TEST_CASE("egress: a tunnel to an allowed name opens, and carries TLS that names it") {
  Fixture f;
  f.start(R"({"mode": "allowlist", "allow": [{"host": "site.test", "ports": [ECHO]}]})");
  auto c = f.connect();
  f.send(c, f.connect_line("site.test:" + std::to_string(f.echo.port())));
  f.read(c, "\r\n\r\n");
  CHECK(c.got == "HTTP/1.1 200 Connection Established\r\n\r\n");
  const std::string hello = client_hello("site.test");
  f.send(c, hello);
  c.got.clear();
  f.read(c, hello);
  CHECK(c.got == hello);  // echoed by the upstream
  c.s.shutdown(tcp::socket::shutdown_send);
  f.read(c);
  f.wait_records(1);
  const auto& r = f.records[0];
  CHECK(r.kind == "connect");
  CHECK(r.allowed);
  CHECK(r.host == "site.test");
  CHECK(r.address == "127.0.0.1");
  CHECK(r.rule == "allow[0]");
  CHECK(r.status == 200);
  CHECK(r.bytes_up == hello.size());
  CHECK(r.bytes_down == hello.size());
  CHECK(f.dns.queries == 0);  // a pinned name asks nobody
}

TEST_CASE("egress: TLS for another host, or for none, is reset before a byte goes upstream") {
  Fixture f;
  f.start(R"({"mode": "allowlist", "allow": [{"host": "site.test", "ports": [ECHO]}]})");
  for (const char* sni : {"other.test", ""}) {
    INFO(sni);
    auto c = f.connect();
    f.send(c, f.connect_line("site.test:" + std::to_string(f.echo.port())));
    f.read(c, "\r\n\r\n");
    REQUIRE(c.got.rfind("HTTP/1.1 200", 0) == 0);
    c.got.clear();
    f.send(c, client_hello(sni));
    f.read(c);
    CHECK(c.got.empty());
  }
  f.wait_records(2);
  CHECK_FALSE(f.records[0].allowed);
  CHECK(f.records[0].reason == "TLS in the tunnel is for other.test, not site.test");
  CHECK(f.records[1].reason == "TLS in the tunnel names no host (SNI)");
  CHECK(f.echo.received == 0);
  // HTTP in a tunnel must carry the tunnel's host too.
  auto c = f.connect();
  f.send(c, f.connect_line("site.test:" + std::to_string(f.echo.port())));
  f.read(c, "\r\n\r\n");
  f.send(c, "GET / HTTP/1.1\r\nHost: other.test\r\n\r\n");
  f.read(c);
  f.wait_records(3);
  CHECK(f.records[2].reason.rfind("HTTP in the tunnel is for other.test", 0) == 0);
  CHECK(f.echo.received == 0);
}

TEST_CASE("egress: denied names get 403 with the reason, and are never looked up") {
  Fixture f;
  f.start(R"({"mode": "allowlist", "allow": [{"host": "site.test", "ports": [ECHO]},
                                              {"host": "*.unpinned.test", "ports": [ECHO]}],
              "deny": [{"host": "evil.test"}]})");
  const std::string port = std::to_string(f.echo.port());
  for (const std::string& target : {"evil.test:" + port, "exfil-data.attacker.test:" + port,
                                    std::string("site.test:1"), "127.0.0.1:" + port}) {
    INFO(target);
    auto c = f.connect();
    f.send(c, f.connect_line(target));
    f.read(c);
    CHECK(c.got.rfind("HTTP/1.1 403 Forbidden\r\n", 0) == 0);
    CHECK(c.got.find("X-Cabin-Egress: denied") != std::string::npos);
  }
  f.wait_records(4);
  CHECK(f.records[0].rule == "deny[0]");
  CHECK(f.records[0].reason == "evil.test:" + port + " is denied");
  CHECK(f.records[1].reason == "no rule allows exfil-data.attacker.test:" + port);
  CHECK(f.records[2].reason == "no rule allows site.test:1");
  CHECK(f.records[3].reason == "no rule allows 127.0.0.1:" + port);
  CHECK(f.dns.queries == 0);
  // An allowed name that is not pinned is asked for, A and AAAA; silence is a 502.
  auto c = f.connect();
  f.send(c, f.connect_line("a.unpinned.test:" + port));
  f.read(c);
  CHECK(c.got.rfind("HTTP/1.1 502 Bad Gateway\r\n", 0) == 0);
  f.wait_records(5);
  CHECK(f.records[4].allowed);  // the policy allowed it; the lookup failed
  CHECK(f.records[4].reason.rfind("cannot resolve a.unpinned.test:", 0) == 0);
  CHECK(f.dns.queries == 2);
}

TEST_CASE("egress: an allowed name that resolves to a private address is refused") {
  Fixture f;
  f.start(R"({"mode": "open"})");
  auto c = f.connect();
  f.send(c, f.connect_line("private.test:443"));
  f.read(c);
  CHECK(c.got.rfind("HTTP/1.1 403", 0) == 0);
  f.wait_records(1);
  CHECK(f.records[0].rule == "always denied");
  CHECK(f.records[0].reason.find("resolved to 10.0.0.1:443, a private address, which sessions "
                                 "reach only when cabind is started with --egress-allow-cidr "
                                 "10.0.0.1/32") == 0);
  CHECK(f.records[0].address.empty());
}

TEST_CASE("egress: a plain HTTP request goes upstream in origin form, without proxy fields") {
  Fixture f;
  f.start(R"({"mode": "allowlist", "allow": [{"host": "site.test", "ports": [WEB]}]})");
  const std::string authority = "site.test:" + std::to_string(f.web.port());
  auto c = f.connect();
  f.send(c, "GET http://" + authority + "/path?q=1 HTTP/1.1\r\nHost: " + authority +
                "\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic eA==\r\n"
                "Connection: X-Drop\r\nX-Drop: 1\r\nX-Keep: 2\r\n\r\n");
  f.read(c);
  REQUIRE(f.web.heads.size() == 1);
  const std::string& head = f.web.heads[0];
  CHECK(head.rfind("GET /path?q=1 HTTP/1.1\r\n", 0) == 0);
  CHECK(head.find("X-Keep: 2\r\n") != std::string::npos);
  CHECK(head.find("Connection: close\r\n") != std::string::npos);
  for (const char* gone : {"Proxy-", "X-Drop", "keep-alive"}) {
    INFO(gone);
    CHECK(head.find(gone) == std::string::npos);
  }
  CHECK(c.got.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  f.wait_records(1);
  CHECK(f.records[0].kind == "http");
  CHECK(f.records[0].method == "GET");
  CHECK(f.records[0].status == 200);
  CHECK(f.records[0].bytes_down == c.got.size());

  // Host must match the URL; a fronted Host is refused before anything is dialled.
  auto d = f.connect();
  f.send(d, "GET http://" + authority + "/ HTTP/1.1\r\nHost: other.test\r\n\r\n");
  f.read(d);
  CHECK(d.got.rfind("HTTP/1.1 400", 0) == 0);
  f.wait_records(2);
  CHECK(f.records[1].reason == "Host must name the URL's host and port");
  auto two = f.connect();
  f.send(two, "GET http://" + authority + "/ HTTP/1.1\r\nHost: " + authority +
                  "\r\nHost: other.test\r\n\r\n");
  f.read(two);
  CHECK(two.got.rfind("HTTP/1.1 400", 0) == 0);
  f.wait_records(3);
  CHECK(f.records[2].reason == "more than one Host field");
  CHECK(f.web.heads.size() == 1);
}

TEST_CASE("egress: a live policy change closes a tunnel it no longer allows") {
  Fixture f;
  f.start(R"({"mode": "allowlist", "allow": [{"host": "site.test", "ports": [ECHO]}]})");
  auto c = f.connect();
  f.send(c, f.connect_line("site.test:" + std::to_string(f.echo.port())));
  f.read(c, "\r\n\r\n");
  const std::string hello = client_hello("site.test");
  f.send(c, hello);
  f.read(c, hello);
  REQUIRE(f.proxy->open_connections() == 1);
  f.proxy->set_policy(
      f.policy(R"({"mode": "allowlist", "allow": [{"host": "site.test", "ports": [1]}]})"));
  f.read(c);  // ends: the proxy closed it
  f.wait_records(1);
  CHECK(f.records[0].reason == "closed: the policy changed and no longer allows it");
  CHECK(f.proxy->open_connections() == 0);
}

TEST_CASE("egress: connections past the limit get 503, and a slow request head is cut off") {
  Fixture f;
  ProxyLimits limits;
  limits.max_connections = 2;
  limits.head_timeout = std::chrono::milliseconds(300);
  f.start(R"({"mode": "allowlist", "allow": [{"host": "site.test", "ports": [ECHO]}]})", limits);
  auto a = f.connect();
  auto b = f.connect();
  f.send(a, "CONNECT site.te");  // and no more: cut off after 300 ms
  run_until(f.io, [&] { return f.proxy->open_connections() == 2; });
  auto c = f.connect();
  f.send(c, f.connect_line("site.test:" + std::to_string(f.echo.port())));
  f.read(c);
  CHECK(c.got.rfind("HTTP/1.1 503", 0) == 0);
  f.read(a);  // closed by the proxy
  CHECK(a.got.empty());
  f.wait_records(3);  // b is cut off too
  CHECK(f.records[0].reason == "the session has 2 connections open, the most it may");
  CHECK(f.records[1].reason == "no whole request head within 300 ms");
  CHECK(f.records[2].reason == "no whole request head within 300 ms");
}

TEST_CASE(
    "egress: a server that speaks first and closes first ends the tunnel, and its record comes") {
  Fixture f;
  BannerServer banner(f.io);
  const std::string port = std::to_string(banner.port());
  f.start(R"({"mode": "allowlist", "allow": [{"host": "site.test", "ports": [)" + port + "]}]}");
  auto c = f.connect();
  f.send(c, f.connect_line("site.test:" + port));
  f.read(c);  // the 200, the banner, then the end the proxy passed on
  CHECK(c.got == "HTTP/1.1 200 Connection Established\r\n\r\n220 banner\r\n");
  c.s.close();
  f.wait_records(1);
  CHECK(f.records[0].allowed);
  CHECK(f.records[0].bytes_down == 12);
  CHECK(f.records[0].bytes_up == 0);
}

namespace {

namespace http = boost::beast::http;

// A session whose secrets are bound to site.test; the proxy trusts the site's CA.
struct SecretsFixture : Fixture {
  SecretsFixture() : site(io) {
    tls_port = site.port();
    const std::string policy = R"({"mode": "allowlist",
      "allow": [{"host": "site.test", "ports": [TLS]}, {"host": "other.test", "ports": [WEB]}],
      "secrets": [{"name": "gh", "value": "ghp_real&=\"", "hosts": ["site.test"], "ports": [TLS],
                   "header": "Authorization", "format": "Bearer {value}",
                   "substitute": ["target", "body"]},
                  {"name": "key", "value": "key_real", "hosts": ["site.test"], "ports": [TLS],
                   "header": "X-Token"},
                  {"name": "other", "value": "other_real", "hosts": ["elsewhere.test"]}]})";
    start(policy);
    ca = *SessionCa::create("ses_test");
    const auto file = site.ca_file();
    proxy->set_tls(ca, *upstream_tls_context(file));
    std::filesystem::remove(file);
    for (const auto& sec : proxy->policy()->secrets) placeholders[sec.name] = sec.placeholder;
    client_ctx.set_verify_mode(net::ssl::verify_peer);
    const std::string& pem = ca->certificate_pem();
    client_ctx.add_certificate_authority(net::buffer(pem));
  }

  // A tunnel to site.test with the sandbox's TLS on it (trusting the session's CA only).
  struct Tunnel {
    tcp::socket s;
    std::unique_ptr<net::ssl::stream<tcp::socket&>> tls;
    boost::beast::flat_buffer buf;
  };
  net::awaitable<void> open(Tunnel& t, std::string sni = "site.test") {
    boost::system::error_code ec;
    const std::string line = connect_line("site.test:" + std::to_string(tls_port));
    co_await net::async_write(t.s, net::buffer(line), net::redirect_error(net::use_awaitable, ec));
    std::string head;
    co_await net::async_read_until(t.s, net::dynamic_buffer(head), "\r\n\r\n",
                                   net::redirect_error(net::use_awaitable, ec));
    REQUIRE(head.rfind("HTTP/1.1 200", 0) == 0);
    t.tls = std::make_unique<net::ssl::stream<tcp::socket&>>(t.s, client_ctx);
    SSL_set_tlsext_host_name(t.tls->native_handle(), sni.c_str());
    SSL_set1_host(t.tls->native_handle(), sni.c_str());
    co_await t.tls->async_handshake(net::ssl::stream_base::client,
                                    net::redirect_error(net::use_awaitable, ec));
    handshake = ec;
  }
  net::awaitable<http::response<http::string_body>> ask(Tunnel& t,
                                                        http::request<http::string_body> req) {
    boost::system::error_code ec;
    req.prepare_payload();
    co_await http::async_write(*t.tls, req, net::redirect_error(net::use_awaitable, ec));
    http::response<http::string_body> res;
    co_await http::async_read(*t.tls, t.buf, res, net::redirect_error(net::use_awaitable, ec));
    if (ec) res.result(599);
    co_return res;
  }
  // `req` on a tunnel of its own, opened for it.
  http::response<http::string_body> ask_anew(http::request<http::string_body> req) {
    Tunnel t{tcp::socket(io), nullptr, {}};
    t.s.connect({kLoopback, proxy_port});
    run_sync(io, open(t));
    REQUIRE_FALSE(handshake);
    return run_sync(io, ask(t, std::move(req)));
  }
  http::request<http::string_body> request(http::verb v, std::string target) {
    http::request<http::string_body> r{v, target, 11};
    r.set(http::field::host, "site.test:" + std::to_string(tls_port));
    return r;
  }

  TlsSite site;
  std::shared_ptr<SessionCa> ca;
  net::ssl::context client_ctx{net::ssl::context::tls_client};
  std::map<std::string, std::string> placeholders;
  boost::system::error_code handshake;
};

}  // namespace

TEST_CASE("egress secrets: the bound host gets the value in its header, target and form") {
  SecretsFixture f;
  SecretsFixture::Tunnel t{tcp::socket(f.io), nullptr, {}};
  t.s.connect({kLoopback, f.proxy_port});
  run_sync(f.io, f.open(t));
  REQUIRE_FALSE(f.handshake);  // the sandbox's TLS ends at the proxy, with the session's CA

  auto post = f.request(http::verb::post, "/login?key=" + f.placeholders["gh"]);
  post.set("X-Token", "token " + f.placeholders["key"]);
  post.set(http::field::content_type, "application/x-www-form-urlencoded");
  post.body() = "user=a&pass=" + f.placeholders["gh"];
  auto res = run_sync(f.io, f.ask(t, post));
  CHECK(res.result_int() == 200);
  CHECK(res.body() == "ok 1");
  // The same tunnel goes on: a JSON body, escaped as JSON.
  auto json = f.request(http::verb::put, "/api");
  json.set(http::field::content_type, "application/json");
  json.body() = R"({"token":")" + f.placeholders["gh"] + R"("})";
  res = run_sync(f.io, f.ask(t, json));
  CHECK(res.body() == "ok 2");

  REQUIRE(f.site.requests.size() == 2);
  const auto& got = f.site.requests[0];
  CHECK(got[http::field::authorization] == "Bearer ghp_real&=\"");
  CHECK(got["X-Token"] == "token key_real");
  CHECK(got.body() == "user=a&pass=ghp_real%26%3D%22");
  CHECK(got.target() == "/login?key=ghp_real%26%3D%22");
  CHECK(f.site.requests[1].body() == R"({"token":"ghp_real&=\""})");
  for (const auto& r : f.site.requests) {
    CHECK(r.body().find("cabin_secret_") == std::string::npos);
  }

  t.tls.reset();
  t.s.close();
  f.wait_records(3);  // two requests, then the tunnel
  CHECK(f.records[0].kind == "http");
  CHECK(f.records[0].method == "POST");
  CHECK(f.records[0].status == 200);
  CHECK(f.records[0].secrets == std::vector<std::string>{"gh", "key"});
  CHECK(f.records[0].bytes_up > post.body().size());
  CHECK(f.records[1].method == "PUT");
  CHECK(f.records[2].kind == "connect");
  CHECK(f.records[2].secrets == std::vector<std::string>{"gh", "key"});
  CHECK(f.records[2].reason == "intercepted for secrets: 2 requests");
  for (const auto& r : f.records) {
    CHECK(nlohmann::json(record_json(r)).dump().find("ghp_real") == std::string::npos);
  }
}

TEST_CASE("egress secrets: a placeholder bound elsewhere, or in plain HTTP, is refused") {
  SecretsFixture f;
  SecretsFixture::Tunnel t{tcp::socket(f.io), nullptr, {}};
  t.s.connect({kLoopback, f.proxy_port});
  run_sync(f.io, f.open(t));
  REQUIRE_FALSE(f.handshake);
  auto get = f.request(http::verb::get, "/?q=" + f.placeholders["other"]);
  auto res = run_sync(f.io, f.ask(t, get));
  CHECK(res.result_int() == 403);
  CHECK(res.body().find("secret other") != std::string::npos);
  CHECK(f.site.requests.empty());

  // Plain HTTP to another allowed host: no placeholder leaves, bound or not.
  auto c = f.connect();
  f.send(c, "POST http://other.test:" + std::to_string(f.web.port()) +
                "/ HTTP/1.1\r\nHost: other.test:" + std::to_string(f.web.port()) +
                "\r\nContent-Length: " + std::to_string(f.placeholders["gh"].size()) + "\r\n\r\n" +
                f.placeholders["gh"]);
  f.read(c);
  CHECK(c.got.rfind("HTTP/1.1 403", 0) == 0);
  CHECK(c.got.find("secret gh, which is bound to other hosts") != std::string::npos);
  CHECK(f.web.heads.empty());
  f.wait_records(3);  // the request in the tunnel, the tunnel, the plain request
  CHECK(f.records[0].status == 403);
  CHECK(f.records[1].kind == "connect");
  CHECK(f.records[2].kind == "http");
}

TEST_CASE("egress secrets: a request for another host in the tunnel is refused") {
  SecretsFixture f;
  SecretsFixture::Tunnel t{tcp::socket(f.io), nullptr, {}};
  t.s.connect({kLoopback, f.proxy_port});
  run_sync(f.io, f.open(t));
  REQUIRE_FALSE(f.handshake);
  auto get = f.request(http::verb::get, "/");
  get.set(http::field::host, "other.test");
  auto res = run_sync(f.io, f.ask(t, get));
  CHECK(res.result_int() == 421);
  CHECK(f.site.requests.empty());
}

TEST_CASE("egress secrets: only a path of the tunnel's own host gets them") {
  SecretsFixture f;
  // Each refusal ends its tunnel: a new one each time.
  auto ask = [&](http::request<http::string_body> req) { return f.ask_anew(std::move(req)); };
  // What a front end serving other names too would route by the target, not the Host.
  for (const std::string target :
       {"https://evil.test/steal", "http://evil.test/", "evil.test:443", "//evil.test/x"}) {
    auto res = ask(f.request(http::verb::get, target));
    CHECK(res.result_int() == 403);
    CHECK(res.body().find("must name a path of that host") != std::string::npos);
  }
  auto connect = f.request(http::verb::connect, "evil.test:443");
  auto res = ask(connect);
  CHECK(res.result_int() == 403);
  CHECK(res.body().find("may not be CONNECT") != std::string::npos);
  for (const char* echoing : {"TRACE", "TRACK", "trace"}) {
    auto req = f.request(http::verb::unknown, "/");
    req.method_string(echoing);
    res = ask(req);
    CHECK(res.result_int() == 403);
  }
  CHECK(f.site.requests.empty());

  // A path goes, without the fields some front ends route by; so does OPTIONS *.
  auto get = f.request(http::verb::get, "/ok");
  get.set("X-Forwarded-Host", "evil.test");
  get.set("Forwarded", "host=evil.test");
  get.set("X-Original-URL", "https://evil.test/");
  res = ask(get);
  CHECK(res.result_int() == 200);
  res = ask(f.request(http::verb::options, "*"));
  CHECK(res.result_int() == 200);
  REQUIRE(f.site.requests.size() == 2);
  CHECK(f.site.requests[0].target() == "/ok");
  CHECK(f.site.requests[0].count("X-Forwarded-Host") == 0);
  CHECK(f.site.requests[0].count("Forwarded") == 0);
  CHECK(f.site.requests[0].count("X-Original-URL") == 0);
  CHECK(f.site.requests[0][http::field::authorization] == "Bearer ghp_real&=\"");
}

TEST_CASE("egress secrets: a placeholder where its secret is not put is refused and never sent") {
  SecretsFixture f;
  auto ask = [&](http::request<http::string_body> req) { return f.ask_anew(std::move(req)); };
  // key goes into X-Token only: not the target, the body, or another field.
  auto res = ask(f.request(http::verb::get, "/search?q=" + f.placeholders["key"]));
  CHECK(res.result_int() == 403);
  CHECK(res.body().find("target carries the placeholder of secret key") != std::string::npos);
  auto post = f.request(http::verb::post, "/echo");
  post.set(http::field::content_type, "text/plain");
  post.body() = f.placeholders["key"];
  res = ask(post);  // read, since gh is put into bodies of this host
  CHECK(res.result_int() == 403);
  CHECK(res.body().find("body carries the placeholder of secret key") != std::string::npos);
  auto cookie = f.request(http::verb::get, "/");
  cookie.set(http::field::cookie, "k=" + f.placeholders["key"]);
  res = ask(cookie);
  CHECK(res.result_int() == 403);
  CHECK(res.body().find("field Cookie carries the placeholder of secret key") != std::string::npos);
  CHECK(f.site.requests.empty());
}

TEST_CASE("egress secrets: a host on a port its secrets are not bound to is only tunnelled") {
  Fixture f;
  f.start(R"({"mode": "open", "secrets": [{"name": "gh", "value": "v", "hosts": ["site.test"]}]})");
  f.proxy->set_tls(*SessionCa::create("ses_test"), *upstream_tls_context({}));
  auto c = f.connect();
  const std::string hello = client_hello("site.test");
  const std::string established = "HTTP/1.1 200 Connection Established\r\n\r\n";
  f.send(c, f.connect_line("site.test:" + std::to_string(f.echo.port())));
  f.read(c, established);
  f.send(c, hello);
  // The echo server's answer is the ClientHello itself: the bytes went through untouched, where
  // an opened-up tunnel would have answered with the session CA's ServerHello.
  f.read(c, established + hello);
  CHECK(c.got == established + hello);
  c.s.close();
  f.wait_records(1);
  CHECK(f.records[0].allowed);
  CHECK(f.records[0].reason.find("intercepted") == std::string::npos);
}

TEST_CASE("egress secrets: a site the proxy cannot verify gets no secret") {
  SecretsFixture f;
  f.proxy->set_tls(f.ca, *upstream_tls_context({}));  // the system's roots only
  SecretsFixture::Tunnel t{tcp::socket(f.io), nullptr, {}};
  t.s.connect({kLoopback, f.proxy_port});
  run_sync(f.io, f.open(t));
  REQUIRE_FALSE(f.handshake);
  auto res = run_sync(f.io, f.ask(t, f.request(http::verb::get, "/")));
  CHECK(res.result_int() == 502);
  CHECK(res.body().find("its certificate is not trusted") != std::string::npos);
  CHECK(f.site.requests.empty());
}

TEST_CASE("egress secrets: a host that closed a kept-alive connection gets the next request anew") {
  SecretsFixture f;
  f.site.close_after_each = true;
  SecretsFixture::Tunnel t{tcp::socket(f.io), nullptr, {}};
  t.s.connect({kLoopback, f.proxy_port});
  run_sync(f.io, f.open(t));
  REQUIRE_FALSE(f.handshake);
  for (int i = 1; i <= 3; ++i) {
    auto res = run_sync(f.io, f.ask(t, f.request(http::verb::get, "/" + std::to_string(i))));
    CHECK(res.result_int() == 200);
    CHECK(res.body() == "ok " + std::to_string(i));
  }
  CHECK(f.site.connections == 3);
  CHECK(f.site.requests.size() == 3);
}

namespace {

// A small upstream proxy on 127.0.0.1: SOCKS5 (no credentials, or user "u" with password "p")
// or HTTP CONNECT (with "Proxy-Authorization: Basic dTpw" when it wants credentials). It keeps
// what it was asked for, connects there, and pumps.
struct TinyUpstream {
  TinyUpstream(net::io_context& io, bool socks, bool want_credentials)
      : acceptor(io, {kLoopback, 0}), socks(socks), want(want_credentials) {
    net::co_spawn(io, run(), net::detached);
  }
  net::awaitable<void> run() {
    return accept_each(acceptor, [this](std::shared_ptr<tcp::socket> s) { return serve(s); });
  }
  static net::awaitable<std::string> read_n(tcp::socket& s, size_t n) {
    std::string out(n, '\0');
    boost::system::error_code ec;
    co_await net::async_read(s, net::buffer(out), net::redirect_error(net::use_awaitable, ec));
    if (ec) out.clear();
    co_return out;
  }
  net::awaitable<void> serve(std::shared_ptr<tcp::socket> s) {
    boost::system::error_code ec;
    tcp::endpoint to;
    if (socks) {
      auto hello = co_await read_n(*s, 2);
      if (hello.size() != 2) co_return;
      auto methods = co_await read_n(*s, static_cast<uint8_t>(hello[1]));
      const bool pw = methods.find('\x02') != std::string::npos;
      if (want && !pw) {
        co_await net::async_write(*s, net::buffer(std::string("\x05\xff", 2)),
                                  net::redirect_error(net::use_awaitable, ec));
        co_return;
      }
      co_await net::async_write(*s, net::buffer(std::string(want ? "\x05\x02" : "\x05\x00", 2)),
                                net::redirect_error(net::use_awaitable, ec));
      if (want) {
        auto head = co_await read_n(*s, 2);
        auto user = co_await read_n(*s, static_cast<uint8_t>(head[1]));
        auto plen = co_await read_n(*s, 1);
        auto pass = co_await read_n(*s, static_cast<uint8_t>(plen[0]));
        credentials = user + ":" + pass;
        const bool good = credentials == "u:p";
        co_await net::async_write(*s, net::buffer(std::string(good ? "\x01\x00" : "\x01\x01", 2)),
                                  net::redirect_error(net::use_awaitable, ec));
        if (!good) co_return;
      }
      auto req = co_await read_n(*s, 4);
      if (req.size() != 4 || req[3] != '\x01') co_return;
      auto addr = co_await read_n(*s, 6);
      net::ip::address_v4::bytes_type b;
      std::memcpy(b.data(), addr.data(), 4);
      to = tcp::endpoint(net::ip::address_v4(b),
                         static_cast<uint16_t>(static_cast<uint8_t>(addr[4]) << 8 |
                                               static_cast<uint8_t>(addr[5])));
      asked.push_back(to.address().to_string() + ":" + std::to_string(to.port()));
    } else {
      std::string head;
      co_await net::async_read_until(*s, net::dynamic_buffer(head), "\r\n\r\n",
                                     net::redirect_error(net::use_awaitable, ec));
      if (ec) co_return;
      const std::string target = head.substr(8, head.find(' ', 8) - 8);
      asked.push_back(target);
      if (want && head.find("\r\nProxy-Authorization: Basic dTpw\r\n") == std::string::npos) {
        co_await net::async_write(*s, net::buffer(std::string("HTTP/1.1 407 No\r\n\r\n")),
                                  net::redirect_error(net::use_awaitable, ec));
        co_return;
      }
      const size_t colon = target.rfind(':');
      to = tcp::endpoint(net::ip::make_address(target.substr(0, colon)),
                         static_cast<uint16_t>(std::stoi(target.substr(colon + 1))));
    }
    tcp::socket up(s->get_executor());
    co_await up.async_connect(to, net::redirect_error(net::use_awaitable, ec));
    const std::string ok = socks ? std::string("\x05\x00\x00\x01\x7f\x00\x00\x01\x00\x00", 10)
                                 : std::string("HTTP/1.1 200 OK\r\n\r\n");
    co_await net::async_write(*s, net::buffer(ok), net::redirect_error(net::use_awaitable, ec));
    // One way each: enough for the echo tests.
    std::array<char, 4096> buf;
    for (;;) {
      const size_t n = co_await s->async_read_some(net::buffer(buf),
                                                   net::redirect_error(net::use_awaitable, ec));
      if (ec) co_return;
      co_await net::async_write(up, net::buffer(buf.data(), n),
                                net::redirect_error(net::use_awaitable, ec));
      const size_t m = co_await up.async_read_some(net::buffer(buf),
                                                   net::redirect_error(net::use_awaitable, ec));
      if (ec) co_return;
      co_await net::async_write(*s, net::buffer(buf.data(), m),
                                net::redirect_error(net::use_awaitable, ec));
    }
  }
  uint16_t port() const { return acceptor.local_endpoint().port(); }
  tcp::acceptor acceptor;
  bool socks, want;
  std::vector<std::string> asked;
  std::string credentials;
};

}  // namespace

TEST_CASE(
    "egress upstream: allowed tunnels go on through SOCKS5 or HTTP CONNECT, asking for the checked "
    "address") {
  for (const bool socks : {true, false}) {
    for (const bool creds : {false, true}) {
      INFO("socks " << socks << ", credentials " << creds);
      Fixture f;
      TinyUpstream up(f.io, socks, creds);
      const std::string url = std::string(socks ? "socks5://" : "http://") + (creds ? "u:p@" : "") +
                              "127.0.0.1:" + std::to_string(up.port());
      f.start(R"({"mode": "allowlist", "allow": [{"host": "site.test", "ports": [ECHO]}],
                  "upstream_proxy": ")" +
              url + R"("})");
      auto c = f.connect();
      f.send(c, f.connect_line("site.test:" + std::to_string(f.echo.port())));
      f.read(c, "\r\n\r\n");
      REQUIRE(c.got == "HTTP/1.1 200 Connection Established\r\n\r\n");
      const std::string hello = client_hello("site.test");
      f.send(c, hello);
      c.got.clear();
      f.read(c, hello);
      CHECK(c.got == hello);
      REQUIRE(up.asked.size() == 1);
      CHECK(up.asked[0] == "127.0.0.1:" + std::to_string(f.echo.port()));  // never the name
      if (socks && creds) CHECK(up.credentials == "u:p");
      // The policy's answer names the proxy, never its credentials.
      CHECK(policy_json(*f.proxy->policy())["upstream_proxy"] ==
            std::string(socks ? "socks5://" : "http://") +
                "127.0.0.1:" + std::to_string(up.port()));
    }
  }
}

TEST_CASE(
    "egress upstream: a proxy that refuses is a 502 that says why, and a session may not name a "
    "private one") {
  Fixture f;
  TinyUpstream up(f.io, true, true);
  f.start(R"({"mode": "allowlist", "allow": [{"host": "site.test", "ports": [ECHO]}],
              "upstream_proxy": "socks5://u:wrong@127.0.0.1:)" +
          std::to_string(up.port()) + R"("})");
  auto c = f.connect();
  f.send(c, f.connect_line("site.test:" + std::to_string(f.echo.port())));
  f.read(c);
  CHECK(c.got.rfind("HTTP/1.1 502", 0) == 0);
  CHECK(c.got.find("refused the credentials") != std::string::npos);
  CHECK(f.echo.received == 0);

  // Without the operator's 127.0.0.0/8, a session may not name a proxy on loopback.
  Fixture g;
  g.start(R"({"mode": "open"})");
  g.proxy->set_policy(g.policy(R"({"mode": "open", "upstream_proxy": "http://10.1.2.3:3128"})"));
  auto d = g.connect();
  g.send(d, g.connect_line("site.test:" + std::to_string(g.echo.port())));
  g.read(d);
  CHECK(d.got.rfind("HTTP/1.1 403", 0) == 0);
  CHECK(d.got.find("the upstream proxy http://10.1.2.3:3128 is at a private address") !=
        std::string::npos);
}

TEST_CASE("parse_upstream_proxy and the replies it reads") {
  auto p = parse_upstream_proxy("socks5://us%40er:p%3Ass@proxy.example:1080");
  REQUIRE(p);
  CHECK(p->kind == UpstreamProxy::Kind::kSocks5);
  CHECK(p->user == "us@er");
  CHECK(p->password == "p:ss");
  CHECK(p->to_string() == "socks5://proxy.example:1080");
  CHECK(parse_upstream_proxy("http://a+b:c@h:1")->user == "a+b");  // no '+' for a space here
  CHECK(parse_upstream_proxy("http://[2001:db8::1]:3128/")->to_string() ==
        "http://[2001:db8::1]:3128");
  for (const char* bad : {"ftp://a:1", "http://a", "socks5://:p@a:1", "http://a:0", "http://a:1/x",
                          "socks5://u:%zz@a:1"}) {
    INFO(bad);
    CHECK_FALSE(parse_upstream_proxy(bad));
  }
  using S = UpstreamReply::Status;
  CHECK(parse_connect_reply("HTTP/1.1 200 OK\r\n").status == S::kNeedMore);
  CHECK(parse_connect_reply("HTTP/1.1 200 OK\r\n\r\nrest").size == 19);
  CHECK(parse_connect_reply("HTTP/1.1 407 Auth\r\n\r\n").error == "it answered 407 Auth");
  CHECK(parse_connect_reply("SSH-2.0").status == S::kRefused);
  CHECK(parse_connect_reply(std::string(kMaxUpstreamReply, 'H').replace(0, 5, "HTTP/")).status ==
        S::kRefused);
  CHECK(parse_socks5_method(std::string("\x05\x00", 2), false).status == S::kOk);
  CHECK(parse_socks5_method(std::string("\x05\x02", 2), false).status == S::kRefused);
  CHECK(parse_socks5_method(std::string("\x05\x02", 2), true).status == S::kOk);
  CHECK(parse_socks5_auth(std::string("\x01\x01", 2)).status == S::kRefused);
  CHECK(parse_socks5_connect(std::string("\x05\x00\x00\x01\x01\x02\x03\x04\x00", 9)).status ==
        S::kNeedMore);
  CHECK(parse_socks5_connect(std::string("\x05\x00\x00\x01\x01\x02\x03\x04\x00\x50", 10)).size ==
        10);
  CHECK(parse_socks5_connect(std::string("\x05\x00\x00\x03\x03"
                                         "abc\x00\x50",
                                         10))
            .size == 10);
  CHECK(parse_socks5_connect(std::string("\x05\x05\x00\x01\x00", 5)).error == "connection refused");
}
