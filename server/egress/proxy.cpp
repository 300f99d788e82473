#include "server/egress/proxy.h"

#include <algorithm>
#include <array>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "common/agent_protocol.h"
#include "common/ascii.h"
#include "common/deadline.h"
#include "common/spawn.h"
#include "server/egress/client_hello.h"
#include "server/egress/proxy_conn.h"
#include "server/egress/secrets.h"
#include "server/http/hop_by_hop.h"
#include "server/preview/relay.h"

namespace cabin::egress {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

std::string_view status_text(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 403:
      return "Forbidden";
    case 408:
      return "Request Timeout";
    case 413:
      return "Payload Too Large";
    case 421:
      return "Misdirected Request";
    case 431:
      return "Request Header Fields Too Large";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "Error";
  }
}

}  // namespace

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string proxy_refusal(int status, std::string_view reason) {
  std::string body = "cabin egress: " + std::string(reason) + "\n";
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + std::string(status_text(status)) +
                    "\r\nContent-Type: text/plain; charset=utf-8\r\nX-Cabin-Egress: " +
                    (status == 403 ? "denied" : "failed") +
                    "\r\nConnection: close\r\nContent-Length: " + std::to_string(body.size()) +
                    "\r\n\r\n";
  return out + body;
}

nlohmann::json record_json(const EgressRecord& r) {
  return {{"seq", r.seq},
          {"time_ms", r.time_ms},
          {"kind", r.kind},
          {"method", r.method},
          {"host", r.host},
          {"port", r.port},
          {"address", r.address},
          {"rule", r.rule},
          {"decision", r.allowed ? "allow" : "deny"},
          {"reason", r.reason},
          {"status", r.status},
          {"bytes_up", r.bytes_up},
          {"bytes_down", r.bytes_down},
          {"duration_ms", r.duration_ms},
          {"secrets", r.secrets}};
}

namespace {

// Closes `c` once it has moved no byte for `limit`.
net::awaitable<void> watch_idle(std::shared_ptr<EgressProxy::Conn> c,
                                std::chrono::milliseconds limit);

}  // namespace

EgressProxy::EgressProxy(std::string session_id, std::shared_ptr<const Policy> policy,
                         Boundary boundary, std::shared_ptr<const Resolver> resolver,
                         ProxyLimits limits, Sink sink)
    : session_id_(std::move(session_id)),
      policy_(std::move(policy)),
      boundary_(std::move(boundary)),
      resolver_(std::move(resolver)),
      limits_(limits),
      sink_(std::move(sink)),
      bodies_(limits.max_held_bodies) {}

EgressProxy::~EgressProxy() = default;

net::awaitable<void> EgressProxy::serve(tcp::acceptor listener) {
  auto self = shared_from_this();
  listener_ = std::make_unique<tcp::acceptor>(std::move(listener));
  boost::system::error_code ec;
  while (!stopped_) {
    tcp::socket s = co_await listener_->async_accept(net::redirect_error(net::use_awaitable, ec));
    if (ec == net::error::operation_aborted || stopped_) break;
    if (ec) continue;  // EMFILE and the like: the next accept may succeed
    cabin::spawn(listener_->get_executor(), handle(std::move(s)),
                 "session " + session_id_ + ": egress connection");
  }
}

void EgressProxy::serve_reverse(net::any_io_executor ex, Dial dial, size_t waiting) {
  for (size_t i = 0; i < waiting; ++i) {
    cabin::spawn(ex, wait_reverse(dial), "session " + session_id_ + ": egress door");
  }
}

