// A session's egress policy: what its sandbox may reach through cabind's proxy. Parsed once from
// the session spec's "network" object (or a live replacement), never changed afterwards, and
// asked twice per destination: before any DNS (check_host) and for every address a name
// resolves to (check_address). No I/O here.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "server/egress/host.h"
#include "server/egress/upstream.h"

namespace cabin::egress {

enum class Mode { kNone, kAllowlist, kOpen };
std::string_view mode_name(Mode m);
std::optional<Mode> parse_mode(std::string_view s);

struct HostPattern {
  std::string name;       // canonical
  bool wildcard = false;  // "*.name": any name below `name`, at any depth, never `name` itself
  bool matches(std::string_view canonical_name) const;
  std::string to_string() const;
};
// "example.com" or "*.example.com", canonicalised as canonical_host does; IP literals are
// refused (a range is a "cidr").
Result<HostPattern> parse_host_pattern(std::string_view text);

struct Rule {
  // Exactly one of the two.
  std::optional<HostPattern> host;
  std::optional<Cidr> cidr;
  // Allow rules: [80, 443] unless given. Deny rules: every port unless given.
  std::vector<uint16_t> ports;
  std::vector<std::string> methods;  // upper case; empty: every method
  std::string label;                 // how decisions name it: "allow[0]", "deny[2]"
};

// A credential kept by cabind. The sandbox sees only `placeholder`; on HTTPS requests to `hosts`
// on `ports` the proxy puts `format` with {value} replaced into `header`, and replaces the
// placeholder there. In the request target and body only where the secret says so: a host that
// echoes either (a search page, an error page, a redirect) would hand the value back.
struct Secret {
  std::string name;
  std::string value;
  std::vector<HostPattern> hosts;
  std::vector<uint16_t> ports = {443};  // sorted
  std::string header = "Authorization";
  std::string format = "{value}";
  bool in_target = false;   // "substitute": ["target"]
  bool in_body = false;     // "substitute": ["body"]
  std::string placeholder;  // kPlaceholderPrefix and 32 hex digits, made when parsed
};
inline constexpr std::string_view kPlaceholderPrefix = "cabin_secret_";

struct Policy {
  Mode mode = Mode::kNone;
  std::vector<Rule> allow;
  std::vector<Rule> deny;
  std::vector<Secret> secrets;
  // Allowed traffic goes on through this proxy (else the server's, if any).
  std::optional<UpstreamProxy> upstream;
  // The JSON object it was parsed from (empty for one built in code): a restarted cabind parses
  // it again to adopt the session, with the same placeholders.
  std::string source;
};

inline constexpr size_t kMaxRules = 256;  // each of allow and deny
inline constexpr size_t kMaxSecrets = 32;
inline constexpr size_t kMaxSecretValue = 8192;
inline constexpr size_t kMaxPortsPerRule = 64;
inline constexpr size_t kMaxHostsPerSecret = 32;

// `v` is the "network" object, `field` its name in error messages. A secret named as one of
// `previous`'s keeps its placeholder, so that a placeholder the agent already holds still works
// after a live change.
Result<Policy> parse_policy(const nlohmann::json& v, std::string_view field = "network",
                            const Policy* previous = nullptr);
// An allow rule for a range that the operator's boundary keeps closed can never match: 400
// naming the rule and the cabind option that would open it.
Result<void> check_reachable(const Policy& p, const Boundary& b,
                             std::string_view field = "network");

// Why `kind` (always_denied's answer) is closed, and the option that opens `a`.
std::string closed_address_why(std::string_view kind, const IpAddress& a);

// The policy as answered to clients: each secret's name, hosts, header and placeholder, never
// its value.
nlohmann::json policy_json(const Policy& p);

struct Decision {
  bool allowed = false;
  std::string rule;    // "allow[0]", "deny[1]", "mode open", "mode none", "always denied", ""
  std::string reason;  // one line for the log and the refusal
  // A rule that limits methods matched a tunnel, whose requests the proxy cannot see: the
  // decision holds only for requests checked one by one (check_host with their method).
  bool needs_request_check = false;
};

// Stage one, before any DNS. `method` is empty for a tunnel (CONNECT), else the request's.
Decision check_host(const Policy& p, const Boundary& b, const Host& host, uint16_t port,
                    std::string_view method);
// Stage two: for each address an allowed name resolved to. The proxy dials only addresses that
// pass, and exactly the address it checked.
Decision check_address(const Policy& p, const Boundary& b, const IpAddress& a, uint16_t port);

}  // namespace cabin::egress
