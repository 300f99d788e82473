// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <catch2/catch.hpp>
#include <functional>

#include "server/egress/dns.h"
#include "tests/unit/run_sync.h"

using namespace cabin::egress;
namespace net = boost::asio;

namespace {

using Bytes = std::vector<uint8_t>;

Bytes name_bytes(std::string_view name) {
  Bytes out;
  while (!name.empty()) {
    const size_t dot = name.find('.');
    const auto label = name.substr(0, dot);
    out.push_back(static_cast<uint8_t>(label.size()));
    out.insert(out.end(), label.begin(), label.end());
    name = dot == std::string_view::npos ? "" : name.substr(dot + 1);
  }
  out.push_back(0);
  return out;
}

struct Rr {
  Bytes owner;  // encoded, or a pointer {0xC0, offset}
  uint16_t type;
  Bytes rdata;
  uint32_t ttl = 300;
  uint16_t rclass = 1;
};

void put16(Bytes& b, uint32_t v) {
  b.push_back(static_cast<uint8_t>(v >> 8));
  b.push_back(static_cast<uint8_t>(v));
}

// An answer as a server writes it; the question's name starts at offset 12.
Bytes answer(uint16_t id, uint16_t flags, std::string_view qname, uint16_t qtype,
             const std::vector<Rr>& rrs) {
  Bytes b;
  put16(b, id);
  put16(b, flags);
  put16(b, 1);
  put16(b, static_cast<uint16_t>(rrs.size()));
  put16(b, 0);
  put16(b, 0);
  const Bytes q = name_bytes(qname);
  b.insert(b.end(), q.begin(), q.end());
  put16(b, qtype);
  put16(b, 1);
  for (const auto& r : rrs) {
    b.insert(b.end(), r.owner.begin(), r.owner.end());
    put16(b, r.type);
    put16(b, r.rclass);
    put16(b, r.ttl >> 16);
    put16(b, r.ttl & 0xffff);
    put16(b, static_cast<uint16_t>(r.rdata.size()));
    b.insert(b.end(), r.rdata.begin(), r.rdata.end());
  }
  return b;
}

const Bytes kAtQuestion = {0xC0, 12};
constexpr uint16_t kOk = 0x8180;  // QR, RD, RA

IpAddress address(const char* s) { return net::ip::make_address(s); }

}  // namespace

TEST_CASE("dns_query asks one question, recursion desired, for the canonical name") {
  const Bytes q = dns_query(0xBEEF, "www.example.com", DnsType::kAaaa);
  Bytes want = {0xBE, 0xEF, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0};
  const Bytes n = name_bytes("www.example.com");
  want.insert(want.end(), n.begin(), n.end());
  want.insert(want.end(), {0, 28, 0, 1});
  CHECK(q == want);
}

TEST_CASE("parse_dns_answer reads addresses, following CNAMEs through compression pointers") {
  // www.example.com CNAME edge.example.net (written after the question), which has two A
  // records; a record for another owner and one of another class are ignored.
  Bytes edge = name_bytes("edge.example.net");
  const size_t edge_at = 12 + name_bytes("www.example.com").size() + 4 + 2 + 10;
  const Bytes at_edge = {0xC0, static_cast<uint8_t>(edge_at)};
  auto msg = answer(7, kOk, "www.example.com", 1,
                    {{kAtQuestion, 5, edge, 600},
                     {at_edge, 1, {93, 184, 215, 14}, 60},
                     {at_edge, 1, {93, 184, 215, 15}, 120},
                     {name_bytes("other.test"), 1, {1, 2, 3, 4}},
                     {at_edge, 1, {5, 6, 7, 8}, 30, 3}});
  auto a = parse_dns_answer(msg, 7, "www.example.com", DnsType::kA);
  REQUIRE(a);
  CHECK(a->addresses == std::vector<IpAddress>{address("93.184.215.14"), address("93.184.215.15")});
  CHECK(a->ttl == 60);

  auto v6 = parse_dns_answer(
      answer(9, kOk, "v6.test", 28,
             {{kAtQuestion, 28, Bytes{0x26, 6, 0x28, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}}}),
      9, "v6.test", DnsType::kAaaa);
  REQUIRE(v6);
  CHECK(v6->addresses == std::vector<IpAddress>{address("2606:2800::1")});

  // Upper case from the server still names the question.
  auto upper = parse_dns_answer(answer(1, kOk, "SITE.Test", 1, {{kAtQuestion, 1, {8, 8, 4, 4}}}), 1,
                                "site.test", DnsType::kA);
  REQUIRE(upper);
  CHECK(upper->addresses.size() == 1);

  auto none = parse_dns_answer(answer(2, kOk, "a.test", 1, {}), 2, "a.test", DnsType::kA);
  REQUIRE(none);
  CHECK(none->addresses.empty());
  auto nx = parse_dns_answer(answer(3, 0x8183, "a.test", 1, {}), 3, "a.test", DnsType::kA);
  REQUIRE(nx);
  CHECK(nx->no_such_name);
  auto tc = parse_dns_answer(answer(4, 0x8380, "a.test", 1, {}), 4, "a.test", DnsType::kA);
  REQUIRE(tc);
  CHECK(tc->truncated);
}

