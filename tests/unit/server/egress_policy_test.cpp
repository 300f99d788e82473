#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <set>

#include "server/egress/host.h"
#include "server/egress/policy.h"

using namespace cabin::egress;
using nlohmann::json;

namespace {

Host host(std::string_view text) {
  auto h = canonical_host(text);
  INFO(text);
  REQUIRE(h);
  return *h;
}

IpAddress ip(const char* text) { return boost::asio::ip::make_address(text); }

Policy policy(const char* text) {
  auto p = parse_policy(json::parse(text));
  INFO(text);
  if (!p) FAIL(p.error().message);
  return *p;
}

std::string policy_error(const char* text) {
  auto p = parse_policy(json::parse(text));
  INFO(text);
  REQUIRE_FALSE(p);
  return p.error().message;
}

}  // namespace

TEST_CASE("canonical_host lowercases, drops one trailing dot and converts names to punycode") {
  CHECK(host("EXAMPLE.COM").name == "example.com");
  CHECK(host("example.com.").name == "example.com");
  CHECK(host("Bücher.example").name == "xn--bcher-kva.example");
  CHECK(host("xn--BCHER-kva.example").name == "xn--bcher-kva.example");
  CHECK(host("_dmarc.example.com").name == "_dmarc.example.com");
  for (const char* bad :
       {"", ".", "example.com..", "a..b", "exa mple.com", "ex%61mple.com", "example.com/",
        "user@example.com", "example.com:443", "[::1", "[fe80::1%eth0]"}) {
    INFO(bad);
    CHECK_FALSE(canonical_host(bad));
  }
  CHECK_FALSE(canonical_host(std::string(64, 'a') + ".com"));
  CHECK(canonical_host(std::string(63, 'a') + ".com"));
  std::string long_name;
  for (int i = 0; i < 50; ++i) long_name += "abcd.";
  long_name += "com";  // 253 bytes
  CHECK(canonical_host(long_name));
  CHECK_FALSE(canonical_host("a" + long_name));
}

TEST_CASE("canonical_host turns every IPv4 form and bracketed IPv6 into an address") {
  for (const char* loopback : {"127.0.0.1", "2130706433", "0x7f.1", "0177.0.0.1", "127.1",
                               "0x7F000001", "127.0.0.1.", "0x7f.0.0.0x1"}) {
    INFO(loopback);
    auto h = host(loopback);
    REQUIRE(h.is_ip());
    CHECK(*h.ip == ip("127.0.0.1"));
  }
  CHECK(*host("[::1]").ip == ip("::1"));
  CHECK(*host("[::FFFF:169.254.169.254]").ip == ip("::ffff:169.254.169.254"));
  CHECK(host("[2001:db8::1]").to_string() == "[2001:db8::1]");
  // A host ending in a number is an address or nothing, as URL parsers take it.
  for (const char* bad : {"1.2.3.256", "example.1", "256.1.1.1.1", "0x100000000", "09.1.1.1",
                          "1.2.3.4.5", "4294967296"}) {
    INFO(bad);
    CHECK_FALSE(canonical_host(bad));
  }
  CHECK(host("1e100.net").name == "1e100.net");
}

TEST_CASE("parse_cidr keeps ranges strict, and matches IPv4-mapped forms of IPv4 ranges") {
  auto c = parse_cidr("203.0.113.0/24");
  REQUIRE(c);
  CHECK(c->contains(ip("203.0.113.200")));
  CHECK_FALSE(c->contains(ip("203.0.114.1")));
  CHECK(c->contains(ip("::ffff:203.0.113.9")));
  CHECK(c->to_string() == "203.0.113.0/24");
  auto v6 = parse_cidr("2001:db8::/32");
  REQUIRE(v6);
  CHECK(v6->contains(ip("2001:db8:ffff::1")));
  CHECK_FALSE(v6->contains(ip("2001:db9::1")));
  CHECK_FALSE(v6->contains(ip("203.0.113.1")));
  auto one = parse_cidr("198.51.100.7");
  REQUIRE(one);
  CHECK(one->prefix == 32);
  auto all = parse_cidr("0.0.0.0/0");
  REQUIRE(all);
  CHECK(all->contains(ip("8.8.8.8")));
  for (const char* bad : {"203.0.113.1/24", "203.0.113.0/33", "2001:db8::/129", "x/8", "",
                          "10.0.0.0/", "10.0.0.0/-1", "::ffff:10.0.0.0/104", "fe80::1%1"}) {
    INFO(bad);
    CHECK_FALSE(parse_cidr(bad));
  }
}

