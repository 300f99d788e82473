#include "server/api/router.h"

#include <vector>

#include "server/api/errors.h"
#include "server/api/ids.h"

namespace cabin::api {
namespace {

Error not_found() { return make_error(Errc::kNotFound, "not_found", "no such endpoint"); }

Error method_not_allowed(std::string_view allowed) {
  return Error{Errc::kMethodNotAllowed, "method_not_allowed",
               "method not allowed; use " + std::string(allowed)};
}

// Splits "/a/b/" into {"a","b"}; a single trailing slash is allowed, other empty segments are not.
bool split_path(std::string_view path, std::vector<std::string_view>& out) {
  if (path.empty() || path[0] != '/') return false;
  path.remove_prefix(1);
  if (!path.empty() && path.back() == '/') path.remove_suffix(1);
  if (path.empty()) return true;
  size_t start = 0;
  while (true) {
    size_t pos = path.find('/', start);
    std::string_view seg = path.substr(start, pos == std::string_view::npos ? pos : pos - start);
    if (seg.empty() || seg == "." || seg == "..") return false;
    out.push_back(seg);
    if (pos == std::string_view::npos) return true;
    start = pos + 1;
  }
}

Result<std::map<std::string, std::string>> parse_query(std::string_view q) {
  std::map<std::string, std::string> out;
  while (!q.empty()) {
    size_t amp = q.find('&');
    std::string_view pair = q.substr(0, amp);
    q = amp == std::string_view::npos ? std::string_view{} : q.substr(amp + 1);
    if (pair.empty()) continue;
    size_t eq = pair.find('=');
    auto key = percent_decode(pair.substr(0, eq));
    auto value = percent_decode(eq == std::string_view::npos ? "" : pair.substr(eq + 1));
    if (!key || !value) {
      return make_error(Errc::kInvalidArgument, "bad_query", "malformed query string");
    }
    if (out.size() >= kMaxQueryParams) {
      return make_error(Errc::kInvalidArgument, "bad_query", "too many query parameters");
    }
    out[*key] = *value;
  }
  return out;
}

}  // namespace

const std::vector<std::string_view>& token_scopes(Auth auth) {
  static const std::vector<std::string_view> none, cdp{"cdp"}, view{"view", "control"},
      control{"control"};
  switch (auth) {
    case Auth::kCdpToken:
      return cdp;
    case Auth::kViewToken:
      return view;
    case Auth::kControlToken:
      return control;
    case Auth::kNone:
    case Auth::kApiKey:
      return none;
  }
  return none;
}

std::span<const RouteEntry> route_table() {
  using enum RouteId;
  static constexpr RouteEntry kTable[] = {
      {"GET", "/healthz", kHealthz},
      {"GET", "/readyz", kReadyz},
      {"GET", "/metrics", kMetrics},
      {"GET", "/openapi.json", kOpenApi},
      {"POST", "/mcp", kMcp},
      {"GET", "/", kConsolePage},
      {"GET", "/ui/{name}", kUiAsset},
      {"GET", "/v1/info", kInfo},
      {"POST", "/v1/keys", kCreateKey},
      {"GET", "/v1/keys", kListKeys},
      {"DELETE", "/v1/keys/{key_id}", kDeleteKey},
      {"POST", "/v1/profiles", kCreateProfile},
      {"GET", "/v1/profiles", kListProfiles},
      {"GET", "/v1/profiles/{profile_id}", kGetProfile},
      {"DELETE", "/v1/profiles/{profile_id}", kDeleteProfile},
      {"POST", "/v1/sessions", kCreateSession},
      {"GET", "/v1/sessions", kListSessions},
      {"GET", "/v1/sessions/{session_id}", kGetSession},
      {"PATCH", "/v1/sessions/{session_id}", kPatchSession},
      {"DELETE", "/v1/sessions/{session_id}", kDeleteSession},
      {"POST", "/v1/sessions/{session_id}/keepalive", kKeepalive},
      {"POST", "/v1/sessions/{session_id}/pause", kPause},
      {"POST", "/v1/sessions/{session_id}/resume", kResume},
      {"POST", "/v1/sessions/{session_id}/fork", kFork},
      {"POST", "/v1/sessions/{session_id}/exec", kExec},
      {"POST", "/v1/sessions/{session_id}/computer", kComputer},
      {"GET", "/v1/sessions/{session_id}/screenshot", kScreenshot},
      {"GET", "/v1/sessions/{session_id}/logs", kLogs},
      {"GET", "/v1/sessions/{session_id}/network", kGetNetwork},
      {"PUT", "/v1/sessions/{session_id}/network", kPutNetwork},
      {"GET", "/v1/sessions/{session_id}/network/log", kNetworkLog},
      {"GET", "/v1/sessions/{session_id}/cdp", kCdpBrowser},
      {"GET", "/v1/sessions/{session_id}/devtools/page/{target_id}", kCdpPage},
      {"GET", "/v1/sessions/{session_id}/devtools/browser/{target_id}", kCdpBrowser},
      {"GET", "/v1/sessions/{session_id}/json", kJsonList},
      {"GET", "/v1/sessions/{session_id}/json/list", kJsonList},
      {"GET", "/v1/sessions/{session_id}/json/version", kJsonVersion},
      {"GET", "/v1/sessions/{session_id}/frames", kFrames},
      {"GET", "/v1/sessions/{session_id}/frames.mjpeg", kFramesMjpeg},
      {"GET", "/v1/sessions/{session_id}/vnc", kVnc},
      {"GET", "/v1/sessions/{session_id}/live", kLivePage},
      {"GET", "/v1/sessions/{session_id}/live/status", kLiveStatus},
      {"POST", "/v1/sessions/{session_id}/tokens", kMintToken},
      {"POST", "/v1/sessions/{session_id}/tokens/revoke", kRevokeTokens},
      {"POST", "/v1/sessions/{session_id}/previews", kCreatePreview},
      {"GET", "/v1/sessions/{session_id}/previews", kListPreviews},
      {"DELETE", "/v1/sessions/{session_id}/previews/{preview_id}", kDeletePreview},
      {"GET", "/v1/sessions/{session_id}/events", kEvents},
      {"POST", "/v1/sessions/{session_id}/control", kControl},
      {"GET", "/v1/sessions/{session_id}/clipboard", kGetClipboard},
      {"PUT", "/v1/sessions/{session_id}/clipboard", kPutClipboard},
      {"GET", "/v1/sessions/{session_id}/files", kGetFiles},
      {"PUT", "/v1/sessions/{session_id}/files", kPutFile},
      {"DELETE", "/v1/sessions/{session_id}/files", kDeleteFile},
      {"GET", "/v1/sessions/{session_id}/downloads", kListDownloads},
      {"POST", "/v1/sessions/{session_id}/recordings", kStartRecording},
      {"GET", "/v1/sessions/{session_id}/recordings", kListRecordings},
      {"GET", "/v1/sessions/{session_id}/recordings/{recording_id}", kGetRecording},
      {"DELETE", "/v1/sessions/{session_id}/recordings/{recording_id}", kDeleteRecording},
      {"POST", "/v1/sessions/{session_id}/recordings/{recording_id}/stop", kStopRecording},
  };
  return kTable;
}

bool takes_connection(RouteId id) {
  return id == RouteId::kCdpBrowser || id == RouteId::kCdpPage || id == RouteId::kFrames ||
         id == RouteId::kFramesMjpeg || id == RouteId::kVnc || id == RouteId::kEvents ||
         id == RouteId::kGetFiles || id == RouteId::kPutFile || id == RouteId::kGetRecording;
}

Result<Route> route(std::string_view method, std::string_view target) {
  size_t qpos = target.find('?');
  std::string_view path = target.substr(0, qpos);
  std::vector<std::string_view> seg;
  // Paths are matched raw: a '%' can never form a valid id or a known segment.
  if (!split_path(path, seg)) return not_found();

  Route r{RouteId::kHealthz};
  if (qpos != std::string_view::npos) {
    auto q = parse_query(target.substr(qpos + 1));
    if (!q) return q.error();
    r.query = std::move(*q);
  }
  auto want = [&](std::string_view m, RouteId id, Auth auth) -> Result<Route> {
    if (method != m) return method_not_allowed(m);
    r.id = id;
    r.auth = auth;
    return r;
  };

  const size_t n = seg.size();
  if (n == 1 && seg[0] == "healthz") return want("GET", RouteId::kHealthz, Auth::kNone);
  if (n == 1 && seg[0] == "readyz") return want("GET", RouteId::kReadyz, Auth::kNone);
  if (n == 1 && seg[0] == "metrics") return want("GET", RouteId::kMetrics, Auth::kApiKey);
  if (n == 1 && seg[0] == "openapi.json") return want("GET", RouteId::kOpenApi, Auth::kApiKey);
  if (n == 1 && seg[0] == "mcp") return want("POST", RouteId::kMcp, Auth::kApiKey);
  if (n == 0) return want("GET", RouteId::kConsolePage, Auth::kNone);
  if (seg[0] == "ui") {
    if (n != 2 || !valid_asset_name(seg[1])) return not_found();
    r.asset = std::string(seg[1]);
    return want("GET", RouteId::kUiAsset, Auth::kNone);
  }
  if (n < 2 || seg[0] != "v1") return not_found();
  if (n == 2 && seg[1] == "info") return want("GET", RouteId::kInfo, Auth::kApiKey);
  if (seg[1] == "keys") {
    if (n == 2) {
      if (method == "POST") return want("POST", RouteId::kCreateKey, Auth::kApiKey);
      if (method == "GET") return want("GET", RouteId::kListKeys, Auth::kApiKey);
      return method_not_allowed("GET or POST");
    }
    if (n == 3 && valid_key_id(seg[2])) {
      r.key_id = std::string(seg[2]);
      return want("DELETE", RouteId::kDeleteKey, Auth::kApiKey);
    }
    return errors::key_not_found();
  }
  if (seg[1] == "profiles") {
    if (n == 2) {
      if (method == "POST") return want("POST", RouteId::kCreateProfile, Auth::kApiKey);
      if (method == "GET") return want("GET", RouteId::kListProfiles, Auth::kApiKey);
      return method_not_allowed("GET or POST");
    }
    if (n == 3 && valid_profile_id(seg[2])) {
      r.profile_id = std::string(seg[2]);
      if (method == "GET") return want("GET", RouteId::kGetProfile, Auth::kApiKey);
      if (method == "DELETE") return want("DELETE", RouteId::kDeleteProfile, Auth::kApiKey);
      return method_not_allowed("GET or DELETE");
    }
    return errors::profile_not_found();
  }
  if (seg[1] != "sessions") return not_found();
  if (n == 2) {
    if (method == "POST") return want("POST", RouteId::kCreateSession, Auth::kApiKey);
    if (method == "GET") return want("GET", RouteId::kListSessions, Auth::kApiKey);
    return method_not_allowed("GET or POST");
  }
  if (!valid_session_id(seg[2])) {
    return errors::session_not_found();
  }
  r.session_id = std::string(seg[2]);
  if (n == 3) {
    if (method == "GET") return want("GET", RouteId::kGetSession, Auth::kApiKey);
    if (method == "DELETE") return want("DELETE", RouteId::kDeleteSession, Auth::kApiKey);
    if (method == "PATCH") return want("PATCH", RouteId::kPatchSession, Auth::kApiKey);
    return method_not_allowed("GET, PATCH or DELETE");
  }
  std::string_view sub = seg[3];
  if (n == 4 && sub == "keepalive") return want("POST", RouteId::kKeepalive, Auth::kApiKey);
  if (n == 4 && sub == "pause") return want("POST", RouteId::kPause, Auth::kApiKey);
  if (n == 4 && sub == "resume") return want("POST", RouteId::kResume, Auth::kApiKey);
  if (n == 4 && sub == "fork") return want("POST", RouteId::kFork, Auth::kApiKey);
  if (n == 4 && sub == "exec") return want("POST", RouteId::kExec, Auth::kApiKey);
  if (n == 4 && sub == "computer") return want("POST", RouteId::kComputer, Auth::kApiKey);
  if (n == 4 && sub == "screenshot") return want("GET", RouteId::kScreenshot, Auth::kApiKey);
  if (n == 4 && sub == "logs") return want("GET", RouteId::kLogs, Auth::kApiKey);
  if (sub == "network") {
    if (n == 4) {
      if (method == "GET") return want("GET", RouteId::kGetNetwork, Auth::kApiKey);
      if (method == "PUT") return want("PUT", RouteId::kPutNetwork, Auth::kApiKey);
      return method_not_allowed("GET or PUT");
    }
    if (n == 5 && seg[4] == "log") return want("GET", RouteId::kNetworkLog, Auth::kApiKey);
    return not_found();
  }
  if (n == 4 && sub == "cdp") return want("GET", RouteId::kCdpBrowser, Auth::kCdpToken);
  if (n == 4 && sub == "frames") return want("GET", RouteId::kFrames, Auth::kViewToken);
  if (n == 4 && sub == "frames.mjpeg") {
    return want("GET", RouteId::kFramesMjpeg, Auth::kViewToken);
  }
  if (n == 4 && sub == "vnc") return want("GET", RouteId::kVnc, Auth::kViewToken);
  if (n == 4 && sub == "events") return want("GET", RouteId::kEvents, Auth::kViewToken);
  if (n == 4 && sub == "control") return want("POST", RouteId::kControl, Auth::kControlToken);
  if (n == 4 && sub == "clipboard") {
    if (method == "GET") return want("GET", RouteId::kGetClipboard, Auth::kApiKey);
    if (method == "PUT") return want("PUT", RouteId::kPutClipboard, Auth::kApiKey);
    return method_not_allowed("GET or PUT");
  }
  if (n == 4 && sub == "files") {
    if (method == "GET") return want("GET", RouteId::kGetFiles, Auth::kApiKey);
    if (method == "PUT") return want("PUT", RouteId::kPutFile, Auth::kApiKey);
    if (method == "DELETE") return want("DELETE", RouteId::kDeleteFile, Auth::kApiKey);
    return method_not_allowed("GET, PUT or DELETE");
  }
  if (n == 4 && sub == "downloads") return want("GET", RouteId::kListDownloads, Auth::kApiKey);
  if (sub == "live") {
    if (n == 4) return want("GET", RouteId::kLivePage, Auth::kViewToken);
    if (n == 5 && seg[4] == "status") return want("GET", RouteId::kLiveStatus, Auth::kViewToken);
    return not_found();
  }
  if (sub == "tokens") {
    if (n == 4) return want("POST", RouteId::kMintToken, Auth::kApiKey);
    if (n == 5 && seg[4] == "revoke") return want("POST", RouteId::kRevokeTokens, Auth::kApiKey);
    return not_found();
  }
  if (sub == "previews") {
    if (n == 4) {
      if (method == "POST") return want("POST", RouteId::kCreatePreview, Auth::kApiKey);
      if (method == "GET") return want("GET", RouteId::kListPreviews, Auth::kApiKey);
      return method_not_allowed("GET or POST");
    }
    if (n == 5 && valid_preview_id(seg[4])) {
      r.preview_id = std::string(seg[4]);
      return want("DELETE", RouteId::kDeletePreview, Auth::kApiKey);
    }
    return make_error(Errc::kNotFound, "preview_not_found", "no preview with that id");
  }
  if (sub == "recordings") {
    if (n == 4) {
      if (method == "POST") return want("POST", RouteId::kStartRecording, Auth::kApiKey);
      if (method == "GET") return want("GET", RouteId::kListRecordings, Auth::kApiKey);
      return method_not_allowed("GET or POST");
    }
    if ((n == 5 || n == 6) && valid_recording_id(seg[4])) {
      r.recording_id = std::string(seg[4]);
      if (n == 6 && seg[5] == "stop") return want("POST", RouteId::kStopRecording, Auth::kApiKey);
      if (n == 6) return not_found();
      if (method == "GET") return want("GET", RouteId::kGetRecording, Auth::kApiKey);
      if (method == "DELETE") return want("DELETE", RouteId::kDeleteRecording, Auth::kApiKey);
      return method_not_allowed("GET or DELETE");
    }
    return errors::recording_not_found();
  }
  if (sub == "json") {
    if (n == 4 || (n == 5 && seg[4] == "list")) {
      return want("GET", RouteId::kJsonList, Auth::kCdpToken);
    }
    if (n == 5 && seg[4] == "version") return want("GET", RouteId::kJsonVersion, Auth::kCdpToken);
    return not_found();
  }
  if (sub == "devtools" && n == 6 && (seg[4] == "page" || seg[4] == "browser")) {
    if (!valid_target_id(seg[5])) return not_found();
    if (seg[4] == "browser") return want("GET", RouteId::kCdpBrowser, Auth::kCdpToken);
    r.target_id = std::string(seg[5]);
    return want("GET", RouteId::kCdpPage, Auth::kCdpToken);
  }
  return not_found();
}

}  // namespace cabin::api
