// The secret-injecting path of the egress proxy: a tunnel to a host bound to a secret ends in
// cabind, with a certificate from the session's CA; each request on it is checked (its Host,
// its method, the placeholders it carries), gets its secrets, and goes to the host over the
// proxy's own verified TLS. HTTP/1.1 only (the certificate's context offers nothing else).
// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <optional>
#include <vector>

#include "common/ascii.h"
#include "common/deadline.h"
#include "server/egress/proxy.h"
#include "server/egress/proxy_conn.h"
#include "server/egress/secrets.h"
#include "server/http/hop_by_hop.h"
#include "server/preview/relay.h"

namespace cabin::egress {

namespace beast = boost::beast;
namespace http = beast::http;

namespace {

using tcp = net::ip::tcp;
using preview::Framing;

// The sandbox's side of the tunnel under the TLS server: the ClientHello the proxy already read
// comes first, and every byte either way is counted (TLS included) for the log.
class SandboxStream {
 public:
  using executor_type = tcp::socket::executor_type;
  using lowest_layer_type = tcp::socket::lowest_layer_type;
  SandboxStream(tcp::socket& s, std::vector<uint8_t> first) : s_(s), first_(std::move(first)) {}
  executor_type get_executor() { return s_.get_executor(); }
  lowest_layer_type& lowest_layer() { return s_.lowest_layer(); }
  uint64_t received() const { return received_; }
  uint64_t sent() const { return sent_; }

  template <typename Buffers, typename Token>
  auto async_read_some(const Buffers& b, Token&& token) {
    return net::async_initiate<Token, void(boost::system::error_code, size_t)>(
        [this](auto handler, const Buffers& b) {
          if (offset_ < first_.size()) {
            const size_t n = net::buffer_copy(b, net::buffer(first_) + offset_);
            offset_ += n;
            received_ += n;
            net::post(s_.get_executor(), [h = std::move(handler), n]() mutable { h({}, n); });
            return;
          }
          s_.async_read_some(
              b, [this, h = std::move(handler)](boost::system::error_code ec, size_t n) mutable {
                received_ += n;
                h(ec, n);
              });
        },
        token, b);
  }
  template <typename Buffers, typename Token>
  auto async_write_some(const Buffers& b, Token&& token) {
    return net::async_initiate<Token, void(boost::system::error_code, size_t)>(
        [this](auto handler, const Buffers& b) {
          s_.async_write_some(
              b, [this, h = std::move(handler)](boost::system::error_code ec, size_t n) mutable {
                sent_ += n;
                h(ec, n);
              });
        },
        token, b);
  }

