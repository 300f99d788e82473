#include "server/egress/upstream.h"

#include <array>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>

#include "common/crypto.h"
#include "server/api/router.h"

namespace cabin::egress {

namespace {

Error bad_upstream(const std::string& why) {
  return make_error(Errc::kInvalidArgument, "invalid_upstream_proxy", why);
}

UpstreamReply need_more() { return {}; }
UpstreamReply ok(size_t n) { return {UpstreamReply::Status::kOk, n, {}}; }
UpstreamReply refused(std::string why) {
  return {UpstreamReply::Status::kRefused, 0, std::move(why)};
}

std::string socks5_error(uint8_t code) {
  static constexpr std::array<const char*, 9> kText = {
      "succeeded",           "general failure",       "not allowed by its rules",
      "network unreachable", "host unreachable",      "connection refused",
      "TTL expired",         "command not supported", "address type not supported"};
  return code < kText.size() ? kText[code] : "error " + std::to_string(code);
}

enum class Step { kConnectReply, kMethod, kMethodOrPassword, kAuth, kConnect };

struct StepResult {
  std::string error;  // empty: it said yes
  bool chose_password = false;
};

// Writes `out`, then reads until the reply `step` expects is whole, a byte at a time: what comes
// after it is the destination's, and stays in the socket.
net::awaitable<StepResult> upstream_step(net::ip::tcp::socket& s, std::string& got, std::string out,
                                         Step step) {
  boost::system::error_code ec;
  co_await net::async_write(s, net::buffer(out), net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return StepResult{"writing to it: " + ec.message()};
  char byte = 0;
  for (;;) {
    UpstreamReply r;
    switch (step) {
      case Step::kConnectReply:
        r = parse_connect_reply(got);
        break;
      case Step::kMethod:
      case Step::kMethodOrPassword:
        r = parse_socks5_method(got, step == Step::kMethodOrPassword);
        break;
      case Step::kAuth:
        r = parse_socks5_auth(got);
        break;
      case Step::kConnect:
        r = parse_socks5_connect(got);
        break;
    }
    if (r.status == UpstreamReply::Status::kRefused) co_return StepResult{r.error};
    if (r.status == UpstreamReply::Status::kOk) {
      StepResult out_result;
      out_result.chose_password = step == Step::kMethodOrPassword && got[1] == 2;
      got.erase(0, r.size);
      co_return out_result;
    }
    co_await net::async_read(s, net::buffer(&byte, 1), net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return StepResult{"reading its answer: " + ec.message()};
    got += byte;
  }
}

}  // namespace

std::string UpstreamProxy::to_string() const {
  return std::string(kind == Kind::kHttp ? "http://" : "socks5://") + at.to_string();
}

Result<UpstreamProxy> parse_upstream_proxy(std::string_view url) {
  if (url.size() > kMaxUpstreamUrl) return bad_upstream("longer than 2048 bytes");
  UpstreamProxy p;
  if (url.substr(0, 7) == "http://") {
    p.kind = UpstreamProxy::Kind::kHttp;
    url.remove_prefix(7);
  } else if (url.substr(0, 9) == "socks5://") {
    p.kind = UpstreamProxy::Kind::kSocks5;
    url.remove_prefix(9);
  } else {
    return bad_upstream("must start with http:// or socks5://");
  }
  if (!url.empty() && url.back() == '/') url.remove_suffix(1);
  if (const size_t at = url.rfind('@'); at != std::string_view::npos) {
    const std::string_view userinfo = url.substr(0, at);
    url.remove_prefix(at + 1);
    const size_t colon = userinfo.find(':');
    auto user = api::percent_decode(userinfo.substr(0, colon), false);
    auto pass = api::percent_decode(
        colon == std::string_view::npos ? std::string_view() : userinfo.substr(colon + 1), false);
    if (!user || !pass || user->empty()) return bad_upstream("bad user:password");
    if (user->size() > 255 || pass->size() > 255) {
      return bad_upstream("a user or password longer than 255 bytes");
    }
    p.user = std::move(*user);
    p.password = std::move(*pass);
  }
  auto a = parse_authority(url);
  if (!a) return bad_upstream(a.error().message);
  p.at = std::move(*a);
  return p;
}

UpstreamReply parse_connect_reply(std::string_view bytes) {
  const size_t end = bytes.find("\r\n\r\n");
  if (end == std::string_view::npos) {
    if (bytes.size() >= kMaxUpstreamReply) return refused("its answer's head is too large");
    if (bytes.size() >= 5 && bytes.substr(0, 5) != "HTTP/") return refused("it answered no HTTP");
    return need_more();
  }
  if (end + 4 > kMaxUpstreamReply) return refused("its answer's head is too large");
  const std::string_view line = bytes.substr(0, bytes.find("\r\n"));
  // "HTTP/1.1 200 Connection established"
  if (line.size() < 12 || line.substr(0, 7) != "HTTP/1." || line[8] != ' ') {
    return refused("it answered no HTTP");
  }
  if (line.substr(9, 3) != "200") return refused("it answered " + std::string(line.substr(9)));
  return ok(end + 4);
}

UpstreamReply parse_socks5_method(std::string_view bytes, bool offered_password) {
  if (bytes.size() < 2) return need_more();
  if (bytes[0] != 5) return refused("it does not speak SOCKS5");
  const auto method = static_cast<uint8_t>(bytes[1]);
  if (method == 0) return ok(2);
  if (method == 2 && offered_password) return ok(2);
  return refused(offered_password ? "it accepts neither no credentials nor ours"
                                  : "it wants credentials");
}

UpstreamReply parse_socks5_auth(std::string_view bytes) {
  if (bytes.size() < 2) return need_more();
  if (bytes[0] != 1) return refused("a bad answer to the credentials");
  if (bytes[1] != 0) return refused("it refused the credentials");
  return ok(2);
}

UpstreamReply parse_socks5_connect(std::string_view bytes) {
  if (bytes.size() < 5) return need_more();
  if (bytes[0] != 5) return refused("it does not speak SOCKS5");
  if (bytes[1] != 0) return refused(socks5_error(static_cast<uint8_t>(bytes[1])));
  size_t size = 0;
  switch (static_cast<uint8_t>(bytes[3])) {
    case 1:
      size = 4 + 4 + 2;
      break;
    case 4:
      size = 4 + 16 + 2;
      break;
    case 3:
      size = 4 + 1 + static_cast<uint8_t>(bytes[4]) + 2;
      break;
    default:
      return refused("a bad address type in its answer");
  }
  if (bytes.size() < size) return need_more();
  return ok(size);
}

net::awaitable<std::string> upstream_handshake(net::ip::tcp::socket& s, const UpstreamProxy& p,
                                               const IpAddress& a, uint16_t port) {
  std::string got;
  if (p.kind == UpstreamProxy::Kind::kHttp) {
    Host h;
    h.ip = a;
    const std::string where = h.to_string() + ":" + std::to_string(port);
    std::string req = "CONNECT " + where + " HTTP/1.1\r\nHost: " + where + "\r\n";
    if (!p.user.empty()) {
      req += "Proxy-Authorization: Basic " + base64_encode(p.user + ":" + p.password) + "\r\n";
    }
    req += "\r\n";
    auto r = co_await upstream_step(s, got, req, Step::kConnectReply);
    co_return r.error;
  }
  const bool password = !p.user.empty();
  std::string hello =
      password ? std::string("\x05\x02\x00\x02", 4) : std::string("\x05\x01\x00", 3);
  auto r =
      co_await upstream_step(s, got, hello, password ? Step::kMethodOrPassword : Step::kMethod);
  if (!r.error.empty()) co_return r.error;
  if (password && r.chose_password) {
    std::string auth = "\x01";
    auth += static_cast<char>(p.user.size());
    auth += p.user;
    auth += static_cast<char>(p.password.size());
    auth += p.password;
    r = co_await upstream_step(s, got, auth, Step::kAuth);
    if (!r.error.empty()) co_return r.error;
  }
  std::string req("\x05\x01\x00", 3);
  if (a.is_v4()) {
    req += '\x01';
    const auto bytes = a.to_v4().to_bytes();
    req.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  } else {
    req += '\x04';
    const auto bytes = a.to_v6().to_bytes();
    req.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }
  req += static_cast<char>(port >> 8);
  req += static_cast<char>(port & 0xff);
  r = co_await upstream_step(s, got, req, Step::kConnect);
  co_return r.error;
}

}  // namespace cabin::egress
