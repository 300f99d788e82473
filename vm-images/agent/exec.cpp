#include "vm-images/agent/exec.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "common/capabilities.h"
#include "common/notifier.h"
#include "common/spawn.h"
#include "vm-images/agent/exec_filter.h"
#include "vm-images/agent/process.h"

namespace cabin::agent {
namespace {

using Clock = std::chrono::steady_clock;

struct Capture {
  explicit Capture(net::any_io_executor ex) : pipe(ex) {}
  net::posix::stream_descriptor pipe;
  std::string data;
  bool truncated = false;
  bool done = false;
};

// Shared by the sub-coroutines of one exec; they hold it by shared_ptr so none outlives it.
struct ExecState {
  explicit ExecState(net::any_io_executor ex) : changed(ex), out(ex), err(ex), in(ex) {}
  Notifier changed;
  Capture out;
  Capture err;
  net::posix::stream_descriptor in;
  std::string stdin_data;
  bool stdin_done = true;
  std::unique_ptr<ChildProcess> child;
  bool exited = false;
};

// Reads until EOF; past the cap it keeps reading and discarding so the child never blocks.
net::awaitable<void> read_capture(std::shared_ptr<ExecState> st, Capture* cap, size_t limit) {
  std::array<char, 16384> buf;
  for (;;) {
    boost::system::error_code ec;
    size_t n = co_await cap->pipe.async_read_some(net::buffer(buf),
                                                  net::redirect_error(net::use_awaitable, ec));
    size_t room = limit - std::min(limit, cap->data.size());
    cap->data.append(buf.data(), std::min(n, room));
    if (n > room) cap->truncated = true;
    if (ec) break;
  }
  cap->done = true;
  st->changed.notify_all();
}

net::awaitable<void> write_stdin(std::shared_ptr<ExecState> st) {
  boost::system::error_code ec;
  // EPIPE when the command does not read its input is fine: SIGPIPE is ignored in the agent.
  co_await net::async_write(st->in, net::buffer(st->stdin_data),
                            net::redirect_error(net::use_awaitable, ec));
  st->in.close(ec);
  st->stdin_done = true;
  st->changed.notify_all();
}

net::awaitable<void> wait_child(std::shared_ptr<ExecState> st) {
  co_await st->child->wait();
  st->exited = true;
  st->changed.notify_all();
}

// posix_spawn's child starts with this thread's capabilities. For the one spawn of the helper
// that becomes the exec uid, CAP_SETUID goes inheritable and ambient (so it survives the helper's
// execve); before and after, this thread's children get none.
class SetuidForSpawn {
 public:
  static Result<SetuidForSpawn> raise() {
    auto now = caps::get();
    if (!now) return now.error();
    caps::Sets s = *now;
    s.inheritable |= caps::bit(CAP_SETUID);
    if (auto r = caps::set(s); !r) return r.error();
    SetuidForSpawn raised(*now);
    if (auto r = caps::raise_ambient(caps::bit(CAP_SETUID)); !r) return r.error();
    return raised;
  }
  SetuidForSpawn(SetuidForSpawn&& o) noexcept : before_(std::exchange(o.before_, std::nullopt)) {}
  ~SetuidForSpawn() {
    if (!before_) return;
    (void)caps::clear_ambient();
    (void)caps::set(*before_);
  }

 private:
  explicit SetuidForSpawn(caps::Sets before) : before_(before) {}
  std::optional<caps::Sets> before_;
};

}  // namespace

net::awaitable<Result<ExecResult>> run_exec(ExecRequest spec, ExecOptions opts) {
  auto ex = co_await net::this_coro::executor;
  const auto start = Clock::now();

  if (spec.cwd) {
    struct stat sb;
    if (::stat(spec.cwd->c_str(), &sb) != 0 || !S_ISDIR(sb.st_mode)) {
      co_return make_error(Errc::kInvalidArgument, "spawn_failed",
                           "cwd '" + *spec.cwd + "' is not a directory");
    }
  }

  auto in = make_pipe();
  auto out = make_pipe();
  auto err = make_pipe();
  if (!in) co_return in.error();
  if (!out) co_return out.error();
  if (!err) co_return err.error();

  SpawnOptions so;
  so.search_path = true;
  if (!opts.filter_helper.empty() && !spec.argv.empty()) {
    auto program = find_program(spec.argv[0]);
    if (!program) co_return program.error();
    so.argv = filtered_exec_argv(opts.filter_helper, opts.exec_uid, *program, spec.argv);
  } else {
    so.argv = std::move(spec.argv);
  }
  so.env = child_environment({spec.env.begin(), spec.env.end()});
  so.cwd = spec.cwd;
  so.stdin_fd = in->read.get();
  so.stdout_fd = out->write.get();
  so.stderr_fd = err->write.get();
  std::optional<SetuidForSpawn> setuid;
  if (opts.exec_uid && !opts.filter_helper.empty()) {
    auto raised = SetuidForSpawn::raise();
    if (!raised) co_return raised.error();
    setuid.emplace(std::move(*raised));
  }
  auto child = ChildProcess::spawn(ex, so);
  setuid.reset();
  if (!child) co_return child.error();
  // Drop our copies of the child's ends so EOF arrives when the child's side closes.
  in->read.reset();
  out->write.reset();
  err->write.reset();

  auto st = std::make_shared<ExecState>(ex);
  st->child = std::move(*child);
  st->out.pipe.assign(out->read.release());
  st->err.pipe.assign(err->read.release());
  st->in.assign(in->write.release());
  st->stdin_data = std::move(spec.stdin_data);
  st->stdin_done = false;

  cabin::spawn(ex, read_capture(st, &st->out, static_cast<size_t>(spec.max_output_bytes)),
               "exec stdout");
  cabin::spawn(ex, read_capture(st, &st->err, static_cast<size_t>(spec.max_output_bytes)),
               "exec stderr");
  cabin::spawn(ex, write_stdin(st), "exec stdin");
  cabin::spawn(ex, wait_child(st), "exec exit");

  ExecResult r;
  const auto deadline = start + std::chrono::milliseconds(spec.timeout_ms);
  while (!st->exited && Clock::now() < deadline) co_await st->changed.wait_until(deadline);
  if (!st->exited) {
    r.timed_out = true;
    st->child->kill_group(SIGKILL);
    while (!st->exited) co_await st->changed.wait_until(Clock::time_point::max());
  }

  // Background processes the command left behind may hold the pipes open: read what comes
  // within the grace period, then close.
  const auto drain_deadline = Clock::now() + opts.drain_grace;
  auto pending = [&] { return !st->out.done || !st->err.done || !st->stdin_done; };
  while (pending() && Clock::now() < drain_deadline) {
    co_await st->changed.wait_until(drain_deadline);
  }
  if (pending()) {
    boost::system::error_code ignored;
    // close() rather than cancel(): a read issued after a cancel would wait again.
    st->out.pipe.close(ignored);
    st->err.pipe.close(ignored);
    st->in.close(ignored);
    while (pending()) co_await st->changed.wait_until(Clock::time_point::max());
  }

  int status = *st->child->status();
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  r.stdout_data = std::move(st->out.data);
  r.stderr_data = std::move(st->err.data);
  r.stdout_truncated = st->out.truncated;
  r.stderr_truncated = st->err.truncated;
  r.duration_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  co_return r;
}


}  // namespace cabin::agent
