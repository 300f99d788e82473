// DevTools HTTP discovery (/json/version, /json/list) rewritten so every URL a client sees points
// at cabind, never at the browser inside the sandbox.
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"

namespace cabin::cdp {

// Discovery answers from the guest larger than this are refused.
inline constexpr size_t kMaxDiscoveryBody = 4 * 1024 * 1024;

// browser_ws_url: the full cdp URL clients should use (with its token).
Result<std::string> rewrite_version(std::string_view guest_body, const std::string& browser_ws_url);

// page_ws_prefix: "ws://host/v1/sessions/<id>/devtools/page/"; token_query: "?token=..." or "".
// Only string fields Chromium documents are copied; entries with an invalid id are dropped.
Result<std::string> rewrite_list(std::string_view guest_body, const std::string& page_ws_prefix,
                                 const std::string& token_query);

}  // namespace cabin::cdp
