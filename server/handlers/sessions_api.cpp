// The sessions endpoints of Api: create, list, get, delete, logs, exec, and the server's info.
#include <algorithm>

#include "common/agent_protocol.h"
#include "common/crypto.h"
#include "common/json_fields.h"
#include "server/api/errors.h"
#include "server/api/ids.h"
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
            {"idle_timeout_s", r.idle_timeout_s},
            {"on_idle", r.on_idle},
            {"owner", r.owner},
            {"created_at", format_rfc3339(r.created_at)},
            {"expires_at", format_rfc3339(r.expires_at)},
            {"idle_since", nullptr}};
  if (r.ended_at != 0) {
    j["ended_at"] = format_rfc3339(r.ended_at);
    j["end_reason"] = r.end_reason;
  }
  // A paused session's URLs work again once it is resumed.
  if (auto s = sessions_.find(r.id); s && (r.status == store::SessionStatus::kRunning ||
                                           r.status == store::SessionStatus::kPaused)) {
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
  if (auto s = sessions_.find(r.id)) {
    if (auto p = s->network()) j["network"] = egress::policy_json(*p);
    j["wait_until"] = api::wait_until_name(s->spec().wait_until);
    if (const auto& p = s->spec().profile) j["profile"] = {{"id", p->id}, {"persist", p->persist}};
    if (auto idle = s->idle_since()) j["idle_since"] = format_rfc3339(*idle);
    if (r.status == store::SessionStatus::kPaused)
      j["pause_mode"] = s->hibernated() ? "hibernate" : "freeze";
  }
  // Its recordings, live and kept (GET /recordings has the whole records).
  json recordings = json::array();
  if (auto list = sessions_.recordings(r.id)) {
    for (const auto& rec : *list)
      recordings.push_back({{"id", rec.value("id", "")}, {"status", rec.value("status", "")}});
  }
  j["recordings"] = std::move(recordings);
  return j;
}

Response Api::readyz() const {
  if (sessions_.draining()) {
    return error_response(
        make_error(Errc::kUnavailable, "not_ready", "the server is shutting down"));
  }
  for (const auto& d : sessions_.driver_infos()) {
    if (d.available) return json_response(http::status::ok, {{"status", "ready"}});
  }
  return error_response(
      make_error(Errc::kUnavailable, "not_ready", "no driver can start a sandbox here"));
}

Response Api::info(const Authn& authn) const {
  json drivers = json::array();
  for (const auto& d : sessions_.driver_infos()) {
    json e = {{"name", d.name},
              {"isolation", d.isolation},
              {"detail", d.detail},
              {"available", d.available},
              {"supports_pause", d.supports_pause},
              {"supports_hibernate", d.supports_hibernate},
              // A fork copies what the driver can reach of a browser: its whole machine, or
              // its profile.
              {"supports_profiles", d.supports_profiles},
              {"supports_fork", d.supports_profiles || d.supports_snapshots}};
    if (!d.available) e["unavailable_reason"] = d.unavailable_reason;
    drivers.push_back(e);
  }
  json pools = json::array();
  for (const auto& p : sessions_.pools()) {
    pools.push_back({{"driver", p.config.driver},
                     {"resolution", {{"width", p.config.width}, {"height", p.config.height}}},
                     {"size", p.config.count},
                     {"ready", p.ready},
                     {"starting", p.starting},
                     {"claims", p.claims},
                     {"misses", p.misses}});
  }
  json templates = json::array();
  for (const auto& t : sessions_.templates())
    templates.push_back({{"shape", t.shape}, {"state", t.state}, {"copies", t.copies}});
  return json_response(
      http::status::ok,
      {{"name", "cabin"},
       {"version", CABIN_VERSION},
       // Behind cabin-gateway: the node id in this server's session ids; null alone.
       {"node", api::node_id().empty() ? json(nullptr) : json(api::node_id())},
       {"default_driver", config_.default_driver},
       {"drivers", drivers},
       {"pools", pools},
       {"templates", templates},
       // A tenant sees its own sessions against its own quota.
       {"sessions", authn.key ? json{{"live", sessions_.tenant_load(authn.key->id)},
                                     {"max", authn.key->max_sessions},
                                     {"max_creates_per_minute", authn.key->max_creates_per_minute}}
                              : json{{"live", sessions_.live_count()}, {"max", config_.max_sessions}}},
       {"limits",
        {{"max_timeout_s", config_.max_timeout_s},
         {"default_timeout_s", config_.default_timeout_s},
         {"default_idle_timeout_s", config_.default_idle_timeout_s},
         {"resolution_min", api::kMinDimension},
         {"resolution_max", api::kMaxDimension}}}});
}

