// EgressProxy: a session's only way out. It accepts the sandbox's connections on a listener
// cabind holds (the sandbox's loopback port), reads one request head, asks the policy, resolves
// an allowed name on the host, dials an address the policy also allows, and relays: a CONNECT
// tunnel once its first bytes name the same host, or one plain HTTP request. Every decision is
// one record for the session's log. Runs on one executor (cabind's control thread).
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "server/egress/byte_budget.h"
#include "server/egress/dns.h"
#include "server/egress/policy.h"
#include "server/egress/proxy_request.h"
#include "server/egress/session_ca.h"

namespace cabin::egress {

struct ProxyLimits {
  // The request head, and a tunnel's first bytes, must arrive within this.
  std::chrono::milliseconds head_timeout{10000};
  std::chrono::milliseconds connect_timeout{10000};
  // A connection that moves no byte either way for this long is closed.
  std::chrono::milliseconds idle_timeout{120000};
  size_t max_connections = 256;  // open at once, per session
  size_t max_head = 64 * 1024;
  // Request bodies read whole (to put a secret into them) held at once by one session's proxy.
  size_t max_held_bodies = 16u << 20;
};

// One decision, as the session's network log keeps it.
struct EgressRecord {
  uint64_t seq = 0;  // set by the log
  int64_t time_ms = 0;
  std::string kind;  // "connect" (a tunnel) or "http" (a plain request)
  std::string method;
  std::string host;  // canonical, as asked (empty: the request could not be read)
  uint16_t port = 0;
  std::string address;  // what was dialled, if anything
  std::string rule;
  bool allowed = false;
  std::string reason;
  int status = 0;  // what the proxy answered (200 for an opened tunnel), or the upstream's
  uint64_t bytes_up = 0;
  uint64_t bytes_down = 0;
  int64_t duration_ms = 0;
  std::vector<std::string> secrets;  // the names of the secrets put into the request
};
nlohmann::json record_json(const EgressRecord& r);

class EgressProxy : public std::enable_shared_from_this<EgressProxy> {
 public:
  using Sink = std::function<void(EgressRecord)>;
  EgressProxy(std::string session_id, std::shared_ptr<const Policy> policy, Boundary boundary,
              std::shared_ptr<const Resolver> resolver, ProxyLimits limits, Sink sink);
  ~EgressProxy();

  // Accepts on `listener` until stop(); each connection is handled on its own.
  net::awaitable<void> serve(net::ip::tcp::acceptor listener);
  // Where cabind has no listener in the sandbox: `waiting` connections at once, each made by
  // `dial` (a connection to the sandbox's agent that asked to wait), taken as a client once the
  // agent says kEgressPaired, and made again.
  using Dial = std::function<net::awaitable<Result<net::ip::tcp::socket>>()>;
  void serve_reverse(net::any_io_executor ex, Dial dial, size_t waiting);
  // Ends the listener and every connection.
  void stop();

  std::shared_ptr<const Policy> policy() const { return policy_; }
  // The policy from now on; open connections it no longer allows are closed at once.
  void set_policy(std::shared_ptr<const Policy> p);
  size_t open_connections() const { return conns_.size(); }
  // What tunnels to hosts bound to a secret need: the session's CA, which signs the certificates
  // the sandbox sees, and the context the proxy verifies the real hosts with. Without them such a
  // tunnel is refused.
  // The server's upstream proxy, for sessions whose policy names none.
  void set_default_upstream(std::optional<UpstreamProxy> p) { default_upstream_ = std::move(p); }
  void set_tls(std::shared_ptr<SessionCa> ca, std::shared_ptr<ssl::context> upstream) {
    ca_ = std::move(ca);
    upstream_tls_ = std::move(upstream);
  }
  // What every session's proxy holds of request bodies at once, shared with them.
  void set_server_bodies(std::shared_ptr<ByteBudget> b) { server_bodies_ = std::move(b); }

  struct Conn;  // one connection from the sandbox (proxy.cpp)

 private:
  net::awaitable<void> handle(net::ip::tcp::socket client);
  net::awaitable<void> wait_reverse(Dial dial);
  net::awaitable<void> tunnel(std::shared_ptr<Conn> c, EgressRecord& rec);
  // A tunnel to a host bound to a secret: the sandbox's TLS ends here (its ClientHello is
  // `first`), each request is checked and gets its secrets, and goes on over the proxy's own
  // TLS to the host (intercept.cpp).
  net::awaitable<void> intercept(std::shared_ptr<Conn> c, EgressRecord& rec,
                                 std::vector<uint8_t> first);
  // A plain request's answer, once the request went: as it comes, until the host closes.
  net::awaitable<void> answer(std::shared_ptr<Conn> c, EgressRecord& rec);
  // The first address of `target` the policy lets through that accepts a connection.
  net::awaitable<bool> dial(std::shared_ptr<Conn> c, const ProxyTarget& target, EgressRecord& rec);
  // The policy's answer for `t` before DNS; a tunnel that only a method-limited rule allows is
  // refused, since its requests cannot be seen.
  Decision decide(const ProxyTarget& t) const;
  bool still_allowed(const Conn& c) const;
  // Answers the proxy's refusal for `rec` (its status and reason) and closes the connection.
  static net::awaitable<void> refuse(std::shared_ptr<Conn> c, const EgressRecord& rec);
  void emit(EgressRecord& rec);

  std::string session_id_;
  std::shared_ptr<const Policy> policy_;
  Boundary boundary_;
  std::shared_ptr<const Resolver> resolver_;
  ProxyLimits limits_;
  Sink sink_;
  std::optional<UpstreamProxy> default_upstream_;
  std::shared_ptr<SessionCa> ca_;
  std::shared_ptr<ssl::context> upstream_tls_;
  ByteBudget bodies_;
  std::shared_ptr<ByteBudget> server_bodies_;
  std::unique_ptr<net::ip::tcp::acceptor> listener_;
  std::map<uint64_t, std::weak_ptr<Conn>> conns_;
  std::map<uint64_t, net::ip::tcp::socket*> waiting_;  // reverse connections not yet paired
  uint64_t next_conn_ = 0;
  bool stopped_ = false;
};

}  // namespace cabin::egress
