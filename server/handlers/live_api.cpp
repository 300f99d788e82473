// What people open: the console and live view pages, the live view's status, and the RFB
// WebSocket, filtered by the caller's access.
#include "common/agent_protocol.h"
#include "common/log.h"
#include "server/api/errors.h"
#include "server/handlers/api.h"
#include "server/http/websocket.h"
#include "server/metrics/metrics.h"
#include "vnc/rfb_bridge_link.h"

namespace cabin::http_api {
using nlohmann::json;

Response Api::ui_file(std::string_view name, const Request& req, PageCache cache) const {
  const StaticFile* f = ui_.find(name);
  if (!f) {
    if (ui_.size() == 0) {
      return error_response(api::errors::web_ui_unavailable());
    }
    return error_response(api::errors::not_found_file());
  }
  auto inm = req.find(http::field::if_none_match);
  return static_response(*f, inm == req.end() ? std::string_view{} : inm->value(), cache);
}

Response Api::live_status(const api::Route& route, const Request& req) const {
  auto r = sessions_.record(route.session_id);
  if (!r) return error_response(api::errors::session_not_found());
  if (!store::is_live(r->status)) return error_response(session_ended_error(*r));
  auto live = sessions_.find(route.session_id);
  // authenticate() has checked the token (or the key, which may do everything).
  std::string scope = "control";
  json expires = nullptr;
  if (req.find(http::field::authorization) == req.end()) {
    auto t = route.query.find("token");
    if (t != route.query.end()) {
      if (auto claims = tokens_.decode(t->second); claims) {
        scope = claims->scope;
        expires = format_rfc3339(claims->expires_at);
      }
    }
  }
  return json_response(http::status::ok,
                       {{"id", r->id},
                        {"status", store::to_string(r->status)},
                        {"scope", scope},
                        {"expires_at", expires},
                        {"control", live ? control_status(*live) : json(nullptr)},
                        {"resolution", {{"width", r->width}, {"height", r->height}}}});
}

net::awaitable<void> Api::vnc(const api::Route& route, const Authn& authn, Request req,
                              ClientStream socket) {
  auto s = sessions_.find(route.session_id);
  if (!s || !s->running()) {
    co_await refuse_connection(socket, error_response(api::errors::session_not_found()));
    co_return;
  }
  auto tunnel = co_await s->open_rfb();
  if (!tunnel) {
    co_await refuse_connection(socket, error_response(tunnel.error()));
    co_return;
  }
  const std::string id = s->id();
  // Passed authenticate(): the API key (full control), or a valid view or control token.
  const vnc::RfbAccess access = !authn.by_token || authn.claims.scope == "control"
                                    ? vnc::RfbAccess::kControl
                                    : vnc::RfbAccess::kView;
  auth::TokenConnections::Registration reg;
  if (authn.by_token) {
    reg = connections_.add({id, "", token_time_left(authn)}, socket.closer());
  }
  // Control a live view took goes back when its last viewer that could steer leaves.
  std::optional<sessions::Session::ControlViewer> steering;
  if (access == vnc::RfbAccess::kControl) steering.emplace(s);
  s.reset();  // a viewer must not keep an ended session alive
  const char* mode = access == vnc::RfbAccess::kControl ? "control" : "view";
  api_log().info("session {}: RFB viewer attached ({})", id, mode);
  auto bridge = [req = std::move(req), up_buffer = std::move(tunnel->buffer), access](
                    ClientStream client, drivers::AgentStream up) mutable {
    return vnc::serve_rfb_websocket<WebSocket>(std::move(client), std::move(req), std::move(up),
                                               std::move(up_buffer), access, {},
                                               metrics::relay_counts(metrics::Relay::kVnc));
  };
  auto stats =
      co_await run_pump(pumps_, std::move(socket), std::move(tunnel->stream), std::move(bridge));
  api_log().info(
      "session {}: RFB viewer detached ({}): {} bytes out, {} in, {} of {} messages "
      "dropped; {}",
      id, mode, stats.bytes_to_client, stats.bytes_to_sandbox, stats.dropped, stats.messages,
      stats.close_reason);
}

}  // namespace cabin::http_api
