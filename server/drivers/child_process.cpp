#include "server/drivers/child_process.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cerrno>
#include <cstring>

#include "server/drivers/namespace/sys_util.h"

namespace cabin::drivers {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

int pidfd_open(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

int pidfd_send_signal(int pidfd, int sig) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

Result<ChildProcess> spawn_child(const ChildSpawn& s) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return nsbox::sys_error("pipe");
  UniqueFd out_r(out[0]), out_w(out[1]);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_w.get(), 1);
  posix_spawn_file_actions_adddup2(&fa, out_w.get(), 2);
  // dup2 clears FD_CLOEXEC on the copy (glibc clears it too when pass_fd is already 3).
  if (s.pass_fd >= 0) posix_spawn_file_actions_adddup2(&fa, s.pass_fd, 3);
  // Everything else is closed, CLOEXEC or not: Asio opens and accepts sockets without
  // SOCK_CLOEXEC, and a sandbox holding cabind's listener could accept operators' requests.
  posix_spawn_file_actions_addclosefrom_np(&fa, s.pass_fd >= 0 ? 4 : 3);
  if (!s.cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, s.cwd.c_str());
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  // cabind ignores SIGPIPE and may block signals; none of that belongs to the child.
  for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGCHLD, SIGQUIT, SIGUSR1, SIGUSR2})
    sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  // Its own process group: a terminal's Ctrl-C goes to cabind, which decides.
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);

  std::vector<std::string> argv = s.argv, env = s.env;
  std::vector<char*> cargv, cenv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  for (auto& e : env) cenv.push_back(e.data());
  cenv.push_back(nullptr);

  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, cargv[0], &fa, &attr, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return nsbox::sys_error("spawn " + argv[0], rc);

  ChildProcess p;
  p.pid = pid;
  p.output = std::move(out_r);
  // We are the parent and have not reaped it, so the pid cannot have been reused.
  p.pidfd = UniqueFd(pidfd_open(pid));
  if (!p.pidfd.valid()) {
    int err = errno;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return nsbox::sys_error("pidfd_open", err);
  }
  return p;
}

net::awaitable<bool> poll_until(net::any_io_executor ex, std::function<bool()> done,
                                std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  net::steady_timer timer(ex);
  while (!done()) {
    if (Clock::now() >= deadline) co_return false;
    timer.expires_after(5ms);
    boost::system::error_code ec;
    co_await timer.async_wait(net::redirect_error(net::use_awaitable, ec));
  }
  co_return true;
}

RunningChild::RunningChild(net::any_io_executor ex, ChildProcess p, const std::string& logger_name)
    : executor(ex),
      log(logger(logger_name)),
      pid(p.pid),
      pidfd(ex, p.pidfd.release()),
      output(ex, p.output.release()) {}

std::string clean_output_line(std::string_view raw, bool strip_cr) {
  if (strip_cr) {
    while (!raw.empty() && raw.back() == '\r') raw.remove_suffix(1);
  }
  std::string line(raw.substr(0, kMaxLogLine));
  for (char& c : line) {
    if (static_cast<unsigned char>(c) < 0x20 && c != '\t') c = '?';
  }
  return line;
}

net::awaitable<void> log_child_output(std::shared_ptr<RunningChild> s, OutputStyle style) {
  std::string pending;
  std::array<char, 4096> buf;
  for (;;) {
    boost::system::error_code ec;
    size_t n = co_await s->output.async_read_some(net::buffer(buf),
                                                  net::redirect_error(net::use_awaitable, ec));
    if (ec) break;
    pending.append(buf.data(), n);
    size_t pos;
    while ((pos = pending.find('\n')) != std::string::npos || pending.size() > kMaxLogLine) {
      size_t len = pos == std::string::npos ? kMaxLogLine : pos;
      std::string line =
          clean_output_line(std::string_view(pending).substr(0, len), style.strip_cr);
      pending.erase(0, pos == std::string::npos ? len : pos + 1);
      if (line.empty()) continue;
      s->last_line = line;
      s->tail.push_back(line);
      if (s->tail.size() > kMaxTailLines) s->tail.pop_front();
      if (style.on_line) style.on_line(line);
      if (s->lines_logged < kMaxLogLines) {
        s->log->info("[{}] {}: {}", s->id, style.source, line);
      } else if (s->lines_logged == kMaxLogLines) {
        s->log->warn("[{}] {} output: further lines not logged", s->id, style.source);
      }
      ++s->lines_logged;
    }
  }
  if (!pending.empty()) s->last_line = clean_output_line(pending, style.strip_cr);
  s->output_done = true;
}

net::awaitable<siginfo_t> reap_child(std::shared_ptr<RunningChild> s, std::string what) {
  boost::system::error_code ec;
  co_await s->pidfd.async_wait(net::posix::stream_descriptor::wait_read,
                               net::redirect_error(net::use_awaitable, ec));
  siginfo_t info{};
  if (::waitid(P_PID, static_cast<id_t>(s->pid), &info, WEXITED) != 0) {
    s->log->error("[{}] waitid {} {}: {}", s->id, what, s->pid, std::strerror(errno));
    info.si_code = CLD_KILLED;
    info.si_status = SIGKILL;
  }
  // The last lines explain an early failure; the pipe closes right after the child dies.
  co_await poll_until(
      s->executor, [&] { return s->output_done; }, 500ms);
  co_return info;
}

}  // namespace cabin::drivers
