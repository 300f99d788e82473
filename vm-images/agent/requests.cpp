#include "vm-images/agent/requests.h"

#include <arpa/inet.h>
#include <sys/un.h>

#include <nlohmann/json.hpp>

namespace cabin::agent {
namespace {

using nlohmann::json;

Error bad_request(std::string message) {
  return make_error(Errc::kInvalidArgument, "invalid_request", std::move(message));
}

bool has_nul(std::string_view s) { return s.find('\0') != std::string_view::npos; }

}  // namespace

std::optional<uint32_t> parse_decimal(std::string_view s, uint32_t min, uint32_t max) {
  if (s.empty() || s.size() > 10 || (s.size() > 1 && s[0] == '0')) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v < min || v > max) return std::nullopt;
  return static_cast<uint32_t>(v);
}

Result<HealthQuery> parse_health_query(std::string_view query) {
  HealthQuery q;
  if (query.empty()) return q;
  constexpr std::string_view kWait = "wait_ms=";
  if (query.substr(0, kWait.size()) != kWait) {
    return bad_request("the only query parameter is wait_ms");
  }
  auto ms = parse_decimal(query.substr(kWait.size()), 0, kMaxHealthWaitMs);
  if (!ms) return bad_request("wait_ms must be an integer in 0..60000");
  q.wait = std::chrono::milliseconds(*ms);
  return q;
}

Result<ConnectTarget> parse_connect_target(std::string_view target) {
  auto forbidden = [&](std::string why) {
    return make_error(Errc::kPermissionDenied, "forbidden_target", std::move(why));
  };
  // The port follows the last colon; an IPv6 host must be bracketed so that is unambiguous.
  auto colon = target.rfind(':');
  if (colon == std::string_view::npos) return forbidden("CONNECT target must be HOST:PORT");
  std::string_view host = target.substr(0, colon);
  auto port = parse_decimal(target.substr(colon + 1), 1, 65535);
  if (!port) return forbidden("CONNECT port must be in 1..65535");

  ConnectTarget t;
  t.port = static_cast<uint16_t>(*port);
  if (host == "127.0.0.1") {
    t.host = ConnectTarget::Host::kIpv4Loopback;
  } else if (host == "localhost") {
    t.host = ConnectTarget::Host::kLocalhost;
  } else if (host == "[::1]") {
    t.host = ConnectTarget::Host::kIpv6Loopback;
  } else {
    return forbidden("CONNECT is limited to 127.0.0.1, localhost and [::1]");
  }
  return t;
}

Result<ListenAddress> parse_listen_address(std::string_view text) {
  auto bad = [&](std::string why) { return make_error(Errc::kInvalidArgument, "bad_listen", why); };
  ListenAddress a;
  if (text.substr(0, 5) == "unix:") {
    a.kind = ListenAddress::Kind::kUnix;
    a.path = std::string(text.substr(5));
    if (a.path.empty() || has_nul(a.path)) return bad("unix: needs a path");
    if (a.path.size() >= sizeof(sockaddr_un::sun_path)) return bad("unix socket path is too long");
    return a;
  }
  if (text.substr(0, 4) == "tcp:") {
    a.kind = ListenAddress::Kind::kTcp;
    auto rest = text.substr(4);
    auto colon = rest.rfind(':');
    if (colon == std::string_view::npos) return bad("tcp: needs HOST:PORT");
    auto host = rest.substr(0, colon);
    auto port = parse_decimal(rest.substr(colon + 1), 0, 65535);
    if (!port) return bad("tcp port must be in 0..65535");
    a.port = static_cast<uint16_t>(*port);
    unsigned char buf[sizeof(in6_addr)];
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
      a.host = std::string(host.substr(1, host.size() - 2));
      if (inet_pton(AF_INET6, a.host.c_str(), buf) != 1) return bad("not an IPv6 address");
    } else {
      a.host = std::string(host);
      if (inet_pton(AF_INET, a.host.c_str(), buf) != 1) return bad("not an IPv4 address");
    }
    return a;
  }
  if (text.substr(0, 3) == "fd:") {
    a.kind = ListenAddress::Kind::kFd;
    auto fd = parse_decimal(text.substr(3), 3, 1023);
    if (!fd) return bad("fd: needs a descriptor number in 3..1023");
    a.fd = static_cast<int>(*fd);
    return a;
  }
  return bad("listen address must start with unix:, tcp: or fd:");
}

std::pair<std::string_view, std::string_view> split_target(std::string_view target) {
  auto q = target.find('?');
  if (q == std::string_view::npos) return {target, {}};
  return {target.substr(0, q), target.substr(q + 1)};
}

}  // namespace cabin::agent