TEST_CASE("parse_dns_answer refuses answers to other questions and malformed messages") {
  const auto good = answer(5, kOk, "a.test", 1, {{kAtQuestion, 1, {1, 2, 3, 4}}});
  REQUIRE(parse_dns_answer(good, 5, "a.test", DnsType::kA));
  CHECK_FALSE(parse_dns_answer(good, 6, "a.test", DnsType::kA));
  CHECK_FALSE(parse_dns_answer(good, 5, "b.test", DnsType::kA));
  CHECK_FALSE(parse_dns_answer(good, 5, "a.test", DnsType::kAaaa));
  auto servfail = parse_dns_answer(answer(5, 0x8182, "a.test", 1, {}), 5, "a.test", DnsType::kA);
  REQUIRE_FALSE(servfail);
  CHECK(servfail.error().message == "the name server answered SERVFAIL");
  CHECK_FALSE(parse_dns_answer(answer(5, 0x0100, "a.test", 1, {}), 5, "a.test", DnsType::kA));
  for (size_t n = 0; n < good.size(); ++n) {
    INFO(n);
    CHECK_FALSE(parse_dns_answer(std::span(good).first(n), 5, "a.test", DnsType::kA));
  }
  // A pointer to itself, or forwards, cannot be followed.
  CHECK_FALSE(parse_dns_answer(answer(5, kOk, "a.test", 1, {{{0xC0, 24}, 1, {1, 2, 3, 4}}}), 5,
                               "a.test", DnsType::kA));
  CHECK_FALSE(parse_dns_answer(answer(5, kOk, "a.test", 1, {{{0xC0, 200}, 1, {1, 2, 3, 4}}}), 5,
                               "a.test", DnsType::kA));
  CHECK_FALSE(parse_dns_answer(answer(5, kOk, "a.test", 1, {{kAtQuestion, 1, {1, 2, 3}}}), 5,
                               "a.test", DnsType::kA));
  CHECK_FALSE(parse_dns_answer(answer(5, kOk, "a.test", 1, {{{0x80, 1, 'a', 0}, 1, {1, 2, 3, 4}}}),
                               5, "a.test", DnsType::kA));
  // A label holding a dot would let "a.test" be spelt as one label.
  CHECK_FALSE(parse_dns_answer(
      answer(5, kOk, "x", 1, {{{6, 'a', '.', 't', 'e', 's', 't', 0}, 1, {1, 2, 3, 4}}}), 5, "x",
      DnsType::kA));
  // A CNAME chain longer than kMaxCnameHops.
  std::vector<Rr> chain;
  for (int i = 0; i <= kMaxCnameHops; ++i) {
    chain.push_back({name_bytes("n" + std::to_string(i) + ".test"), 5,
                     name_bytes("n" + std::to_string(i + 1) + ".test")});
  }
  auto long_chain =
      parse_dns_answer(answer(5, kOk, "n0.test", 1, chain), 5, "n0.test", DnsType::kA);
  REQUIRE_FALSE(long_chain);
  CHECK(long_chain.error().message == "the CNAME chain is too long");
}

TEST_CASE("resolv_conf_servers takes each nameserver line") {
  auto s = resolv_conf_servers(
      "# comment\nsearch example.com\nnameserver 192.0.2.53\nnameserver\t2001:db8::53 # v6\n"
      "nameserver fe80::1%eth0\nnameservers 1.1.1.1\nnameserver bogus\n");
  REQUIRE(s.size() == 2);
  CHECK(s[0].address() == address("192.0.2.53"));
  CHECK(s[0].port() == 53);
  CHECK(s[1].address() == address("2001:db8::53"));
}

