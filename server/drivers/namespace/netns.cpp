#include "server/drivers/namespace/netns.h"

#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "common/unique_fd.h"
#include "server/drivers/namespace/sys_util.h"

namespace cabin::nsbox {

Result<void> bring_up_loopback() {
  UniqueFd sock(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) return sys_error("socket for lo");
  struct ifreq ifr {};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  if (::ioctl(sock.get(), SIOCGIFFLAGS, &ifr) != 0) return sys_error("SIOCGIFFLAGS lo");
  ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP | IFF_RUNNING);
  if (::ioctl(sock.get(), SIOCSIFFLAGS, &ifr) != 0) return sys_error("SIOCSIFFLAGS lo");
  return {};
}

Result<int> sandbox_init_pid(int launcher_pid) {
  std::ifstream in("/proc/" + std::to_string(launcher_pid) + "/task/" +
                   std::to_string(launcher_pid) + "/children");
  long child = 0;
  if (!(in >> child) || child <= 0) {
    return make_error(Errc::kUnavailable, "sandbox_not_ready", "sandbox PID 1 not there yet");
  }
  return static_cast<int>(child);
}

Result<UniqueFd> open_sandbox_netns(int launcher_pid) {
  CABIN_ASSIGN_OR_RETURN(const int init, sandbox_init_pid(launcher_pid));
  return open_own_netns_of(init);
}

Result<UniqueFd> open_own_netns_of(int pid) {
  std::string path = "/proc/" + std::to_string(pid) + "/ns/net";
  UniqueFd ns(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!ns.valid()) return sys_error("open " + path);
  struct stat mine {}, theirs {};
  if (::stat("/proc/thread-self/ns/net", &mine) != 0 || ::fstat(ns.get(), &theirs) != 0) {
    return sys_error("stat net namespace");
  }
  // Not yet unshared (or the pid was reused): never hand out a host socket as a sandbox one.
  if (mine.st_ino == theirs.st_ino && mine.st_dev == theirs.st_dev) {
    return make_error(Errc::kUnavailable, "sandbox_not_ready",
                      "process " + std::to_string(pid) + " has no net namespace of its own");
  }
  return ns;
}

Result<UniqueFd> tcp_socket_in_netns(int netns_fd) {
  UniqueFd home(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  if (!home.valid()) return sys_error("open own net namespace");
  if (::setns(netns_fd, CLONE_NEWNET) != 0) return sys_error("setns into sandbox");
  UniqueFd sock(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  int saved = errno;
  // A thread left in the sandbox's namespace would open host sockets there: not survivable.
  if (::setns(home.get(), CLONE_NEWNET) != 0) std::abort();
  if (!sock.valid()) {
    errno = saved;
    return sys_error("socket in sandbox");
  }
  return sock;
}

Result<UniqueFd> tcp_listener_in_netns(int netns_fd, uint16_t port) {
  auto sock = tcp_socket_in_netns(netns_fd);
  if (!sock) return sock.error();
  const int one = 1;
  ::setsockopt(sock->get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(sock->get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    return sys_error("bind 127.0.0.1:" + std::to_string(port) + " in sandbox");
  }
  if (::listen(sock->get(), SOMAXCONN) != 0) return sys_error("listen in sandbox");
  return std::move(*sock);
}

}  // namespace cabin::nsbox
