// What a sandbox asks cabind's egress proxy, parsed strictly: a CONNECT's authority, or a plain
// HTTP request in absolute form with its Host header. Anything else is refused before any
// policy is asked or any name is looked up.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"
#include "server/egress/host.h"

namespace cabin::egress {

inline constexpr size_t kMaxProxyTarget = 8 * 1024;

// A character of an HTTP token (RFC 9110): methods and field names.
inline bool is_token_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

struct Authority {
  Host host;
  uint16_t port = 0;
  std::string to_string() const;  // "example.com:443", "[2001:db8::1]:443"
  bool operator==(const Authority& o) const {
    return port == o.port && host.name == o.host.name && host.ip == o.host.ip;
  }
};

// "host:port" or "[v6]:port"; without a port, `default_port` (0: the port is required). No
// userinfo, no percent escapes, no path; a port of 1 to 65535 without sign or leading zero; the
// host as canonical_host takes it.
Result<Authority> parse_authority(std::string_view text, uint16_t default_port = 0);

struct ProxyTarget {
  bool tunnel = false;  // CONNECT: bytes pass both ways once the proxy answers 200
  std::string method;   // as sent (methods are case-sensitive)
  Authority authority;
  std::string origin_target;  // plain HTTP: "/path?query", as sent upstream
};

// The request line's method and target and the Host header (empty: none), checked together:
// CONNECT takes an authority with its port, and a Host, if any, that names the same; any other
// method an http:// URL whose authority the Host header must name. https:// URLs come through
// CONNECT and are refused here, as are origin-form and asterisk targets.
Result<ProxyTarget> parse_proxy_target(std::string_view method, std::string_view target,
                                       std::string_view host_header);

}  // namespace cabin::egress
