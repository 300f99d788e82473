// The sandbox's network namespace: loopback only, brought up so 127.0.0.1 works inside.
#pragma once

#include <cstdint>

#include "common/result.h"
#include "common/unique_fd.h"

namespace cabin::nsbox {

// Sets IFF_UP on "lo" (SIOCSIFFLAGS); a fresh net namespace starts with lo down.
Result<void> bring_up_loopback();

// The host pid of the sandbox's PID 1: the only child of its launcher `launcher_pid`. Fails
// while it is not there yet.
Result<int> sandbox_init_pid(int launcher_pid);

// The network namespace of the sandbox whose launcher is `launcher_pid`. Fails while the sandbox
// is not built yet.
Result<UniqueFd> open_sandbox_netns(int launcher_pid);

// The network namespace of process `pid`; fails while it is still cabind's own (not unshared
// yet, or the pid was reused).
Result<UniqueFd> open_own_netns_of(int pid);

// A non-blocking TCP socket created inside `netns_fd`, for cabind to reach the sandbox's loopback
// without a relay. The calling thread enters the namespace only for the socket() call.
Result<UniqueFd> tcp_socket_in_netns(int netns_fd);

// A non-blocking TCP socket listening on 127.0.0.1:`port` inside `netns_fd`: cabind's end of a
// service the sandbox reaches on its own loopback (the egress proxy).
Result<UniqueFd> tcp_listener_in_netns(int netns_fd, uint16_t port);

}  // namespace cabin::nsbox
