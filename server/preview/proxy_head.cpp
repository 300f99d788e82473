#include "server/preview/proxy_head.h"

#include <boost/beast/core/string.hpp>
#include <charconv>

#include "common/ascii.h"
#include "server/http/hop_by_hop.h"
#include "server/preview/preview_request.h"

namespace cabin::preview {
namespace {

using Field = http::field;

using http_api::ConnectionNamed;
using http_api::hop_by_hop;

// Forwarding fields a client could forge; the proxy writes its own.
bool forwarding(const http::fields::value_type& f) {
  if (f.name() == Field::forwarded) return true;
  std::string_view n = f.name_string();
  if (n.empty() || (n[0] != 'x' && n[0] != 'X')) return false;
  for (std::string_view forged : {"X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host",
                                  "X-Forwarded-Prefix", "X-Forwarded-Port", "X-Real-IP"}) {
    if (iequals(n, forged)) return true;
  }
  return false;
}

void field(std::string& out, std::string_view name, std::string_view value) {
  out.append(name).append(": ").append(value).append("\r\n");
}

void number(std::string& out, std::uint64_t n) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, n);
  out.append(buf, end);
}

void framing(std::string& out, Framing f, std::uint64_t length) {
  if (f == Framing::kChunked) {
    field(out, "Transfer-Encoding", "chunked");
  } else if (f == Framing::kLength) {
    out.append("Content-Length: ");
    number(out, length);
    out.append("\r\n");
  }
}

}  // namespace

void write_request_head(std::string& out, const http::request_header<>& h,
                        const UpstreamRequest& r) {
  out.append(h.method_string()).append(" ").append(r.target).append(" HTTP/1.1\r\n");
  out.append("Host: 127.0.0.1:");
  number(out, static_cast<std::uint64_t>(r.port));
  out.append("\r\n");
  ConnectionNamed named(h);
  for (const auto& f : h) {
    auto id = f.name();
    if (hop_by_hop(id) || id == Field::host || id == Field::cookie || id == Field::expect ||
        id == Field::authorization || forwarding(f) || named.contains(f.name_string())) {
      continue;
    }
    field(out, f.name_string(), f.value());
  }
  if (r.cookies) {
    for (const auto& c : *r.cookies) field(out, "Cookie", c);
  }
  const std::string_view proto = r.tls ? "https" : "http";
  field(out, "X-Forwarded-For", r.client_ip);
  field(out, "X-Forwarded-Proto", proto);
  field(out, "X-Forwarded-Host", r.original_host);
  if (!r.prefix.empty()) field(out, "X-Forwarded-Prefix", r.prefix);
  out.append("Forwarded: for=\"")
      .append(r.client_ip)
      .append("\";host=\"")
      .append(r.original_host)
      .append("\";proto=")
      .append(proto)
      .append("\r\n");
  framing(out, r.framing, r.length);
  if (r.websocket) out.append("Connection: Upgrade\r\nUpgrade: websocket\r\n");
  out.append("\r\n");
}

void write_response_head(std::string& out, const http::response_header<>& h,
                         const ClientAnswer& a) {
  out.append("HTTP/1.1 ");
  number(out, h.result_int());
  out.append(" ");
  std::string_view reason = h.reason();
  out.append(reason.empty() ? std::string_view(http::obsolete_reason(h.result())) : reason);
  out.append("\r\n");
  ConnectionNamed named(h);
  for (const auto& f : h) {
    auto id = f.name();
    if (hop_by_hop(id) || named.contains(f.name_string())) continue;
    // It would let a script under a preview register a service worker above it (for "/").
    if (iequals(f.name_string(), "Service-Worker-Allowed")) continue;
    if (id == Field::set_cookie) {
      if (sets_cookie(f.value(), kCookieName) || sets_cookie(f.value(), kHostCookieName)) continue;
      std::string cookie = drop_cookie_domain(f.value());
      field(out, f.name_string(),
            a.prefix.empty() ? cookie : rewrite_cookie_path(cookie, a.prefix));
      continue;
    }
    if ((id == Field::location || id == Field::content_location) && !a.prefix.empty()) {
      field(out, f.name_string(), rewrite_location(f.value(), a.prefix, a.port));
      continue;
    }
    field(out, f.name_string(), f.value());
  }
  if (!a.prefix.empty()) field(out, "Content-Security-Policy", kPathPreviewCsp);
  if (a.websocket) {
    out.append("Connection: Upgrade\r\nUpgrade: websocket\r\n");
  } else {
    framing(out, a.framing, a.length);
    if (!a.keep_alive) out.append("Connection: close\r\n");
  }
  out.append("\r\n");
}

}  // namespace cabin::preview