TEST_CASE("always_denied names every range no policy opens, in every IPv6 disguise") {
  const Boundary none;
  const std::pair<const char*, std::string_view> cases[] = {
      {"127.0.0.1", "loopback"},
      {"127.255.1.2", "loopback"},
      {"10.0.0.5", "private"},
      {"172.16.0.1", "private"},
      {"172.31.255.255", "private"},
      {"192.168.1.1", "private"},
      {"100.64.0.1", "shared (CGNAT)"},
      {"169.254.169.254", "metadata"},
      {"169.254.1.1", "link-local"},
      {"0.0.0.0", "unspecified"},
      {"224.0.0.251", "multicast"},
      {"255.255.255.255", "reserved"},
      {"::1", "loopback"},
      {"::", "unspecified"},
      {"fe80::1", "link-local"},
      {"fd00:ec2::254", "metadata"},
      {"fc00::1", "private"},
      {"ff02::1", "multicast"},
      {"::ffff:169.254.169.254", "metadata"},
      {"::ffff:127.0.0.1", "loopback"},
      {"::127.0.0.1", "loopback"},
      {"64:ff9b::a9fe:a9fe", "metadata"},
      {"64:ff9b::a00:5", "private"},
      {"2002:7f00:1::", "loopback"},
      {"64:ff9b:1::1", "local NAT64"},
      {"2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"},
      // SIIT (RFC 2765) carries an IPv4 address; ISATAP's interface id reaches one too.
      {"::ffff:0:127.0.0.1", "loopback"},
      {"::ffff:0:a00:5", "private"},
      {"2001:db8::5efe:a00:5", "ISATAP"},
      {"2606:2800::200:5efe:5db8:d70e", "ISATAP"},
  };
  for (const auto& [address, why] : cases) {
    INFO(address);
    CHECK(always_denied(ip(address), none) == why);
  }
  for (const char* pub : {"93.184.215.14", "203.0.113.5", "8.8.8.8", "172.32.0.1", "2606:2800::1",
                          "::ffff:93.184.215.14", "64:ff9b::5db8:d70e", "100.128.0.1"}) {
    INFO(pub);
    CHECK(always_denied(ip(pub), none).empty());
  }
  Boundary lab;
  lab.open_cidrs.push_back(*parse_cidr("10.0.0.0/8"));
  lab.open_cidrs.push_back(*parse_cidr("169.254.0.0/16"));
  lab.open_cidrs.push_back(*parse_cidr("0.0.0.0/0"));
  lab.host_addresses = {ip("127.0.0.1"), ip("10.1.2.3")};
  CHECK(always_denied(ip("10.1.1.1"), lab).empty());
  CHECK(always_denied(ip("169.254.1.1"), lab).empty());
  // An open range, however wide, does not open the host itself or the metadata service.
  CHECK(always_denied(ip("10.1.2.3"), lab) == "host address");
  CHECK(always_denied(ip("::ffff:10.1.2.3"), lab) == "host address");
  CHECK(always_denied(ip("169.254.169.254"), lab) == "metadata");
  CHECK(always_denied(ip("127.0.0.2"), lab) == "loopback");
  CHECK(always_denied(ip("0.0.0.0"), lab) == "unspecified");
  // Only a range opened for the host does, and only within it.
  lab.open_host_cidrs.push_back(*parse_cidr("127.0.0.1/32"));
  CHECK(always_denied(ip("127.0.0.1"), lab).empty());
  CHECK(always_denied(ip("::ffff:127.0.0.1"), lab).empty());
  CHECK(always_denied(ip("127.0.0.2"), lab) == "loopback");
  CHECK(always_denied(ip("10.1.2.3"), lab) == "host address");
  Boundary none_open;
  none_open.host_addresses = {ip("198.51.100.20")};
  CHECK(always_denied(ip("198.51.100.20"), none_open) == "host address");
  CHECK(always_denied(ip("198.51.100.21"), none_open).empty());
}