net::awaitable<void> EgressProxy::wait_reverse(Dial dial) {
  auto self = shared_from_this();
  auto ex = co_await net::this_coro::executor;
  net::steady_timer backoff(ex);
  std::chrono::milliseconds pause{0};
  boost::system::error_code ec;
  const uint64_t id = next_conn_++;
  while (!stopped_) {
    if (pause.count() > 0) {
      backoff.expires_after(pause);
      co_await backoff.async_wait(net::redirect_error(net::use_awaitable, ec));
      if (stopped_) break;
    }
    // Each failure waits longer, up to 2 s: an agent that is not up yet, or refuses.
    pause = std::min<std::chrono::milliseconds>(std::max(pause * 2, std::chrono::milliseconds(20)),
                                                std::chrono::milliseconds(2000));
    auto s = co_await dial();
    if (!s || stopped_) continue;
    std::array<char, agent_protocol::kEgressPaired.size()> got{};
    waiting_[id] = &*s;
    co_await net::async_read(*s, net::buffer(got), net::redirect_error(net::use_awaitable, ec));
    waiting_.erase(id);
    if (ec || stopped_ || std::string_view(got.data(), got.size()) != agent_protocol::kEgressPaired)
      continue;
    pause = std::chrono::milliseconds(0);
    cabin::spawn(ex, handle(std::move(*s)), "session " + session_id_ + ": egress connection");
  }
}

void EgressProxy::stop() {
  stopped_ = true;
  boost::system::error_code ec;
  if (listener_) listener_->close(ec);
  for (auto& [id, s] : waiting_) s->close(ec);
  for (auto& [id, weak] : conns_) {
    if (auto c = weak.lock()) c->close("the session ended");
  }
}

void EgressProxy::set_policy(std::shared_ptr<const Policy> p) {
  policy_ = std::move(p);
  for (auto& [id, weak] : conns_) {
    auto c = weak.lock();
    if (c && c->open && !still_allowed(*c)) c->close("the policy changed and no longer allows it");
  }
}

Decision EgressProxy::decide(const ProxyTarget& t) const {
  auto d = check_host(*policy_, boundary_, t.authority.host, t.authority.port,
                      t.tunnel ? std::string_view() : std::string_view(t.method));
  if (d.allowed && t.tunnel && d.needs_request_check) {
    d.allowed = false;
    d.reason = d.rule + " allows only some methods, and a tunnel's requests cannot be seen";
  }
  return d;
}

bool EgressProxy::still_allowed(const Conn& c) const {
  if (!c.target) return true;  // not yet asked for anything
  const auto& t = *c.target;
  if (!decide(t).allowed) return false;
  return !c.address || check_address(*policy_, boundary_, *c.address, t.authority.port).allowed;
}

net::awaitable<void> EgressProxy::refuse(std::shared_ptr<Conn> c, const EgressRecord& rec) {
  const std::string text = proxy_refusal(rec.status, rec.reason);
  boost::system::error_code ec;
  co_await net::async_write(c->client, net::buffer(text),
                            net::redirect_error(net::use_awaitable, ec));
  c->finish();
}

void EgressProxy::emit(EgressRecord& rec) {
  if (sink_) sink_(rec);
}

