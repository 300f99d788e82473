// The sessions endpoints of Api: create, list, get, delete, logs, exec, and the server's info.
#include "common/agent_protocol.h"
#include "server/api/errors.h"
#include "server/handlers/api.h"

namespace cabin::http_api {

using nlohmann::json;

json Api::session_json(const store::SessionRecord& r, const Request& req) const {
  json j = {{"id", r.id},
            {"status", store::to_string(r.status)},
            {"driver", r.driver},
            {"resolution", {{"width", r.width}, {"height", r.height}}},
            {"start_url", r.start_url},
            {"timeout_s", r.timeout_s},
            {"created_at", format_rfc3339(r.created_at)},
            {"expires_at", format_rfc3339(r.expires_at)}};
  if (r.ended_at != 0) {
    j["ended_at"] = format_rfc3339(r.ended_at);
    j["end_reason"] = r.end_reason;
  }
  if (auto s = sessions_.find(r.id); s && r.status == store::SessionStatus::kRunning) {
    std::string ws = base_url(req, true) + "/v1/sessions/" + r.id;
    std::string token = cdp_token(*s);
    j["cdp_url"] = ws + "/cdp?token=" + token;
    if (const auto& d = s->spec().display) {
      j["display"] = {{"width", d->width}, {"height", d->height}};
    }
    j["json_version_url"] = base_url(req, false) + "/v1/sessions/" + r.id + "/json/version";
    const std::string view = scoped_token(*s, "view");
    j["vnc_url"] = ws + "/vnc?token=" + view;
    j["live_view_url"] = base_url(req, false) + "/v1/sessions/" + r.id + "/live?token=" + view;
  }
  return j;
}

Response Api::info() const {
  json drivers = json::array();
  for (const auto& d : sessions_.driver_infos()) {
    json e = {{"name", d.name},
              {"isolation", d.isolation},
              {"detail", d.detail},
              {"available", d.available},
              {"supports_pause", d.supports_pause}};
    if (!d.available) e["unavailable_reason"] = d.unavailable_reason;
    drivers.push_back(e);
  }
  return json_response(
      http::status::ok,
      {{"name", "cabin"},
       {"version", CABIN_VERSION},
       {"default_driver", config_.default_driver},
       {"drivers", drivers},
       {"sessions", {{"live", sessions_.live_count()}, {"max", config_.max_sessions}}},
       {"limits",
        {{"max_timeout_s", config_.max_timeout_s},
         {"default_timeout_s", config_.default_timeout_s},
         {"resolution_min", api::kMinDimension},
         {"resolution_max", api::kMaxDimension}}}});
}

net::awaitable<Response> Api::create(const Request& req) {
  api::SpecLimits limits{config_.max_timeout_s, config_.default_timeout_s};
  auto spec = api::parse_session_spec(req.body(), limits);
  if (!spec) co_return error_response(spec.error());
  auto s = co_await sessions_.create(*spec);
  if (!s) co_return error_response(s.error());
  co_return json_response(http::status::created, session_json((*s)->record(), req));
}

Response Api::list_sessions(const api::Route& route, const Request& req) const {
  auto all = route.query.find("all");
  bool include_ended = all != route.query.end() && (all->second == "1" || all->second == "true");
  json list = json::array();
  for (const auto& r : sessions_.list(include_ended)) list.push_back(session_json(r, req));
  return json_response(http::status::ok, {{"sessions", list}});
}

Response Api::get_session(const api::Route& route, const Request& req) const {
  auto r = sessions_.record(route.session_id);
  if (!r) return error_response(api::errors::session_not_found());
  return json_response(http::status::ok, session_json(*r, req));
}

net::awaitable<Response> Api::delete_session(const api::Route& route, const Request& req) {
  auto r = co_await sessions_.end(route.session_id, "deleted");
  if (!r) co_return error_response(r.error());
  co_return json_response(http::status::ok, session_json(*r, req));
}

Response Api::logs(const api::Route& route) const {
  auto lines = sessions_.output(route.session_id);
  if (!lines) return error_response(api::errors::session_not_found());
  return json_response(http::status::ok, {{"id", route.session_id},
                                          {"live", sessions_.find(route.session_id) != nullptr},
                                          {"lines", *lines}});
}

net::awaitable<Response> Api::exec(const api::Route& route, const Request& req) {
  auto parsed = agent_protocol::parse_exec_request(req.body());
  if (!parsed) co_return error_response(parsed.error());
  auto s = sessions_.find(route.session_id);
  if (!s) co_return error_response(api::errors::session_not_found());
  auto result = co_await s->exec(*parsed);
  if (!result) co_return error_response(result.error());
  co_return json_response(http::status::ok, agent_protocol::to_json(*result));
}

}  // namespace cabin::http_api