TEST_CASE("host patterns: a wildcard matches below its name at any depth, never the name itself") {
  auto wild = parse_host_pattern("*.Wikipedia.org.");
  REQUIRE(wild);
  CHECK(wild->to_string() == "*.wikipedia.org");
  CHECK(wild->matches("en.wikipedia.org"));
  CHECK(wild->matches("a.b.wikipedia.org"));
  CHECK_FALSE(wild->matches("wikipedia.org"));
  CHECK_FALSE(wild->matches("evilwikipedia.org"));
  CHECK_FALSE(wild->matches("wikipedia.org.evil.test"));
  CHECK_FALSE(wild->matches(".wikipedia.org"));
  auto exact = parse_host_pattern("example.com");
  REQUIRE(exact);
  CHECK(exact->matches("example.com"));
  CHECK_FALSE(exact->matches("www.example.com"));
  for (const char* bad : {"*", "*.", "a.*.com", "*example.com", "**.example.com", "10.0.0.1",
                          "[::1]", "*.*.example.com"}) {
    INFO(bad);
    CHECK_FALSE(parse_host_pattern(bad));
  }
}

TEST_CASE("parse_policy: errors name the field, defaults are filled in") {
  CHECK(policy_error(R"({"allow": []})") == "network.mode: is required");
  CHECK(policy_error(R"({"mode": "closed"})") == "network.mode: must be none, allowlist or open");
  CHECK(policy_error(R"({"mode": "none", "bogus": 1})").find("bogus") != std::string::npos);
  CHECK(policy_error(R"({"mode": "open", "allow": [{"host": "a.com"}]})") ==
        "network.allow: only an allowlist has allow rules");
  CHECK(policy_error(R"({"mode": "allowlist", "allow": [{"host": "a.com", "cidr": "1.2.3.4"}]})") ==
        "network.allow[0]: needs exactly one of \"host\" and \"cidr\"");
  CHECK(policy_error(R"({"mode": "allowlist", "allow": [{}]})") ==
        "network.allow[0]: needs exactly one of \"host\" and \"cidr\"");
  CHECK(policy_error(R"({"mode": "allowlist", "allow": [{"host": "a.com", "ports": [0]}]})")
            .find("network.allow[0].ports[0]") == 0);
  CHECK(policy_error(R"({"mode": "allowlist", "allow": [{"host": "a.com", "ports": []}]})")
            .find("network.allow[0].ports") == 0);
  CHECK(policy_error(R"({"mode": "allowlist", "allow": [{"host": "a.*.com"}]})")
            .find("network.allow[0].host") == 0);
  CHECK(policy_error(R"({"mode": "allowlist", "allow": [{"host": "10.0.0.1"}]})").find("cidr") !=
        std::string::npos);
  CHECK(policy_error(R"({"mode": "allowlist", "allow": [{"host": "a.com", "methods": ["G T"]}]})")
            .find("network.allow[0].methods[0]") == 0);
  CHECK(policy_error(R"({"mode": "allowlist", "deny": [{"cidr": "10.0.0.1/8"}]})")
            .find("network.deny[0].cidr") == 0);
  CHECK(policy_error(R"({"mode": "none", "secrets": [{"name": "a", "value": "v"}]})") ==
        "network.secrets[0].hosts: is required");
  CHECK(policy_error(R"({"mode": "none", "secrets": [{"name": "a", "value": "v", "hosts": ["a.com"],
                                                     "format": "Bearer"}]})") ==
        "network.secrets[0].format: must hold {value}");
  CHECK(policy_error(
            R"({"mode": "none", "secrets": [{"name": "a", "value": "v\n", "hosts": ["a.com"]}]})")
            .find("network.secrets[0].value") == 0);
  CHECK(
      policy_error(R"({"mode": "none", "secrets": [{"name": "a", "value": "v", "hosts": ["a.com"]},
                                                     {"name": "a", "value": "w", "hosts": ["a.com"]}]})") ==
      "network.secrets[1].name: is used twice");
  json many = {{"mode", "allowlist"}, {"allow", json::array()}};
  for (size_t i = 0; i <= kMaxRules; ++i) many["allow"].push_back({{"host", "a.com"}});
  CHECK_FALSE(parse_policy(many));

  auto p = policy(R"({"mode": "allowlist",
      "allow": [{"host": "Example.COM"}, {"cidr": "203.0.113.0/24", "ports": [443, 443, 8443]},
                {"host": "api.example.com", "methods": ["get", "HEAD"]}],
      "deny": [{"host": "upload.wikimedia.org"}]})");
  REQUIRE(p.allow.size() == 3);
  CHECK(p.allow[0].host->name == "example.com");
  CHECK(p.allow[0].ports == std::vector<uint16_t>{80, 443});
  CHECK(p.allow[1].ports == std::vector<uint16_t>{443, 8443});
  CHECK(p.allow[2].methods == std::vector<std::string>{"GET", "HEAD"});
  CHECK(p.allow[2].label == "allow[2]");
  CHECK(p.deny[0].ports.empty());  // every port
}