 private:
  tcp::socket& s_;
  std::vector<uint8_t> first_;
  size_t offset_ = 0;
  uint64_t received_ = 0, sent_ = 0;
};
using SandboxTls = ssl::stream<SandboxStream&>;
using HostTls = ssl::stream<tcp::socket&>;

std::string tls_failure(HostTls& s, const boost::system::error_code& ec) {
  const long verify = SSL_get_verify_result(s.native_handle());
  if (verify != X509_V_OK) {
    return std::string("its certificate is not trusted: ") + X509_verify_cert_error_string(verify);
  }
  return ec.message();
}

// The proxy's own TLS to the host on `raw`, verified for `host`: empty, or what failed.
net::awaitable<std::string> host_handshake(HostTls& up, tcp::socket& raw, const std::string& host,
                                           std::chrono::milliseconds timeout) {
  SSL_set_tlsext_host_name(up.native_handle(), host.c_str());
  SSL_set1_host(up.native_handle(), host.c_str());
  boost::system::error_code ec;
  {
    Deadline deadline(raw, timeout);
    co_await up.async_handshake(ssl::stream_base::client,
                                net::redirect_error(net::use_awaitable, ec));
  }
  if (!ec) co_return std::string();
  co_return "TLS to " + host + ": " + tls_failure(up, ec);
}

// Why a request in a tunnel to a host with secrets may not go on as it is, or empty. Only a
// path of the tunnel's own host: an origin server obeys an absolute-form target over Host (RFC
// 9112 3.2.2), so a front end serving other names too would route the request, secrets and all,
// to whichever the target names; a target starting "//" reads as a host to some of them. No
// CONNECT (another tunnel, with the secrets), no TRACE or TRACK (they echo the request back).
std::string request_line_problem(const http::request_header<>& h) {
  const std::string_view method = h.method_string();
  for (std::string_view no : {"CONNECT", "TRACE", "TRACK"}) {
    if (iequals(method, no)) {
      return "a request to a host with secrets may not be " + std::string(no);
    }
  }
  const std::string_view target = h.target();
  if (target == "*" && h.method() == http::verb::options) return {};
  if (target.empty() || target[0] != '/' || target.substr(0, 2) == "//") {
    return "a request to a host with secrets must name a path of that host (\"/...\"), not \"" +
           std::string(target.substr(0, 256)) + "\"";
  }
  return {};
}

// Fields by which a front end or framework may route a request elsewhere than its Host: never
// sent to a host with secrets.
bool routing_field(std::string_view name) {
  for (std::string_view f :
       {"Forwarded", "X-Forwarded-Host", "X-Forwarded-Server", "X-Host", "X-Original-URL",
        "X-Rewrite-URL", "X-Original-Host", "X-HTTP-Host-Override", "X-Forwarded-Prefix"}) {
    if (iequals(name, f)) return true;
  }
  return false;
}

// Writes the proxy's refusal and ends the tunnel.
net::awaitable<void> refuse_in_tunnel(std::shared_ptr<EgressProxy::Conn> c, SandboxTls& down,
                                      const EgressRecord& r) {
  const std::string text = proxy_refusal(r.status, r.reason);
  boost::system::error_code ec;
  co_await net::async_write(down, net::buffer(text), net::redirect_error(net::use_awaitable, ec));
  c->finish();
}

// `from` to `to` until either ends (a WebSocket after 101), after what `pending` holds.
template <typename From, typename To>
net::awaitable<void> pump_tls(std::shared_ptr<EgressProxy::Conn> c, From& from,
                              beast::flat_buffer& pending, To& to) {
  boost::system::error_code ec;
  if (pending.size() > 0) {
    co_await net::async_write(to, pending.data(), net::redirect_error(net::use_awaitable, ec));
    pending.consume(pending.size());
  }
  uint64_t moved = 0;  // counted below the TLS
  if (!ec) co_await copy_counted(c, from, to, moved);
  c->finish();
}

}  // namespace

net::awaitable<void> EgressProxy::intercept(std::shared_ptr<Conn> c, EgressRecord& rec,
                                            std::vector<uint8_t> first) {
  auto self = shared_from_this();
  const Authority want = c->target->authority;
  const Host& host = want.host;
  auto fail = [&](std::string why) {
    rec.allowed = false;
    rec.reason = std::move(why);
  };
  if (!ca_ || !upstream_tls_) {
    fail("this proxy has no TLS for secrets");
    co_return;
  }
  auto ctx = ca_->server_context(host.name);
  if (!ctx) {
    fail(ctx.error().message);
    co_return;
  }
  // The ClientHello already read is the first thing the TLS server reads.
  SandboxStream sandbox(c->client, std::move(first));
  SandboxTls down(sandbox, **ctx);
  boost::system::error_code ec;
  {
    Deadline deadline(c->client, limits_.head_timeout);
    co_await down.async_handshake(ssl::stream_base::server,
                                  net::redirect_error(net::use_awaitable, ec));
  }
  if (ec) {
    // Most often: the sandbox does not trust the session's CA.
    fail("the sandbox's TLS for " + host.name + ": " + ec.message());
    co_return;
  }
  c->touch();
  auto up = std::make_unique<HostTls>(c->upstream, *upstream_tls_);
  std::string tls_error =
      co_await host_handshake(*up, c->upstream, host.name, limits_.connect_timeout);
  if (!tls_error.empty()) {
    rec.status = 502;
    fail(std::move(tls_error));
    co_await refuse_in_tunnel(c, down, rec);
    co_return;
  }
  c->touch();

  beast::flat_buffer from_sandbox, from_host;
  std::vector<char> chunk(preview::kRelayChunk);
  uint64_t requests = 0;
  std::vector<std::string> used_in_tunnel;
  std::optional<EgressRecord> refusal;
  bool fresh = true;  // the host's connection has carried no request yet
  for (; c->open; ++requests) {
    const uint64_t received_before = sandbox.received(), sent_before = sandbox.sent();
    http::request_parser<http::empty_body> hp;
    hp.header_limit(static_cast<uint32_t>(limits_.max_head));
    hp.body_limit((std::numeric_limits<std::uint64_t>::max)());
    co_await http::async_read_header(down, from_sandbox, hp,
                                     net::redirect_error(net::use_awaitable, ec));
    if (ec) break;  // the sandbox is done (or reset, or idle)
    c->touch();
    const auto started = std::chrono::steady_clock::now();
    EgressRecord r;
    r.time_ms = unix_ms();
    r.kind = "http";
    r.method = std::string(hp.get().method_string());
    r.host = host.name;
    r.port = want.port;
    r.address = rec.address;
    auto settle = [&] {
      r.duration_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now() - started)
                          .count();
      r.bytes_up = sandbox.received() - received_before;
      r.bytes_down = sandbox.sent() - sent_before;
    };
    // Every answer that ends the tunnel: the record says why, the sandbox reads it (after the
    // loop).
    auto refused = [&](int status, std::string why) {
      r.allowed = status >= 500;  // allowed, but the host failed
      r.status = status;
      r.reason = std::move(why);
      settle();
      refusal = std::move(r);
    };
    // The request must be for the tunnel's own host, and one the policy allows by method too.
    const auto& head_in = hp.get();
    auto named = parse_authority(head_in[http::field::host], want.port);
    if (!named || !(*named == want) || head_in.count(http::field::host) != 1) {
      refused(421, "a request in the tunnel to " + want.to_string() + " is for " +
                       std::string(head_in[http::field::host]));
      break;
    }
    const Decision d = check_host(*policy_, boundary_, host, want.port, r.method);
    r.rule = d.rule;
    if (!d.allowed) {
      refused(403, d.reason);
      break;
    }
    if (auto why = request_line_problem(head_in); !why.empty()) {
      refused(403, std::move(why));
      break;
    }
    // A body is read whole (up to kMaxRewrittenBody: searched, and rewritten if it is text) only
    // where a secret is substituted in bodies; else, and when larger, it passes as it comes.
    std::optional<http::request_parser<http::string_body>> whole;
    std::optional<http::request_parser<http::buffer_body>> stream;
    std::optional<ByteBudget::Hold> held, held_by_server;
    if (!hp.is_done()) {
      if (any_secret_in_body(*policy_, host, want.port) &&
          (hp.chunked() || (hp.content_length() && *hp.content_length() <= kMaxRewrittenBody))) {
        // Held until it has gone: within the session's share, and the server's.
        const uint64_t size = hp.chunked() ? kMaxRewrittenBody : *hp.content_length();
        held = bodies_.take(size);
        if (held && server_bodies_) held_by_server = server_bodies_->take(size);
        if (!held || (server_bodies_ && !held_by_server)) {
          refused(503,
                  std::string(held ? "the server's" : "the session's") +
                      " proxy holds as many request bodies as it may (" +
                      std::to_string((held ? server_bodies_->limit() : bodies_.limit()) >> 20) +
                      " MiB); try again when the others have gone");
          break;
        }
        whole.emplace(std::move(hp));
        whole->body_limit(kMaxRewrittenBody);
        co_await http::async_read(down, from_sandbox, *whole,
                                  net::redirect_error(net::use_awaitable, ec));
        if (ec == http::error::body_limit) {
          refused(413, "a chunked request body to a host with secrets is larger than " +
                           std::to_string(kMaxRewrittenBody) + " bytes");
          break;
        }
        if (ec) break;
      } else {
        stream.emplace(std::move(hp));
      }
    }
    const http::request_header<>& h = whole    ? whole->get().base()
                                      : stream ? stream->get().base()
                                               : hp.get().base();
    std::string body = whole ? std::move(whole->get().body()) : std::string();
    const std::string foreign = placeholder_in_request(*policy_, host, want.port, h, body, true);
    if (!foreign.empty()) {
      refused(403, "the request carries the placeholder of secret " + foreign +
                       ", which is bound to other hosts");
      break;
    }
    if (auto why = misplaced_placeholder(*policy_, host, want.port, h, h.target(), body);
        !why.empty()) {
      refused(403, std::move(why));
      break;
    }

    // The request for the host: the sandbox's fields with placeholders replaced, minus this
    // hop's, plus the header of each bound secret the request does not carry.
    const http_api::ConnectionNamed hop(h, {http::field::connection});
    const bool upgrade = !h[http::field::upgrade].empty() && hop.contains("upgrade");
    std::string target(h.target());
    replace_placeholders(*policy_, host, want.port, {Part::kTarget, {}}, target,
                         BodyKind::kUrlEncoded, r.secrets);
    std::string head = r.method + " " + target + " HTTP/1.1\r\n";
    for (const auto& f : h) {
      if (http_api::hop_by_hop(f.name()) || hop.contains(f.name_string()) ||
          routing_field(f.name_string())) {
        continue;
      }
      std::string value(f.value());
      replace_placeholders(*policy_, host, want.port, {Part::kField, f.name_string()}, value,
                           BodyKind::kText, r.secrets);
      head.append(f.name_string()).append(": ").append(value).append("\r\n");
    }
    for (const auto& s : policy_->secrets) {
      if (!bound_to(s, host, want.port) || h.find(s.header) != h.end()) continue;
      head.append(s.header).append(": ").append(header_value(s)).append("\r\n");
      add_name(r.secrets, s.name);
    }
    if (upgrade)
      head += "Connection: Upgrade\r\nUpgrade: " + std::string(h[http::field::upgrade]) + "\r\n";
    Framing framing = Framing::kNone;
    if (whole) {
      const BodyKind kind = body_kind(h[http::field::content_type]);
      if (kind != BodyKind::kOpaque) {
        replace_placeholders(*policy_, host, want.port, {Part::kBody, {}}, body, kind, r.secrets);
      }
      head += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    } else if (stream) {
      framing = Framing::kLength;
      head += "Content-Length: " + std::to_string(*stream->content_length()) + "\r\n";
    }
    const bool keep_alive = h.version() >= 11 ? !hop.contains("close") : hop.contains("keep-alive");
    if (!keep_alive && !upgrade) head += "Connection: close\r\n";
    head += "\r\n";
    for (const auto& n : r.secrets) add_name(used_in_tunnel, n);
    std::optional<http::response_parser<http::buffer_body>> answer;
    for (bool again = true; again;) {
      again = false;
      if (stream) {
        ec = co_await preview::relay(down, from_sandbox, *stream, *up, head, framing, chunk.data(),
                                     &c->last_active);
      } else {
        const std::array<net::const_buffer, 2> out = {net::buffer(head), net::buffer(body)};
        co_await net::async_write(*up, out, net::redirect_error(net::use_awaitable, ec));
      }
      // The answer, as the host sends it.
      if (!ec) ec = co_await preview::read_answer_head(*up, from_host, answer, r.method == "HEAD");
      // A host may close a kept-alive connection while the tunnel is idle, as browsers expect:
      // a request read whole goes again, once, on a new connection.
      if (ec && !fresh && !stream && from_host.size() == 0 && c->open) {
        boost::system::error_code ignored;
        c->upstream.close(ignored);
        EgressRecord redial;
        if (!(co_await dial(c, *c->target, redial))) {
          refused(502, "reconnecting to " + host.name + ": " + redial.reason);
          break;
        }
        up = std::make_unique<HostTls>(c->upstream, *upstream_tls_);
        tls_error = co_await host_handshake(*up, c->upstream, host.name, limits_.connect_timeout);
        if (!tls_error.empty()) {
          refused(502, std::move(tls_error));
          break;
        }
        fresh = again = true;
      }
    }
    if (refusal) break;
    fresh = false;
    r.allowed = true;
    if (ec) {
      refused(502, "the answer of " + host.name + ": " + ec.message());
      break;
    }
    const auto& a = answer->get();
    r.status = a.result_int();
    const http_api::ConnectionNamed answer_hop(a, {http::field::connection});
    std::string out =
        "HTTP/1.1 " + std::to_string(r.status) + " " + std::string(a.reason()) + "\r\n";
    for (const auto& f : a) {
      if (http_api::hop_by_hop(f.name()) || answer_hop.contains(f.name_string())) continue;
      out.append(f.name_string()).append(": ").append(f.value()).append("\r\n");
    }
    const bool switched = r.status == 101 && upgrade;
    Framing out_framing = Framing::kNone;
    bool answer_keep_alive = keep_alive && a.keep_alive();
    if (switched) {
      out += "Connection: Upgrade\r\nUpgrade: " + std::string(a[http::field::upgrade]) + "\r\n";
    } else if (answer->content_length()) {
      out += "Content-Length: " + std::to_string(*answer->content_length()) + "\r\n";
      if (!answer->is_done()) out_framing = Framing::kLength;
    } else if (answer->chunked()) {
      out += "Transfer-Encoding: chunked\r\n";
      if (!answer->is_done()) out_framing = Framing::kChunked;
    } else if (!answer->is_done()) {
      answer_keep_alive = false;  // the body ends with the host's connection, and so does ours
    }
    if (!answer_keep_alive && !switched) out += "Connection: close\r\n";
    out += "\r\n";
    if (switched) {
      co_await net::async_write(down, net::buffer(out),
                                net::redirect_error(net::use_awaitable, ec));
      settle();
      emit(r);
      if (ec) break;
      // Both ways until either ends; the host's direction on its own coroutine.
      Beside from_the_host(c->client.get_executor());
      from_the_host.start(pump_tls(c, *up, from_host, down));
      co_await pump_tls(c, down, from_sandbox, *up);
      co_await from_the_host.wait();
      break;
    }
    ec = co_await preview::relay(*up, from_host, *answer, down, out, out_framing, chunk.data(),
                                 &c->last_active);
    settle();
    if (ec) r.reason = "relaying the answer: " + ec.message();
    emit(r);
    if (ec || !answer_keep_alive) break;
  }
  if (refusal) {
    co_await refuse_in_tunnel(c, down, *refusal);
    emit(*refusal);
  }
  c->up = sandbox.received();
  c->down = sandbox.sent();
  rec.secrets = std::move(used_in_tunnel);
  if (rec.reason.empty()) {
    rec.reason = "intercepted for secrets: " + std::to_string(requests) +
                 (requests == 1 ? " request" : " requests");
  }
  c->finish();
}

}  // namespace cabin::egress
