#include "cdp-bridge/discovery.h"

#include <nlohmann/json.hpp>

#include "common/bounded_json.h"

namespace cabin::cdp {
namespace {

using nlohmann::json;

Error bad_guest(const std::string& what) {
  return make_error(Errc::kBadGateway, "bad_discovery", "browser discovery answer: " + what);
}

bool valid_target_id(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-')) {
      return false;
    }
  }
  return true;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

Result<std::string> rewrite_version(std::string_view guest_body, const std::string& browser_ws_url) {
  auto parsed = parse_bounded(guest_body, {kMaxDiscoveryBody, kGuestJsonDepth, 1u << 16});
  if (!parsed) return bad_guest(parsed.error().message);
  const json& in = *parsed;
  if (!in.is_object()) return bad_guest("not a JSON object");
  json out = json::object();
  for (const char* key : {"Browser", "Protocol-Version", "User-Agent", "V8-Version",
                          "WebKit-Version", "Android-Package"}) {
    if (auto it = in.find(key); it != in.end() && it->is_string()) out[key] = *it;
  }
  out["webSocketDebuggerUrl"] = browser_ws_url;
  return dump(out);
}

Result<std::string> rewrite_list(std::string_view guest_body, const std::string& page_ws_prefix,
                                 const std::string& token_query) {
  auto parsed = parse_bounded(guest_body, {kMaxDiscoveryBody, kGuestJsonDepth, 1u << 16});
  if (!parsed) return bad_guest(parsed.error().message);
  const json& in = *parsed;
  if (!in.is_array()) return bad_guest("not a JSON array");
  json out = json::array();
  for (const auto& t : in) {
    if (!t.is_object()) continue;
    auto id = t.find("id");
    if (id == t.end() || !id->is_string() || !valid_target_id(id->get<std::string>())) continue;
    json e = json::object();
    for (const char* key : {"description", "id", "parentId", "title", "type", "url", "faviconUrl"}) {
      if (auto it = t.find(key); it != t.end() && it->is_string()) e[key] = *it;
    }
    // Only page-like targets accept a direct DevTools connection in Chromium.
    if (t.contains("webSocketDebuggerUrl")) {
      e["webSocketDebuggerUrl"] = page_ws_prefix + id->get<std::string>() + token_query;
    }
    out.push_back(std::move(e));
  }
  return dump(out);
}

}  // namespace cabin::cdp
