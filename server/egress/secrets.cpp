#include "server/egress/secrets.h"

#include <algorithm>
#include <boost/beast/core/string.hpp>

#include "common/ascii.h"
#include "server/api/router.h"

namespace cabin::egress {

namespace {

std::string encode(std::string_view value, BodyKind kind) {
  std::string out;
  switch (kind) {
    case BodyKind::kUrlEncoded:
      return api::percent_encode(value);
    case BodyKind::kJson:
      // A value has no control bytes (the policy refuses them): quotes and backslashes only.
      for (char c : value) {
        if (c == '"' || c == '\\') out += '\\';
        out += c;
      }
      return out;
    case BodyKind::kText:
    case BodyKind::kOpaque:
      break;
  }
  return std::string(value);
}

}  // namespace

bool bound_to(const Secret& s, const Host& host) {
  if (host.is_ip()) return false;
  return std::any_of(s.hosts.begin(), s.hosts.end(),
                     [&](const HostPattern& h) { return h.matches(host.name); });
}

bool bound_to(const Secret& s, const Host& host, uint16_t port) {
  return std::binary_search(s.ports.begin(), s.ports.end(), port) && bound_to(s, host);
}

bool secret_bound(const Policy& p, std::string_view name, const Host& host) {
  return std::any_of(p.secrets.begin(), p.secrets.end(),
                     [&](const Secret& s) { return s.name == name && bound_to(s, host); });
}

bool any_secret_bound(const Policy& p, const Host& host, uint16_t port) {
  return std::any_of(p.secrets.begin(), p.secrets.end(),
                     [&](const Secret& s) { return bound_to(s, host, port); });
}

bool any_secret_in_body(const Policy& p, const Host& host, uint16_t port) {
  return std::any_of(p.secrets.begin(), p.secrets.end(),
                     [&](const Secret& s) { return s.in_body && bound_to(s, host, port); });
}

BodyKind body_kind(std::string_view content_type) {
  const auto semi = content_type.find(';');
  std::string_view type = content_type.substr(0, semi);
  while (!type.empty() && (type.back() == ' ' || type.back() == '\t')) type.remove_suffix(1);
  while (!type.empty() && (type.front() == ' ' || type.front() == '\t')) type.remove_prefix(1);
  namespace beast = boost::beast;
  if (iequals(type, "application/x-www-form-urlencoded")) return BodyKind::kUrlEncoded;
  if (iequals(type, "application/json") ||
      (type.size() > 5 && iequals(type.substr(type.size() - 5), "+json"))) {
    return BodyKind::kJson;
  }
  if (iequals(type, "multipart/form-data") ||
      (type.size() >= 5 && iequals(type.substr(0, 5), "text/"))) {
    return BodyKind::kText;
  }
  return BodyKind::kOpaque;
}

std::string placeholder_in(const Policy& p, const Host& host, uint16_t port, std::string_view text,
                           bool bound_ok) {
  if (text.find(kPlaceholderPrefix) == std::string_view::npos) return {};
  for (const auto& s : p.secrets) {
    if (bound_ok && bound_to(s, host, port)) continue;
    if (text.find(s.placeholder) != std::string_view::npos) return s.name;
  }
  return {};
}

std::string placeholder_in_request(const Policy& p, const Host& host, uint16_t port,
                                   const boost::beast::http::fields& fields,
                                   std::string_view target, std::string_view body, bool bound_ok) {
  std::string found = placeholder_in(p, host, port, body, bound_ok);
  if (found.empty()) found = placeholder_in(p, host, port, target, bound_ok);
  for (const auto& f : fields) {
    if (!found.empty()) break;
    found = placeholder_in(p, host, port, f.value(), bound_ok);
  }
  return found;
}

bool substituted_in(const Secret& s, Part part) {
  switch (part.kind) {
    case Part::kField:
      return iequals(part.field, s.header);
    case Part::kTarget:
      return s.in_target;
    case Part::kBody:
      return s.in_body;
  }
  return false;
}

std::string misplaced_placeholder(const Policy& p, const Host& host, uint16_t port,
                                  const boost::beast::http::fields& fields, std::string_view target,
                                  std::string_view body) {
  auto check = [&](Part part, std::string_view text) -> std::string {
    if (text.find(kPlaceholderPrefix) == std::string_view::npos) return {};
    for (const auto& s : p.secrets) {
      if (!bound_to(s, host, port) || substituted_in(s, part)) continue;
      if (text.find(s.placeholder) == std::string_view::npos) continue;
      const std::string where = part.kind == Part::kField    ? "field " + std::string(part.field)
                                : part.kind == Part::kTarget ? std::string("target")
                                                             : std::string("body");
      std::string fix = part.kind == Part::kField
                            ? "it is put only into its header " + s.header
                            : "it is put only into its header " + s.header + " unless its " +
                                  "\"substitute\" lists \"" +
                                  (part.kind == Part::kTarget ? "target" : "body") + "\"";
      return "the request's " + where + " carries the placeholder of secret " + s.name + ": " + fix;
    }
    return {};
  };
  std::string why = check({Part::kTarget, {}}, target);
  if (why.empty()) why = check({Part::kBody, {}}, body);
  for (const auto& f : fields) {
    if (!why.empty()) break;
    why = check({Part::kField, f.name_string()}, f.value());
  }
  return why;
}

std::string PlaceholderScan::feed(std::string_view piece) {
  // Every placeholder is the prefix and 32 hex digits.
  constexpr size_t kKeep = kPlaceholderPrefix.size() + 32 - 1;
  std::string seam = tail_;
  seam.append(piece.substr(0, kKeep));
  for (std::string_view text : {std::string_view(seam), piece}) {
    for (const auto& s : p_.secrets) {
      if (text.find(s.placeholder) != std::string_view::npos) return s.name;
    }
  }
  if (piece.size() >= kKeep) {
    tail_.assign(piece.substr(piece.size() - kKeep));
  } else {
    tail_.append(piece);
    if (tail_.size() > kKeep) tail_.erase(0, tail_.size() - kKeep);
  }
  return {};
}

void add_name(std::vector<std::string>& names, const std::string& name) {
  if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
}

void replace_placeholders(const Policy& p, const Host& host, uint16_t port, Part part,
                          std::string& text, BodyKind kind, std::vector<std::string>& used) {
  if (text.find(kPlaceholderPrefix) == std::string::npos) return;
  for (const auto& s : p.secrets) {
    if (!bound_to(s, host, port) || !substituted_in(s, part)) continue;
    size_t at = text.find(s.placeholder);
    if (at == std::string::npos) continue;
    const std::string value = encode(s.value, kind);
    while (at != std::string::npos) {
      text.replace(at, s.placeholder.size(), value);
      at = text.find(s.placeholder, at + value.size());
    }
    add_name(used, s.name);
  }
}

std::string header_value(const Secret& s) {
  std::string out = s.format;
  static constexpr std::string_view kValue = "{value}";
  for (size_t at = out.find(kValue); at != std::string::npos;
       at = out.find(kValue, at + s.value.size())) {
    out.replace(at, kValue.size(), s.value);
  }
  return out;
}

}  // namespace cabin::egress
