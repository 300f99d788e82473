// Tunnel: CONNECT to a port on the sandbox's loopback, then a byte pump both ways.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/awaitable.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <string>

#include "common/result.h"
#include "vm-images/agent/requests.h"

namespace cabin::agent {

namespace net = boost::asio;

// Connects to the loopback port (localhost tries 127.0.0.1, then ::1); TCP_NODELAY is set because
// this hop carries CDP. Errors: connect_failed (502).
net::awaitable<Result<net::ip::tcp::socket>> connect_loopback(ConnectTarget target);

// Writes `prefetched` (bytes the HTTP parser read past the CONNECT request) upstream first, then
// copies both ways. EOF on one side becomes shutdown(send) on the other; returns when both
// directions ended or either failed, with both sockets closed.
net::awaitable<void> run_tunnel(net::generic::stream_protocol::socket client,
                                net::ip::tcp::socket upstream, std::string prefetched);

}  // namespace cabin::agent
