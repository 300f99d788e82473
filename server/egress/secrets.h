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

// Bodies up to this size are read whole where a secret is substituted in them; larger ones pass
// as they are.
inline constexpr size_t kMaxRewrittenBody = 1u << 20;

// Whether `s` is bound to `host` on any port (what a refusal says), and on `port`: a tunnel to a
// host and port any secret is bound to ends in the proxy.
bool bound_to(const Secret& s, const Host& host);
bool bound_to(const Secret& s, const Host& host, uint16_t port);
// Whether the policy's secret `name` is bound to `host` (any port).
bool secret_bound(const Policy& p, std::string_view name, const Host& host);
bool any_secret_bound(const Policy& p, const Host& host, uint16_t port);
// Whether a secret bound to `host` and `port` is substituted in request bodies: only then is a
// body read whole.
bool any_secret_in_body(const Policy& p, const Host& host, uint16_t port);

// How a body's text is written, for a value put into it.
enum class BodyKind { kOpaque, kText, kUrlEncoded, kJson };
BodyKind body_kind(std::string_view content_type);

// The first secret whose placeholder is in `text` and that is not bound to `host` and `port`
// (with `bound_ok`), or any secret whose placeholder is in it (without): its name, or empty.
std::string placeholder_in(const Policy& p, const Host& host, uint16_t port, std::string_view text,
                           bool bound_ok);

// placeholder_in over a whole request: its body, its target, then its fields.
std::string placeholder_in_request(const Policy& p, const Host& host, uint16_t port,
                                   const boost::beast::http::fields& fields,
                                   std::string_view target, std::string_view body, bool bound_ok);
template <typename Header>
std::string placeholder_in_request(const Policy& p, const Host& host, uint16_t port,
                                   const Header& h, std::string_view body, bool bound_ok) {
  return placeholder_in_request(p, host, port, h, h.target(), body, bound_ok);
}

// Where in a request a placeholder stands: a field (named), the target, or the body.
struct Part {
  enum Kind { kField, kTarget, kBody } kind;
  std::string_view field;  // kField: its name
};
// Whether `s`'s placeholder is replaced in `part`: in its own header always, in the target and
// the body only where it says so.
bool substituted_in(const Secret& s, Part part);

// A placeholder of a secret bound to `host` and `port` that stands where it is not replaced
// (another field; the target or body of a secret that does not allow it): why the request is
// refused, naming the fix; else empty. `body` is searched only when it was read.
std::string misplaced_placeholder(const Policy& p, const Host& host, uint16_t port,
                                  const boost::beast::http::fields& fields, std::string_view target,
                                  std::string_view body);

// Finds any of a policy's placeholders in a body that passes in pieces, across their seams,
// holding nothing but the last placeholder's length less one byte.
class PlaceholderScan {
 public:
  explicit PlaceholderScan(const Policy& p) : p_(p) {}
  // The name of the first secret whose placeholder the body so far holds, or empty.
  std::string feed(std::string_view piece);

 private:
  const Policy& p_;
  std::string tail_;  // the end of what came, shorter than a placeholder
};

// Adds `name` to `names` unless it is there (the secrets a request or tunnel used).
void add_name(std::vector<std::string>& names, const std::string& name);

// Replaces each placeholder of a secret bound to `host` and `port` and substituted in `part` in
// `text` by the value, written as `kind` needs it (percent-encoded, JSON-escaped, or as it is);
// adds each secret it used to `used` once.
void replace_placeholders(const Policy& p, const Host& host, uint16_t port, Part part,
                          std::string& text, BodyKind kind, std::vector<std::string>& used);

// A header a bound secret adds to a request that does not carry it: the secret's `format` with
// {value} replaced.
std::string header_value(const Secret& s);

}  // namespace cabin::egress
