// FD_CLOEXEC for sockets Asio opens: Boost 1.74 opens and accepts them without SOCK_CLOEXEC, and
// a descriptor that survives an exec would hand a sandbox cabind's listener or connections.
#pragma once

#include <fcntl.h>

#include <boost/system/error_code.hpp>

namespace cabin {

// Marks fd close-on-exec; false (errno set) if fcntl failed.
inline bool set_cloexec(int fd) {
  int flags = ::fcntl(fd, F_GETFD);
  return flags >= 0 && ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC) == 0;
}

// Opens `socket` for `protocol` and marks it close-on-exec. cabind spawns only from its one
// thread, so nothing can exec between the two steps.
template <typename Socket, typename Protocol>
void open_cloexec(Socket& socket, const Protocol& protocol, boost::system::error_code& ec) {
  socket.open(protocol, ec);
  if (!ec && !set_cloexec(socket.native_handle()))
    ec.assign(errno, boost::system::system_category());
}

}  // namespace cabin