net::awaitable<void> EgressProxy::handle(tcp::socket client) {
  auto self = shared_from_this();
  const auto started = Clock::now();
  EgressRecord rec;
  rec.time_ms = unix_ms();
  auto c = std::make_shared<Conn>(std::move(client));
  auto done = [&] {
    rec.duration_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count();
    emit(rec);
  };
  if (conns_.size() >= limits_.max_connections) {
    rec.status = 503;
    rec.reason =
        "the session has " + std::to_string(conns_.size()) + " connections open, the most it may";
    co_await refuse(c, rec);
    done();
    co_return;
  }
  const uint64_t id = next_conn_++;
  conns_[id] = c;
  struct Leave {
    EgressProxy* proxy;
    uint64_t id;
    std::shared_ptr<Conn> conn;
    ~Leave() {
      conn->finish();
      proxy->conns_.erase(id);
    }
  } leave{this, id, c};
  cabin::spawn(c->client.get_executor(), watch_idle(c, limits_.idle_timeout),
               "session " + session_id_ + ": egress idle watch");

  beast::flat_buffer buf;
  http::request_parser<http::buffer_body> parser;
  parser.header_limit(static_cast<uint32_t>(limits_.max_head));
  // A plain request's body passes as it comes, never held whole.
  parser.body_limit((std::numeric_limits<std::uint64_t>::max)());
  boost::system::error_code ec;
  {
    Deadline deadline(c->client, limits_.head_timeout);
    co_await http::async_read_header(c->client, buf, parser,
                                     net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      if (deadline.expired()) {
        rec.reason =
            "no whole request head within " + std::to_string(limits_.head_timeout.count()) + " ms";
        rec.status = 408;
        done();
        co_return;
      }
      if (ec == http::error::end_of_stream || ec == net::error::eof) co_return;  // asked nothing
      rec.status = ec == http::error::header_limit ? 431 : 400;
      rec.reason = ec == http::error::header_limit ? "the request head is larger than " +
                                                         std::to_string(limits_.max_head) + " bytes"
                                                   : "not an HTTP request: " + ec.message();
      co_await refuse(c, rec);
      done();
      co_return;
    }
  }
  c->touch();
  auto& req = parser.get();
  rec.method = std::string(req.method_string());
  Result<ProxyTarget> target =
      parse_proxy_target(req.method_string(), req.target(), req[http::field::host]);
  // A second Host could name another site to an upstream that reads the last one.
  if (target && req.count(http::field::host) > 1) {
    target = make_error(Errc::kInvalidArgument, "bad_proxy_request", "more than one Host field");
  }
  if (!target) {
    rec.kind = req.method_string() == "CONNECT" ? "connect" : "http";
    rec.status = 400;
    rec.reason = target.error().message;
    co_await refuse(c, rec);
    done();
    co_return;
  }
  rec.kind = target->tunnel ? "connect" : "http";
  rec.host = target->authority.host.to_string();
  rec.port = target->authority.port;
  const auto decision = decide(*target);
  rec.rule = decision.rule;
  if (!decision.allowed) {
    rec.status = 403;
    rec.reason = decision.reason;
    co_await refuse(c, rec);
    done();
    co_return;
  }
  c->target = *target;
  if (!(co_await dial(c, *target, rec))) {
    rec.allowed = rec.status != 403;  // allowed, but the network failed
    co_await refuse(c, rec);
    done();
    co_return;
  }
  rec.allowed = true;
  if (target->tunnel) {
    co_await tunnel(c, rec);
    done();
    co_return;
  }
  // A plain request: its head, its body as it comes, then one exchange with Connection: close.
  // Secrets travel only inside the proxy's own TLS: a placeholder in plain HTTP goes nowhere.
  auto carries = [&](const std::string& name) {
    rec.allowed = false;
    rec.status = 403;
    rec.reason =
        "the request carries the placeholder of secret " + name + ", which " +
        (secret_bound(*policy_, name, target->authority.host) ? "goes to its hosts only over HTTPS"
                                                              : "is bound to other hosts");
  };
  if (auto carried = placeholder_in_request(*policy_, target->authority.host,
                                            target->authority.port, req, {}, false);
      !carried.empty()) {
    carries(carried);
    co_await refuse(c, rec);
    done();
    co_return;
  }
  if (iequals(req[http::field::expect], "100-continue")) {
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    co_await net::async_write(c->client, net::buffer(kContinue),
                              net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      done();
      co_return;
    }
  }
  const http_api::ConnectionNamed named(req,
                                        {http::field::connection, http::field::proxy_connection});
  std::string head = rec.method + " " + target->origin_target + " HTTP/1.1\r\n";
  for (const auto& f : req) {
    const std::string_view name = f.name_string();
    if (http_api::hop_by_hop(f.name()) || f.name() == http::field::expect || named.contains(name)) {
      continue;
    }
    head.append(name).append(": ").append(f.value()).append("\r\n");
  }
  preview::Framing framing = preview::Framing::kNone;
  if (parser.chunked()) {
    head += "Transfer-Encoding: chunked\r\n";
    framing = preview::Framing::kChunked;
  } else if (parser.content_length()) {
    head += "Content-Length: " + std::to_string(*parser.content_length()) + "\r\n";
    framing = preview::Framing::kLength;
  }
  head += "Connection: close\r\n\r\n";
  PlaceholderScan scan(*policy_);
  std::string carried;
  uint64_t body_bytes = 0;
  std::vector<char> chunk(preview::kRelayChunk);
  ec = co_await preview::relay(c->client, buf, parser, c->upstream, head, framing, chunk.data(),
                               &c->last_active, nullptr, [&](std::string_view piece) {
                                 body_bytes += piece.size();
                                 carried = scan.feed(piece);
                                 return carried.empty();
                               });
  rec.bytes_up = head.size() + body_bytes;
  if (!carried.empty() || ec) {
    // The host has at most the placeholder less its last byte: its connection is reset.
    boost::system::error_code ignored;
    c->upstream.close(ignored);
    if (!carried.empty()) {
      carries(carried);
    } else {
      rec.status = 502;
      rec.reason = "relaying the request: " + ec.message();
    }
    co_await refuse(c, rec);
    done();
    co_return;
  }
  co_await answer(c, rec);
  done();
}

