// PreviewProxy: serves port previews, /preview/<id>/... and p-<port>-<session>.<domain>: checks
// the Host, the grant and the token or cookie, then relays HTTP/1.1 (streamed both ways) and
// WebSocket upgrades to 127.0.0.1:<port> inside the sandbox.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>
// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include "server/auth/token_connections.h"
#include "server/auth/tokens.h"
#include "server/config.h"
#include "server/http/client_stream.h"
#include "server/http/io_pool.h"
#include "server/http/responses.h"
#include "server/preview/previews.h"
#include "server/sessions/agent_client.h"
#include "server/sessions/session_manager.h"

namespace cabin::preview {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

enum class Outcome {
  kKeepAlive,  // the next request may follow on the connection
  kClose,      // answered; close (after draining what the client still sends)
  kTaken,      // the connection became a WebSocket tunnel and has ended
};

// What revocation, deletion or expiry does to a connection: one busy with the grant (a request
// in flight, a stream, a WebSocket) is shut down; an idle keep-alive one only drops its upstream
// connection, since its next request is checked anyway (and in path-based mode the same client
// connection may carry API requests).
struct ConnectionFds {
  int client = -1;
  int upstream = -1;
  bool busy = false;
  bool stale = false;  // the upstream belongs to a revoked grant: drop it before the next request
  // The wait for the app's answer, watched by one timer per connection (see watch_waits).
  bool awaiting_answer = false;
  std::chrono::steady_clock::time_point awaiting_since;
  bool answer_timed_out = false;
  // The request body being relayed, and when its last bytes came: a client that stops sending
  // one mid-way is cut off like an app that does not answer.
  bool reading_body = false;
  std::chrono::steady_clock::time_point body_progress;
  bool ended = false;  // the connection is gone: the watch stops
  // Set once the connection became a tunnel, which may run on another thread: closes it there.
  std::function<void()> close_tunnel;
};

// What one client connection keeps between its requests.
struct ConnectionState {
  std::string upstream_grant;  // the grant whose upstream connection is kept alive
  std::optional<sessions::Tunnel> upstream;
  std::shared_ptr<ConnectionFds> fds = std::make_shared<ConnectionFds>();
  std::map<std::string, auth::TokenConnections::Registration> registrations;  // by grant id
  std::function<void()> before_take;  // called before the connection becomes a tunnel
  std::string client_ip;              // learnt once per connection
  // The preview token this connection last presented and that verified: its next requests skip
  // the signature check (a tenth of the proxy's CPU) while the token, grant and keys are the same.
  // Expiry and revocation are still checked on every request.
  struct {
    std::string token;
    std::string grant_id;
    uint64_t key_epoch = 0;
    auth::TokenClaims claims;
  } verified;
  // One relay buffer per connection, uninitialised: allocating and zeroing 64 KiB per request
  // and direction was a fifth of the proxy's CPU time.
  std::unique_ptr<char[]> relay_buffer;
  std::string head;  // the head being relayed, its capacity kept between requests
  std::shared_ptr<net::steady_timer> answer_watch;  // started with the first proxied request

  ConnectionState() = default;
  ConnectionState(const ConnectionState&) = delete;
  ConnectionState& operator=(const ConnectionState&) = delete;
  ~ConnectionState() {
    fds->ended = true;
    if (answer_watch) answer_watch->cancel();
  }
};

// Where a preview request goes, from its Host and target.
struct PreviewTarget {
  Grant grant;
  bool by_host = false;         // p-<port>-<session>.<domain>; else path-based
  std::string prefix;           // path-based: "/preview/<id>"
  std::string upstream_target;  // what the app sees
};

// What the client's token or cookie let in.
struct Admission {
  int64_t token_expires_at = 0;
  std::vector<std::string> kept_cookies;  // the client's other cookies, passed to the app
};

class PreviewProxy {
 public:
  PreviewProxy(const ServerConfig& config, sessions::SessionManager& sessions,
               const auth::TokenService& tokens, auth::TokenConnections& connections,
               Previews& previews)
      : config_(config),
        sessions_(sessions),
        tokens_(tokens),
        connections_(connections),
        previews_(previews) {}

  // WebSocket tunnels over plain TCP run on `pool` from now on (null: on the caller's executor).
  void use_pumps(http_api::IoPool* pool) { pumps_ = pool; }

  // Whether the request is the proxy's: its Host is under the preview domain, or its target
  // starts with /preview/.
  bool claims(const http::request_header<>& h) const;

  // Serves one request whose header `header` has read (its body is still unread).
  net::awaitable<Outcome> serve(http_api::ClientStream& client, beast::flat_buffer& buffer,
                                http::request_parser<http::empty_body>& header,
                                ConnectionState& state);

  // The stages of serve(), each answering a refusal (or a redirect) itself. 1: the grant that
  // the Host or the path names; `path_based` is set as soon as the request is known to be one.
  std::variant<PreviewTarget, http_api::Response> locate(const http::request_header<>& h,
                                                         bool& path_based) const;
  // 2: sibling host-based previews are one site; only a preview's own pages may change state or
  // open a WebSocket.
  std::optional<http_api::Response> check_origin(const http::request_header<>& h,
                                                 const PreviewTarget& t, bool tls) const;
  // 3: the token in the URL (which becomes a cookie: a redirect) or the preview cookie.
  std::variant<Admission, http_api::Response> admit(const http::request_header<>& h,
                                                    const PreviewTarget& t,
                                                    const sessions::Session& session,
                                                    ConnectionState& state, bool tls) const;

  // Names a path-based preview's Host header may carry: IP literals, localhost, the public URL's
  // host. Anything else (a DNS name an attacker points at this server) is refused.
  bool allowed_api_host(const std::string& host) const;

 private:
  // 4: revocation, deletion and expiry of the grant reach this connection.
  void watch_revocation(ConnectionState& state, const Grant& grant, int64_t token_expires_at);
  // 6: the connection to the app, kept from the last request to the same grant; false: none.
  net::awaitable<bool> connect_upstream(ConnectionState& state, const sessions::SessionPtr& session,
                                        const Grant& grant);
  // 9: answers the app's 101 (state.head), forwards bytes sent early and pumps until both ends
  // close; `ec` is set when that fails before the pump.
  net::awaitable<void> take_over(http_api::ClientStream& client, beast::flat_buffer& buffer,
                                 ConnectionState& state, const std::string& grant_id,
                                 boost::system::error_code& ec);

  const ServerConfig& config_;
  sessions::SessionManager& sessions_;
  const auth::TokenService& tokens_;
  auth::TokenConnections& connections_;
  Previews& previews_;
  http_api::IoPool* pumps_ = nullptr;
};

}  // namespace cabin::preview
