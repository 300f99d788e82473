#include "server/http/api.h"

#include <sys/socket.h>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/websocket/rfc6455.hpp>
#include <span>

#include "cdp-bridge/bridge.h"
#include "cdp-bridge/discovery.h"
#include "common/agent_protocol.h"
#include "common/json_fields.h"
#include "common/log.h"
#include "server/api/errors.h"
#include "server/auth/api_key.h"
#include "vnc/rfb_bridge_link.h"

namespace cabin::http_api {
namespace {

using nlohmann::json;

const auto& log() {
  static auto l = logger("api");
  return l;
}

using api::errors::session_not_found;

Error session_ended(const store::SessionRecord& r) {
  if (r.ended_at == 0) return api::errors::session_ended("");
  return api::errors::session_ended(r.end_reason.empty() ? std::string(store::to_string(r.status))
                                                         : r.end_reason);
}

// A Host header is echoed into URLs only when it is a plain host[:port].
bool plain_host(std::string_view h) {
  if (h.empty() || h.size() > 255) return false;
  for (char c : h) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-' || c == ':' || c == '[' || c == ']';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

Result<auth::TokenClaims> Api::check_token(std::string_view token, const std::string& session_id,
                                           const std::vector<std::string_view>& scopes) const {
  auto claims = tokens_.verify_any(token, session_id, scopes);
  if (!claims) return claims.error();
  auto s = sessions_.find(session_id);
  if (!s) {
    // Say so when the token's session has ended, rather than that it never was.
    auto r = sessions_.record(session_id);
    if (r && !store::is_live(r->status)) return session_ended(*r);
    return session_not_found();
  }
  if (auto live = tokens_.check_current(*claims, s->token_generation()); !live) return live.error();
  return claims;
}

Result<Authn> Api::authenticate(const api::Route& route, const Request& req) const {
  if (route.auth == api::Auth::kNone) return Authn{};
  auto authz = req.find(http::field::authorization);
  if (authz != req.end()) {
    if (auth::check_bearer(authz->value(), api_key_)) return Authn{};
    return make_error(Errc::kUnauthenticated, "unauthenticated", "the API key is not valid");
  }
  const auto& scopes = api::token_scopes(route.auth);
  if (scopes.empty()) {
    return make_error(Errc::kUnauthenticated, "unauthenticated",
                      "send Authorization: Bearer <api key>");
  }
  auto t = route.query.find("token");
  if (t == route.query.end()) {
    return make_error(Errc::kUnauthenticated, "unauthenticated",
                      "send Authorization: Bearer <api key> or a token= capability");
  }
  auto claims = check_token(t->second, route.session_id, scopes);
  if (!claims) return claims.error();
  return Authn{true, std::move(*claims)};
}

std::string Api::base_url(const Request& req, bool websocket) const {
  std::string base;
  if (!config_.public_url.empty()) {
    base = config_.public_url;
    while (!base.empty() && base.back() == '/') base.pop_back();
  } else {
    auto host = req.find(http::field::host);
    std::string h = host != req.end() && plain_host(host->value())
                        ? std::string(host->value())
                        : config_.listen_host + ":" + std::to_string(config_.listen_port);
    base = (config_.tls() ? "https://" : "http://") + h;
  }
  if (websocket) {
    if (base.rfind("https://", 0) == 0) return "wss://" + base.substr(8);
    if (base.rfind("http://", 0) == 0) return "ws://" + base.substr(7);
  }
  return base;
}

std::string Api::cdp_token(const sessions::Session& s) const { return scoped_token(s, "cdp"); }

std::string Api::scoped_token(const sessions::Session& s, const std::string& scope) const {
  return tokens_.issue(s.id(), scope, expiry_within(s, config_.cdp_token_ttl_s),
                       s.token_generation());
}

int64_t Api::expiry_within(const sessions::Session& s, int64_t ttl_s) const {
  return std::min(tokens_.clock().unix_seconds() + ttl_s, s.record().expires_at);
}

Result<int64_t> Api::requested_ttl(const json& body) const {
  auto f = body.find("ttl_s");
  if (f == body.end()) return std::min<int64_t>(3600, config_.max_token_ttl_s);
  return read_int(*f, "ttl_s", 1, config_.max_token_ttl_s);
}

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
  if (!r) return error_response(session_not_found());
  if (!store::is_live(r->status)) return error_response(session_ended(*r));
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
                        {"resolution", {{"width", r->width}, {"height", r->height}}}});
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

net::awaitable<Response> Api::handle(const api::Route& route, const Authn& authn,
                                     const Request& req) {
  using api::RouteId;
  switch (route.id) {
    case RouteId::kHealthz:
      co_return json_response(http::status::ok, {{"status", "ok"}});
    case RouteId::kInfo:
      co_return info();
    case RouteId::kCreateSession:
      co_return co_await create(req);
    case RouteId::kListSessions: {
      auto all = route.query.find("all");
      bool include_ended =
          all != route.query.end() && (all->second == "1" || all->second == "true");
      json list = json::array();
      for (const auto& r : sessions_.list(include_ended)) list.push_back(session_json(r, req));
      co_return json_response(http::status::ok, {{"sessions", list}});
    }
    case RouteId::kGetSession: {
      auto r = sessions_.record(route.session_id);
      if (!r) co_return error_response(session_not_found());
      co_return json_response(http::status::ok, session_json(*r, req));
    }
    case RouteId::kDeleteSession: {
      auto r = co_await sessions_.end(route.session_id, "deleted");
      if (!r) co_return error_response(r.error());
      co_return json_response(http::status::ok, session_json(*r, req));
    }
    case RouteId::kExec:
      co_return co_await exec(route, req);
    case RouteId::kComputer:
      co_return co_await computer(route, req);
    case RouteId::kScreenshot:
      co_return co_await screenshot(route);
    case RouteId::kLogs: {
      auto lines = sessions_.output(route.session_id);
      if (!lines) co_return error_response(session_not_found());
      co_return json_response(http::status::ok,
                              {{"id", route.session_id},
                               {"live", sessions_.find(route.session_id) != nullptr},
                               {"lines", *lines}});
    }
    case RouteId::kJsonVersion:
    case RouteId::kJsonList:
      co_return co_await discovery(route, authn, req);
    case RouteId::kConsolePage:
      co_return ui_file("index.html", req, PageCache::kRevalidate);
    case RouteId::kUiAsset:
      // Pages only under their own routes: /ui/ serves the hashed assets.
      if (route.asset.size() > 5 && route.asset.substr(route.asset.size() - 5) == ".html") {
        co_return error_response(api::errors::not_found_file());
      }
      co_return ui_file(route.asset, req, PageCache::kRevalidate);
    case RouteId::kLivePage:
      // The page is static; its token travels in the URL, so no cache keeps the page.
      co_return ui_file("live.html", req, PageCache::kNoStore);
    case RouteId::kLiveStatus:
      co_return live_status(route, req);
    case RouteId::kMintToken:
      co_return mint_token(route, req);
    case RouteId::kRevokeTokens:
      co_return revoke_tokens(route);
    case RouteId::kCreatePreview:
      co_return create_preview(route, req);
    case RouteId::kListPreviews:
      co_return list_previews(route, req);
    case RouteId::kDeletePreview:
      co_return delete_preview(route);
    case RouteId::kCdpBrowser:
    case RouteId::kCdpPage:
    case RouteId::kFrames:
    case RouteId::kFramesMjpeg:
    case RouteId::kVnc:
      co_return error_response(api::errors::websocket_required());
  }
  co_return error_response(api::errors::not_found_endpoint());
}

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
  if (!s) return error_response(session_not_found());
  int64_t exp = expiry_within(*s, *ttl);
  std::string bound = *scope;
  json extra = json::object();
  if (*port > 0) {
    // A preview token belongs to the port's live preview, and ends with it.
    auto grant = previews_.find_port(s->id(), *port);
    if (!grant) {
      return error_response(
          api::errors::preview_not_found("no live preview of port " + std::to_string(*port) +
                                         " in this session: create one with POST /previews first"));
    }
    exp = std::min(exp, grant->expires_at);
    bound = auth::preview_scope(*port, grant->id);
    extra["preview_id"] = grant->id;
  }
  json answer = {{"token", tokens_.issue(s->id(), bound, exp, s->token_generation())},
                 {"scope", *scope},
                 {"session_id", s->id()},
                 {"expires_at", format_rfc3339(exp)}};
  answer.update(extra);
  return json_response(http::status::created, answer);
}

