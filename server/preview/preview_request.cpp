#include "server/preview/preview_request.h"

#include <boost/asio/ip/address.hpp>

#include <cctype>
#include <charconv>
#include <vector>

#include "common/ascii.h"
#include "common/percent.h"
#include "server/api/ids.h"
#include "server/api/router.h"

namespace cabin::preview {
namespace {

Error bad_target(std::string message) {
  return make_error(Errc::kInvalidArgument, "bad_target", std::move(message));
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

bool is_ip_literal(std::string_view host) {
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  boost::system::error_code ec;
  boost::asio::ip::make_address(std::string(host), ec);
  return !ec;
}

std::optional<std::string> host_name(std::string_view h) {
  if (h.empty() || h.size() > 255) return std::nullopt;
  std::string_view host = h;
  std::string_view port;
  if (h.front() == '[') {
    size_t close = h.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    host = h.substr(0, close + 1);
    std::string_view after = h.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return std::nullopt;
      port = after.substr(1);
    }
    if (!is_ip_literal(host)) return std::nullopt;
  } else {
    size_t colon = h.find(':');
    if (colon != std::string_view::npos) {
      host = h.substr(0, colon);
      port = h.substr(colon + 1);
      if (port.empty()) return std::nullopt;
    }
    if (host.empty()) return std::nullopt;
    for (char c : host) {
      bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.';
      if (!ok) return std::nullopt;
    }
  }
  for (char c : port) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  if (port.size() > 5) return std::nullopt;
  std::string out(host);
  for (char& c : out) c = ascii_lower(c);
  return out;
}

std::optional<HostAddress> parse_preview_host(std::string_view host, std::string_view domain) {
  if (domain.empty() || host.size() <= domain.size() + 1) return std::nullopt;
  if (host.substr(host.size() - domain.size()) != domain ||
      host[host.size() - domain.size() - 1] != '.') {
    return std::nullopt;
  }
  std::string_view label = host.substr(0, host.size() - domain.size() - 1);
  // p-<port>-<20 of [a-z0-9]>
  if (label.size() < 4 || label.substr(0, 2) != "p-") return std::nullopt;
  label.remove_prefix(2);
  size_t dash = label.find('-');
  if (dash == std::string_view::npos || dash == 0 || dash > 5 || label[0] == '0') {
    return std::nullopt;
  }
  int port = 0;
  auto [end, ec] = std::from_chars(label.data(), label.data() + dash, port);
  if (ec != std::errc() || end != label.data() + dash || port < 1 || port > 65535) {
    return std::nullopt;
  }
  // A host name has no '_': a node's sessions are "<node>-<random>" here.
  std::string suffix(label.substr(dash + 1));
  if (suffix.find('_') != std::string::npos) return std::nullopt;
  if (const size_t sep = suffix.rfind('-'); sep != std::string::npos) suffix[sep] = '_';
  std::string sid = std::string(api::kSessionIdPrefix) + suffix;
  if (!api::valid_session_id(sid)) return std::nullopt;
  return HostAddress{port, sid};
}

std::string preview_host(int port, std::string_view session_id, std::string_view domain) {
  std::string suffix(session_id.substr(api::kSessionIdPrefix.size()));
  if (const size_t sep = suffix.find('_'); sep != std::string::npos) suffix[sep] = '-';
  return "p-" + std::to_string(port) + "-" + suffix + "." + std::string(domain);
}

Result<void> check_target(std::string_view target) {
  if (target.empty() || target[0] != '/') {
    return bad_target("the request target must be a path (origin-form)");
  }
  if (target.size() > kMaxTarget) return bad_target("the request target is too long");
  size_t q = target.find('?');
  std::string_view path = target.substr(0, q);
  for (char c : target) {
    auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7f || c == '\\' || c == '#') {
      return bad_target("the request target has a byte a URL must not carry");
    }
  }
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == '%' &&
        (i + 2 >= target.size() || hex_digit(target[i + 1]) < 0 || hex_digit(target[i + 2]) < 0)) {
      return bad_target("the request target has a bad percent escape");
    }
  }
  // Segments are judged decoded: "%2e%2e" is "..", and an encoded '/' or NUL could split or end
  // a path differently upstream.
  size_t start = 1;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    std::string_view seg =
        path.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    std::string decoded;
    for (size_t i = 0; i < seg.size(); ++i) {
      if (seg[i] == '%') {
        decoded.push_back(static_cast<char>(hex_digit(seg[i + 1]) * 16 + hex_digit(seg[i + 2])));
        i += 2;
      } else {
        decoded.push_back(seg[i]);
      }
    }
    if (decoded == "." || decoded == "..") return bad_target("dot segments are not allowed");
    if (decoded.find_first_of(std::string_view("/\\\0", 3)) != std::string::npos) {
      return bad_target("encoded '/', '\\\\' or NUL in a path segment");
    }
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return {};
}

Result<PathAddress> parse_preview_path(std::string_view target) {
  if (target.substr(0, kPathPrefix.size()) != kPathPrefix) {
    return make_error(Errc::kNotFound, "not_found", "not a preview path");
  }
  if (auto r = check_target(target); !r) return r.error();
  std::string_view rest = target.substr(kPathPrefix.size());
  size_t end = rest.find_first_of("/?");
  std::string_view id = rest.substr(0, end);
  if (!api::valid_preview_id(id)) {
    return make_error(Errc::kNotFound, "preview_not_found", "no preview with that id");
  }
  PathAddress a;
  a.preview_id = std::string(id);
  if (end == std::string_view::npos || rest[end] == '?') {
    a.bare = true;
    return a;
  }
  a.upstream_target = std::string(rest.substr(end));
  return a;
}

