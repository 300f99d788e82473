// Route table: turns (method, target) into a typed Route before any handler logic runs.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "common/result.h"

namespace cabin::api {

enum class RouteId {
  kHealthz,
  kInfo,
  kCreateSession,
  kListSessions,
  kGetSession,
  kDeleteSession,
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
  kVnc,  // WebSocket carrying RFB (the live view, vnc-forward)
};

enum class Auth {
  kNone,       // /healthz only
  kApiKey,     // control API
  kCdpToken,   // a `cdp` capability token in ?token=, or the API key
  kViewToken,  // a `view` or `control` capability token in ?token=, or the API key
};

// Routes whose handler takes the connection over (WebSocket upgrades and endless streams).
bool takes_connection(RouteId id);

struct Route {
  RouteId id;
  Auth auth = Auth::kApiKey;
  std::string session_id;
  std::string target_id;
  std::map<std::string, std::string> query;  // decoded
};

inline constexpr size_t kMaxQueryParams = 16;

// Errors: 404 unknown path or invalid id, 405 known path with another method, 400 bad query.
Result<Route> route(std::string_view method, std::string_view target);

// Percent-decoding of one query component; '+' is a space. Fails on bad escapes.
Result<std::string> percent_decode(std::string_view s);

}  // namespace cabin::api
