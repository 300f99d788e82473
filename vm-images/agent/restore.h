// After a VM is restored from a snapshot, every copy is the same machine until told otherwise.
// The agent (uid 1000, no capabilities) takes its new secret itself; what needs root in the
// guest (the wall clock, a reseed of the kernel's RNG, /etc/machine-id) is done by a helper the
// guest init starts as root, which reads only lines the agent writes on a pipe only the two of
// them hold, and answers each on a second one.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/awaitable.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <chrono>
#include <string>

#include "common/agent_protocol.h"
#include "common/result.h"

namespace cabin::agent {

namespace net = boost::asio;

// The root helper: reads restore lines from in_fd, applies each, answers "ok" or "error: ..."
// on out_fd, until in_fd ends. Returns the process's exit status.
int run_restore_helper(int in_fd, int out_fd);

// Applies one restore line: sets CLOCK_REALTIME to the host's time plus the time since, adds
// the seed to the kernel's RNG and reseeds it, and writes the machine-id to `machine_id_path`.
Result<void> apply_restore_line(const agent_protocol::RestoreLine& line,
                                const std::string& machine_id_path);

// The agent's end of the pipes to the helper.
class RestoreChannel {
 public:
  // Takes both descriptors, which the caller has marked close-on-exec before anything was
  // spawned (no command may inherit them).
  RestoreChannel(net::any_io_executor ex, int to_helper, int from_helper);

  // Hands the request to the helper and waits for its answer, within `timeout`.
  net::awaitable<Result<void>> apply(const agent_protocol::RestoredRequest& r,
                                     std::chrono::milliseconds timeout);

 private:
  net::posix::stream_descriptor out_;
  net::posix::stream_descriptor in_;
};

}  // namespace cabin::agent
