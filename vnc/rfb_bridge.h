// RFB bridge (host side): carries RFB between a client's WebSocket and a stream into the sandbox,
// passing the client's half through RfbClientFilter (vnc-forward reuses its relay, rfb_bridge_link.h).
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/awaitable.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/websocket/rfc6455.hpp>
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
  uint64_t messages = 0;     // client RFB messages
  uint64_t dropped = 0;      // of those, not forwarded (view-only)
  std::string close_reason;  // why the bridge ended, for the log
};

}  // namespace cabin::vnc