sessions::Tenant tenant_of(const Authn& authn) {
  sessions::Tenant tenant;
  if (authn.key) {
    tenant.id = authn.key->id;
    tenant.max_sessions = authn.key->max_sessions;
    tenant.max_creates_per_minute = authn.key->max_creates_per_minute;
    tenant.max_memory_bytes = static_cast<uint64_t>(authn.key->max_memory_mb) << 20;
    tenant.max_vcpus = authn.key->max_vcpus;
    tenant.max_recordings_bytes = static_cast<uint64_t>(authn.key->max_recordings_mb) << 20;
  }
  return tenant;
}

net::awaitable<Response> Api::fork(const Authn& authn, const api::Route& route,
                                   const Request& req) {
  int count = 1;
  if (req.body().find_first_not_of(" \t\r\n") != std::string::npos) {
    auto body = parse_object(req.body());
    if (!body) co_return error_response(body.error());
    if (auto r = reject_unknown(*body, {"count"}); !r) co_return error_response(r.error());
    if (auto it = body->find("count"); it != body->end()) {
      auto n = read_int(*it, "count", 1, sessions::SessionManager::kMaxForks);
      if (!n) co_return error_response(n.error());
      count = static_cast<int>(*n);
    }
  }
  auto made = co_await sessions_.fork(route.session_id, count, tenant_of(authn));
  if (!made) co_return error_response(made.error());
  json list = json::array();
  for (const auto& s : made->sessions) list.push_back(session_json(s->record(), req));
  // What a child has of its source depends on the driver: its whole running machine, or what
  // its browser keeps outside its memory.
  json copied = {"cookies", "local_storage", "indexeddb", "profile", "page_urls"};
  json not_copied = {"page_memory", "dom_state", "form_input", "history", "session_storage"};
  if (made->memory) {
    for (auto& c : not_copied) copied.push_back(c);
    not_copied = json::array();
  }
  co_return json_response(http::status::created, {{"source", route.session_id},
                                                  {"sessions", std::move(list)},
                                                  {"copied", std::move(copied)},
                                                  {"not_copied", std::move(not_copied)}});
}

net::awaitable<Response> Api::create(const Authn& authn, const Request& req,
                                     Cancellation* cancel) {
  api::SpecLimits limits{config_.max_timeout_s, config_.default_timeout_s,
                         config_.default_idle_timeout_s, config_.max_sandbox_vcpus,
                         static_cast<int64_t>(config_.max_sandbox_memory_mb)};
  auto spec = api::parse_session_spec(req.body(), limits);
  if (!spec) co_return error_response(spec.error());
  const sessions::Tenant tenant = tenant_of(authn);
  auto key = req.find("Idempotency-Key");
  if (key == req.end()) {
    auto s = co_await sessions_.create(*spec, tenant, cancel);
    if (!s) co_return error_response(s.error());
    co_return json_response(http::status::created, session_json((*s)->record(), req));
  }
  const std::string k(key->value());
  const bool visible = !k.empty() && k.size() <= 255 &&
                       std::all_of(k.begin(), k.end(), [](char c) { return c > 0x20 && c < 0x7f; });
  if (!visible) {
    co_return error_response(invalid_request("Idempotency-Key: 1 to 255 visible ASCII characters"));
  }
  // Keys are per tenant: another tenant's key of the same text is another key.
  auto made = co_await sessions_.create_once(*spec, tenant, k, sha256_hex(req.body()), cancel);
  if (!made) co_return error_response(made.error());
  co_return json_response(made->replayed ? http::status::ok : http::status::created,
                          session_json(made->record, req));
}