Response Api::revoke_tokens(const api::Route& route) {
  auto gen = sessions_.revoke_tokens(route.session_id);
  if (!gen) return error_response(gen.error());
  size_t closed = connections_.close_session(route.session_id);
  log()->info("session {}: closed {} token-authenticated connections", route.session_id, closed);
  return json_response(
      http::status::ok,
      {{"session_id", route.session_id}, {"revoked", true}, {"closed_connections", closed}});
}

net::awaitable<Response> Api::create(const Request& req) {
  api::SpecLimits limits{config_.max_timeout_s, config_.default_timeout_s};
  auto spec = api::parse_session_spec(req.body(), limits);
  if (!spec) co_return error_response(spec.error());
  auto s = co_await sessions_.create(*spec);
  if (!s) co_return error_response(s.error());
  co_return json_response(http::status::created, session_json((*s)->record(), req));
}

net::awaitable<Response> Api::exec(const api::Route& route, const Request& req) {
  auto parsed = agent_protocol::parse_exec_request(req.body());
  if (!parsed) co_return error_response(parsed.error());
  auto s = sessions_.find(route.session_id);
  if (!s) co_return error_response(session_not_found());
  auto result = co_await s->exec(*parsed);
  if (!result) co_return error_response(result.error());
  co_return json_response(http::status::ok, agent_protocol::to_json(*result));
}