namespace {

// A name server on 127.0.0.1 for one test: each query it gets (UDP or TCP) goes to `reply`,
// which returns the datagrams to send back (over TCP, the first alone).
struct ScriptedServer {
  using Reply = std::function<std::vector<Bytes>(const Bytes& query, bool tcp)>;
  ScriptedServer(net::io_context& io, Reply r)
      : udp(io, net::ip::udp::endpoint(net::ip::make_address("127.0.0.1"), 0)),
        tcp(io, net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"),
                                       udp.local_endpoint().port())),
        reply(std::move(r)) {
    net::co_spawn(io, serve_udp(), net::detached);
    net::co_spawn(io, serve_tcp(), net::detached);
  }
  net::awaitable<void> serve_udp() {
    Bytes buf(4096);
    net::ip::udp::endpoint from;
    boost::system::error_code ec;
    for (;;) {
      const size_t n = co_await udp.async_receive_from(net::buffer(buf), from,
                                                       net::redirect_error(net::use_awaitable, ec));
      if (ec) co_return;
      queries.emplace_back(buf.begin(), buf.begin() + static_cast<long>(n));
      for (const auto& d : reply(queries.back(), false)) {
        co_await udp.async_send_to(net::buffer(d), from,
                                   net::redirect_error(net::use_awaitable, ec));
      }
    }
  }
  net::awaitable<void> serve_tcp() {
    boost::system::error_code ec;
    for (;;) {
      net::ip::tcp::socket s =
          co_await tcp.async_accept(net::redirect_error(net::use_awaitable, ec));
      if (ec) co_return;
      std::array<uint8_t, 2> len{};
      co_await net::async_read(s, net::buffer(len), net::redirect_error(net::use_awaitable, ec));
      Bytes q(size_t{len[0]} << 8 | len[1]);
      if (!ec)
        co_await net::async_read(s, net::buffer(q), net::redirect_error(net::use_awaitable, ec));
      if (ec) continue;
      queries.push_back(q);
      auto out = reply(q, true);
      if (out.empty()) continue;
      Bytes framed = {static_cast<uint8_t>(out[0].size() >> 8),
                      static_cast<uint8_t>(out[0].size())};
      framed.insert(framed.end(), out[0].begin(), out[0].end());
      co_await net::async_write(s, net::buffer(framed),
                                net::redirect_error(net::use_awaitable, ec));
    }
  }
  ResolverConfig config(std::chrono::milliseconds timeout = std::chrono::seconds(2)) const {
    ResolverConfig c;
    c.servers = {udp.local_endpoint()};
    c.timeout = timeout;
    return c;
  }
  net::ip::udp::socket udp;
  net::ip::tcp::acceptor tcp;
  Reply reply;
  std::vector<Bytes> queries;
};

uint16_t id_of(const Bytes& q) { return static_cast<uint16_t>(q[0] << 8 | q[1]); }
uint16_t type_of(const Bytes& q) {
  return static_cast<uint16_t>(q[q.size() - 4] << 8 | q[q.size() - 3]);
}

}  // namespace

TEST_CASE(
    "Resolver asks A and AAAA with fresh ids, ignores a forged datagram, and falls back to TCP") {
  net::io_context io;
  ScriptedServer server(io, [](const Bytes& q, bool tcp) -> std::vector<Bytes> {
    const uint16_t id = id_of(q);
    if (type_of(q) == 1) {
      // A datagram with the wrong id comes first; then the answer.
      return {answer(static_cast<uint16_t>(id + 1), kOk, "site.test", 1,
                     {{kAtQuestion, 1, {10, 9, 9, 9}}}),
              answer(id, kOk, "site.test", 1, {{kAtQuestion, 1, {203, 0, 113, 7}}})};
    }
    if (!tcp) return {answer(id, 0x8380, "site.test", 28, {})};  // truncated: ask over TCP
    return {answer(
        id, kOk, "site.test", 28,
        {{kAtQuestion, 28, Bytes{0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7}}})};
  });
  Resolver resolver(server.config());
  auto r = cabin::testing::run_sync(io, resolver.resolve("site.test"));
  REQUIRE(r);
  CHECK(*r == std::vector<IpAddress>{address("203.0.113.7"), address("2001:db8::7")});
  REQUIRE(server.queries.size() == 3);  // A over UDP, AAAA over UDP, then over TCP
  CHECK(server.queries[0] == dns_query(id_of(server.queries[0]), "site.test", DnsType::kA));
  CHECK(server.queries[1] == dns_query(id_of(server.queries[1]), "site.test", DnsType::kAaaa));
  CHECK(server.queries[2] == server.queries[1]);
}

TEST_CASE("Resolver: pinned names ask nobody, silence and NXDOMAIN are errors that say so") {
  net::io_context io;
  ScriptedServer server(io, [](const Bytes& q, bool) -> std::vector<Bytes> {
    if (q[12] == 6) return {};  // "silent.test": no answer at all
    return {answer(id_of(q), 0x8183, "gone.test", type_of(q), {})};
  });
  auto config = server.config(std::chrono::milliseconds(200));
  config.pinned["pinned.test"] = {address("127.0.0.1")};
  Resolver resolver(config);
  auto pinned = cabin::testing::run_sync(io, resolver.resolve("pinned.test"));
  REQUIRE(pinned);
  CHECK(*pinned == std::vector<IpAddress>{address("127.0.0.1")});
  CHECK(server.queries.empty());

  auto gone = cabin::testing::run_sync(io, resolver.resolve("gone.test"));
  REQUIRE_FALSE(gone);
  CHECK(gone.error().message == "gone.test: no such name");

  auto silent = cabin::testing::run_sync(io, resolver.resolve("silent.test"));
  REQUIRE_FALSE(silent);
  CHECK(silent.error().message.find("did not answer in time") != std::string::npos);

  Resolver nobody(ResolverConfig{});
  auto none = cabin::testing::run_sync(io, nobody.resolve("a.test"));
  REQUIRE_FALSE(none);
  CHECK(none.error().message == "no DNS server is configured");
}