Response Api::list_sessions(const api::Route& route, const Authn& authn,
                                 const Request& req) const {
  auto all = route.query.find("all");
  bool include_ended = all != route.query.end() && (all->second == "1" || all->second == "true");
  json list = json::array();
  const auto rows = authn.key ? sessions_.list_of(authn.key->id, include_ended)
                              : sessions_.list(include_ended);
  for (const auto& r : rows) list.push_back(session_json(r, req));
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

Response Api::patch_session(const api::Route& route, const Request& req) {
  if (auto s = sessions_.live(route.session_id); !s) return error_response(s.error());
  auto body = parse_object(req.body());
  if (!body) return error_response(body.error());
  if (auto r = reject_unknown(*body, {"timeout_s", "idle_timeout_s"}); !r) {
    return error_response(r.error());
  }
  std::optional<int64_t> timeout, idle;
  if (auto it = body->find("timeout_s"); it != body->end()) {
    auto n = read_int(*it, "timeout_s", 1, config_.max_timeout_s);
    if (!n) return error_response(n.error());
    timeout = *n;
  }
  if (auto it = body->find("idle_timeout_s"); it != body->end()) {
    auto n = read_int(*it, "idle_timeout_s", 0, config_.max_timeout_s);
    if (!n) return error_response(n.error());
    idle = *n;
  }
  auto r = sessions_.set_timers(route.session_id, timeout, idle);
  if (!r) return error_response(r.error());
  return json_response(http::status::ok, session_json(*r, req));
}

Response Api::keepalive(const api::Route& route, const Request& req) {
  auto r = sessions_.keepalive(route.session_id);
  if (!r) return error_response(r.error());
  return json_response(http::status::ok, session_json(*r, req));
}

net::awaitable<Response> Api::pause_or_resume(const api::Route& route, const Request& req) {
  Result<store::SessionRecord> r = api::errors::session_not_found();
  if (route.id == api::RouteId::kPause) {
    auto mode = sessions::PauseMode::kFreeze;
    if (req.body().find_first_not_of(" \t\r\n") != std::string::npos) {
      auto body = parse_object(req.body());
      if (!body) co_return error_response(body.error());
      if (auto u = reject_unknown(*body, {"mode"}); !u) co_return error_response(u.error());
      if (auto it = body->find("mode"); it != body->end()) {
        auto m = read_string(*it, "mode", 16);
        if (!m) co_return error_response(m.error());
        if (*m == "hibernate") {
          mode = sessions::PauseMode::kHibernate;
        } else if (*m != "freeze") {
          co_return error_response(invalid_field("mode", "must be freeze or hibernate"));
        }
      }
    }
    r = co_await sessions_.pause(route.session_id, mode);
  } else {
    r = co_await sessions_.resume(route.session_id);
  }
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

Response Api::get_network(const api::Route& route) const {
  auto s = sessions_.find(route.session_id);
  if (!s) return error_response(api::errors::session_not_found());
  auto p = s->network();
  if (!p) return error_response(api::errors::no_egress());
  return json_response(http::status::ok, egress::policy_json(*p));
}

Response Api::put_network(const api::Route& route, const Request& req) {
  auto s = sessions_.find(route.session_id);
  if (!s) return error_response(api::errors::session_not_found());
  auto body = parse_object(req.body());
  if (!body) return error_response(body.error());
  auto old = s->network();
  auto p = egress::parse_policy(*body, "network", old.get());
  if (!p) return error_response(p.error());
  if (auto r = egress::check_reachable(*p, sessions_.config().egress.boundary); !r)
    return error_response(r.error());
  if (auto r = s->set_network(std::move(*p)); !r) return error_response(r.error());
  api_log().info("session {}: network policy replaced (mode {})", s->id(),
                 egress::mode_name(s->network()->mode));
  return json_response(http::status::ok, egress::policy_json(*s->network()));
}

Response Api::network_log(const api::Route& route) const {
  uint64_t since = 0;
  if (auto it = route.query.find("since"); it != route.query.end()) {
    const std::string& v = it->second;
    if (v.empty() || v.size() > 19 || v.find_first_not_of("0123456789") != std::string::npos) {
      return error_response(invalid_field("since", "must be a record's sequence number"));
    }
    since = std::stoull(v);
  }
  auto lines = sessions_.network_log(route.session_id, since);
  if (!lines) return error_response(api::errors::session_not_found());
  Response res{http::status::ok, 11};
  res.set(http::field::content_type, "application/x-ndjson");
  res.set(http::field::cache_control, "no-store");
  for (const auto& l : *lines) res.body() += l + "\n";
  res.prepare_payload();
  return res;
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
