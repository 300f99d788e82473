// Secrets on their way out: which of a session's secrets a host is bound to, where their
// placeholders appear, and the request text with each bound placeholder replaced by its value.
// No I/O here; the proxy reads and writes the messages.
#pragma once

#include <boost/beast/http/fields.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "server/egress/host.h"
#include "server/egress/policy.h"

namespace cabin::egress {

// Bodies up to this size are searched and rewritten; larger ones pass as they are.
inline constexpr size_t kMaxRewrittenBody = 1u << 20;

bool bound_to(const Secret& s, const Host& host);
// Whether the policy's secret `name` is bound to `host`.
bool secret_bound(const Policy& p, std::string_view name, const Host& host);
// Whether any of the policy's secrets is bound to `host`: its tunnels are intercepted.
bool any_secret_bound(const Policy& p, const Host& host);

// How a body's text is written, for a value put into it.
enum class BodyKind { kOpaque, kText, kUrlEncoded, kJson };
BodyKind body_kind(std::string_view content_type);

// The first secret whose placeholder is in `text` and that is not bound to `host` (with
// `bound_ok`), or any secret whose placeholder is in it (without): its name, or empty.
std::string placeholder_in(const Policy& p, const Host& host, std::string_view text, bool bound_ok);

// placeholder_in over a whole request: its body, its target, then its fields.
std::string placeholder_in_request(const Policy& p, const Host& host,
                                   const boost::beast::http::fields& fields,
                                   std::string_view target, std::string_view body, bool bound_ok);
template <typename Header>
std::string placeholder_in_request(const Policy& p, const Host& host, const Header& h,
                                   std::string_view body, bool bound_ok) {
  return placeholder_in_request(p, host, h, h.target(), body, bound_ok);
}

// Adds `name` to `names` unless it is there (the secrets a request or tunnel used).
void add_name(std::vector<std::string>& names, const std::string& name);

// Replaces each placeholder of a secret bound to `host` in `text` by the value, written as
// `kind` needs it (percent-encoded, JSON-escaped, or as it is); adds each secret it used to
// `used` once.
void replace_placeholders(const Policy& p, const Host& host, std::string& text, BodyKind kind,
                          std::vector<std::string>& used);

// A header a bound secret adds to a request that does not carry it: the secret's `format` with
// {value} replaced.
std::string header_value(const Secret& s);

}  // namespace cabin::egress
