// Preview request parsing: which preview a request addresses (by path prefix or by host), its
// target checked and canonicalised, Cabin's cookie and token taken out before anything is
// forwarded, and the upstream's Location and Set-Cookie paths mapped back under the prefix.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace cabin::preview {

inline constexpr std::string_view kPathPrefix = "/preview/";
inline constexpr std::string_view kCookieName = "cabin_preview";
// The cookie's name on a host-based preview under TLS: browsers refuse it with a Domain, without
// Secure or with a Path other than "/", so a sibling preview cannot set one over it.
inline constexpr std::string_view kHostCookieName = "__Host-cabin_preview";
// Preview cookies of one request that are tried: a sibling preview can plant a few of the plain
// name beside the real one; each try costs an HMAC.
inline constexpr size_t kMaxCookieTries = 8;
inline constexpr std::string_view kTokenParam = "cabin_token";
inline constexpr size_t kMaxTarget = 8 * 1024;

// "Host" header → lower-case host name without the port; nullopt when it is not a plain
// host[:port] (reg-name, IPv4 or [IPv6]).
std::optional<std::string> host_name(std::string_view host_header);
bool is_ip_literal(std::string_view host);

// Host-based address: p-<port>-<session suffix>.<domain>.
struct HostAddress {
  int port = 0;
  std::string session_id;  // "ses_" + suffix
};
std::optional<HostAddress> parse_preview_host(std::string_view host, std::string_view domain);
std::string preview_host(int port, std::string_view session_id, std::string_view domain);

// An origin-form target checked for what must not pass the proxy: it starts with '/', has no
// control bytes, spaces, backslashes or fragments, no bad percent escapes, no dot segments and
// no encoded '/' or NUL in the path (decoded or not), and is at most kMaxTarget bytes.
Result<void> check_target(std::string_view target);

// "/preview/<id>/rest?q" → {id, "/rest?q"}; "/preview/<id>" → {id, "", bare}. Checks the target.
struct PathAddress {
  std::string preview_id;
  std::string upstream_target;  // what the app sees; empty when bare
  bool bare = false;            // no '/' after the id: answered with a redirect to add it
};
Result<PathAddress> parse_preview_path(std::string_view target);

// Removes every `name=` parameter from the target's query; returns its (last) decoded value.
struct TokenSplit {
  std::optional<std::string> token;
  std::string target;  // without the parameter (and without a '?' left empty)
};
TokenSplit take_token(std::string_view target, std::string_view name = kTokenParam);

// The token redirect's target: `target` with its leading slashes collapsed to one, so that
// "//evil.example/" stays a path on the preview's own origin.
std::string redirect_target(std::string_view target);

// Removes every pair of Cabin's cookie names (kCookieName and kHostCookieName) from a Cookie
// header value; the values of the cookie `accepted` are appended to `found`, in order, while it
// holds fewer than kMaxCookieTries. Returns the header without them (empty: drop the header).
std::string strip_cookie(std::string_view header, std::string_view accepted,
                         std::vector<std::string>* found);

// True when a Set-Cookie header value sets the cookie `name`.
bool sets_cookie(std::string_view set_cookie, std::string_view name);

// Set-Cookie without its Domain attributes: the cookie stays on the host that set it, and an app
// cannot plant cookies on its sibling previews or on cabind's parent domain.
std::string drop_cookie_domain(std::string_view set_cookie);

// Whether an Origin header names the preview's own origin: `scheme` "://" the Host header, both
// compared without case and without the scheme's default port.
bool same_origin(std::string_view origin, std::string_view scheme, std::string_view host_header);

// Path-based previews live under `prefix` ("/preview/<id>"): a Location pointing at the app's
// own root ("/x", or http://127.0.0.1:<port>/x, http://localhost:<port>/x) is mapped under it;
// other locations pass unchanged.
std::string rewrite_location(std::string_view location, std::string_view prefix, int port);
// Set-Cookie "Path=/x" → "Path=<prefix>/x"; a cookie without Path gets the prefix.
std::string rewrite_cookie_path(std::string_view set_cookie, std::string_view prefix);

}  // namespace cabin::preview