TEST_CASE("secrets: only placeholders leave parse_policy's result, and they survive a change") {
  const char* text = R"({"mode": "allowlist", "allow": [{"host": "api.example.com"}],
      "secrets": [{"name": "gh", "value": "ghp_real", "hosts": ["api.example.com"],
                   "header": "Authorization", "format": "Bearer {value}"},
                  {"name": "other", "value": "xyz", "hosts": ["*.example.org"]}]})";
  auto p = policy(text);
  REQUIRE(p.secrets.size() == 2);
  CHECK(p.secrets[0].value == "ghp_real");
  CHECK(p.secrets[0].placeholder.rfind(kPlaceholderPrefix, 0) == 0);
  CHECK(p.secrets[0].placeholder.size() == kPlaceholderPrefix.size() + 32);
  CHECK(p.secrets[0].placeholder != p.secrets[1].placeholder);
  CHECK(p.secrets[1].header == "Authorization");
  CHECK(p.secrets[1].format == "{value}");
  const std::string shown = policy_json(p).dump();
  CHECK(shown.find("ghp_real") == std::string::npos);
  CHECK(shown.find("xyz") == std::string::npos);
  CHECK(shown.find(p.secrets[0].placeholder) != std::string::npos);

  auto again = parse_policy(json::parse(text), "network", &p);
  REQUIRE(again);
  CHECK(again->secrets[0].placeholder == p.secrets[0].placeholder);
  auto fresh = parse_policy(json::parse(text));
  REQUIRE(fresh);
  CHECK(fresh->secrets[0].placeholder != p.secrets[0].placeholder);

  // The answer parses back into the same rules.
  json back = policy_json(p);
  back.erase("secrets");
  auto round = parse_policy(back);
  REQUIRE(round);
  CHECK(policy_json(*round)["allow"] == policy_json(p)["allow"]);
}

TEST_CASE("check_host: mode none and the allowlist, deny wins, ports, wildcards") {
  const Boundary b;
  auto none = policy(R"({"mode": "none"})");
  auto d = check_host(none, b, host("example.com"), 443, "");
  CHECK_FALSE(d.allowed);
  CHECK(d.rule == "mode none");

  auto p = policy(R"({"mode": "allowlist",
      "allow": [{"host": "example.com", "ports": [443]}, {"host": "*.wikipedia.org"}],
      "deny": [{"host": "upload.wikipedia.org"}]})");
  CHECK(check_host(p, b, host("example.com"), 443, "").allowed);
  CHECK(check_host(p, b, host("EXAMPLE.com."), 443, "").rule == "allow[0]");
  CHECK_FALSE(check_host(p, b, host("example.com"), 80, "").allowed);
  CHECK_FALSE(check_host(p, b, host("example.com"), 8443, "").allowed);
  CHECK_FALSE(check_host(p, b, host("example.org"), 443, "").allowed);
  CHECK(check_host(p, b, host("en.wikipedia.org"), 443, "").rule == "allow[1]");
  CHECK(check_host(p, b, host("a.b.wikipedia.org"), 80, "GET").allowed);
  CHECK_FALSE(check_host(p, b, host("wikipedia.org"), 443, "").allowed);
  CHECK_FALSE(check_host(p, b, host("evilwikipedia.org"), 443, "").allowed);
  auto denied = check_host(p, b, host("upload.wikipedia.org"), 443, "");
  CHECK_FALSE(denied.allowed);
  CHECK(denied.rule == "deny[0]");
  CHECK(denied.reason == "upload.wikipedia.org:443 is denied");
  auto no_rule = check_host(p, b, host("example.org"), 443, "");
  CHECK(no_rule.rule.empty());
  CHECK(no_rule.reason == "no rule allows example.org:443");
}

