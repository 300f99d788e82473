// ChildProcess: a spawned child in its own process group, reaped through a pidfd.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <sys/types.h>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"

namespace cabin::agent {

namespace net = boost::asio;

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH
  std::vector<std::string> env;   // complete environment, "K=V"
  std::optional<std::string> cwd;
  // The child's fds 0, 1, 2; -1 means /dev/null.
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  // Extra fds passed as 3, 4, ... in this order; every other fd is closed in the child.
  std::vector<int> extra_fds;
};

// The agent's environment (without the secret, which main removed) plus overrides.
std::vector<std::string> child_environment(
    const std::vector<std::pair<std::string, std::string>>& overrides);

class ChildProcess {
 public:
  // Spawns with posix_spawn: new process group, default signal dispositions, empty signal mask.
  static Result<std::unique_ptr<ChildProcess>> spawn(net::any_io_executor ex,
                                                     const SpawnOptions& opts);

  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  // Kills the group and reaps the child if nobody waited for it.
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  bool exited() const { return status_.has_value(); }
  // The wait status once exited.
  std::optional<int> status() const { return status_; }
  // Completes once the child has exited and been reaped; one waiter at a time.
  net::awaitable<int> wait();
  // Signals the whole process group (the child is its leader).
  void kill_group(int sig) const;

 private:
  ChildProcess(pid_t pid, net::posix::stream_descriptor pidfd)
      : pid_(pid), pidfd_(std::move(pidfd)) {}
  bool try_reap();

  pid_t pid_;
  net::posix::stream_descriptor pidfd_;
  std::optional<int> status_;
};

// "exited with status 1" / "killed by signal 9 (Killed)".
std::string describe_wait_status(int status);

// A pipe with both ends close-on-exec.
struct Pipe {
  UniqueFd read;
  UniqueFd write;
};
Result<Pipe> make_pipe();

}  // namespace cabin::agent
