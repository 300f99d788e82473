// The preview endpoints of the control API: POST/GET/DELETE /v1/sessions/{id}/previews.
#include "common/agent_protocol.h"
#include "common/json_fields.h"
#include "common/log.h"
#include "server/api/errors.h"
#include "server/handlers/api.h"
#include "server/preview/preview_request.h"

namespace cabin::http_api {

using nlohmann::json;

json Api::preview_urls(const preview::Grant& g, const std::string& token,
                       const Request& req) const {
  std::string query = "?" + std::string(preview::kTokenParam) + "=" + token;
  std::string path_url = base_url(req, false) + std::string(preview::kPathPrefix) + g.id + "/";
  json j = {{"path_url", path_url + query}};
  if (!config_.preview_domain.empty()) {
    // Same scheme and port as the base URL, on the preview's own host.
    std::string base = base_url(req, false);
    size_t scheme_end = base.find("://") + 3;
    std::string authority = base.substr(scheme_end);
    std::string port;
    if (size_t colon = authority.rfind(':');
        colon != std::string::npos && authority.find(']', colon) == std::string::npos) {
      port = authority.substr(colon);
    }
    std::string host_url = base.substr(0, scheme_end) +
                           preview::preview_host(g.port, g.session_id, config_.preview_domain) +
                           port + "/";
    j["host_url"] = host_url + query;
    j["url"] = j["host_url"];
  } else {
    j["url"] = j["path_url"];
  }
  return j;
}

json Api::preview_json(const preview::Grant& g, const sessions::Session& s,
                       const Request& req) const {
  std::string token =
      tokens_.issue(s.id(), auth::preview_scope(g.port, g.id), g.expires_at, s.token_generation());
  json j = {{"id", g.id},
            {"session_id", g.session_id},
            {"port", g.port},
            {"created_at", format_rfc3339(g.created_at)},
            {"expires_at", format_rfc3339(g.expires_at)}};
  j.update(preview_urls(g, token, req));
  return j;
}

Response Api::create_preview(const api::Route& route, const Request& req) {
  auto j = parse_object(req.body());
  if (!j) return error_response(j.error());
  if (auto r = reject_unknown(*j, {"port", "ttl_s"}); !r) return error_response(r.error());
  auto port_field = j->find("port");
  if (port_field == j->end()) return error_response(invalid_field("port", "is required"));
  auto port = read_int(*port_field, "port", 1, 65535);
  if (!port) return error_response(port.error());
  auto ttl = requested_ttl(*j);
  if (!ttl) return error_response(ttl.error());
  auto s = sessions_.find(route.session_id);
  if (!s) return error_response(api::errors::session_not_found());
  // Cabin's own ports in the sandbox: a preview link to one would be more than a look at an app.
  std::string_view reserved;
  if (*port == s->devtools_port()) {
    reserved = "the browser's DevTools port: a link to it would give CDP control of the browser";
  } else if (*port == agent_protocol::kRfbPort) {
    reserved = "the sandbox's VNC server: a link to it would give the screen, keyboard and mouse";
  } else if (*port == agent_protocol::kEgressProxyPort) {
    reserved = "the egress proxy's port: the sandbox's way out is not an app";
  } else if (*port == agent_protocol::kGuestAgentPort) {
    reserved = "the agent's port in a microVM";
  }
  if (!reserved.empty()) {
    return error_response(invalid_field(
        "port", "is " + std::string(reserved) + "; preview a port your own app listens on"));
  }
  previews_.prune([this](const std::string& id) { return sessions_.find(id) != nullptr; });
  const int64_t exp = expiry_within(*s, *ttl);
  std::optional<preview::Grant> replaced;
  auto g = previews_.create(s->id(), static_cast<int>(*port), exp, &replaced);
  if (!g) return error_response(g.error());
  if (replaced) connections_.close_tag(s->id(), replaced->id);
  logger("api")->info("session {}: preview {} of port {} until {}", s->id(), g->id, g->port,
                      format_rfc3339(g->expires_at));
  return json_response(http::status::created, preview_json(*g, *s, req));
}

Response Api::list_previews(const api::Route& route, const Request& req) {
  auto s = sessions_.find(route.session_id);
  if (!s) return error_response(api::errors::session_not_found());
  json list = json::array();
  for (const auto& g : previews_.list(s->id())) list.push_back(preview_json(g, *s, req));
  return json_response(http::status::ok, {{"previews", list}});
}

Response Api::delete_preview(const api::Route& route) {
  auto g = previews_.remove(route.session_id, route.preview_id);
  if (!g) {
    return error_response(
        api::errors::preview_not_found("no preview with that id in this session"));
  }
  size_t closed = connections_.close_tag(g->session_id, g->id);
  return json_response(http::status::ok,
                       {{"id", g->id}, {"deleted", true}, {"closed_connections", closed}});
}

}  // namespace cabin::http_api
