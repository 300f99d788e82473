// A connected pair of UNIX stream sockets, both close-on-exec: in-process stand-ins for a
// sandbox's agent (the sim driver, the unit tests' fake sandbox).
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <sys/socket.h>

#include <boost/asio/generic/stream_protocol.hpp>
#include <utility>

#include "common/result.h"

namespace cabin {

using LocalSocket = net::generic::stream_protocol::socket;

inline Result<std::pair<LocalSocket, LocalSocket>> local_socket_pair(const net::any_io_executor& ex) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
    return make_error(Errc::kInternal, "socketpair", "socketpair failed");
  const net::generic::stream_protocol proto(AF_UNIX, 0);
  return std::pair<LocalSocket, LocalSocket>{LocalSocket(ex, proto, fds[0]),
                                             LocalSocket(ex, proto, fds[1])};
}

}  // namespace cabin
