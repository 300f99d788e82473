// ChildProcess: a started host process that owns its end. Spawned with posix_spawn (no fork of a
// threaded process), in its own process group, with default signals and only the descriptors it
// is given; reaped through a pidfd; killed with its group and reaped if dropped while running.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <sys/types.h>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"

namespace cabin {

namespace net = boost::asio;

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0]: a path, or with search_path a name found in PATH
  bool search_path = false;
  std::vector<std::string> env;  // the child's whole environment, "K=V"
  std::optional<std::string> cwd;
  // The child's fds 0, 1, 2; -1 means /dev/null.
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  // Extra fds passed as 3, 4, ... in this order. Every other descriptor is closed in the child,
  // close-on-exec or not: Asio opens and accepts sockets without SOCK_CLOEXEC.
  std::vector<int> extra_fds;
};

class ChildProcess {
 public:
  // kInvalidArgument "spawn_failed" when the program cannot start (glibc reports exec and chdir
  // failures here: it spawns with CLONE_VFORK).
  static Result<std::unique_ptr<ChildProcess>> spawn(net::any_io_executor ex,
                                                     const SpawnOptions& opts);

  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  // A process an earlier cabind started, found by its pid and checked by its start time (in
  // clock ticks since boot, /proc/PID/stat's 22nd field), so that a recycled pid is never taken
  // for it. It is not our child: its exit is seen through the pidfd, its status is not known.
  static Result<std::unique_ptr<ChildProcess>> adopt(net::any_io_executor ex, pid_t pid,
                                                     uint64_t start_ticks);
  // Kills the group and reaps the child if nobody waited for it, unless released.
  ~ChildProcess();

  // Started by an earlier cabind (adopt()): status() is then kUnknownStatus once exited.
  bool adopted() const { return adopted_; }
  static constexpr int kUnknownStatus = -1;
  // Leaves the process running when this object goes: the next cabind adopts it.
  void release() { released_ = true; }

  pid_t pid() const { return pid_; }
  int pidfd() const { return pidfd_.native_handle(); }
  bool exited() const { return status_.has_value(); }
  // The wait status once exited.
  std::optional<int> status() const { return status_; }
  // Completes once the child has exited and been reaped; one waiter at a time.
  net::awaitable<int> wait();
  // Blocks until the child exits, killing its group once `timeout` has passed; true when it
  // exited by itself. For start-up probes only, never on a running io_context.
  bool wait_blocking(std::chrono::milliseconds timeout);
  // Signals the child alone, through its pidfd (no recycled pid is hit).
  void signal(int sig) const;
  // Signals the whole process group (the child is its leader).
  void kill_group(int sig) const;

 private:
  ChildProcess(pid_t pid, net::posix::stream_descriptor pidfd)
      : pid_(pid), pidfd_(std::move(pidfd)) {}
  bool try_reap();
  bool adopted_ = false;
  bool released_ = false;

  pid_t pid_;
  // mutable: native_handle() is not const in Asio 1.74.
  mutable net::posix::stream_descriptor pidfd_;
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

int pidfd_open(pid_t pid);
// When `pid` started, in clock ticks since boot; nullopt when there is no such process.
std::optional<uint64_t> process_start_ticks(pid_t pid);
int pidfd_send_signal(int pidfd, int sig);

}  // namespace cabin
