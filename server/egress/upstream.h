// Upstream proxies: traffic the policy allowed may go on through an HTTP CONNECT or SOCKS5 proxy
// (a session's "upstream_proxy", or the server's --egress-upstream-proxy). The proxy is asked
// for the address cabind checked, never a name, so it cannot take the traffic elsewhere; its
// credentials stay in cabind.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"
#include "server/egress/host.h"
#include "server/egress/proxy_request.h"

namespace cabin::egress {

struct UpstreamProxy {
  enum class Kind { kHttp, kSocks5 };
  Kind kind = Kind::kHttp;
  Authority at;
  std::string user, password;  // empty user: no credentials
  // "socks5://host:port": never the credentials.
  std::string to_string() const;
};

inline constexpr size_t kMaxUpstreamUrl = 2048;
inline constexpr size_t kMaxUpstreamReply = 16 * 1024;

// "http://[user:pass@]host:port" or "socks5://[user:pass@]host:port"; the port is required, the
// user and password are percent-decoded and at most 255 bytes each (SOCKS5's limit).
Result<UpstreamProxy> parse_upstream_proxy(std::string_view url);

// What the proxy answered so far.
struct UpstreamReply {
  enum class Status { kNeedMore, kOk, kRefused };
  Status status = Status::kNeedMore;
  size_t size = 0;    // kOk: the bytes the reply took
  std::string error;  // kRefused: why
};
// An HTTP proxy's answer to CONNECT: a head that says 200, within kMaxUpstreamReply.
UpstreamReply parse_connect_reply(std::string_view bytes);
// SOCKS5 (RFC 1928, 1929): the method choice, the user/password verdict, the connect reply.
UpstreamReply parse_socks5_method(std::string_view bytes, bool offered_password);
UpstreamReply parse_socks5_auth(std::string_view bytes);
UpstreamReply parse_socks5_connect(std::string_view bytes);

// Over `s`, connected to `p`: asks for a tunnel to `a`:`port`. Empty, or why it failed.
net::awaitable<std::string> upstream_handshake(net::ip::tcp::socket& s, const UpstreamProxy& p,
                                               const IpAddress& a, uint16_t port);

}  // namespace cabin::egress