net::awaitable<bool> EgressProxy::dial(std::shared_ptr<Conn> c, const ProxyTarget& target,
                                       EgressRecord& rec) {
  auto ex = co_await net::this_coro::executor;
  const auto& host = target.authority.host;
  std::vector<IpAddress> addresses;
  if (host.is_ip()) {
    addresses.push_back(*host.ip);
  } else {
    auto r = co_await resolver_->resolve(host.name);
    if (!r) {
      rec.status = 502;
      rec.reason = "cannot resolve " + host.name + ": " + r.error().message;
      co_return false;
    }
    addresses = std::move(*r);
  }
  // Through an upstream proxy: the session's, else the server's.
  const UpstreamProxy* via = policy_->upstream   ? &*policy_->upstream
                             : default_upstream_ ? &*default_upstream_
                                                 : nullptr;
  std::optional<tcp::endpoint> via_at;
  if (via) {
    IpAddress at;
    if (via->at.host.is_ip()) {
      at = *via->at.host.ip;
    } else {
      auto r = co_await resolver_->resolve(via->at.host.name);
      if (!r || r->empty()) {
        rec.status = 502;
        rec.reason = "cannot resolve the upstream proxy " + via->to_string();
        co_return false;
      }
      at = r->front();
    }
    // A session's own proxy is a destination like any other: never the host's private side.
    if (policy_->upstream) {
      if (auto why = always_denied(at, boundary_); !why.empty()) {
        rec.status = 403;
        rec.reason =
            "the upstream proxy " + via->to_string() + " is at a " + std::string(why) + " address";
        co_return false;
      }
    }
    via_at = tcp::endpoint(at, via->at.port);
  }
  std::string denial, failure;
  for (const auto& a : addresses) {
    auto d = check_address(*policy_, boundary_, a, target.authority.port);
    if (!d.allowed) {
      if (denial.empty()) {
        denial = d.reason;
        rec.rule = d.rule;
      }
      continue;
    }
    tcp::socket s(ex);
    boost::system::error_code ec;
    bool timed_out = false;
    Host shown;
    shown.ip = a;
    const std::string where = shown.to_string() + ":" + std::to_string(target.authority.port);
    std::string refused_by_upstream;
    {
      Deadline deadline(s, limits_.connect_timeout);
      const tcp::endpoint to = via_at ? *via_at : tcp::endpoint(a, target.authority.port);
      co_await s.async_connect(to, net::redirect_error(net::use_awaitable, ec));
      // The upstream proxy is asked for the address checked here, never the name.
      if (!ec && via)
        refused_by_upstream = co_await upstream_handshake(s, *via, a, target.authority.port);
      timed_out = deadline.expired();
    }
    if (!ec && !refused_by_upstream.empty()) {
      failure = "the upstream proxy " + via->to_string() + " did not open " + where + ": " +
                (timed_out ? "no answer in time" : refused_by_upstream);
      continue;
    }
    if (ec) {
      failure =
          "cannot connect to " + where + ": " +
          (timed_out ? "no answer within " + std::to_string(limits_.connect_timeout.count()) + " ms"
                     : ec.message());
      continue;
    }
    if (!c->open) co_return false;  // ended meanwhile (stop, policy change)
    c->upstream = std::move(s);
    c->address = a;
    rec.address = shown.to_string();
    if (!still_allowed(*c)) {
      rec.status = 403;
      rec.reason = "the policy changed while connecting";
      co_return false;
    }
    c->touch();
    co_return true;
  }
  if (failure.empty()) {
    rec.status = 403;
    rec.reason = denial.empty() ? host.to_string() + " has no address" : denial;
  } else {
    rec.status = 502;
    rec.reason = failure;
  }
  co_return false;
}