TokenSplit take_token(std::string_view target, std::string_view name) {
  TokenSplit out;
  size_t q = target.find('?');
  if (q == std::string_view::npos) {
    out.target = std::string(target);
    return out;
  }
  out.target = std::string(target.substr(0, q));
  std::string kept;
  std::string_view query = target.substr(q + 1);
  while (true) {
    size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    size_t eq = pair.find('=');
    if (pair.substr(0, eq) == name) {
      auto v = api::percent_decode(eq == std::string_view::npos ? "" : pair.substr(eq + 1));
      out.token = v ? *v : std::string();
    } else if (!pair.empty()) {
      kept += (kept.empty() ? "" : "&") + std::string(pair);
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  if (!kept.empty()) out.target += "?" + kept;
  return out;
}

std::string redirect_target(std::string_view target) {
  size_t first = target.find_first_not_of('/');
  if (first == std::string_view::npos) return "/";
  return std::string(target.substr(first == 0 ? 0 : first - 1));
}

std::string strip_cookie(std::string_view header, std::string_view accepted,
                         std::vector<std::string>* found) {
  std::string out;
  while (!header.empty()) {
    size_t semi = header.find(';');
    std::string_view pair = trim(header.substr(0, semi));
    size_t eq = pair.find('=');
    std::string_view name = eq == std::string_view::npos ? "" : trim(pair.substr(0, eq));
    if (name == kCookieName || name == kHostCookieName) {
      std::string_view value = trim(pair.substr(eq + 1));
      if (found && name == accepted && !value.empty() && found->size() < kMaxCookieTries) {
        found->emplace_back(value);
      }
    } else if (!pair.empty()) {
      out += (out.empty() ? "" : "; ") + std::string(pair);
    }
    if (semi == std::string_view::npos) break;
    header.remove_prefix(semi + 1);
  }
  return out;
}

bool sets_cookie(std::string_view set_cookie, std::string_view name) {
  size_t eq = set_cookie.find('=');
  size_t semi = set_cookie.find(';');
  if (eq == std::string_view::npos || (semi != std::string_view::npos && semi < eq)) return false;
  return trim(set_cookie.substr(0, eq)) == name;
}

std::string drop_cookie_domain(std::string_view set_cookie) {
  size_t semi = set_cookie.find(';');
  if (semi == std::string_view::npos) return std::string(set_cookie);
  std::string out(set_cookie.substr(0, semi));  // name=value
  std::string_view rest = set_cookie.substr(semi + 1);
  while (true) {
    semi = rest.find(';');
    std::string_view attr = rest.substr(0, semi);
    std::string_view name = trim(attr.substr(0, attr.find('=')));
    if (!iequals(name, "domain")) out.append(";").append(attr);
    if (semi == std::string_view::npos) break;
    rest.remove_prefix(semi + 1);
  }
  return out;
}

namespace {

std::string_view without_default_port(std::string_view authority, std::string_view scheme) {
  std::string_view port = iequals(scheme, "https") ? ":443" : ":80";
  if (authority.size() > port.size() && authority.substr(authority.size() - port.size()) == port) {
    authority.remove_suffix(port.size());
  }
  return authority;
}

}  // namespace

bool same_origin(std::string_view origin, std::string_view scheme, std::string_view host_header) {
  size_t sep = origin.find("://");
  if (sep == std::string_view::npos || !iequals(origin.substr(0, sep), scheme)) return false;
  std::string_view authority = origin.substr(sep + 3);
  if (authority.empty() || host_header.empty()) return false;
  return iequals(without_default_port(authority, scheme),
                 without_default_port(host_header, scheme));
}

std::string rewrite_location(std::string_view location, std::string_view prefix, int port) {
  if (!location.empty() && location[0] == '/' && (location.size() < 2 || location[1] != '/')) {
    return std::string(prefix) + std::string(location);
  }
  std::string p = std::to_string(port);
  for (std::string_view origin : {"http://127.0.0.1:", "http://localhost:"}) {
    std::string o = std::string(origin) + p;
    if (location.size() >= o.size() && iequals(location.substr(0, o.size()), o)) {
      std::string_view rest = location.substr(o.size());
      if (rest.empty()) return std::string(prefix) + "/";
      if (rest[0] == '/') return std::string(prefix) + std::string(rest);
    }
  }
  return std::string(location);
}

std::string rewrite_cookie_path(std::string_view set_cookie, std::string_view prefix) {
  std::string out;
  bool had_path = false;
  std::string_view rest = set_cookie;
  bool first = true;
  while (true) {
    size_t semi = rest.find(';');
    std::string_view attr = rest.substr(0, semi);
    std::string_view t = trim(attr);
    if (!first && t.size() >= 5 && iequals(t.substr(0, 5), "path=")) {
      std::string_view path = trim(t.substr(5));
      had_path = true;
      out += "; Path=" + std::string(prefix) +
             (path.empty() || path[0] != '/' ? "/" : std::string(path));
    } else {
      out += (first ? "" : ";") + std::string(attr);
    }
    first = false;
    if (semi == std::string_view::npos) break;
    rest.remove_prefix(semi + 1);
  }
  if (!had_path) out += "; Path=" + std::string(prefix) + "/";
  return out;
}

}  // namespace cabin::preview
