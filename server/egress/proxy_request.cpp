#include "server/egress/proxy_request.h"

#include <algorithm>

namespace cabin::egress {
namespace {

Error bad_request(std::string why) {
  return make_error(Errc::kInvalidArgument, "bad_proxy_request", std::move(why));
}

std::optional<uint16_t> parse_port(std::string_view p) {
  if (p.empty() || p.size() > 5 || p[0] == '0') return std::nullopt;
  uint32_t v = 0;
  for (char c : p) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint32_t>(c - '0');
  }
  if (v == 0 || v > 65535) return std::nullopt;
  return static_cast<uint16_t>(v);
}

}  // namespace

std::string Authority::to_string() const { return host.to_string() + ":" + std::to_string(port); }

Result<Authority> parse_authority(std::string_view text, uint16_t default_port) {
  if (text.empty()) return bad_request("the authority is empty");
  if (text.size() > kMaxHostText + 8) return bad_request("the authority is too long");
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7f) return bad_request("the authority holds a space or control byte");
    if (std::string_view("@/?#\\%").find(c) != std::string_view::npos) {
      return bad_request(std::string("the authority may not hold '") + c + "'");
    }
  }
  std::string_view host = text, port;
  bool has_port = false;
  if (text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) return bad_request("an IPv6 literal must end with ]");
    host = text.substr(0, close + 1);
    const std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return bad_request("after ] only :port may follow");
      port = rest.substr(1);
      has_port = true;
    }
  } else if (const size_t colon = text.rfind(':'); colon != std::string_view::npos) {
    if (text.find(':') != colon) return bad_request("an IPv6 address must be in brackets");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    has_port = true;
  }
  Authority a;
  if (has_port) {
    auto p = parse_port(port);
    if (!p) return bad_request("the port must be a number from 1 to 65535");
    a.port = *p;
  } else {
    if (default_port == 0) return bad_request("the authority needs a port");
    a.port = default_port;
  }
  auto h = canonical_host(host);
  if (!h) return bad_request(h.error().message);
  a.host = std::move(*h);
  return a;
}

Result<ProxyTarget> parse_proxy_target(std::string_view method, std::string_view target,
                                       std::string_view host_header) {
  if (method.empty() || method.size() > 32 ||
      !std::all_of(method.begin(), method.end(), is_token_char)) {
    return bad_request("the method is not an HTTP token");
  }
  if (target.empty() || target.size() > kMaxProxyTarget) {
    return bad_request("the request target is empty or too long");
  }
  for (char c : target) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f)
      return bad_request("the request target holds a space, control or non-ASCII byte");
  }
  ProxyTarget t;
  t.method = std::string(method);
  if (method == "CONNECT") {
    auto a = parse_authority(target);
    if (!a) return a.error();
    if (!host_header.empty()) {
      auto h = parse_authority(host_header, a->port);
      if (!h || !(*h == *a)) return bad_request("Host must name the CONNECT authority");
    }
    t.tunnel = true;
    t.authority = std::move(*a);
    return t;
  }
  // Absolute form: the scheme is case-insensitive.
  constexpr std::string_view kHttp = "http://";
  std::string scheme(target.substr(0, std::min(target.size(), kHttp.size())));
  std::transform(scheme.begin(), scheme.end(), scheme.begin(),
                 [](char c) { return static_cast<char>(c >= 'A' && c <= 'Z' ? c | 0x20 : c); });
  if (scheme != kHttp) {
    if (scheme.rfind("https:", 0) == 0) return bad_request("https:// URLs go through CONNECT");
    return bad_request("a proxy request needs an http:// URL or CONNECT");
  }
  const std::string_view rest = target.substr(kHttp.size());
  const size_t end = rest.find_first_of("/?");
  if (rest.find('#') != std::string_view::npos)
    return bad_request("a URL sent to a proxy has no fragment");
  auto a = parse_authority(rest.substr(0, end), 80);
  if (!a) return a.error();
  if (host_header.empty()) return bad_request("a plain HTTP request needs a Host header");
  auto h = parse_authority(host_header, 80);
  if (!h || !(*h == *a)) return bad_request("Host must name the URL's host and port");
  t.authority = std::move(*a);
  if (end == std::string_view::npos) {
    t.origin_target = "/";
  } else if (rest[end] == '?') {
    t.origin_target = "/" + std::string(rest.substr(end));
  } else {
    t.origin_target = std::string(rest.substr(end));
  }
  return t;
}

}  // namespace cabin::egress