namespace {

net::awaitable<void> copy_down(std::shared_ptr<EgressProxy::Conn> c) {
  co_await copy_counted(c, c->upstream, c->client, c->down);
  // The client learns the end; its own direction may still finish.
  boost::system::error_code ec;
  c->client.shutdown(tcp::socket::shutdown_send, ec);
}

net::awaitable<void> watch_idle(std::shared_ptr<EgressProxy::Conn> c,
                                std::chrono::milliseconds limit) {
  boost::system::error_code ec;
  while (c->open) {
    const auto quiet = Clock::now() - c->last_active;
    if (quiet >= limit) {
      c->close("idle for " + std::to_string(limit.count()) + " ms");
      co_return;
    }
    c->idle.expires_after(limit - quiet);
    co_await c->idle.async_wait(net::redirect_error(net::use_awaitable, ec));
  }
}

}  // namespace

net::awaitable<void> EgressProxy::tunnel(std::shared_ptr<Conn> c, EgressRecord& rec) {
  static constexpr std::string_view kEstablished = "HTTP/1.1 200 Connection Established\r\n\r\n";
  boost::system::error_code ec;
  co_await net::async_write(c->client, net::buffer(kEstablished),
                            net::redirect_error(net::use_awaitable, ec));
  rec.status = 200;
  if (ec) co_return;
  // Bytes from upstream flow from the start: a protocol where the server speaks first works.
  // A host bound to a secret is reached only through the proxy's own TLS: no byte of it flows
  // to the sandbox as it comes.
  const Authority& want = c->target->authority;
  const bool intercepted = any_secret_bound(*policy_, want.host, want.port);
  Beside down(c->client.get_executor());
  if (!intercepted) down.start(copy_down(c));

  // The client's first bytes, before any go upstream: TLS must name the tunnel's host, HTTP
  // must carry its Host. On 80 and 443, nothing else may pass.
  const bool web_port = want.port == 80 || want.port == 443;
  std::vector<uint8_t> first;
  std::string refused;
  {
    std::optional<Deadline<tcp::socket>> deadline;
    if (web_port) deadline.emplace(c->client, limits_.head_timeout);
    std::array<uint8_t, 4096> chunk;
    for (;;) {
      const size_t n = co_await c->client.async_read_some(
          net::buffer(chunk), net::redirect_error(net::use_awaitable, ec));
      if (ec) {
        if (deadline && deadline->expired())
          refused = "the tunnel's first bytes did not come in time";
        break;
      }
      first.insert(first.end(), chunk.begin(), chunk.begin() + static_cast<long>(n));
      c->touch();
      if (first[0] == 0x16) {
        auto h = parse_client_hello(first);
        if (h.status == ClientHello::Status::kNeedMore) continue;
        if (h.status == ClientHello::Status::kInvalid) {
          refused = "TLS in the tunnel: " + h.error;
        } else if (want.host.is_ip()) {
          if (h.server_name) refused = "TLS to an address names a host (" + *h.server_name + ")";
        } else if (!h.server_name) {
          refused = "TLS in the tunnel names no host (SNI)";
        } else {
          auto sni = canonical_host(*h.server_name);
          if (!sni || sni->is_ip() || sni->name != want.host.name) {
            refused =
                "TLS in the tunnel is for " + *h.server_name + ", not " + want.host.to_string();
          }
        }
        break;
      }
      if (intercepted) {
        refused = "a host bound to a secret is reached only over TLS";
        break;
      }
      // HTTP: the head whole, then its Host.
      http::request_parser<http::empty_body> p;
      p.header_limit(static_cast<uint32_t>(limits_.max_head));
      p.eager(false);
      boost::system::error_code pec;
      p.put(net::buffer(first.data(), first.size()), pec);
      if (pec == http::error::need_more && first.size() < limits_.max_head) continue;
      if (pec && !p.is_header_done()) {
        if (web_port) refused = "the tunnel carries neither TLS nor HTTP";
        break;
      }
      auto host = parse_authority(p.get()[http::field::host], want.port);
      if (!host || !(*host == want)) {
        refused = "HTTP in the tunnel is for " + std::string(p.get()[http::field::host]) +
                  ", not " + want.to_string();
      }
      break;
    }
  }
  if (refused.empty() && !ec && c->open && intercepted) {
    co_await intercept(c, rec, std::move(first));
  } else if (refused.empty() && !ec && c->open) {
    co_await net::async_write(c->upstream, net::buffer(first),
                              net::redirect_error(net::use_awaitable, ec));
    c->up += first.size();
    if (!ec) ec = co_await copy_counted(c, c->client, c->upstream, c->up);
    if (ec == net::error::eof) {
      c->upstream.shutdown(tcp::socket::shutdown_send, ec);
    } else {
      c->finish();  // a reset ends both directions
    }
    co_await down.wait();
  } else {
    c->finish();  // a reset, not an answer: the client's TLS or HTTP is under way
    co_await down.wait();
  }
  rec.bytes_up = c->up;
  rec.bytes_down = c->down;
  if (!refused.empty()) {
    rec.allowed = false;
    rec.reason = refused;
  } else if (!c->closed_by_proxy.empty()) {
    rec.reason = "closed: " + c->closed_by_proxy;
  }
  c->finish();
}