TEST_CASE("check_host: IP literals need a cidr rule and never reach the always-denied set") {
  const Boundary b;
  auto p = policy(R"({"mode": "allowlist", "allow": [{"host": "example.com"},
      {"cidr": "203.0.113.0/24", "ports": [443]}, {"cidr": "10.0.0.0/8"}]})");
  CHECK(check_host(p, b, host("203.0.113.5"), 443, "").allowed);
  CHECK_FALSE(check_host(p, b, host("203.0.113.5"), 80, "").allowed);
  CHECK_FALSE(check_host(p, b, host("93.184.215.14"), 443, "").allowed);
  CHECK_FALSE(check_host(p, b, host("[2606:2800::1]"), 443, "").allowed);
  // Allowed by a rule, but private: no policy opens it.
  auto priv = check_host(p, b, host("10.0.0.5"), 443, "");
  CHECK_FALSE(priv.allowed);
  CHECK(priv.rule == "always denied");
  CHECK(priv.reason ==
        "10.0.0.5:443 is a private address, which sessions reach only when cabind is started with "
        "--egress-allow-cidr 10.0.0.5/32 (docs/egress.md)");
  for (const char* sneaky : {"0x7f.1", "2130706433", "[::ffff:169.254.169.254]",
                             "[64:ff9b::a9fe:a9fe]", "169.254.169.254"}) {
    INFO(sneaky);
    CHECK(check_host(p, b, host(sneaky), 443, "").rule == "always denied");
  }
  auto open = policy(R"({"mode": "open", "deny": [{"cidr": "198.51.100.7"}]})");
  CHECK(check_host(open, b, host("93.184.215.14"), 443, "").allowed);
  CHECK(check_host(open, b, host("anything.example"), 8080, "").rule == "mode open");
  CHECK_FALSE(check_host(open, b, host("198.51.100.7"), 443, "").allowed);
  CHECK_FALSE(check_host(open, b, host("127.0.0.1"), 443, "").allowed);
  Boundary lab;
  lab.open_cidrs.push_back(*parse_cidr("127.0.0.0/8"));
  CHECK_FALSE(check_host(open, lab, host("127.0.0.1"), 443, "").allowed);
  lab.open_host_cidrs.push_back(*parse_cidr("127.0.0.0/8"));
  CHECK(check_host(open, lab, host("127.0.0.1"), 443, "").allowed);
}

TEST_CASE("check_reachable: a rule the boundary keeps closed is refused, naming the option") {
  const Boundary closed;
  auto loop = check_reachable(policy(R"({"mode": "allowlist", "allow": [{"host": "a.test"},
      {"cidr": "127.0.0.1/32"}]})"),
                              closed);
  REQUIRE_FALSE(loop);
  CHECK(loop.error().code == "invalid_request");
  CHECK(loop.error().message.find("network.allow[1]: 127.0.0.1/32 can never match") == 0);
  CHECK(loop.error().message.find("--egress-allow-host-cidr 127.0.0.1/32") != std::string::npos);
  auto priv = check_reachable(policy(R"({"mode": "allowlist", "allow": [{"cidr": "10.0.0.0/8"}]})"),
                              closed);
  REQUIRE_FALSE(priv);
  CHECK(priv.error().message.find("--egress-allow-cidr 10.0.0.0/8") != std::string::npos);
  // Public, partly public, or opened by the operator: accepted.
  CHECK(check_reachable(policy(R"({"mode": "allowlist", "allow": [{"cidr": "203.0.113.0/24"},
      {"cidr": "0.0.0.0/0"}, {"cidr": "8.0.0.0/6"}]})"),
                        closed));
  Boundary lab;
  lab.open_cidrs.push_back(*parse_cidr("10.1.0.0/16"));
  lab.open_host_cidrs.push_back(*parse_cidr("127.0.0.1/32"));
  CHECK(check_reachable(policy(R"({"mode": "allowlist", "allow": [{"cidr": "10.0.0.0/8"},
      {"cidr": "127.0.0.0/8"}]})"),
                        lab));
  // Only loopback opened for the host: a loopback rule elsewhere in 127/8 stays closed.
  CHECK_FALSE(check_reachable(
      policy(R"({"mode": "allowlist", "allow": [{"cidr": "127.0.0.2/32"}]})"), lab));
  CHECK_FALSE(
      check_reachable(policy(R"({"mode": "allowlist", "allow": [{"cidr": "::1/128"}]})"), closed));
}

