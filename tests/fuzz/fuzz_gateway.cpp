// Fuzz target: cabin-gateway's routing (method byte, Host line, request target) and its merge
// of the nodes' session lists (odd first byte: the rest is one node's answer).
#include <cstdint>
#include <string>
#include <string_view>

#include "server/api/ids.h"
#include "server/gateway/gateway.h"
#include "server/gateway/route.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) {
    (void)cabin::gateway::merge_session_lists({std::string(rest), std::string(rest)});
    return 0;
  }
  static const char* kMethods[] = {"GET", "POST", "DELETE", "PUT"};
  const size_t nl = rest.find('\n');
  const std::string_view host = nl == std::string_view::npos ? std::string_view{} : rest.substr(0, nl);
  const std::string_view target = nl == std::string_view::npos ? rest : rest.substr(nl + 1);
  auto d = cabin::gateway::route_request(kMethods[(data[0] >> 1) % 4], target, host,
                                         "preview.example.com");
  using Kind = cabin::gateway::RouteDecision::Kind;
  if (d.kind == Kind::kNode) {
    // Only a well-formed id routes, and its node part is a node id or nothing.
    if (!cabin::api::valid_session_id(d.session_id) && !cabin::api::valid_preview_id(d.session_id))
      __builtin_trap();
    if (!d.node.empty() && !cabin::api::valid_node_id(d.node)) __builtin_trap();
  }
  return 0;
}
