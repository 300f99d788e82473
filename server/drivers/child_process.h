// ChildProcess: a host process a driver starts (posix_spawn with default signals and its own process group, output on one pipe, a pidfd to wait on) and the coroutines that log its output and reap it.
#pragma once

#include <signal.h>
#include <sys/types.h>

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <chrono>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/log.h"
#include "common/result.h"
#include "common/unique_fd.h"

namespace cabin::drivers {

namespace net = boost::asio;

// A started child: its pid, a pidfd, and the read end of its stdout/stderr.
struct ChildProcess {
  pid_t pid = -1;
  UniqueFd pidfd;
  UniqueFd output;  // read end: the child's stdout and stderr
};

struct ChildSpawn {
  std::vector<std::string> argv;  // argv[0] is the path run
  std::vector<std::string> env;   // the child's whole environment
  std::filesystem::path cwd;      // empty: cabind's
  int pass_fd = -1;               // if >= 0: given to the child as fd 3
};

// posix_spawn (vfork-like, safe in a multithreaded process): stdin /dev/null, stdout and stderr
// on one pipe, default signal dispositions, nothing blocked, its own process group.
Result<ChildProcess> spawn_child(const ChildSpawn& s);

int pidfd_open(pid_t pid);
int pidfd_send_signal(int pidfd, int sig);

// Polls `done` every 5 ms until it holds (true) or `timeout` passes (false).
net::awaitable<bool> poll_until(net::any_io_executor ex, std::function<bool()> done,
                                std::chrono::milliseconds timeout);

// A started child as the driver's coroutines see it. A driver's per-sandbox state derives from
// it, so log_child_output and reap_child keep that state alive while they run.
struct RunningChild {
  RunningChild(net::any_io_executor ex, ChildProcess p, const std::string& logger_name);

  net::any_io_executor executor;
  std::shared_ptr<spdlog::logger> log;
  std::string id;
  pid_t pid;
  net::posix::stream_descriptor pidfd;
  net::posix::stream_descriptor output;

  bool output_done = false;
  std::string last_line;
  size_t lines_logged = 0;
  // The newest lines of output (console, agent, launcher), for GET /v1/sessions/{id}/logs.
  std::deque<std::string> tail;
};

// How a driver's child output is logged: "[ID] SOURCE: LINE".
struct OutputStyle {
  std::string source;    // "sandbox", "vm"
  bool strip_cr = false;  // drop trailing '\r's before cleaning a line
  std::function<void(const std::string&)> on_line;  // optional: each logged-or-not line
};

// Bounds on what a child may make cabind log: it is hostile.
constexpr size_t kMaxLogLine = 2048;
constexpr size_t kMaxLogLines = 10000;
constexpr size_t kMaxTailLines = 500;

// The first kMaxLogLine bytes of `raw`, control characters (not tabs) as '?'.
std::string clean_output_line(std::string_view raw, bool strip_cr);

// Logs the child's output line by line, with the session id; sets output_done at EOF.
net::awaitable<void> log_child_output(std::shared_ptr<RunningChild> s, OutputStyle style);

// Waits for the child to exit and reaps it; then waits (at most 500 ms) for its output to be
// drained, so last_line explains the end. `what` names the child in the log ("launcher").
net::awaitable<siginfo_t> reap_child(std::shared_ptr<RunningChild> s, std::string what);

}  // namespace cabin::drivers