TEST_CASE("check_host: a method-limited rule leaves a tunnel's requests to be checked") {
  const Boundary b;
  auto p = policy(R"({"mode": "allowlist",
      "allow": [{"host": "api.example.com", "ports": [443], "methods": ["GET", "HEAD"]}]})");
  auto tunnel = check_host(p, b, host("api.example.com"), 443, "");
  CHECK(tunnel.allowed);
  CHECK(tunnel.needs_request_check);
  CHECK(check_host(p, b, host("api.example.com"), 443, "GET").allowed);
  CHECK_FALSE(check_host(p, b, host("api.example.com"), 443, "GET").needs_request_check);
  auto post = check_host(p, b, host("api.example.com"), 443, "POST");
  CHECK_FALSE(post.allowed);
  CHECK(post.reason == "no rule allows api.example.com:443 for POST");
  // A wider rule settles the tunnel.
  auto wide = policy(R"({"mode": "allowlist",
      "allow": [{"host": "api.example.com", "methods": ["GET"]}, {"host": "*.example.com"}]})");
  auto w = check_host(wide, b, host("api.example.com"), 443, "");
  CHECK(w.allowed);
  CHECK_FALSE(w.needs_request_check);
  CHECK(w.rule == "allow[1]");
  // A deny limited to methods: the tunnel opens, its POSTs do not pass.
  auto no_post =
      policy(R"({"mode": "open", "deny": [{"host": "api.example.com", "methods": ["POST"]}]})");
  auto t = check_host(no_post, b, host("api.example.com"), 443, "");
  CHECK(t.allowed);
  CHECK(t.needs_request_check);
  CHECK_FALSE(check_host(no_post, b, host("api.example.com"), 443, "POST").allowed);
  CHECK(check_host(no_post, b, host("api.example.com"), 443, "GET").allowed);
}

TEST_CASE("check_address: what an allowed name resolves to is checked again") {
  Boundary b;
  b.host_addresses = {ip("198.51.100.20")};
  auto p = policy(R"({"mode": "allowlist", "allow": [{"host": "site.test"}],
                      "deny": [{"cidr": "203.0.113.0/24"}]})");
  CHECK(check_address(p, b, ip("93.184.215.14"), 443).allowed);
  auto loop = check_address(p, b, ip("127.0.0.1"), 443);
  CHECK_FALSE(loop.allowed);
  CHECK(loop.reason ==
        "resolved to 127.0.0.1:443, a loopback address, which sessions reach only when cabind is "
        "started with --egress-allow-host-cidr 127.0.0.1/32 (docs/egress.md)");
  CHECK_FALSE(check_address(p, b, ip("10.0.0.5"), 443).allowed);
  CHECK_FALSE(check_address(p, b, ip("::ffff:10.0.0.5"), 443).allowed);
  CHECK_FALSE(check_address(p, b, ip("198.51.100.20"), 443).allowed);
  auto denied = check_address(p, b, ip("203.0.113.9"), 443);
  CHECK_FALSE(denied.allowed);
  CHECK(denied.rule == "deny[0]");
  CHECK(denied.reason == "resolved to 203.0.113.9:443, which is denied");
  CHECK(check_address(p, b, ip("2606:2800::1"), 443).allowed);
  CHECK_FALSE(check_address(p, b, ip("fe80::1"), 443).allowed);
}
