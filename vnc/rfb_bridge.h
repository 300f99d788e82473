// RFB bridge (host side): carries RFB between a client's WebSocket and a stream into the sandbox,
// passing the client's half through RfbClientFilter; also the client end used by vnc-forward.
#pragma once

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange
#include <boost/asio/awaitable.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/websocket/stream.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "common/result.h"
#include "vnc/rfb_filter.h"

namespace cabin::vnc {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;

using WsStream = websocket::stream<net::ip::tcp::socket>;
using SandboxStream = net::generic::stream_protocol::socket;

// noVNC's (and websockify's) subprotocol for raw binary frames.
inline constexpr std::string_view kRfbSubprotocol = "binary";
// One WebSocket message from a client may be at most this large (a whole maximal cut text
// plus room for the messages around it).
inline constexpr size_t kMaxWsMessage = kMaxClientMessage + 64 * 1024;

// True when the Sec-WebSocket-Protocol list names "binary".
bool offers_binary(std::string_view protocols);

struct BridgeStats {
  uint64_t bytes_to_client = 0;
  uint64_t bytes_to_sandbox = 0;
  uint64_t messages = 0;  // client RFB messages
  uint64_t dropped = 0;   // of those, not forwarded (view-only)
  std::string close_reason;  // why the bridge ended, for the log
};

// Completes the WebSocket handshake for `req` (answering "binary" when offered), then carries
// bytes until either side ends. `sandbox_buffer` holds bytes already read from the sandbox.
// A malformed client message closes the WebSocket with 1008 (policy) and the reason. The
// `alive` callback runs for every client message, for activity tracking; may be empty.
net::awaitable<BridgeStats> serve_rfb_websocket(net::ip::tcp::socket client,
                                                http::request<http::string_body> req,
                                                SandboxStream sandbox,
                                                beast::flat_buffer sandbox_buffer,
                                                RfbAccess access, std::function<void()> alive);

// The vnc-forward side: a WebSocket to `host:port` + `target` with `Authorization: Bearer key`
// and the binary subprotocol; then bytes between it and a native client's TCP connection.
net::awaitable<Result<WsStream>> dial_rfb_websocket(std::string host, uint16_t port,
                                                    std::string target, std::string api_key);
net::awaitable<void> forward_rfb(net::ip::tcp::socket client, WsStream ws);

}  // namespace cabin::vnc
