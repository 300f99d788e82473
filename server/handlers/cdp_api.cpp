// The CDP endpoints of Api: DevTools discovery, rewritten to point at cabind, and the WebSocket
// bridge to the browser and its pages.
#include "cdp-bridge/bridge.h"
#include "cdp-bridge/discovery.h"
#include "common/log.h"
#include "server/api/errors.h"
#include "server/handlers/api.h"
#include "server/metrics/metrics.h"

namespace cabin::http_api {
namespace {

// A browser under TCG can take seconds to answer; one that takes this long is not coming, and a
// client that gave up must not leave the tunnel waiting.
constexpr std::chrono::seconds kBrowserUpgradeTimeout{60};

}  // namespace

net::awaitable<Response> Api::discovery(const api::Route& route, const Authn& authn,
                                        const Request& req) {
  auto s = sessions_.find(route.session_id);
  if (!s) co_return error_response(api::errors::session_not_found());
  bool version = route.id == api::RouteId::kJsonVersion;
  auto found = co_await s->devtools_discovery(version);
  if (!found) co_return error_response(found.error());
  std::string token;
  if (authn.by_token) {
    token = route.query.at("token");  // authenticate() found and verified it there
  } else {
    token = cdp_token(*s);
  }
  std::string ws = base_url(req, true) + "/v1/sessions/" + s->id();
  auto body = version ? cdp::rewrite_version(*found, ws + "/cdp?token=" + token)
                      : cdp::rewrite_list(*found, ws + "/devtools/page/", "?token=" + token);
  if (!body) co_return error_response(body.error());
  Response out{http::status::ok, 11};
  out.set(http::field::content_type, "application/json");
  out.set(http::field::cache_control, "no-store");
  out.body() = std::move(*body);
  out.prepare_payload();
  co_return out;
}

net::awaitable<void> Api::cdp(const api::Route& route, const Authn& authn, Request req,
                              ClientStream socket, beast::flat_buffer buffer) {
  auto s = sessions_.find(route.session_id);
  if (!s || !s->running()) {
    co_await refuse_connection(socket, error_response(api::errors::session_not_found()));
    co_return;
  }
  std::optional<std::string> page;
  if (route.id == api::RouteId::kCdpPage) page = route.target_id;
  auto upstream = co_await s->open_cdp(page);
  if (!upstream) {
    co_await refuse_connection(socket, error_response(upstream.error()));
    co_return;
  }
  sessions::Tunnel* tunnel = &upstream->tunnel;
  const std::string& path = upstream->path;
  std::string id = s->id();
  auto answer = co_await cdp::upstream_handshake(tunnel->stream, tunnel->buffer, req.base(), path,
                                                 upstream->port, kBrowserUpgradeTimeout);
  s.reset();  // a bridged connection must not keep an ended session alive
  if (!answer) {
    api_log().warn("session {}: CDP handshake failed: {}", id, answer.error().message);
    co_await refuse_connection(socket, error_response(answer.error()));
    co_return;
  }
  api_log().debug("session {}: CDP client attached to {}", id, path);
  // Token-authenticated bridges close when the session's tokens are revoked. The registration
  // lives in this frame, so it ends with the bridge; the closer reaches the connection wherever
  // it runs.
  auth::TokenConnections::Registration reg;
  if (authn.by_token) {
    // Ending the client's side ends the pump, which then closes the browser's side too.
    reg = connections_.add({id, "", token_time_left(authn)}, socket.closer());
  }
  auto splice = [buffer = std::move(buffer), answer = std::move(*answer),
                 up_buffer = std::move(tunnel->buffer)](ClientStream client,
                                                        drivers::AgentStream up) mutable {
    return cdp::splice(std::move(client), std::move(buffer), std::move(answer), std::move(up),
                       std::move(up_buffer), metrics::relay_counts(metrics::Relay::kCdp));
  };
  co_await run_pump(pumps_, std::move(socket), std::move(tunnel->stream), std::move(splice));
  api_log().debug("session {}: CDP client detached", id);
}

}  // namespace cabin::http_api
