#include "server/handlers/api.h"

#include <boost/beast/websocket/rfc6455.hpp>

#include "common/crypto.h"
#include "common/json_fields.h"
#include "server/api/errors.h"
#include "server/api/openapi_doc.h"
#include "server/auth/api_key.h"
#include "server/metrics/metrics.h"

namespace cabin::http_api {
namespace {

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

using nlohmann::json;

spdlog::logger& api_log() {
  static auto l = logger("api");
  return *l;
}

Error session_ended_error(const store::SessionRecord& r) {
  if (r.ended_at == 0) return api::errors::session_ended("");
  return api::errors::session_ended(r.end_reason.empty() ? std::string(store::to_string(r.status))
                                                         : r.end_reason);
}

Result<auth::TokenClaims> Api::check_token(std::string_view token, const std::string& session_id,
                                           const std::vector<std::string_view>& scopes) const {
  auto claims = tokens_.verify_any(token, session_id, scopes);
  if (!claims) return claims.error();
  auto s = sessions_.find(session_id);
  if (!s) {
    // Say so when the token's session has ended, rather than that it never was.
    auto r = sessions_.record(session_id);
    if (r && !store::is_live(r->status)) return session_ended_error(*r);
    return api::errors::session_not_found();
  }
  if (auto live = tokens_.check_current(*claims, s->token_generation()); !live) return live.error();
  return claims;
}

Result<Authn> Api::authenticate(const api::Route& route, const Request& req) const {
  auto r = authenticate_once(route, req);
  if (!r) metrics::registry().inc("cabin_token_refusals_total", {r.error().code});
  return r;
}

// Why an Authorization header that is not the API key was refused, naming the fix for the
// usual slips: the key without "Bearer ", a capability token sent as a key.
std::string Api::why_not_a_key(std::string_view value) const {
  constexpr std::string_view kBearer = "Bearer ";
  const bool bearer = value.substr(0, kBearer.size()) == kBearer;
  const std::string_view presented = bearer ? value.substr(kBearer.size()) : value;
  if (!bearer) {
    if (constant_time_equal(presented, api_key_) || store::KeyStore::looks_like_key(presented)) {
      return "the Authorization header must read \"Bearer <api key>\": \"Bearer \" is missing "
             "before the key";
    }
    if (const auto sp = value.find(' '); sp != std::string_view::npos && sp < 32) {
      return "cabind takes \"Authorization: Bearer <api key>\", not the " +
             std::string(value.substr(0, sp)) + " scheme";
    }
  }
  if (tokens_.decode(presented)) {
    return "that is a capability token, not an API key: a token goes in the token= query "
           "parameter of the URL it came with (cdp_url, live_view_url, a minted token's url)";
  }
  return "the API key is not valid";
}

Result<Authn> Api::authenticate_once(const api::Route& route, const Request& req) const {
  if (route.auth == api::Auth::kNone) return Authn{};
  auto authz = req.find(http::field::authorization);
  if (authz != req.end()) {
    if (auth::check_bearer(authz->value(), api_key_)) return Authn{};
    constexpr std::string_view kBearer = "Bearer ";
    const std::string_view value = authz->value();
    if (keys_ && value.substr(0, kBearer.size()) == kBearer &&
        store::KeyStore::looks_like_key(value.substr(kBearer.size()))) {
      auto key = keys_->verify(value.substr(kBearer.size()));
      if (!key) return key.error();
      CABIN_TRY(tenant_may(route, *key));
      Authn a;
      a.key = std::move(*key);
      return a;
    }
    return make_error(Errc::kUnauthenticated, "unauthenticated", why_not_a_key(value));
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

Result<void> Api::tenant_may(const api::Route& route, const store::ApiKeyRecord& key) const {
  using api::RouteId;
  switch (route.id) {
    case RouteId::kCreateKey:
    case RouteId::kListKeys:
    case RouteId::kDeleteKey:
    case RouteId::kMetrics:  // the whole server's numbers
      return api::errors::admin_only();
    default:
      break;
  }
  if (route.session_id.empty()) return {};
  // Another tenant's session is answered as if there were none, and one that is not there the
  // same way on every route: no answer tells the two apart.
  if (auto r = sessions_.record(route.session_id); !r || r->owner != key.id)
    return api::errors::session_not_found();
  return {};
}

void Api::use_keys(store::KeyStore* keys) {
  keys_ = keys;
  if (keys_) metrics::registry().replace("cabin_api_keys", {{{}, double(keys_->list().size())}});
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

Result<void> Api::token_connection_room(const Authn& authn, const std::string& session_id) const {
  if (!authn.by_token) return {};
  const auto max = static_cast<size_t>(config_.max_token_connections_per_session);
  if (connections_.count(session_id) < max) return {};
  return api::errors::too_many_connections("this session's tokens hold " + std::to_string(max) +
                                           " connections open, the most allowed");
}

std::optional<std::chrono::steady_clock::duration> Api::token_time_left(const Authn& authn) const {
  if (!authn.by_token) return std::nullopt;
  const int64_t left = authn.claims.expires_at - tokens_.clock().unix_seconds();
  return std::chrono::seconds(std::max<int64_t>(left, 0));
}

namespace {

// Whether the route needs the session's sandbox to run: refused while it is paused, as nothing
// in it would answer. The rest (timers, tokens, policy, records) is cabind's own.
bool reaches_sandbox(api::RouteId id) {
  using api::RouteId;
  switch (id) {
    case RouteId::kExec:
    case RouteId::kComputer:
    case RouteId::kScreenshot:
    case RouteId::kGetClipboard:
    case RouteId::kPutClipboard:
    case RouteId::kGetFiles:
    case RouteId::kPutFile:
    case RouteId::kDeleteFile:
    case RouteId::kStartRecording:
    case RouteId::kStopRecording:
    case RouteId::kFork:
    case RouteId::kJsonVersion:
    case RouteId::kJsonList:
    case RouteId::kCdpBrowser:
    case RouteId::kCdpPage:
    case RouteId::kFrames:
    case RouteId::kFramesMjpeg:
    case RouteId::kVnc:
      return true;
    default:
      return false;
  }
}

// Whether a request on the route is someone using its session: it acts on the sandbox or opens
// a way into it. Reading the session's records (a dashboard polling them) is not, nor is
// changing its timers.
bool uses_session(api::RouteId id) {
  using api::RouteId;
  return reaches_sandbox(id) || id == RouteId::kPutNetwork || id == RouteId::kMintToken ||
         id == RouteId::kCreatePreview;
}

}  // namespace

Result<void> Api::not_paused(const api::Route& route) const {
  if (route.session_id.empty() || !reaches_sandbox(route.id)) return {};
  auto s = sessions_.find(route.session_id);
  if (s && s->paused()) return api::errors::session_paused();
  return {};
}

namespace {

// What the audit log calls a route's action; null for routes it does not record (reads).
const char* audit_action(api::RouteId id) {
  using api::RouteId;
  switch (id) {
    case RouteId::kCreateSession:
      return "session.create";
    case RouteId::kDeleteSession:
      return "session.delete";
    case RouteId::kFork:
      return "session.fork";
    case RouteId::kPatchSession:
      return "session.timers";
    case RouteId::kPause:
      return "session.pause";
    case RouteId::kResume:
      return "session.resume";
    case RouteId::kExec:
      return "exec";
    case RouteId::kComputer:
      return "computer";
    case RouteId::kControl:
      return "control";
    case RouteId::kPutClipboard:
      return "clipboard.write";
    case RouteId::kPutFile:
      return "file.write";
    case RouteId::kDeleteFile:
      return "file.delete";
    case RouteId::kStartRecording:
      return "recording.start";
    case RouteId::kStopRecording:
      return "recording.stop";
    case RouteId::kDeleteRecording:
      return "recording.delete";
    case RouteId::kMintToken:
      return "token.mint";
    case RouteId::kRevokeTokens:
      return "token.revoke";
    case RouteId::kCreatePreview:
      return "preview.create";
    case RouteId::kDeletePreview:
      return "preview.delete";
    case RouteId::kPutNetwork:
      return "network.replace";
    case RouteId::kCreateKey:
      return "key.mint";
    case RouteId::kDeleteKey:
      return "key.revoke";
    case RouteId::kCreateProfile:
      return "profile.create";
    case RouteId::kDeleteProfile:
      return "profile.delete";
    default:
      return nullptr;
  }
}

// At most `n` strings of a JSON array, each cut to `len` bytes: an entry stays small.
nlohmann::json bounded_strings(const nlohmann::json& a, size_t n, size_t len) {
  nlohmann::json out = nlohmann::json::array();
  if (!a.is_array()) return out;
  for (const auto& v : a) {
    if (out.size() == n) break;
    if (v.is_string()) out.push_back(v.get_ref<const std::string&>().substr(0, len));
  }
  return out;
}

}  // namespace

std::optional<nlohmann::json> Api::audit_entry(const api::Route& route, const Authn& authn,
                                               const Request& req, const Response& res) const {
  const char* action = audit_action(route.id);
  if (!action) return std::nullopt;
  using nlohmann::json;
  const bool ok = res.result_int() < 400;
  // The request as the handler read it, with the same bounds; nothing (null) if it was no object.
  auto parsed = parse_object(req.body());
  const json in = parsed ? std::move(*parsed) : json();
  // The answer is cabind's own; only those the entry reads from are parsed (a computer batch's
  // answer may carry screenshots).
  const bool read_out = !ok || route.id == api::RouteId::kCreateSession ||
                        route.id == api::RouteId::kExec || route.id == api::RouteId::kCreatePreview ||
                        route.id == api::RouteId::kCreateKey ||
                        route.id == api::RouteId::kCreateProfile ||
                        route.id == api::RouteId::kFork;
  const json out = read_out ? json::parse(res.body(), nullptr, false) : json();
  json e = {
      {"action", action},
      {"key", authn.who()},
      {"status", res.result_int()},
      {"outcome", ok                                         ? "ok"
                  : out.is_object() && out.contains("error") ? out["error"].value("code", "error")
                                                             : "error"}};
  std::string session = route.session_id;
  if (route.id == api::RouteId::kCreateSession && ok && out.is_object())
    session = out.value("id", "");
  e["session"] = session.empty() ? json(nullptr) : json(session);
  const bool in_object = in.is_object();
  switch (route.id) {
    case api::RouteId::kCreateSession:
      if (ok && out.is_object()) e["driver"] = out.value("driver", "");
      break;
    case api::RouteId::kExec:
      if (in_object) e["argv"] = bounded_strings(in.value("argv", json::array()), 32, 256);
      if (ok && out.is_object()) e["exit_code"] = out.value("exit_code", json(nullptr));
      break;
    case api::RouteId::kComputer: {
      json ops = json::array();
      const json actions = in_object ? in.value("actions", json::array()) : json::array();
      for (const auto& a : actions) {
        if (ops.size() == 64) break;
        if (a.is_object()) ops.push_back(a.value("op", a.value("action", "")).substr(0, 32));
      }
      if (in_object && in.contains("action") && in["action"].is_string())
        ops.push_back(in["action"].get<std::string>().substr(0, 32));
      e["actions"] = ops;
      break;
    }
    case api::RouteId::kMintToken:
      if (in_object && in.contains("scope") && in["scope"].is_string())
        e["scope"] = in["scope"].get<std::string>().substr(0, 64);
      break;
    case api::RouteId::kCreatePreview:
      if (in_object && in.contains("port")) e["port"] = in["port"];
      if (ok && out.is_object()) e["preview"] = out.value("id", "");
      break;
    case api::RouteId::kDeletePreview:
      e["preview"] = route.preview_id;
      break;
    case api::RouteId::kPutNetwork:
      if (in_object && in.contains("mode") && in["mode"].is_string())
        e["mode"] = in["mode"].get<std::string>().substr(0, 16);
      break;
    case api::RouteId::kPatchSession:
      for (const char* f : {"timeout_s", "idle_timeout_s"}) {
        if (in_object && in.contains(f) && in[f].is_number_integer()) e[f] = in[f];
      }
      break;
    case api::RouteId::kCreateKey:
      // The key's id and name from the answer; never its secret.
      if (ok && out.is_object()) {
        e["api_key"] = out.value("id", "");
        e["name"] = out.value("name", "");
      }
      break;
    case api::RouteId::kDeleteKey:
      e["api_key"] = route.key_id;
      break;
    case api::RouteId::kFork:
      if (ok && out.is_object() && out.contains("sessions") && out["sessions"].is_array()) {
        json ids = json::array();
        for (const auto& c : out["sessions"]) {
          if (c.is_object()) ids.push_back(c.value("id", ""));
        }
        e["children"] = std::move(ids);
      }
      break;
    case api::RouteId::kCreateProfile:
      if (ok && out.is_object()) e["profile"] = out.value("id", "");
      break;
    case api::RouteId::kDeleteProfile:
      e["profile"] = route.profile_id;
      break;
    default:
      break;
  }
  return e;
}

sessions::Session::Presence Api::presence(const api::Route& route) const {
  if (route.session_id.empty() || !uses_session(route.id)) return {};
  auto s = sessions_.find(route.session_id);
  return s ? sessions::Session::Presence(s) : sessions::Session::Presence();
}

net::awaitable<Response> Api::handle(const api::Route& route, const Authn& authn,
                                     const Request& req, Cancellation* cancel) {
  Response res;
  {
    // A request for a session keeps it from being idle while it is in flight.
    const auto present = presence(route);
    if (auto r = not_paused(route); r) {
      res = co_await dispatch(route, authn, req, cancel);
    } else {
      res = error_response(r.error());
    }
  }
  if (audit_) {
    if (auto entry = audit_entry(route, authn, req, res)) audit_->record(std::move(*entry));
  }
  co_return res;
}

net::awaitable<Response> Api::dispatch(const api::Route& route, const Authn& authn,
                                       const Request& req, Cancellation* cancel) {
  using api::RouteId;
  switch (route.id) {
    case RouteId::kHealthz:
      co_return json_response(http::status::ok, {{"status", "ok"}});
    case RouteId::kReadyz:
      co_return readyz();
    case RouteId::kMetrics: {
      Response res{http::status::ok, 11};
      res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
      res.set(http::field::cache_control, "no-store");
      res.body() = metrics::registry().exposition();
      res.prepare_payload();
      co_return res;
    }
    case RouteId::kInfo:
      co_return info(authn);
    case RouteId::kMcp:
      co_return co_await mcp(authn, req);
    case RouteId::kOpenApi: {
      Response res{http::status::ok, 11};
      res.set(http::field::content_type, "application/json");
      res.set(http::field::cache_control, "no-cache");
      res.body() = std::string(api::openapi_document());
      res.prepare_payload();
      co_return res;
    }
    case RouteId::kCreateSession:
      co_return co_await create(authn, req, cancel);
    case RouteId::kListSessions:
      co_return list_sessions(route, authn, req);
    case RouteId::kGetSession:
      co_return get_session(route, req);
    case RouteId::kDeleteSession:
      co_return co_await delete_session(route, req);
    case RouteId::kPatchSession:
      co_return patch_session(route, req);
    case RouteId::kKeepalive:
      co_return keepalive(route, req);
    case RouteId::kPause:
    case RouteId::kResume:
      co_return co_await pause_or_resume(route, req);
    case RouteId::kFork:
      co_return co_await fork(authn, route, req);
    case RouteId::kExec:
      co_return co_await exec(route, req);
    case RouteId::kComputer:
      co_return co_await computer(route, req);
    case RouteId::kScreenshot:
      co_return co_await screenshot(route);
    case RouteId::kLogs:
      co_return logs(route);
    case RouteId::kGetNetwork:
      co_return get_network(route);
    case RouteId::kPutNetwork:
      co_return put_network(route, req);
    case RouteId::kNetworkLog:
      co_return network_log(route);
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
    case RouteId::kControl:
      co_return control(route, authn, req);
    case RouteId::kGetClipboard:
    case RouteId::kPutClipboard:
      co_return co_await clipboard(route, req);
    case RouteId::kDeleteFile:
      co_return co_await delete_file(route);
    case RouteId::kListDownloads:
      co_return list_downloads(route);
    case RouteId::kStartRecording:
    case RouteId::kListRecordings:
    case RouteId::kStopRecording:
    case RouteId::kDeleteRecording:
      co_return co_await recordings(route, authn, req);
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
    case RouteId::kCreateKey:
      co_return create_key(req);
    case RouteId::kListKeys:
      co_return list_keys();
    case RouteId::kDeleteKey:
      co_return delete_key(route);
    case RouteId::kCreateProfile:
      co_return create_profile(authn, req);
    case RouteId::kListProfiles:
      co_return list_profiles(authn);
    case RouteId::kGetProfile:
      co_return get_profile(authn, route);
    case RouteId::kDeleteProfile:
      co_return delete_profile(authn, route);
    case RouteId::kCdpBrowser:
    case RouteId::kCdpPage:
    case RouteId::kFrames:
    case RouteId::kFramesMjpeg:
    case RouteId::kVnc:
    case RouteId::kEvents:
    case RouteId::kGetFiles:
    case RouteId::kPutFile:
    case RouteId::kGetRecording:
      co_return error_response(api::errors::websocket_required());
  }
  co_return error_response(api::errors::not_found_endpoint());
}

net::awaitable<void> Api::handle_upgrade(const api::Route& route, const Authn& authn, Request req,
                                         ClientStream socket, beast::flat_buffer buffer) {
  // A client stream keeps its session from being idle while it is open.
  const auto present = presence(route);
  const char* kind = route.id == api::RouteId::kVnc      ? "vnc"
                     : route.id == api::RouteId::kEvents ? "events"
                     : route.id == api::RouteId::kGetFiles || route.id == api::RouteId::kPutFile ||
                               route.id == api::RouteId::kGetRecording
                         ? "files"
                     : route.id == api::RouteId::kFrames || route.id == api::RouteId::kFramesMjpeg
                         ? "frames"
                         : "cdp";
  const metrics::GaugeHold open("cabin_connections", {kind});
  if (auto r = not_paused(route); !r) {
    co_await refuse_connection(socket, error_response(r.error()));
    co_return;
  }
  if (auto room = token_connection_room(authn, route.session_id); !room) {
    co_await refuse_connection(socket, error_response(room.error()));
    co_return;
  }
  if (route.id == api::RouteId::kEvents) {
    co_await events(route, authn, std::move(req), std::move(socket));
    co_return;
  }
  if (route.id == api::RouteId::kGetRecording) {
    co_await recording_video(route, std::move(socket));
    co_return;
  }
  if (route.id == api::RouteId::kGetFiles) {
    co_await get_files(route, std::move(socket));
    co_return;
  }
  if (route.id == api::RouteId::kPutFile) {
    co_await put_file(route, authn, std::move(req), std::move(socket), std::move(buffer));
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
  co_await cdp(route, authn, std::move(req), std::move(socket), std::move(buffer));
}

}  // namespace cabin::http_api
