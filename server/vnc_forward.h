// `cabind vnc-forward SESSION`: a local listener that carries a native VNC client's RFB over the
// authenticated /v1/sessions/{id}/vnc WebSocket (plain or TLS), for connections of its own uid.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/ip/tcp.hpp>
#include <cstdint>
#include <optional>
#include <string_view>

namespace cabin {

// argv[0] is "vnc-forward". Returns the process exit status (2: bad arguments).
int run_vnc_forward(int argc, char** argv);

// The uid owning the established TCP socket whose local end is `local` and remote end `remote`,
// from the text of /proc/net/tcp or /proc/net/tcp6; nullopt when no line matches. Loopback TCP
// has no SO_PEERCRED, so this is how vnc-forward learns who connected.
std::optional<uint32_t> tcp_socket_owner(std::string_view proc_net_tcp,
                                         const boost::asio::ip::tcp::endpoint& local,
                                         const boost::asio::ip::tcp::endpoint& remote);

}  // namespace cabin
