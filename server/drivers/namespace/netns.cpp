#include "server/drivers/namespace/netns.h"

#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cstring>

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

}  // namespace cabin::nsbox