Result<void> Api::token_connection_room(const Authn& authn, const std::string& session_id) const {
  if (!authn.by_token) return {};
  const auto max = static_cast<size_t>(config_.max_token_connections_per_session);
  if (connections_.count(session_id) < max) return {};
  return api::errors::too_many_connections("this session's tokens hold " + std::to_string(max) +
                                           " connections open, the most allowed");
}

std::optional<std::chrono::steady_clock::duration> Api::token_time_left(
    const Authn& authn) const {
  if (!authn.by_token) return std::nullopt;
  const int64_t left = authn.claims.expires_at - tokens_.clock().unix_seconds();
  return std::chrono::seconds(std::max<int64_t>(left, 0));
}

net::awaitable<Response> Api::discovery(const api::Route& route, const Authn& authn,
                                        const Request& req) {
  auto s = sessions_.find(route.session_id);
  if (!s) co_return error_response(session_not_found());
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

net::awaitable<void> Api::handle_upgrade(const api::Route& route, const Authn& authn, Request req,
                                         ClientStream socket, beast::flat_buffer buffer) {
  if (auto room = token_connection_room(authn, route.session_id); !room) {
    co_await refuse_connection(socket, error_response(room.error()));
    co_return;
  }
  if (route.id == api::RouteId::kFrames || route.id == api::RouteId::kFramesMjpeg) {
    co_await frames(route, authn, std::move(req), std::move(socket));
    co_return;
  }
  if (!beast::websocket::is_upgrade(req)) {
    co_await refuse_connection(socket, error_response(api::errors::websocket_required()));
    co_return;
  }
  if (route.id == api::RouteId::kVnc) {
    co_await vnc(route, authn, std::move(req), std::move(socket));
    co_return;
  }
  auto s = sessions_.find(route.session_id);
  if (!s || !s->running()) {
    co_await refuse_connection(socket, error_response(session_not_found()));
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
                                                 upstream->port);
  s.reset();  // a bridged connection must not keep an ended session alive
  if (!answer) {
    log()->warn("session {}: CDP handshake failed: {}", id, answer.error().message);
    co_await refuse_connection(socket, error_response(answer.error()));
    co_return;
  }
  log()->debug("session {}: CDP client attached to {}", id, path);
  // Token-authenticated bridges close when the session's tokens are revoked. The registration
  // lives in this frame, so it ends with the bridge; the closer only touches the socket's handle.
  auth::TokenConnections::Registration reg;
  if (authn.by_token) {
    reg = connections_.add({id, "", token_time_left(authn)},
                           [client = socket.socket().native_handle(),
                                                    up = tunnel->stream.native_handle()] {
      // shutdown() rather than close(): the fds stay owned by the pump,
      // which then reads EOF both ways and ends.
      ::shutdown(client, SHUT_RDWR);
      ::shutdown(up, SHUT_RDWR);
    });
  }
  co_await cdp::splice(std::move(socket), std::move(buffer), std::move(*answer),
                       std::move(tunnel->stream), std::move(tunnel->buffer));
  log()->debug("session {}: CDP client detached", id);
}

}  // namespace cabin::http_api

namespace cabin::http_api {

net::awaitable<void> Api::vnc(const api::Route& route, const Authn& authn, Request req,
                              ClientStream socket) {
  auto s = sessions_.find(route.session_id);
  if (!s || !s->running()) {
    co_await refuse_connection(socket, error_response(session_not_found()));
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
    reg = connections_.add({id, "", token_time_left(authn)},
                           [fd = socket.socket().native_handle()] { ::shutdown(fd, SHUT_RDWR); });
  }
  s.reset();  // a viewer must not keep an ended session alive
  const char* mode = access == vnc::RfbAccess::kControl ? "control" : "view";
  log()->info("session {}: RFB viewer attached ({})", id, mode);
  auto stats = co_await vnc::serve_rfb_websocket(std::move(socket), std::move(req),
                                                 std::move(tunnel->stream),
                                                 std::move(tunnel->buffer), access, {});
  log()->info(
      "session {}: RFB viewer detached ({}): {} bytes out, {} in, {} of {} messages "
      "dropped; {}",
      id, mode, stats.bytes_to_client, stats.bytes_to_sandbox, stats.dropped, stats.messages,
      stats.close_reason);
}

}  // namespace cabin::http_api
