#include "common/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cerrno>
#include <fstream>
#include <sstream>

namespace cabin {
namespace {

Error spawn_error(const std::string& what, int err) {
  return make_error(Errc::kInvalidArgument, "spawn_failed", what + ": " + strerror(err));
}

}  // namespace

int pidfd_open(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

int pidfd_send_signal(int pidfd, int sig) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

Result<Pipe> make_pipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return make_error(Errc::kInternal, "pipe_failed", std::string("pipe2: ") + strerror(errno));
  }
  return Pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

Result<std::unique_ptr<ChildProcess>> ChildProcess::spawn(net::any_io_executor ex,
                                                          const SpawnOptions& opts) {
  if (opts.argv.empty()) return spawn_error("empty argv", EINVAL);

  UniqueFd devnull(::open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!devnull.valid()) return spawn_error("open /dev/null", errno);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  struct Cleanup {
    posix_spawn_file_actions_t* fa;
    posix_spawnattr_t* attr;
    ~Cleanup() {
      posix_spawn_file_actions_destroy(fa);
      posix_spawnattr_destroy(attr);
    }
  } cleanup{&fa, &attr};

  // Sources may sit on the very fds they are copied to, so every source is first parked above
  // all targets; dup2 onto the target clears close-on-exec, then closefrom drops the rest.
  std::vector<int> sources = {opts.stdin_fd < 0 ? devnull.get() : opts.stdin_fd,
                              opts.stdout_fd < 0 ? devnull.get() : opts.stdout_fd,
                              opts.stderr_fd < 0 ? devnull.get() : opts.stderr_fd};
  sources.insert(sources.end(), opts.extra_fds.begin(), opts.extra_fds.end());
  const int n = static_cast<int>(sources.size());
  int park_base = n;
  for (int fd : sources) park_base = std::max(park_base, fd + 1);
  for (int i = 0; i < n; ++i) posix_spawn_file_actions_adddup2(&fa, sources[i], park_base + i);
  for (int i = 0; i < n; ++i) posix_spawn_file_actions_adddup2(&fa, park_base + i, i);
  posix_spawn_file_actions_addclosefrom_np(&fa, n);
  if (opts.cwd) posix_spawn_file_actions_addchdir_np(&fa, opts.cwd->c_str());

  // The parent ignores SIGPIPE and may block signals; ignored dispositions survive exec, so
  // reset them. Its own process group: a terminal's Ctrl-C goes to the parent, which decides.
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGCHLD, SIGQUIT, SIGUSR1, SIGUSR2})
    sigaddset(&defaults, sig);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  sigset_t empty;
  sigemptyset(&empty);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);

  std::vector<char*> argv;
  for (const auto& a : opts.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : opts.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  pid_t pid = -1;
  int rc = opts.search_path ? posix_spawnp(&pid, argv[0], &fa, &attr, argv.data(), envp.data())
                            : posix_spawn(&pid, argv[0], &fa, &attr, argv.data(), envp.data());
  if (rc != 0) return spawn_error("cannot start '" + opts.argv[0] + "'", rc);

  // We are the parent and have not reaped it, so the pid cannot have been reused.
  int pidfd = pidfd_open(pid);
  if (pidfd < 0) {
    int err = errno;
    ::kill(-pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return make_error(Errc::kInternal, "pidfd_failed", std::string("pidfd_open: ") + strerror(err));
  }
  ::fcntl(pidfd, F_SETFD, FD_CLOEXEC);
  return std::unique_ptr<ChildProcess>(
      new ChildProcess(pid, net::posix::stream_descriptor(ex, pidfd)));
}

Result<std::unique_ptr<ChildProcess>> ChildProcess::adopt(net::any_io_executor ex, pid_t pid,
                                                         uint64_t start_ticks) {
  auto gone = [&] {
    return make_error(Errc::kNotFound, "process_gone",
                      "process " + std::to_string(pid) + " is gone");
  };
  if (pid <= 1) return gone();
  int pidfd = pidfd_open(pid);
  if (pidfd < 0) return gone();
  // Checked after the pidfd is open: if the start time matches now, the pidfd names that process.
  if (process_start_ticks(pid) != start_ticks) {
    ::close(pidfd);
    return gone();
  }
  ::fcntl(pidfd, F_SETFD, FD_CLOEXEC);
  std::unique_ptr<ChildProcess> p(new ChildProcess(pid, net::posix::stream_descriptor(ex, pidfd)));
  p->adopted_ = true;
  return p;
}

std::optional<uint64_t> process_start_ticks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return std::nullopt;
  // The command name (field 2) may hold spaces and parentheses: count from its closing one.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(stat.substr(close + 1));
  std::string field;
  // Fields 3..21, then 22: starttime.
  for (int i = 3; i <= 21; ++i) {
    if (!(rest >> field)) return std::nullopt;
  }
  uint64_t ticks = 0;
  if (!(rest >> ticks)) return std::nullopt;
  return ticks;
}

ChildProcess::~ChildProcess() {
  if (status_ || released_) return;
  kill_group(SIGKILL);
  if (adopted_) return;  // init reaps it
  int st = 0;
  while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
  }
}

bool ChildProcess::try_reap() {
  if (status_) return true;
  if (adopted_) {
    // Not our child: a pidfd turns readable when its process exits.
    struct pollfd p {
      pidfd_.native_handle(), POLLIN, 0
    };
    if (::poll(&p, 1, 0) != 1) return false;
    status_ = kUnknownStatus;
    return true;
  }
  int st = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &st, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == pid_) {
    status_ = st;
    return true;
  }
  if (r < 0) {
    // Someone else reaped it (not expected); report it as lost rather than hang.
    status_ = 0xff00;  // "exited with status 255"
    return true;
  }
  return false;
}

net::awaitable<int> ChildProcess::wait() {
  // The pidfd is registered edge-triggered, so check before waiting; no suspension lies between
  // this check and queueing the wait, and a later exit produces a fresh edge.
  while (!try_reap()) {
    boost::system::error_code ec;
    co_await pidfd_.async_wait(net::posix::stream_descriptor::wait_read,
                               net::redirect_error(net::use_awaitable, ec));
    if (ec == net::error::operation_aborted) continue;
    if (ec) {
      // Should not happen on a pidfd; fall back to a blocking reap rather than spin.
      int st = 0;
      while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
      }
      status_ = st;
    }
  }
  co_return *status_;
}

bool ChildProcess::wait_blocking(std::chrono::milliseconds timeout) {
  if (status_) return true;
  struct pollfd p {
    pidfd_.native_handle(), POLLIN, 0
  };
  int ready;
  do {
    ready = ::poll(&p, 1, static_cast<int>(timeout.count()));
  } while (ready < 0 && errno == EINTR);
  if (ready != 1) kill_group(SIGKILL);
  int st = 0;
  while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
  }
  status_ = st;
  return ready == 1;
}

void ChildProcess::signal(int sig) const { (void)pidfd_send_signal(pidfd_.native_handle(), sig); }

void ChildProcess::kill_group(int sig) const {
  // The group outlives its leader (Chromium's helpers), so signal it even after the leader exited.
  ::kill(-pid_, sig);
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return "killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return "stopped with wait status " + std::to_string(status);
}

}  // namespace cabin
