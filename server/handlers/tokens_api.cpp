// The token endpoints of Api: mint a capability token, revoke every token of a session.
#include <optional>

#include "common/json_fields.h"
#include "common/log.h"
#include "server/api/errors.h"
#include "server/handlers/api.h"

namespace cabin::http_api {
using nlohmann::json;

Response Api::mint_token(const api::Route& route, const Request& req) {
  auto j = parse_object(req.body());
  if (!j) return error_response(j.error());
  if (auto r = reject_unknown(*j, {"scope", "ttl_s"}); !r) return error_response(r.error());
  auto scope_field = j->find("scope");
  if (scope_field == j->end()) return error_response(invalid_field("scope", "is required"));
  auto scope = read_string(*scope_field, "scope", 32);
  if (!scope) return error_response(scope.error());
  auto port = auth::parse_scope(*scope);
  if (!port) {
    return error_response(
        invalid_field("scope", "must be cdp, view, control or preview:<port 1-65535>"));
  }
  auto ttl = requested_ttl(*j);
  if (!ttl) return error_response(ttl.error());
  auto s = sessions_.find(route.session_id);
  if (!s) return error_response(api::errors::session_not_found());
  int64_t exp = expiry_within(*s, *ttl);
  std::string bound = *scope;
  std::optional<preview::Grant> grant;
  if (*port > 0) {
    // A preview token belongs to the port's live preview, and ends with it.
    grant = previews_.find_port(s->id(), *port);
    if (!grant) {
      return error_response(
          api::errors::preview_not_found("no live preview of port " + std::to_string(*port) +
                                         " in this session: create one with POST /previews first"));
    }
    exp = std::min(exp, grant->expires_at);
    bound = auth::preview_scope(*port, grant->id);
  }
  const std::string token = tokens_.issue(s->id(), bound, exp, s->token_generation());
  json answer = {{"token", token},
                 {"scope", *scope},
                 {"session_id", s->id()},
                 {"expires_at", format_rfc3339(exp)}};
  // The URLs the token opens, ready to hand on.
  const std::string path = "/v1/sessions/" + s->id();
  if (grant) {
    answer["preview_id"] = grant->id;
    answer.update(preview_urls(*grant, token, req));
  } else if (*scope == "cdp") {
    answer["cdp_url"] = base_url(req, true) + path + "/cdp?token=" + token;
  } else {
    answer["live_view_url"] = base_url(req, false) + path + "/live?token=" + token;
    answer["vnc_url"] = base_url(req, true) + path + "/vnc?token=" + token;
  }
  return json_response(http::status::created, answer);
}

Response Api::revoke_tokens(const api::Route& route) {
  auto gen = sessions_.revoke_tokens(route.session_id);
  if (!gen) return error_response(gen.error());
  size_t closed = connections_.close_session(route.session_id);
  api_log().info("session {}: closed {} token-authenticated connections", route.session_id, closed);
  return json_response(
      http::status::ok,
      {{"session_id", route.session_id}, {"revoked", true}, {"closed_connections", closed}});
}

}  // namespace cabin::http_api
