// Route table: turns (method, target) into a typed Route before any handler logic runs.
#pragma once

#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/percent.h"
#include "common/result.h"

namespace cabin::api {

enum class RouteId {
  kHealthz,
  kReadyz,   // GET: whether creates are taken
  kMetrics,  // GET /metrics: Prometheus text
  kInfo,
  kCreateSession,
  kListSessions,
  kGetSession,
  kDeleteSession,
  kPatchSession,  // PATCH: the session's timers
  kKeepalive,     // POST /keepalive: the idle time starts again
  kPause,         // POST /pause: freeze the sandbox
  kResume,        // POST /resume
  kFork,          // POST /fork {count}: sessions that continue from this one's browser
  kExec,
  kComputer,     // POST: one action or a batch, any vocabulary
  kScreenshot,   // GET: image bytes
  kLogs,         // GET: the sandbox's newest output lines
  kCdpBrowser,   // WebSocket: the browser target
  kCdpPage,      // WebSocket: /devtools/page/{target}
  kFrames,       // WebSocket: a frame whenever the screen changes
  kFramesMjpeg,  // GET: multipart/x-mixed-replace JPEG stream
  kJsonVersion,
  kJsonList,
  kConsolePage,    // GET /: the web console (static; its API calls carry the key)
  kUiAsset,        // GET /ui/{name}: a built script or stylesheet
  kLivePage,       // GET: the live view page
  kLiveStatus,     // GET: what a live-view token allows, and whether the session runs
  kVnc,            // WebSocket carrying RFB (the live view, vnc-forward)
  kMintToken,      // POST /tokens {scope, ttl_s}
  kRevokeTokens,   // POST /tokens/revoke
  kCreatePreview,  // POST /previews {port, ttl_s}
  kListPreviews,   // GET /previews
  kDeletePreview,  // DELETE /previews/{preview}
  kGetNetwork,     // GET /network: the egress policy in force
  kPutNetwork,     // PUT /network: a new one, live
  kNetworkLog,     // GET /network/log?since=: the egress decisions
  kCreateKey,      // POST /v1/keys: a tenant API key (the admin key only)
  kListKeys,       // GET /v1/keys
  kDeleteKey,      // DELETE /v1/keys/{key}: revokes it
  kCreateProfile,  // POST /v1/profiles {name}: a saved browser profile, empty
  kListProfiles,   // GET /v1/profiles
  kGetProfile,     // GET /v1/profiles/{profile}
  kDeleteProfile,  // DELETE /v1/profiles/{profile}
  kOpenApi,        // GET /openapi.json: the API's OpenAPI document
  kMcp,            // POST /mcp: MCP's Streamable HTTP transport, stateless
  kEvents,         // GET /events: the session's events, a WebSocket or Server-Sent Events
  kControl,        // POST /control {action}: take or release the input lock
  kGetClipboard,   // GET /clipboard: the sandbox's clipboard text
  kPutClipboard,   // PUT /clipboard {text}
  kGetFiles,       // GET /files?path= (a file's bytes, streamed) or ?dir= (a listing)
  kPutFile,        // PUT /files?path=: the body, streamed into the file
  kDeleteFile,     // DELETE /files?path=
  kListDownloads,  // GET /downloads: what the browser downloaded
  kStartRecording,   // POST /recordings {fps, quality, max_duration_s, max_mb}
  kListRecordings,   // GET /recordings
  kGetRecording,     // GET /recordings/{recording}: the video, streamed
  kStopRecording,    // POST /recordings/{recording}/stop
  kDeleteRecording,  // DELETE /recordings/{recording}
};

// What authenticates a route. The API key (Authorization: Bearer) is accepted everywhere but
// kNone; token routes also accept a capability token in ?token= whose scope is one of
// token_scopes(auth).
enum class Auth {
  kNone,          // /healthz and the web UI's static files
  kApiKey,        // control API
  kCdpToken,      // a `cdp` token
  kViewToken,     // a `view` or `control` token: watching
  kControlToken,  // a `control` token: watching and input
};

// The token scopes a route with this auth accepts; empty for kNone and kApiKey.
const std::vector<std::string_view>& token_scopes(Auth auth);

// Routes whose handler takes the connection over (WebSocket upgrades, endless streams, and
// files, whose bodies are streamed: kPutFile's is read by its handler, not before).
bool takes_connection(RouteId id);

struct Route {
  RouteId id;
  Auth auth = Auth::kApiKey;
  std::string session_id;
  std::string target_id;
  std::string asset;  // kUiAsset: a plain file name (valid_asset_name)
  std::string preview_id;
  std::string recording_id;  // api::valid_recording_id
  std::string key_id;                        // kDeleteKey: api::valid_key_id
  std::string profile_id;                    // kGetProfile, kDeleteProfile: api::valid_profile_id
  std::map<std::string, std::string> query;  // decoded
};

inline constexpr size_t kMaxQueryParams = 16;

// One route as the API reference names it: the method and an OpenAPI path template.
struct RouteEntry {
  std::string_view method;
  std::string_view path;
  RouteId id;
};

// Every (method, path) that route() takes. Not used to route: the unit tests hold route() and
// docs/openapi.json to it, so neither can gain or lose a path without the other.
std::span<const RouteEntry> route_table();

// Errors: 404 unknown path or invalid id, 405 known path with another method, 400 bad query.
Result<Route> route(std::string_view method, std::string_view target);

using cabin::percent_decode;
using cabin::percent_encode;

}  // namespace cabin::api
