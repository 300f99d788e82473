#include "server/http/responses.h"

#include <boost/beast/version.hpp>

#include "server/metrics/metrics.h"

namespace cabin::http_api {

Response json_response(http::status status, const nlohmann::json& body) {
  Response res{status, 11};
  res.set(http::field::server, "cabind/" CABIN_VERSION);
  res.set(http::field::content_type, "application/json");
  res.set(http::field::cache_control, "no-store");
  res.body() = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  res.body().push_back('\n');
  res.prepare_payload();
  return res;
}

Response error_response(const Error& e) {
  metrics::registry().inc("cabin_api_errors_total", {e.code});
  const auto status = static_cast<http::status>(http_status(e.errc));
  auto res = json_response(status, {{"error", {{"code", e.code}, {"message", e.message}}}});
  if (status == http::status::unauthorized) res.set(http::field::www_authenticate, "Bearer");
  if (e.retry_after_s > 0) res.set(http::field::retry_after, std::to_string(e.retry_after_s));
  return res;
}

namespace {

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

// What a person holding a refused link should read first; the server's message follows.
std::string_view headline(std::string_view code) {
  if (code == "token_expired") return "This link has expired.";
  if (code == "token_revoked") return "This link has been revoked.";
  if (code == "invalid_token") return "This link is not valid.";
  if (code == "unauthenticated") return "This link has no token.";
  if (code == "token_scope") return "This link does not open this page.";
  if (code == "session_not_found") return "This session does not exist.";
  if (code == "session_ended") return "This session has ended.";
  return "This page cannot be shown.";
}

}  // namespace

Response error_page(const Error& e) {
  Response res{static_cast<http::status>(http_status(e.errc)), 11};
  res.set(http::field::server, "cabind/" CABIN_VERSION);
  res.set(http::field::content_type, "text/html; charset=utf-8");
  res.set(http::field::cache_control, "no-store");
  res.set("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'");
  res.set("X-Content-Type-Options", "nosniff");
  res.set("Referrer-Policy", "no-referrer");
  if (e.errc == Errc::kUnauthenticated) res.set(http::field::www_authenticate, "Bearer");
  res.body() = "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
               "<title>Cabin: " + html_escape(e.code) + "</title></head>\n<body>"
               "<h1 id=\"error-title\">" + std::string(headline(e.code)) + "</h1>\n"
               "<p id=\"error-message\">" + html_escape(e.message) + "</p>\n"
               "<p>Error code: <code id=\"error-code\">" + html_escape(e.code) +
               "</code></p>\n</body></html>\n";
  res.prepare_payload();
  return res;
}

}  // namespace cabin::http_api
