// Where cabin-gateway sends a request: to the node named in the session or preview id it
// addresses, to a node chosen for a create, to every node for a list, or to any node. Pure: no
// I/O, so it is unit-tested and fuzzed alone.
#pragma once

#include <string>
#include <string_view>

namespace cabin::gateway {

struct RouteDecision {
  enum class Kind {
    kNode,    // `node` holds the session: only it can answer
    kCreate,  // POST /v1/sessions: a node with room
    kList,    // GET /v1/sessions: every node, merged
    kAny,     // the same on every node (/v1/info, the web UI, the OpenAPI document)
    kHealth,  // /healthz and /readyz: the gateway's own
  };
  Kind kind = Kind::kAny;
  std::string node;        // kNode: the node id; empty: the id names no node
  std::string session_id;  // kNode: what the request addresses, for errors
};

// `target` is the request target (path and query), `host` the Host header without its port,
// `preview_domain` the host-based previews' domain (empty: none).
RouteDecision route_request(std::string_view method, std::string_view target,
                            std::string_view host, std::string_view preview_domain);

}  // namespace cabin::gateway
