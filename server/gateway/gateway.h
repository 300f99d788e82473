// Gateway: cabin-gateway's server. Holds no session state: every request goes to the node its
// session or preview id names (REST, CDP, VNC and frame WebSockets, previews in both modes),
// creates to the node with the most room, lists to every node; bytes are relayed as they come,
// nothing is buffered. Nodes are found by DNS (a headless Service's records) or listed, and
// asked for their id and load every poll interval.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <chrono>
#include <map>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "server/egress/dns.h"
#include "server/gateway/node_table.h"
#include "server/http/responses.h"

namespace cabin::gateway {

namespace beast = boost::beast;
namespace http = beast::http;

struct GatewayConfig {
  std::string listen_host = "127.0.0.1";
  uint16_t listen_port = 8080;
  // Discovery: a name whose A/AAAA records are the nodes (a headless Service), each on
  // node_port; or, without it, fixed addresses ("host:port").
  std::string nodes_dns;
  uint16_t node_port = 8080;
  std::vector<std::string> nodes;
  std::string dns_server;  // IP:PORT; empty: /etc/resolv.conf's
  std::string api_key;     // the nodes' admin key: the gateway reads their load with it
  std::string preview_domain;
  std::chrono::milliseconds poll_interval{1000};
  std::chrono::milliseconds poll_timeout{1000};
  size_t max_connections = 16384;
  size_t max_connections_per_peer = 256;
  std::string log_level = "info";
};

// What a node answered, for a fan-out.
struct NodeAnswer {
  std::string address;
  unsigned status = 0;  // 0: no answer
  std::string body;
  std::string content_type;
};

class Gateway {
 public:
  Gateway(net::any_io_executor ex, GatewayConfig config);

  Result<void> listen();
  uint16_t port() const { return acceptor_.local_endpoint().port(); }
  // Accepts until stop(); discovery and polling run beside it.
  net::awaitable<void> run();
  // Stops accepting; connections open go on.
  void stop();
  // Waits until every connection has ended, or `deadline`; false if some were still open.
  net::awaitable<bool> drain(std::chrono::steady_clock::time_point deadline);
  size_t open_connections() const { return open_connections_; }

  // One discovery and poll round (run() repeats it every poll interval).
  net::awaitable<void> poll_once();
  const NodeTable& table() const { return table_; }

 private:
  struct NodeConn;
  net::awaitable<void> serve(net::ip::tcp::socket client);
  // One request and its answer on a kept-alive client connection, over `kept` when it goes to
  // the same node; false when the connection ends.
  net::awaitable<bool> exchange(beast::tcp_stream& client, beast::flat_buffer& buffer,
                                http::request_parser<http::empty_body>& request,
                                const std::string& address, const std::string& node_id,
                                NodeConn& kept);
  net::awaitable<void> poll_loop();
  net::awaitable<std::vector<std::string>> discover();
  net::awaitable<void> poll_node(std::string address);
  // Relays the request whose head `parser` holds, and what follows on the connection, to
  // `address`; answers 503 node_unavailable itself if the node cannot be reached.
  net::awaitable<void> relay(net::ip::tcp::socket client, beast::flat_buffer buffer,
                             const http::request_header<>& head, std::string address,
                             std::string node_id, const std::string* body = nullptr);
  // POST /mcp: the body names the session (a tool's session_id), or asks for a create or a
  // list; read whole (MCP messages are small), then relayed like any request.
  net::awaitable<void> serve_mcp(net::ip::tcp::socket client, beast::flat_buffer& buffer,
                                 http::request_parser<http::empty_body>& header);
  net::awaitable<http_api::Response> list(const http::request_header<>& head);
  // A tenant key's refusal when its live sessions on all nodes together are at its
  // max_sessions (or a node's refusal of the key); nullopt to go on.
  net::awaitable<std::optional<http_api::Response>> tenant_over_quota(std::string_view authorization);
  net::awaitable<std::vector<NodeAnswer>> fan_out(std::vector<std::string> addresses,
                                                  std::string target, std::string authorization);

  net::any_io_executor ex_;
  GatewayConfig config_;
  net::ip::tcp::acceptor acceptor_;
  net::steady_timer poll_timer_;
  std::optional<egress::Resolver> resolver_;
  NodeTable table_;
  size_t any_turn_ = 0;
  size_t open_connections_ = 0;
  std::map<net::ip::address, size_t> per_peer_;
  std::set<beast::tcp_stream*> idle_;  // connections waiting for their next request
  bool stopping_ = false;
};

// An HTTP/1.1 GET to `address` ("host:port") with `headers` (name, value), read whole up to
// `body_limit` bytes within `timeout`.
net::awaitable<Result<NodeAnswer>> http_get(std::string address, std::string target,
                                            std::vector<std::pair<std::string, std::string>> headers,
                                            std::chrono::milliseconds timeout, size_t body_limit);

// Merges the `{"sessions": [...]}` answers of several nodes, newest first (by created_at).
Result<std::string> merge_session_lists(const std::vector<std::string>& bodies);

}  // namespace cabin::gateway
