#include "server/egress/policy.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <tuple>

#include "common/crypto.h"
#include "common/json_fields.h"
#include "server/egress/proxy_request.h"

namespace cabin::egress {
namespace {

using nlohmann::json;

const std::vector<uint16_t> kDefaultAllowPorts = {80, 443};

Result<std::vector<uint16_t>> read_ports(const json& v, const std::string& field) {
  if (!v.is_array() || v.empty() || v.size() > kMaxPortsPerRule) {
    return invalid_field(field,
                         "must be an array of 1 to " + std::to_string(kMaxPortsPerRule) + " ports");
  }
  std::vector<uint16_t> out;
  for (size_t i = 0; i < v.size(); ++i) {
    auto n = read_int(v[i], field + "[" + std::to_string(i) + "]", 1, 65535);
    if (!n) return n.error();
    out.push_back(static_cast<uint16_t>(*n));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

Result<std::vector<std::string>> read_methods(const json& v, const std::string& field) {
  if (!v.is_array() || v.empty() || v.size() > 16) {
    return invalid_field(field, "must be an array of 1 to 16 methods");
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string f = field + "[" + std::to_string(i) + "]";
    auto s = read_string(v[i], f, 32);
    if (!s) return s.error();
    if (s->empty() || !std::all_of(s->begin(), s->end(), is_token_char)) {
      return invalid_field(f, "must be an HTTP method");
    }
    std::string m = *s;
    for (char& c : m) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (m == "CONNECT")
      return invalid_field(f, "CONNECT is how tunnels open, not a method to allow");
    out.push_back(std::move(m));
  }
  return out;
}

Result<Rule> read_rule(const json& v, const std::string& field, bool allow) {
  if (!v.is_object()) return invalid_field(field, "must be an object with \"host\" or \"cidr\"");
  if (auto r = reject_unknown(v, {"host", "cidr", "ports", "methods"}, field + "."); !r) {
    return r.error();
  }
  Rule rule;
  const auto host = v.find("host"), cidr = v.find("cidr");
  if ((host == v.end()) == (cidr == v.end())) {
    return invalid_field(field, "needs exactly one of \"host\" and \"cidr\"");
  }
  if (host != v.end()) {
    auto s = read_string(*host, field + ".host", kMaxHostText);
    if (!s) return s.error();
    auto p = parse_host_pattern(*s);
    if (!p) return invalid_field(field + ".host", p.error().message);
    rule.host = std::move(*p);
  } else {
    auto s = read_string(*cidr, field + ".cidr", 64);
    if (!s) return s.error();
    auto c = parse_cidr(*s);
    if (!c) return invalid_field(field + ".cidr", c.error().message);
    rule.cidr = *c;
  }
  if (auto it = v.find("ports"); it != v.end()) {
    auto p = read_ports(*it, field + ".ports");
    if (!p) return p.error();
    rule.ports = std::move(*p);
  } else if (allow) {
    rule.ports = kDefaultAllowPorts;
  }
  if (auto it = v.find("methods"); it != v.end()) {
    auto m = read_methods(*it, field + ".methods");
    if (!m) return m.error();
    rule.methods = std::move(*m);
  }
  return rule;
}

Result<Secret> read_secret(const json& v, const std::string& field) {
  if (!v.is_object()) return invalid_field(field, "must be an object {name, value, hosts}");
  if (auto r = reject_unknown(
          v, {"name", "value", "hosts", "ports", "header", "format", "substitute"}, field + ".");
      !r) {
    return r.error();
  }
  Secret s;
  for (const char* required : {"name", "value", "hosts"}) {
    if (!v.contains(required)) return invalid_field(field + "." + required, "is required");
  }
  auto name = read_string(v["name"], field + ".name", 64);
  if (!name) return name.error();
  const bool name_ok = !name->empty() && std::all_of(name->begin(), name->end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
  if (!name_ok) return invalid_field(field + ".name", "must be letters, digits, '_' or '-'");
  s.name = *name;
  auto value = read_string(v["value"], field + ".value", kMaxSecretValue);
  if (!value) return value.error();
  // The value goes into a header line: no control bytes.
  const bool value_ok = !value->empty() && std::none_of(value->begin(), value->end(), [](char c) {
    return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
  });
  if (!value_ok) return invalid_field(field + ".value", "must be non-empty, without control bytes");
  s.value = *value;
  const json& hosts = v["hosts"];
  if (!hosts.is_array() || hosts.empty() || hosts.size() > kMaxHostsPerSecret) {
    return invalid_field(field + ".hosts", "must be an array of 1 to " +
                                               std::to_string(kMaxHostsPerSecret) + " hosts");
  }
  for (size_t i = 0; i < hosts.size(); ++i) {
    const std::string f = field + ".hosts[" + std::to_string(i) + "]";
    auto h = read_string(hosts[i], f, kMaxHostText);
    if (!h) return h.error();
    auto p = parse_host_pattern(*h);
    if (!p) return invalid_field(f, p.error().message);
    s.hosts.push_back(std::move(*p));
  }
  if (auto it = v.find("ports"); it != v.end()) {
    auto p = read_ports(*it, field + ".ports");
    if (!p) return p.error();
    s.ports = std::move(*p);
  }
  if (auto it = v.find("substitute"); it != v.end()) {
    const std::string f = field + ".substitute";
    if (!it->is_array() || it->size() > 2) {
      return invalid_field(f, "must be an array of \"target\" and \"body\" (the header is always)");
    }
    for (size_t i = 0; i < it->size(); ++i) {
      const json& part = (*it)[i];
      if (part == "target") {
        s.in_target = true;
      } else if (part == "body") {
        s.in_body = true;
      } else {
        return invalid_field(f + "[" + std::to_string(i) + "]",
                             "must be \"target\" or \"body\" (the header is always substituted)");
      }
    }
  }
  if (auto it = v.find("header"); it != v.end()) {
    auto h = read_string(*it, field + ".header", 64);
    if (!h) return h.error();
    if (h->empty() || !std::all_of(h->begin(), h->end(), is_token_char)) {
      return invalid_field(field + ".header", "must be a header name");
    }
    s.header = *h;
  }
  if (auto it = v.find("format"); it != v.end()) {
    auto f = read_string(*it, field + ".format", 256);
    if (!f) return f.error();
    if (f->find("{value}") == std::string::npos) {
      return invalid_field(field + ".format", "must hold {value}");
    }
    if (std::any_of(f->begin(), f->end(),
                    [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; })) {
      return invalid_field(field + ".format", "must not hold control bytes");
    }
    s.format = *f;
  }
  return s;
}

bool port_matches(const Rule& r, uint16_t port) {
  return r.ports.empty() || std::binary_search(r.ports.begin(), r.ports.end(), port);
}

bool host_matches(const Rule& r, const Host& h) {
  if (h.is_ip()) return r.cidr && r.cidr->contains(*h.ip);
  return r.host && r.host->matches(h.name);
}

// A rule's methods against a request's (empty: a tunnel, whose methods cannot be seen).
enum class MethodMatch { kYes, kNo, kUnknown };
MethodMatch method_matches(const Rule& r, std::string_view method) {
  if (r.methods.empty()) return MethodMatch::kYes;
  if (method.empty()) return MethodMatch::kUnknown;
  return std::find(r.methods.begin(), r.methods.end(), method) != r.methods.end()
             ? MethodMatch::kYes
             : MethodMatch::kNo;
}

Decision deny(std::string rule, std::string reason) {
  Decision d;
  d.rule = std::move(rule);
  d.reason = std::move(reason);
  return d;
}

std::string where(const Host& h, uint16_t port) {
  return h.to_string() + ":" + std::to_string(port);
}

json rule_json(const Rule& r) {
  json j = json::object();
  if (r.host) j["host"] = r.host->to_string();
  if (r.cidr) j["cidr"] = r.cidr->to_string();
  if (!r.ports.empty()) j["ports"] = r.ports;
  if (!r.methods.empty()) j["methods"] = r.methods;
  return j;
}

}  // namespace

std::string_view mode_name(Mode m) {
  switch (m) {
    case Mode::kNone:
      return "none";
    case Mode::kAllowlist:
      return "allowlist";
    case Mode::kOpen:
      return "open";
  }
  return "none";
}

std::optional<Mode> parse_mode(std::string_view s) {
  for (Mode m : {Mode::kNone, Mode::kAllowlist, Mode::kOpen}) {
    if (s == mode_name(m)) return m;
  }
  return std::nullopt;
}

bool HostPattern::matches(std::string_view n) const {
  if (!wildcard) return n == name;
  return n.size() > name.size() + 1 && n.substr(n.size() - name.size()) == name &&
         n[n.size() - name.size() - 1] == '.';
}

std::string HostPattern::to_string() const { return wildcard ? "*." + name : name; }

Result<HostPattern> parse_host_pattern(std::string_view text) {
  HostPattern p;
  if (text.substr(0, 2) == "*.") {
    p.wildcard = true;
    text.remove_prefix(2);
  }
  if (text.find('*') != std::string_view::npos) {
    return make_error(Errc::kInvalidArgument, "invalid_host",
                      "'*' may only be the whole leftmost label, as in *.example.com");
  }
  auto h = canonical_host(text);
  if (!h) return h.error();
  if (h->is_ip()) {
    return make_error(Errc::kInvalidArgument, "invalid_host",
                      "an IP address is matched by a \"cidr\" rule, not a host");
  }
  p.name = std::move(h->name);
  return p;
}

Result<Policy> parse_policy(const json& v, std::string_view field_name, const Policy* previous) {
  const std::string field(field_name);
  if (!v.is_object()) return invalid_field(field, "must be an object {mode, allow, deny, secrets}");
  if (auto r =
          reject_unknown(v, {"mode", "allow", "deny", "secrets", "upstream_proxy"}, field + ".");
      !r) {
    return r.error();
  }
  Policy p;
  auto mode_it = v.find("mode");
  if (mode_it == v.end()) return invalid_field(field + ".mode", "is required");
  auto mode_text = read_string(*mode_it, field + ".mode", 16);
  if (!mode_text) return mode_text.error();
  auto mode = parse_mode(*mode_text);
  if (!mode) return invalid_field(field + ".mode", "must be none, allowlist or open");
  p.mode = *mode;
  for (auto [key, out, allow] :
       {std::tuple{"allow", &p.allow, true}, std::tuple{"deny", &p.deny, false}}) {
    auto it = v.find(key);
    if (it == v.end()) continue;
    const std::string f = field + "." + key;
    if (!it->is_array() || it->size() > kMaxRules) {
      return invalid_field(f,
                           "must be an array of at most " + std::to_string(kMaxRules) + " rules");
    }
    for (size_t i = 0; i < it->size(); ++i) {
      const std::string label = std::string(key) + "[" + std::to_string(i) + "]";
      auto r = read_rule((*it)[i], field + "." + label, allow);
      if (!r) return r.error();
      r->label = label;
      out->push_back(std::move(*r));
    }
  }
  if (p.mode != Mode::kAllowlist && !p.allow.empty()) {
    return invalid_field(field + ".allow", "only an allowlist has allow rules");
  }
  if (auto it = v.find("upstream_proxy"); it != v.end()) {
    auto text = read_string(*it, field + ".upstream_proxy", kMaxUpstreamUrl);
    if (!text) return text.error();
    auto up = parse_upstream_proxy(*text);
    if (!up) return invalid_field(field + ".upstream_proxy", up.error().message);
    p.upstream = std::move(*up);
  }
  if (auto it = v.find("secrets"); it != v.end()) {
    const std::string f = field + ".secrets";
    if (!it->is_array() || it->size() > kMaxSecrets) {
      return invalid_field(
          f, "must be an array of at most " + std::to_string(kMaxSecrets) + " secrets");
    }
    for (size_t i = 0; i < it->size(); ++i) {
      auto s = read_secret((*it)[i], f + "[" + std::to_string(i) + "]");
      if (!s) return s.error();
      for (const auto& other : p.secrets) {
        if (other.name == s->name) {
          return invalid_field(f + "[" + std::to_string(i) + "].name", "is used twice");
        }
      }
      if (previous) {
        for (const auto& old : previous->secrets) {
          if (old.name == s->name) s->placeholder = old.placeholder;
        }
      }
      if (s->placeholder.empty()) s->placeholder = std::string(kPlaceholderPrefix) + random_hex(16);
      p.secrets.push_back(std::move(*s));
    }
  }
  p.source = v.dump();
  return p;
}

json policy_json(const Policy& p) {
  json j = {{"mode", mode_name(p.mode)},
            {"allow", json::array()},
            {"deny", json::array()},
            {"secrets", json::array()}};
  if (p.upstream) j["upstream_proxy"] = p.upstream->to_string();  // never its credentials
  for (const auto& r : p.allow) j["allow"].push_back(rule_json(r));
  for (const auto& r : p.deny) j["deny"].push_back(rule_json(r));
  for (const auto& s : p.secrets) {
    json hosts = json::array();
    for (const auto& h : s.hosts) hosts.push_back(h.to_string());
    json substitute = json::array();
    if (s.in_target) substitute.push_back("target");
    if (s.in_body) substitute.push_back("body");
    j["secrets"].push_back({{"name", s.name},
                            {"placeholder", s.placeholder},
                            {"hosts", std::move(hosts)},
                            {"ports", s.ports},
                            {"header", s.header},
                            {"format", s.format},
                            {"substitute", std::move(substitute)}});
  }
  return j;
}

namespace {

// The last address of a range.
IpAddress last_of(const Cidr& c) {
  if (c.base.is_v4()) {
    const uint32_t base = c.base.to_v4().to_uint();
    const uint32_t host = c.prefix >= 32 ? 0 : (0xffffffffu >> c.prefix);
    return net::ip::address_v4(base | host);
  }
  auto bytes = c.base.to_v6().to_bytes();
  for (int bit = c.prefix; bit < 128; ++bit)
    bytes[bit / 8] |= static_cast<uint8_t>(0x80 >> (bit % 8));
  return net::ip::address_v6(bytes);
}

bool overlaps(const Cidr& a, const Cidr& b) { return a.contains(b.base) || b.contains(a.base); }

}  // namespace

std::string closed_address_why(std::string_view kind, const IpAddress& a) {
  const std::string one = a.to_string() + (a.is_v4() ? "/32" : "/128");
  if (kind == "host address") {
    return "an address of cabind's own host, which sessions reach only when cabind is started "
           "with --egress-allow-host-cidr " +
           one + " (docs/egress.md)";
  }
  const std::string article =
      !kind.empty() && std::string_view("aeiou").find(kind.front()) != std::string_view::npos
          ? "an "
          : "a ";
  return article + std::string(kind) +
         " address, which sessions reach only when cabind is "
         "started with " +
         (opened_for_host(kind) ? "--egress-allow-host-cidr " : "--egress-allow-cidr ") + one +
         " (docs/egress.md)";
}

Result<void> check_reachable(const Policy& p, const Boundary& b, std::string_view field) {
  if (p.mode != Mode::kAllowlist) return {};
  for (size_t i = 0; i < p.allow.size(); ++i) {
    const auto& r = p.allow[i];
    if (!r.cidr) continue;
    const Cidr& c = *r.cidr;
    const auto first = always_denied(c.base, b);
    const auto last = always_denied(last_of(c), b);
    if (first.empty() || first != last) continue;
    const auto overlapped = [&](const std::vector<Cidr>& opened) {
      return std::any_of(opened.begin(), opened.end(),
                         [&](const Cidr& o) { return overlaps(o, c); });
    };
    if (overlapped(b.open_cidrs) || overlapped(b.open_host_cidrs)) continue;
    const std::string flag =
        opened_for_host(first) ? "--egress-allow-host-cidr" : "--egress-allow-cidr";
    return invalid_request(std::string(field) + ".allow[" + std::to_string(i) +
                           "]: " + c.to_string() + " can never match: it is " +
                           (first == "host address" ? "cabind's own host" : std::string(first)) +
                           " space, which this cabind keeps closed to every session; start cabind "
                           "with " +
                           flag + " " + c.to_string() +
                           " to open it (docs/egress.md, \"A server on your own machine\")");
  }
  return {};
}

Decision check_host(const Policy& p, const Boundary& b, const Host& host, uint16_t port,
                    std::string_view method) {
  if (p.mode == Mode::kNone) return deny("mode none", "the session has no network access");
  if (host.is_ip()) {
    if (auto why = always_denied(*host.ip, b); !why.empty()) {
      return deny("always denied", where(host, port) + " is " + closed_address_why(why, *host.ip));
    }
  }
  bool needs_request_check = false;
  for (const auto& r : p.deny) {
    if (!host_matches(r, host) || !port_matches(r, port)) continue;
    switch (method_matches(r, method)) {
      case MethodMatch::kYes:
        return deny(r.label, where(host, port) + " is denied");
      case MethodMatch::kUnknown:
        needs_request_check = true;
        break;
      case MethodMatch::kNo:
        break;
    }
  }
  Decision d;
  if (p.mode == Mode::kOpen) {
    d.allowed = true;
    d.rule = "mode open";
  } else {
    // A rule open to every method settles it; one limited to methods the tunnel's requests
    // must then be checked against, unless a wider rule also matches.
    bool settled = false;
    for (const auto& r : p.allow) {
      if (!host_matches(r, host) || !port_matches(r, port)) continue;
      const auto m = method_matches(r, method);
      if (m == MethodMatch::kNo) continue;
      if (!d.allowed || m == MethodMatch::kYes) d.rule = r.label;
      d.allowed = true;
      if (m == MethodMatch::kYes) {
        settled = true;
        break;
      }
    }
    if (!d.allowed) {
      std::string why = "no rule allows " + where(host, port);
      if (!method.empty()) why += " for " + std::string(method);
      return deny("", std::move(why));
    }
    if (!settled) needs_request_check = true;
  }
  d.needs_request_check = needs_request_check;
  return d;
}

Decision check_address(const Policy& p, const Boundary& b, const IpAddress& a, uint16_t port) {
  Host h;
  h.ip = a;
  if (p.mode == Mode::kNone) return deny("mode none", "the session has no network access");
  if (auto why = always_denied(a, b); !why.empty()) {
    return deny("always denied",
                "resolved to " + where(h, port) + ", " + closed_address_why(why, a));
  }
  for (const auto& r : p.deny) {
    if (r.cidr && r.cidr->contains(a) && port_matches(r, port) && r.methods.empty()) {
      return deny(r.label, "resolved to " + where(h, port) + ", which is denied");
    }
  }
  Decision d;
  d.allowed = true;
  return d;
}

}  // namespace cabin::egress
