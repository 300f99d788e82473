#include "server/gateway/gateway.h"

#include <malloc.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>

#include "common/ascii.h"
#include "common/bounded_json.h"
#include "common/cloexec.h"
#include "common/log.h"
#include "server/api/errors.h"
#include "server/api/ids.h"
#include "server/api/mcp.h"
#include "server/egress/proxy_request.h"
#include "server/gateway/route.h"
#include "server/http/hop_by_hop.h"
#include "server/preview/preview_request.h"

namespace cabin::gateway {

namespace mcp = api::mcp;

namespace {

using tcp = net::ip::tcp;
using json = nlohmann::json;
using namespace std::chrono_literals;

constexpr size_t kMaxHeaderBytes = 16 * 1024;
constexpr auto kFirstRequestTimeout = 10s;
// Between two requests on one client connection.
constexpr auto kIdleTimeout = 120s;
constexpr size_t kMaxNodeHeaderBytes = 64 * 1024;
constexpr auto kConnectTimeout = 3s;
// After a plain request's answer has gone down: how long the client may take to close.
constexpr auto kCloseGrace = 10s;
constexpr size_t kRelayBuffer = 16 * 1024;
// A node's list of sessions, whole.
constexpr size_t kMaxListBytes = 256 * 1024 * 1024;
constexpr size_t kMaxInfoBytes = 1024 * 1024;
constexpr int64_t kRetryAfterS = 5;

std::shared_ptr<spdlog::logger> log() {
  static auto l = logger("gateway");
  return l;
}

std::optional<tcp::endpoint> endpoint_of(std::string_view address) {
  auto a = egress::parse_authority(address);
  if (!a || !a->host.ip) return std::nullopt;
  return tcp::endpoint(*a->host.ip, a->port);
}

std::string address_of(const net::ip::address& ip, uint16_t port) {
  return (ip.is_v6() ? "[" + ip.to_string() + "]" : ip.to_string()) + ":" + std::to_string(port);
}

net::awaitable<Result<tcp::socket>> connect(std::string_view address,
                                            std::chrono::milliseconds timeout = kConnectTimeout) {
  auto ep = endpoint_of(address);
  if (!ep) co_return make_error(Errc::kUnavailable, "node_unavailable", "bad address " + std::string(address));
  beast::tcp_stream s(co_await net::this_coro::executor);
  boost::system::error_code ec;
  open_cloexec(s.socket(), ep->protocol(), ec);
  if (ec) co_return make_error(Errc::kUnavailable, "node_unavailable", ec.message());
  s.expires_after(timeout);
  co_await s.async_connect(*ep, net::redirect_error(net::use_awaitable, ec));
  // Refused: nothing listens there (the node is gone), which the poller takes as certain.
  if (ec == net::error::connection_refused)
    co_return make_error(Errc::kUnavailable, "node_refused", ec.message());
  if (ec) co_return make_error(Errc::kUnavailable, "node_unavailable", ec.message());
  s.expires_never();
  s.socket().set_option(tcp::no_delay(true), ec);
  co_return s.release_socket();
}

// Writes a short answer and closes: after a half-close, what the client still sends is read
// and dropped for a moment, so a reset does not destroy the answer before it is read.
net::awaitable<void> answer(tcp::socket& s, http_api::Response res) {
  res.keep_alive(false);
  res.prepare_payload();
  boost::system::error_code ec;
  beast::tcp_stream stream(std::move(s));
  stream.expires_after(10s);
  co_await http::async_write(stream, res, net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return;
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  std::array<char, 4096> sink;
  stream.expires_after(2s);
  for (size_t drained = 0; !ec && drained < 1024 * 1024;) {
    drained += co_await stream.async_read_some(net::buffer(sink),
                                               net::redirect_error(net::use_awaitable, ec));
  }
}

http_api::Response node_unavailable(std::string_view node) {
  Error e = api::errors::node_unavailable(std::string(node));
  e.retry_after_s = kRetryAfterS;
  return http_api::error_response(e);
}

// How the node's connection goes on after this request.
enum class HeadMode { kClose, kKeepAlive, kUpgrade };

// The request head for the node: the client's fields but for those of this hop, and the
// client's address appended to X-Forwarded-For. `body`: the request's body, read already: it
// goes with a Content-Length of its own.
std::string node_head(const http::request_header<>& h, HeadMode mode, std::string_view client_ip,
                      const std::string* body = nullptr) {
  const bool upgrade = mode == HeadMode::kUpgrade;
  std::string out;
  out.reserve(1024);
  out.append(h.method_string()).append(" ").append(h.target()).append(" HTTP/1.1\r\n");
  http_api::ConnectionNamed named(h);
  std::string forwarded_for;
  for (const auto& f : h) {
    const auto id = f.name();
    const std::string_view name = f.name_string();
    if (iequals(name, "X-Forwarded-For")) {
      forwarded_for.append(forwarded_for.empty() ? "" : ", ").append(f.value());
      continue;
    }
    if (id == http::field::connection || id == http::field::keep_alive ||
        id == http::field::proxy_connection || id == http::field::te ||
        id == http::field::trailer || id == http::field::proxy_authorization) {
      continue;
    }
    if (id == http::field::upgrade) {
      if (upgrade) out.append(name).append(": ").append(f.value()).append("\r\n");
      continue;
    }
    // On a kept connection the gateway answers 100-continue itself (exchange()).
    if (id == http::field::expect && mode == HeadMode::kKeepAlive) continue;
    if (named.contains(name) && id != http::field::transfer_encoding) continue;
    if (body && (id == http::field::content_length || id == http::field::transfer_encoding))
      continue;
    out.append(name).append(": ").append(f.value()).append("\r\n");
  }
  if (body) out.append("Content-Length: ").append(std::to_string(body->size())).append("\r\n");
  forwarded_for.append(forwarded_for.empty() ? "" : ", ").append(client_ip);
  out.append("X-Forwarded-For: ").append(forwarded_for).append("\r\n");
  if (mode == HeadMode::kUpgrade) out.append("Connection: Upgrade\r\n");
  if (mode == HeadMode::kClose) out.append("Connection: close\r\n");
  out.append("\r\n");
  return out;
}

// Copies both ways until both end. A plain request's node closes after its answer; the client
// then gets kCloseGrace to close its side. A WebSocket runs until either end closes.
net::awaitable<void> relay_bytes(tcp::socket client, tcp::socket node, bool upgrade) {
  struct State {
    tcp::socket client, node;
    net::steady_timer up_done;
    bool up_ended = false;
    State(tcp::socket c, tcp::socket n)
        : client(std::move(c)), node(std::move(n)), up_done(client.get_executor()) {
      up_done.expires_at(net::steady_timer::time_point::max());
    }
    void cut() {
      boost::system::error_code ec;
      client.close(ec);
      node.close(ec);
    }
  };
  auto st = std::make_shared<State>(std::move(client), std::move(node));
  net::co_spawn(
      st->client.get_executor(),
      [st]() -> net::awaitable<void> {
        std::array<char, kRelayBuffer> buf;
        boost::system::error_code ec;
        for (;;) {
          size_t n = co_await st->client.async_read_some(
              net::buffer(buf), net::redirect_error(net::use_awaitable, ec));
          if (ec) break;
          co_await net::async_write(st->node, net::buffer(buf.data(), n),
                                    net::redirect_error(net::use_awaitable, ec));
          if (ec) break;
        }
        if (ec == net::error::eof) {
          st->node.shutdown(tcp::socket::shutdown_send, ec);
        } else {
          st->cut();
        }
      },
      [st](std::exception_ptr) {
        st->up_ended = true;
        st->up_done.cancel();
      });
  std::array<char, kRelayBuffer> buf;
  boost::system::error_code ec;
  for (;;) {
    size_t n = co_await st->node.async_read_some(net::buffer(buf),
                                                 net::redirect_error(net::use_awaitable, ec));
    if (ec) break;
    co_await net::async_write(st->client, net::buffer(buf.data(), n),
                              net::redirect_error(net::use_awaitable, ec));
    if (ec) break;
  }
  if (ec == net::error::eof) {
    st->client.shutdown(tcp::socket::shutdown_send, ec);
    if (!st->up_ended) {
      if (!upgrade) st->up_done.expires_after(kCloseGrace);
      co_await st->up_done.async_wait(net::redirect_error(net::use_awaitable, ec));
    }
  }
  st->cut();
}

}  // namespace

Gateway::Gateway(net::any_io_executor ex, GatewayConfig config)
    : ex_(std::move(ex)), config_(std::move(config)), acceptor_(ex_), poll_timer_(ex_) {
  if (!config_.nodes_dns.empty()) {
    egress::ResolverConfig rc;
    if (config_.dns_server.empty()) {
      rc.servers = egress::system_name_servers();
    } else if (auto a = egress::parse_authority(config_.dns_server, 53); a && a->host.ip) {
      rc.servers = {{*a->host.ip, a->port}};
    }
    rc.timeout = config_.poll_timeout;
    resolver_.emplace(std::move(rc));
  }
}

Result<void> Gateway::listen() {
  boost::system::error_code ec;
  auto addr = net::ip::make_address(config_.listen_host, ec);
  if (ec) return make_error(Errc::kInvalidArgument, "bad_listen", "bad --listen address: " + ec.message());
  tcp::endpoint ep(addr, config_.listen_port);
  open_cloexec(acceptor_, ep.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return make_error(Errc::kUnavailable, "listen_failed",
                      "cannot listen on " + address_of(addr, config_.listen_port) + ": " +
                          ec.message());
  }
  return {};
}

void Gateway::stop() {
  stopping_ = true;
  boost::system::error_code ec;
  acceptor_.close(ec);
  poll_timer_.cancel();
  for (auto* s : idle_) s->socket().close(ec);
}

net::awaitable<bool> Gateway::drain(std::chrono::steady_clock::time_point deadline) {
  net::steady_timer t(ex_);
  while (open_connections_ > 0 && std::chrono::steady_clock::now() < deadline) {
    t.expires_after(std::chrono::milliseconds(50));
    boost::system::error_code ec;
    co_await t.async_wait(net::redirect_error(net::use_awaitable, ec));
  }
  co_return open_connections_ == 0;
}

net::awaitable<void> Gateway::run() {
  co_await poll_once();
  net::co_spawn(ex_, poll_loop(), net::detached);
  while (!stopping_) {
    boost::system::error_code ec;
    tcp::socket s = co_await acceptor_.async_accept(net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      if (stopping_ || ec == net::error::operation_aborted) break;
      // Out of descriptors: wait rather than spin.
      net::steady_timer t(ex_, 100ms);
      co_await t.async_wait(net::redirect_error(net::use_awaitable, ec));
      continue;
    }
    set_cloexec(s.native_handle());
    const auto peer = s.remote_endpoint(ec).address();
    if (ec || open_connections_ >= config_.max_connections ||
        per_peer_[peer] >= config_.max_connections_per_peer) {
      if (!ec && per_peer_[peer] == 0) per_peer_.erase(peer);
      continue;  // closed as `s` goes
    }
    // An answer's head and body go as two writes: without this the body waits for an ACK.
    s.set_option(tcp::no_delay(true), ec);
    ++open_connections_;
    ++per_peer_[peer];
    net::co_spawn(ex_, serve(std::move(s)), [this, peer](std::exception_ptr) {
      --open_connections_;
      if (--per_peer_[peer] == 0) per_peer_.erase(peer);
    });
  }
}

net::awaitable<void> Gateway::poll_loop() {
  while (!stopping_) {
    poll_timer_.expires_after(config_.poll_interval);
    boost::system::error_code ec;
    co_await poll_timer_.async_wait(net::redirect_error(net::use_awaitable, ec));
    if (stopping_) break;
    co_await poll_once();
  }
}

net::awaitable<std::vector<std::string>> Gateway::discover() {
  std::vector<std::string> out;
  if (resolver_) {
    auto ips = co_await resolver_->resolve(config_.nodes_dns);
    if (!ips) {
      log()->warn("discovery: {}: {}", config_.nodes_dns, ips.error().message);
      // Keep what was known: a DNS hiccup is not every node going away.
      for (const auto& [address, n] : table_.nodes()) out.push_back(address);
      co_return out;
    }
    for (const auto& ip : *ips) out.push_back(address_of(ip, config_.node_port));
    co_return out;
  }
  for (const auto& n : config_.nodes) {
    if (endpoint_of(n)) {
      out.push_back(n);
      continue;
    }
    auto a = egress::parse_authority(n);
    if (!a) continue;
    tcp::resolver r(ex_);
    boost::system::error_code ec;
    auto results = co_await r.async_resolve(a->host.name, std::to_string(a->port),
                                            net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      log()->warn("discovery: {}: {}", n, ec.message());
      continue;
    }
    for (const auto& e : results) out.push_back(address_of(e.endpoint().address(), a->port));
  }
  co_return out;
}

net::awaitable<void> Gateway::poll_once() {
  table_.set_addresses(co_await discover(), Clock::now());
  auto addresses = table_.up_addresses();
  for (const auto& [address, n] : table_.nodes())
    if (!n.up) addresses.push_back(address);
  // All at once: one slow node does not delay the news of the others.
  auto pending = std::make_shared<size_t>(addresses.size());
  net::steady_timer all_done(ex_, net::steady_timer::time_point::max());
  for (const auto& a : addresses) {
    net::co_spawn(ex_, poll_node(a), [pending, &all_done](std::exception_ptr) {
      if (--*pending == 0) all_done.cancel();
    });
  }
  if (*pending > 0) {
    boost::system::error_code ec;
    co_await all_done.async_wait(net::redirect_error(net::use_awaitable, ec));
  }
}

net::awaitable<void> Gateway::poll_node(std::string address) {
  const bool was_up = [&] {
    auto it = table_.nodes().find(address);
    return it != table_.nodes().end() && it->second.up;
  }();
  auto fail = [&](const std::string& why, bool refused = false) {
    table_.report_failure(address, Clock::now(), refused);
    auto it = table_.nodes().find(address);
    if (was_up && it != table_.nodes().end() && !it->second.up) {
      log()->warn("node {} stopped answering: {}", address, why);
    } else if (was_up) {
      log()->info("node {} did not answer a poll in time: {}", address, why);
    }
  };
  // Named, not braced in the call: GCC 12 miscompiles braced temporaries in co_await operands.
  std::vector<std::pair<std::string, std::string>> none, auth;
  auth.emplace_back("Authorization", "Bearer " + config_.api_key);
  auto ready = co_await http_get(address, "/readyz", none, config_.poll_timeout, kMaxInfoBytes);
  if (!ready) {
    fail(ready.error().message, ready.error().code == "node_refused");
    co_return;
  }
  auto info = co_await http_get(address, "/v1/info", auth, config_.poll_timeout, kMaxInfoBytes);
  if (!info) {
    fail(info.error().message);
    co_return;
  }
  if (info->status != 200) {
    fail("/v1/info answered " + std::to_string(info->status));
    co_return;
  }
  auto j = parse_bounded(info->body, JsonLimits{kMaxInfoBytes, kClientJsonDepth});
  NodeReport r;
  r.ready = ready->status == 200;
  if (j && j->is_object()) {
    const auto& v = *j;
    if (auto it = v.find("node"); it != v.end() && it->is_string()) r.id = it->get<std::string>();
    if (auto s = v.find("sessions"); s != v.end() && s->is_object()) {
      r.live = s->value("live", 0);
      r.max = s->value("max", 0);
    }
    if (auto p = v.find("pools"); p != v.end() && p->is_array()) {
      for (const auto& pool : *p)
        if (pool.is_object()) r.pool_ready += pool.value("ready", 0);
    }
  }
  if (r.id.empty()) {
    fail("its /v1/info names no node (--node-id)");
    co_return;
  }
  table_.report(address, r);
  if (!was_up) log()->info("node {} at {} answers ({} of {} sessions)", r.id, address, r.live, r.max);
}

struct Gateway::NodeConn {
  std::string address;
  std::optional<beast::tcp_stream> stream;
  beast::flat_buffer buffer;
  void drop() {
    stream.reset();
    buffer.clear();
  }
};

net::awaitable<void> Gateway::serve(tcp::socket socket) {
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  NodeConn kept;  // the node connection of the last request, for the next to the same node
  for (bool first = true;; first = false) {
    http::request_parser<http::empty_body> parser;
    parser.header_limit(kMaxHeaderBytes);
    if (stopping_) co_return;
    stream.expires_after(first ? kFirstRequestTimeout : kIdleTimeout);
    boost::system::error_code ec;
    // Between requests a connection is idle: a drain closes it rather than wait for the client.
    idle_.insert(&stream);
    co_await http::async_read_header(stream, buffer, parser,
                                     net::redirect_error(net::use_awaitable, ec));
    idle_.erase(&stream);
    stream.expires_never();
    if (stopping_ && ec) co_return;
    if (!ec && parser.get().method() == http::verb::post &&
        parser.get().target().substr(0, parser.get().target().find('?')) == "/mcp") {
      co_return co_await serve_mcp(stream.release_socket(), buffer, parser);
    }
    if (ec) {
      tcp::socket client = stream.release_socket();
      if (ec == http::error::header_limit) {
        co_await answer(client, http_api::error_response(api::errors::headers_too_large("16 KiB")));
      } else if (ec != net::error::eof && ec != beast::error::timeout &&
                 ec != http::error::end_of_stream) {
        co_await answer(client, http_api::error_response(api::errors::bad_request(ec.message())));
      }
      co_return;
    }
    const auto& h = parser.get().base();
    const std::string host = preview::host_name(h[http::field::host]).value_or("");
    const RouteDecision d =
        route_request(h.method_string(), h.target(), host, config_.preview_domain);
    std::string address;
    std::string node = d.node;
    std::optional<http_api::Response> local;  // answered here, and the connection closed
    switch (d.kind) {
      case RouteDecision::Kind::kHealth: {
        const bool readyz = h.target().starts_with("/readyz");
        if (readyz && !table_.any_up()) {
          local = http_api::error_response(api::errors::not_ready("no node answers"));
          break;
        }
        nlohmann::json status;
        status["status"] = readyz ? "ready" : "ok";
        status["nodes_up"] = table_.up_addresses().size();
        local = http_api::json_response(http::status::ok, status);
        break;
      }
      case RouteDecision::Kind::kList:
        local = co_await list(h);
        break;
      case RouteDecision::Kind::kNode: {
        const Lookup l = table_.find(d.node);
        if (l.state == Lookup::State::kUp) {
          address = l.address;
        } else if (l.state == Lookup::State::kDown && !d.node.empty()) {
          local = node_unavailable(d.node);
        } else {
          const bool preview = d.session_id.starts_with(api::kPreviewIdPrefix);
          local = http_api::error_response(preview
                                               ? api::errors::preview_not_found("no such preview")
                                               : api::errors::session_not_found());
        }
        break;
      }
      case RouteDecision::Kind::kCreate: {
        if (auto over = co_await tenant_over_quota(h[http::field::authorization])) {
          local = std::move(*over);
          break;
        }
        auto a = table_.place(h["Idempotency-Key"]);
        if (a) {
          address = *a;
        } else {
          local = http_api::error_response(
              api::errors::capacity("no node takes sessions now", kRetryAfterS));
        }
        break;
      }
      case RouteDecision::Kind::kAny: {
        auto up = table_.up_addresses();
        if (up.empty()) {
          local = http_api::error_response(api::errors::not_ready("no node answers"));
        } else {
          address = up[any_turn_++ % up.size()];
        }
        break;
      }
    }
    if (local) {
      tcp::socket client = stream.release_socket();
      co_return co_await answer(client, std::move(*local));
    }
    if (node.empty()) {
      auto it = table_.nodes().find(address);
      if (it != table_.nodes().end()) node = it->second.last.id;
    }
    const bool upgrade = http_api::ConnectionNamed(h).contains("upgrade") &&
                         h.find(http::field::upgrade) != h.end();
    // A WebSocket becomes a tunnel; a chunked request body goes through as bytes (its end is
    // the client's to say), and the connection closes after.
    if (upgrade || parser.chunked()) {
      co_return co_await relay(stream.release_socket(), std::move(buffer), h, address, node);
    }
    if (!co_await exchange(stream, buffer, parser, address, node, kept)) co_return;
  }
}

net::awaitable<bool> Gateway::exchange(beast::tcp_stream& client, beast::flat_buffer& buffer,
                                       http::request_parser<http::empty_body>& request,
                                       const std::string& address, const std::string& node_id,
                                       NodeConn& kept) {
  const auto& h = request.get().base();
  const uint64_t length = request.content_length().value_or(0);
  boost::system::error_code ec;
  auto fail_node = [&]() -> net::awaitable<bool> {
    kept.drop();
    tcp::socket c = client.release_socket();
    co_await answer(c, node_unavailable(node_id));
    co_return false;
  };
  // The client waits for this before it sends a large body; the node never sees the Expect.
  if (iequals(h[http::field::expect], "100-continue")) {
    static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    co_await net::async_write(client, net::buffer(kContinue),
                              net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return false;
  }
  const std::string peer = client.socket().remote_endpoint(ec).address().to_string();
  std::string first = node_head(h, HeadMode::kKeepAlive, peer);
  // The body's start, read with the head.
  const size_t have = static_cast<size_t>(std::min<uint64_t>(length, buffer.size()));
  first.append(static_cast<const char*>(buffer.data().data()), have);
  buffer.consume(have);
  uint64_t left = length - have;
  std::optional<http::response_parser<http::buffer_body>> rp;
  for (int attempt = 0;; ++attempt) {
    const bool reused = kept.stream && kept.address == address;
    if (!reused) {
      kept.drop();
      auto c = co_await connect(address);
      if (!c) {
        table_.report_failure(address, Clock::now(), c.error().code == "node_refused");
        log()->warn("node {} at {}: {}", node_id, address, c.error().message);
        co_return co_await fail_node();
      }
      kept.stream.emplace(std::move(*c));
      kept.address = address;
    }
    // A kept connection the node closed meanwhile fails at once: once more on a new one, if
    // the whole request is still at hand.
    const bool may_retry = reused && attempt == 0 && left == 0;
    co_await net::async_write(*kept.stream, net::buffer(first),
                              net::redirect_error(net::use_awaitable, ec));
    if (ec && may_retry) {
      kept.drop();
      continue;
    }
    if (ec) co_return co_await fail_node();
    std::array<char, kRelayBuffer> body;
    while (left > 0) {
      const size_t n = co_await client.async_read_some(
          net::buffer(body.data(), static_cast<size_t>(std::min<uint64_t>(left, body.size()))),
          net::redirect_error(net::use_awaitable, ec));
      if (ec) co_return false;  // the client went away mid-body
      co_await net::async_write(*kept.stream, net::buffer(body.data(), n),
                                net::redirect_error(net::use_awaitable, ec));
      if (ec) co_return co_await fail_node();
      left -= n;
    }
    rp.emplace();
    rp->header_limit(kMaxNodeHeaderBytes);
    rp->body_limit(std::numeric_limits<std::uint64_t>::max());
    if (h.method() == http::verb::head) rp->skip(true);
    co_await http::async_read_header(*kept.stream, kept.buffer, *rp,
                                     net::redirect_error(net::use_awaitable, ec));
    if (ec && may_retry && kept.buffer.size() == 0 &&
        (ec == http::error::end_of_stream || ec == net::error::connection_reset)) {
      kept.drop();
      continue;
    }
    if (ec) co_return co_await fail_node();
    break;
  }
  const auto& res = rp->get();
  const unsigned status = res.result_int();
  const bool no_body = h.method() == http::verb::head || status / 100 == 1 || status == 204 ||
                       status == 304;
  const bool chunked = !no_body && rp->chunked();
  // A body that ends when the node closes cannot be framed for a kept connection.
  const bool keep = request.keep_alive() && (no_body || chunked || rp->content_length());
  std::string out;
  out.reserve(512);
  out.append("HTTP/1.1 ").append(std::to_string(status)).append(" ").append(res.reason());
  out.append("\r\n");
  http_api::ConnectionNamed named(res);
  for (const auto& f : res) {
    const auto id = f.name();
    if (id == http::field::connection || id == http::field::keep_alive ||
        id == http::field::transfer_encoding || named.contains(f.name_string()))
      continue;
    out.append(f.name_string()).append(": ").append(f.value()).append("\r\n");
  }
  if (chunked) out.append("Transfer-Encoding: chunked\r\n");
  if (!keep) out.append("Connection: close\r\n");
  out.append("\r\n");
  co_await net::async_write(client, net::buffer(out), net::redirect_error(net::use_awaitable, ec));
  if (ec) {
    kept.drop();
    co_return false;
  }
  // The body as it comes: a stream of events or frames goes down piece by piece.
  std::array<char, kRelayBuffer> buf;
  while (!rp->is_done()) {
    rp->get().body().data = buf.data();
    rp->get().body().size = buf.size();
    co_await http::async_read_some(*kept.stream, kept.buffer, *rp,
                                   net::redirect_error(net::use_awaitable, ec));
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      kept.drop();
      co_return false;
    }
    const size_t n = buf.size() - rp->get().body().size;
    if (n == 0) continue;
    if (chunked) {
      char size_line[24];
      const int len = std::snprintf(size_line, sizeof size_line, "%zx\r\n", n);
      const std::array<net::const_buffer, 3> parts{net::buffer(size_line, static_cast<size_t>(len)),
                                                   net::buffer(buf.data(), n),
                                                   net::buffer("\r\n", 2)};
      co_await net::async_write(client, parts, net::redirect_error(net::use_awaitable, ec));
    } else {
      co_await net::async_write(client, net::buffer(buf.data(), n),
                                net::redirect_error(net::use_awaitable, ec));
    }
    if (ec) {
      kept.drop();
      co_return false;
    }
  }
  if (chunked) {
    co_await net::async_write(client, net::buffer("0\r\n\r\n", 5),
                              net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      kept.drop();
      co_return false;
    }
  }
  if (!rp->keep_alive()) kept.drop();
  if (!keep) {
    client.socket().shutdown(tcp::socket::shutdown_send, ec);
    co_return false;
  }
  co_return true;
}

net::awaitable<void> Gateway::relay(tcp::socket client, beast::flat_buffer buffer,
                                    const http::request_header<>& head, std::string address,
                                    std::string node_id, const std::string* body) {
  auto upstream = co_await connect(address);
  if (!upstream) {
    table_.report_failure(address, Clock::now(), upstream.error().code == "node_refused");
    log()->warn("node {} at {}: {}", node_id, address, upstream.error().message);
    co_return co_await answer(client, node_unavailable(node_id));
  }
  boost::system::error_code ec;
  const bool upgrade = http_api::ConnectionNamed(head).contains("upgrade") &&
                       head.find(http::field::upgrade) != head.end();
  const std::string peer = client.remote_endpoint(ec).address().to_string();
  std::string first = node_head(head, upgrade ? HeadMode::kUpgrade : HeadMode::kClose, peer, body);
  if (body) first.append(*body);
  // What the client sent past the head (a body's start) follows it.
  const auto rest = buffer.data();
  first.append(static_cast<const char*>(rest.data()), rest.size());
  co_await net::async_write(*upstream, net::buffer(first),
                            net::redirect_error(net::use_awaitable, ec));
  if (ec) {
    co_return co_await answer(client, node_unavailable(node_id));
  }
  client.set_option(tcp::no_delay(true), ec);
  co_await relay_bytes(std::move(client), std::move(*upstream), upgrade);
}

net::awaitable<void> Gateway::serve_mcp(tcp::socket socket, beast::flat_buffer& buffer,
                                        http::request_parser<http::empty_body>& header) {
  beast::tcp_stream stream(std::move(socket));
  http::request_parser<http::string_body> parser(std::move(header));
  parser.body_limit(mcp::kMaxMessageBytes);
  boost::system::error_code ec;
  stream.expires_after(kFirstRequestTimeout);
  co_await http::async_read(stream, buffer, parser, net::redirect_error(net::use_awaitable, ec));
  stream.expires_never();
  tcp::socket client = stream.release_socket();
  if (ec == http::error::body_limit) {
    co_return co_await answer(client, http_api::error_response(api::errors::body_too_large("1 MiB")));
  }
  if (ec) co_return;
  const auto& req = parser.get();
  const std::string body = req.body();
  // The node answers what is malformed; only what names a node, or several, is read here.
  std::string address, node;
  auto parsed = mcp::parse_message(body);
  if (auto* m = std::get_if<mcp::Message>(&parsed);
      m && m->kind == mcp::Message::Kind::kRequest && m->method == "tools/call") {
    auto call = mcp::parse_tool_call(m->id, m->params);
    if (auto* c = std::get_if<mcp::ToolCall>(&call)) {
      if (c->name == "session_create") {
        if (auto over = co_await tenant_over_quota(req[http::field::authorization])) {
          if (over->result() != http::status::too_many_requests) co_return co_await answer(client, std::move(*over));
          const json e = json::parse(over->body(), nullptr, false);
          auto res = http_api::json_response(
              http::status::ok,
              mcp::rpc_result(m->id, mcp::error_result("quota_sessions",
                                                       e.is_object() && e.contains("error")
                                                           ? e["error"].value("message", "")
                                                           : std::string())));
          co_return co_await answer(client, std::move(res));
        }
        auto a = table_.place("");
        if (!a) {
          co_return co_await answer(client, http_api::error_response(api::errors::capacity(
                                                "no node takes sessions now", kRetryAfterS)));
        }
        address = *a;
      } else if (c->name == "session_list") {
        http::request_header<> list_head;
        list_head.method(http::verb::get);
        list_head.target("/v1/sessions");
        list_head.set(http::field::authorization, req[http::field::authorization]);
        auto merged = co_await list(list_head);
        if (merged.result() != http::status::ok) co_return co_await answer(client, merged);
        const json j = json::parse(merged.body(), nullptr, false);
        auto res = http_api::json_response(
            http::status::ok, mcp::rpc_result(m->id, mcp::text_result(merged.body(), j)));
        co_return co_await answer(client, std::move(res));
      } else if (auto sid = c->arguments.find("session_id");
                 sid != c->arguments.end() && sid->is_string()) {
        const std::string id = sid->get<std::string>();
        node = std::string(api::node_of_id(id));
        const Lookup l = table_.find(node);
        if (l.state == Lookup::State::kUp) {
          address = l.address;
        } else if (l.state == Lookup::State::kDown && !node.empty()) {
          auto res = http_api::json_response(
              http::status::ok,
              mcp::rpc_result(m->id, mcp::error_result(
                                         "node_unavailable",
                                         api::errors::node_unavailable(node).message)));
          co_return co_await answer(client, std::move(res));
        }
      }
    }
  }
  if (address.empty()) {
    auto up = table_.up_addresses();
    if (up.empty()) {
      co_return co_await answer(client,
                                http_api::error_response(api::errors::not_ready("no node answers")));
    }
    address = up[any_turn_++ % up.size()];
  }
  if (node.empty()) {
    auto it = table_.nodes().find(address);
    if (it != table_.nodes().end()) node = it->second.last.id;
  }
  co_await relay(std::move(client), std::move(buffer), req.base(), address, node, &body);
}

net::awaitable<std::optional<http_api::Response>> Gateway::tenant_over_quota(
    std::string_view authorization) {
  // The admin key has no quota; a tenant key's max_sessions holds across the nodes, each of
  // which counts only its own.
  if (!authorization.starts_with("Bearer cabin_")) co_return std::nullopt;
  auto answers = co_await fan_out(table_.up_addresses(), "/v1/info", std::string(authorization));
  int live = 0, max = 0;
  for (auto& a : answers) {
    if (a.status == 0) continue;
    if (a.status != 200) {
      http_api::Response res{static_cast<http::status>(a.status), 11};
      res.set(http::field::content_type, "application/json");
      res.body() = std::move(a.body);
      co_return res;
    }
    const json j = json::parse(a.body, nullptr, false);
    if (!j.is_object() || !j.contains("sessions") || !j["sessions"].is_object()) continue;
    live += j["sessions"].value("live", 0);
    max = std::max(max, j["sessions"].value("max", 0));
  }
  if (max > 0 && live >= max) {
    co_return http_api::error_response(api::errors::quota_sessions(max, kRetryAfterS));
  }
  co_return std::nullopt;
}

net::awaitable<http_api::Response> Gateway::list(const http::request_header<>& head) {
  auto addresses = table_.up_addresses();
  if (addresses.empty()) {
    co_return http_api::error_response(api::errors::not_ready("no node answers"));
  }
  auto answers = co_await fan_out(addresses, std::string(head.target()),
                                  std::string(head[http::field::authorization]));
  std::vector<std::string> bodies;
  for (auto& a : answers) {
    if (a.status == 200) {
      bodies.push_back(std::move(a.body));
      continue;
    }
    if (a.status == 0) continue;  // it went away since the last poll: listed as unavailable
    // Every node checks the same keys the same way: its refusal is everyone's.
    http_api::Response res{static_cast<http::status>(a.status), 11};
    res.set(http::field::content_type, a.content_type.empty() ? "application/json" : a.content_type);
    res.body() = std::move(a.body);
    co_return res;
  }
  auto merged = merge_session_lists(bodies);
  bodies.clear();
  bodies.shrink_to_fit();
  // A list of many sessions is tens of MiB parsed; hand that memory back rather than keep it
  // for the next list: the gateway's size does not follow the sessions'.
  ::malloc_trim(0);
  if (!merged) co_return http_api::error_response(merged.error());
  http_api::Response res{http::status::ok, 11};
  res.set(http::field::content_type, "application/json");
  std::string down;
  for (const auto& id : table_.down_ids()) down.append(down.empty() ? "" : ", ").append(id);
  for (const auto& a : answers)
    if (a.status == 0) down.append(down.empty() ? "" : ", ").append(a.address);
  // Sessions of nodes that do not answer are missing: say which nodes.
  if (!down.empty()) res.set("Cabin-Unavailable-Nodes", down);
  res.body() = std::move(*merged);
  co_return res;
}

net::awaitable<std::vector<NodeAnswer>> Gateway::fan_out(std::vector<std::string> addresses,
                                                         std::string target,
                                                         std::string authorization) {
  auto answers = std::make_shared<std::vector<NodeAnswer>>(addresses.size());
  auto pending = std::make_shared<size_t>(addresses.size());
  auto all_done = std::make_shared<net::steady_timer>(ex_, net::steady_timer::time_point::max());
  for (size_t i = 0; i < addresses.size(); ++i) {
    (*answers)[i].address = addresses[i];
    net::co_spawn(
        ex_,
        [answers, i, address = addresses[i], target, authorization]() -> net::awaitable<void> {
          std::vector<std::pair<std::string, std::string>> headers;
          if (!authorization.empty()) headers.emplace_back("Authorization", authorization);
          auto r = co_await http_get(address, target, std::move(headers), 30s, kMaxListBytes);
          if (r) (*answers)[i] = std::move(*r);
          (*answers)[i].address = address;
        },
        [pending, all_done](std::exception_ptr) {
          if (--*pending == 0) all_done->cancel();
        });
  }
  boost::system::error_code ec;
  if (*pending > 0) co_await all_done->async_wait(net::redirect_error(net::use_awaitable, ec));
  co_return std::move(*answers);
}

net::awaitable<Result<NodeAnswer>> http_get(std::string address, std::string target,
                                            std::vector<std::pair<std::string, std::string>> headers,
                                            std::chrono::milliseconds timeout, size_t body_limit) {
  const auto began = std::chrono::steady_clock::now();
  auto socket = co_await connect(address, timeout);
  if (!socket) co_return socket.error();
  beast::tcp_stream s(std::move(*socket));
  s.expires_at(began + timeout);
  boost::system::error_code ec;
  http::request<http::empty_body> req{http::verb::get, target, 11};
  req.set(http::field::host, address);
  req.keep_alive(false);
  for (const auto& [k, v] : headers) req.set(k, v);
  co_await http::async_write(s, req, net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return make_error(Errc::kUnavailable, "node_unavailable", ec.message());
  beast::flat_buffer buf;
  http::response_parser<http::string_body> parser;
  parser.body_limit(body_limit);
  co_await http::async_read(s, buf, parser, net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return make_error(Errc::kUnavailable, "node_unavailable", ec.message());
  NodeAnswer a;
  a.address = address;
  a.status = parser.get().result_int();
  a.content_type = std::string(parser.get()[http::field::content_type]);
  a.body = std::move(parser.get().body());
  co_return a;
}

namespace {

// A JSON scanner for the nodes' lists: it finds where values begin and end without building
// them, so a list of ten thousand sessions is spliced rather than parsed and written again.
// Every function answers npos for what is not JSON.
constexpr size_t kBad = std::string_view::npos;
constexpr int kMaxScanDepth = 64;

size_t skip_ws(std::string_view s, size_t i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) ++i;
  return i;
}

// `i` at the opening quote; answers the index after the closing one.
size_t skip_string(std::string_view s, size_t i) {
  if (i >= s.size() || s[i] != '"') return kBad;
  for (++i; i < s.size(); ++i) {
    if (s[i] == '\\') {
      ++i;
    } else if (s[i] == '"') {
      return i + 1;
    } else if (static_cast<unsigned char>(s[i]) < 0x20) {
      return kBad;
    }
  }
  return kBad;
}

size_t skip_value(std::string_view s, size_t i, int depth = 0);

// `i` at '{' or '['.
size_t skip_container(std::string_view s, size_t i, int depth) {
  if (depth >= kMaxScanDepth) return kBad;
  const bool object = s[i] == '{';
  const char close = object ? '}' : ']';
  i = skip_ws(s, i + 1);
  if (i < s.size() && s[i] == close) return i + 1;
  for (;;) {
    if (object) {
      i = skip_string(s, i);
      if (i == kBad) return kBad;
      i = skip_ws(s, i);
      if (i >= s.size() || s[i] != ':') return kBad;
      i = skip_ws(s, i + 1);
    }
    i = skip_value(s, i, depth + 1);
    if (i == kBad) return kBad;
    i = skip_ws(s, i);
    if (i >= s.size()) return kBad;
    if (s[i] == close) return i + 1;
    if (s[i] != ',') return kBad;
    i = skip_ws(s, i + 1);
  }
}

size_t skip_value(std::string_view s, size_t i, int depth) {
  if (i >= s.size()) return kBad;
  if (s[i] == '"') return skip_string(s, i);
  if (s[i] == '{' || s[i] == '[') return skip_container(s, i, depth);
  // A number, true, false or null.
  const size_t from = i;
  while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '-' ||
                          s[i] == '+' || s[i] == '.')) {
    ++i;
  }
  return i == from ? kBad : i;
}

// Calls `member(key, value)` for each member of the object at `i` (both as raw text, the key
// without its quotes); answers the index after the object.
template <typename F>
size_t each_member(std::string_view s, size_t i, F&& member) {
  i = skip_ws(s, i);
  if (i >= s.size() || s[i] != '{') return kBad;
  i = skip_ws(s, i + 1);
  if (i < s.size() && s[i] == '}') return i + 1;
  for (;;) {
    const size_t key_end = skip_string(s, i);
    if (key_end == kBad) return kBad;
    const std::string_view key = s.substr(i + 1, key_end - i - 2);
    i = skip_ws(s, key_end);
    if (i >= s.size() || s[i] != ':') return kBad;
    i = skip_ws(s, i + 1);
    const size_t value_end = skip_value(s, i);
    if (value_end == kBad) return kBad;
    if (!member(key, s.substr(i, value_end - i))) return kBad;
    i = skip_ws(s, value_end);
    if (i >= s.size()) return kBad;
    if (s[i] == '}') return i + 1;
    if (s[i] != ',') return kBad;
    i = skip_ws(s, i + 1);
  }
}

struct ListedSession {
  std::string_view text;
  std::string_view created_at;  // as written, quotes and all: RFC 3339 UTC sorts as text
};

bool split_sessions(std::string_view body, std::vector<ListedSession>& out) {
  bool found = false;
  const size_t end = each_member(body, 0, [&](std::string_view key, std::string_view value) {
    if (key != "sessions") return true;
    if (value.empty() || value.front() != '[') return false;
    found = true;
    size_t i = skip_ws(value, 1);
    if (i < value.size() && value[i] == ']') return true;
    for (;;) {
      const size_t e = skip_value(value, i);
      if (e == kBad) return false;
      ListedSession ls{value.substr(i, e - i), {}};
      if (each_member(ls.text, 0, [&](std::string_view k, std::string_view v) {
            if (k == "created_at") ls.created_at = v;
            return true;
          }) == kBad) {
        return false;
      }
      out.push_back(ls);
      i = skip_ws(value, e);
      if (i >= value.size()) return false;
      if (value[i] == ']') return true;
      if (value[i] != ',') return false;
      i = skip_ws(value, i + 1);
    }
  });
  return end != kBad && skip_ws(body, end) == body.size() && found;
}

}  // namespace

Result<std::string> merge_session_lists(const std::vector<std::string>& bodies) {
  std::vector<ListedSession> all;
  size_t bytes = 0;
  for (const auto& b : bodies) {
    if (b.size() > kMaxListBytes || !split_sessions(b, all)) {
      return make_error(Errc::kUnavailable, "node_unavailable",
                        "a node answered its list of sessions with something else");
    }
    bytes += b.size();
  }
  // Newest first, as one node lists them.
  std::stable_sort(all.begin(), all.end(), [](const ListedSession& a, const ListedSession& b) {
    return a.created_at > b.created_at;
  });
  std::string out;
  out.reserve(bytes + 32);
  out.append("{\"sessions\":[");
  for (size_t i = 0; i < all.size(); ++i) {
    if (i) out.push_back(',');
    out.append(all[i].text);
  }
  out.append("]}");
  return out;
}

}  // namespace cabin::gateway