net::awaitable<void> EgressProxy::answer(std::shared_ptr<Conn> c, EgressRecord& rec) {
  boost::system::error_code ec;
  // The answer passes as the upstream sends it, until it closes (it was asked to).
  std::vector<char> buf(kCopyChunk);
  std::string status_line;
  for (;;) {
    const size_t n = co_await c->upstream.async_read_some(
        net::buffer(buf), net::redirect_error(net::use_awaitable, ec));
    if (ec) break;
    c->touch();
    if (status_line.size() < 16)
      status_line.append(buf.data(), std::min(n, 16 - status_line.size()));
    co_await net::async_write(c->client, net::buffer(buf.data(), n),
                              net::redirect_error(net::use_awaitable, ec));
    if (ec) break;
    c->down += n;
  }
  rec.bytes_down = c->down;
  // "HTTP/1.1 302 ..."
  if (status_line.size() >= 12 && status_line.rfind("HTTP/", 0) == 0) {
    rec.status = std::atoi(status_line.substr(9, 3).c_str());
  } else {
    rec.status = 502;
    rec.reason = "the upstream answered no HTTP response";
  }
  if (!c->closed_by_proxy.empty()) rec.reason = "closed: " + c->closed_by_proxy;
  c->finish();
}

}  // namespace cabin::egress
