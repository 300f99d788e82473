#include "server/gateway/route.h"

#include "server/api/ids.h"
#include "server/preview/preview_request.h"

namespace cabin::gateway {

namespace {

// The path of an origin-form target, without its query.
std::string_view path_of(std::string_view target) {
  return target.substr(0, target.find_first_of("?#"));
}

// The first segment of `rest` (up to '/' or the end).
std::string_view segment(std::string_view rest) { return rest.substr(0, rest.find('/')); }

RouteDecision to_node(std::string_view id) {
  RouteDecision d;
  d.kind = RouteDecision::Kind::kNode;
  d.node = std::string(api::node_of_id(id));
  d.session_id = std::string(id);
  return d;
}

}  // namespace

RouteDecision route_request(std::string_view method, std::string_view target,
                            std::string_view host, std::string_view preview_domain) {
  if (!preview_domain.empty()) {
    if (auto a = preview::parse_preview_host(host, preview_domain)) return to_node(a->session_id);
  }
  const std::string_view path = path_of(target);
  if (path == "/healthz" || path == "/readyz") return {RouteDecision::Kind::kHealth, {}, {}};
  constexpr std::string_view kSessions = "/v1/sessions";
  if (path == kSessions || path == "/v1/sessions/") {
    if (method == "POST") return {RouteDecision::Kind::kCreate, {}, {}};
    if (method == "GET") return {RouteDecision::Kind::kList, {}, {}};
    return {};
  }
  if (path.starts_with("/v1/sessions/")) {
    const auto id = segment(path.substr(kSessions.size() + 1));
    if (api::valid_session_id(id)) return to_node(id);
    return {};  // any node answers a malformed id the same way
  }
  if (path.starts_with(preview::kPathPrefix)) {
    const auto id = segment(path.substr(preview::kPathPrefix.size()));
    if (api::valid_preview_id(id)) return to_node(id);
    return {};
  }
  return {};
}

}  // namespace cabin::gateway
