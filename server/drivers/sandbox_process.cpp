#include "server/drivers/sandbox_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "common/spawn.h"
#include "server/drivers/namespace/sys_util.h"

namespace cabin::drivers {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

// A FIFO at `path` (which must not exist), both ends open: the read end non-blocking for the
// output pump, the write end for the child.
Result<Pipe> make_output_fifo(const std::filesystem::path& path) {
  if (::mkfifo(path.c_str(), 0600) != 0) return nsbox::sys_error("mkfifo " + path.string());
  Pipe p;
  // A FIFO's writer may open only once a reader has.
  auto read = open_output_fifo(path);
  if (!read) return read.error();
  p.read = std::move(*read);
  p.write = UniqueFd(::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!p.write.valid()) return nsbox::sys_error("open " + path.string());
  return p;
}

}  // namespace

Result<UniqueFd> open_output_fifo(const std::filesystem::path& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) return nsbox::sys_error("open " + path.string());
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISFIFO(st.st_mode))
    return make_error(Errc::kInternal, "sandbox_system", path.string() + " is not a FIFO");
  return fd;
}

std::pair<int64_t, uint64_t> handoff_process(const nlohmann::json& handoff) {
  std::pair<int64_t, uint64_t> out{0, 0};
  if (!handoff.is_object()) return out;
  if (auto p = handoff.find("pid"); p != handoff.end() && p->is_number_integer())
    out.first = p->get<int64_t>();
  if (auto s = handoff.find("start"); s != handoff.end() && s->is_number_unsigned())
    out.second = s->get<uint64_t>();
  return out;
}

Result<HostChild> adopt_host_child(net::any_io_executor ex, pid_t pid, uint64_t start_ticks,
                                   const std::filesystem::path& output_fifo) {
  auto process = ChildProcess::adopt(ex, pid, start_ticks);
  if (!process) return process.error();
  auto out = open_output_fifo(output_fifo);
  if (!out) return out.error();
  return HostChild{std::move(*process), std::move(*out)};
}

Result<HostChild> spawn_host_child(net::any_io_executor ex, const HostSpawn& s) {
  auto out = s.output_fifo.empty() ? make_pipe() : make_output_fifo(s.output_fifo);
  if (!out) return out.error();
  SpawnOptions o;
  o.argv = s.argv;
  o.env = s.env;
  if (!s.cwd.empty()) o.cwd = s.cwd.string();
  o.stdout_fd = out->write.get();
  o.stderr_fd = out->write.get();
  if (s.pass_fd >= 0) o.extra_fds = {s.pass_fd};
  auto child = ChildProcess::spawn(std::move(ex), o);
  // A program cabind runs that cannot start is cabind's fault, not the client's.
  if (!child) return make_error(Errc::kInternal, "sandbox_system", child.error().message);
  return HostChild{std::move(*child), std::move(out->read)};
}

std::string read_finished_output(const UniqueFd& output, size_t limit) {
  std::string out;
  ::fcntl(output.get(), F_SETFL, O_NONBLOCK);
  char buf[1024];
  for (ssize_t n; (n = ::read(output.get(), buf, sizeof buf)) > 0 && out.size() < limit;)
    out.append(buf, static_cast<size_t>(n));
  return out;
}

Result<std::filesystem::path> make_sandbox_dir(const DriverInfo& info, const SandboxSpec& spec,
                                               const std::filesystem::path& run_root) {
  if (!info.available)
    return make_error(Errc::kUnavailable, "driver_unavailable", info.unavailable_reason);
  if (!nsbox::valid_sandbox_id(spec.session_id))
    return make_error(Errc::kInvalidArgument, "invalid_session_id",
                      "session id must be [a-z0-9_]{1,64}");
  std::error_code ec;
  std::filesystem::create_directories(run_root, ec);
  std::filesystem::path dir = run_root / spec.session_id;
  if (::mkdir(dir.c_str(), 0700) != 0) {
    if (errno == EEXIST)
      return make_error(Errc::kConflict, "sandbox_exists",
                        "a sandbox dir for " + spec.session_id + " exists");
    return nsbox::sys_error("mkdir " + dir.string());
  }
  return dir;
}

DriverInfo unavailable_driver(DriverInfo info, std::string why) {
  info.available = false;
  info.unavailable_reason = std::move(why);
  return info;
}

Result<void> write_private_file(const std::filesystem::path& path, std::string_view data) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd.valid()) return nsbox::sys_error("create " + path.string());
  if (::write(fd.get(), data.data(), data.size()) != static_cast<ssize_t>(data.size()))
    return nsbox::sys_error("write " + path.string());
  return {};
}

bool executable(const std::filesystem::path& p) {
  return !p.empty() && ::access(p.c_str(), X_OK) == 0;
}

ExitCode exit_code_of(int wait_status) {
  if (WIFEXITED(wait_status)) return {CLD_EXITED, WEXITSTATUS(wait_status)};
  if (WIFSIGNALED(wait_status)) return {CLD_KILLED, WTERMSIG(wait_status)};
  return {CLD_KILLED, SIGKILL};
}

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

SandboxProcess::SandboxProcess(net::any_io_executor ex, HostChild child,
                               SandboxProcessConfig config)
    : executor_(ex),
      config_(std::move(config)),
      log_(logger(config_.logger)),
      child_(std::move(child.process)),
      output_(ex, child.output.release()),
      changed_(ex) {}

void SandboxProcess::start() {
  auto self = shared_from_this();
  cabin::spawn(executor_, pump_output(self), "[" + id() + "] " + config_.source + " output");
  cabin::spawn(executor_, watch_exit(self), "[" + id() + "] " + config_.what + " exit");
}

Result<void> SandboxProcess::check_live() const {
  if (ended()) return make_error(Errc::kUnavailable, "sandbox_ended", "the sandbox has ended");
  return {};
}

net::awaitable<void> SandboxProcess::pump_output(std::shared_ptr<SandboxProcess> self) {
  SandboxProcess& s = *self;
  std::string pending;
  std::array<char, 4096> buf;
  for (;;) {
    boost::system::error_code ec;
    size_t n = co_await s.output_.async_read_some(net::buffer(buf),
                                                  net::redirect_error(net::use_awaitable, ec));
    if (ec) break;
    pending.append(buf.data(), n);
    size_t pos;
    while ((pos = pending.find('\n')) != std::string::npos || pending.size() > kMaxLogLine) {
      size_t len = pos == std::string::npos ? kMaxLogLine : pos;
      std::string line =
          clean_output_line(std::string_view(pending).substr(0, len), s.config_.strip_cr);
      pending.erase(0, pos == std::string::npos ? len : pos + 1);
      if (line.empty()) continue;
      s.last_line_ = line;
      s.tail_.push_back(line);
      if (s.tail_.size() > kMaxTailLines) s.tail_.pop_front();
      s.on_output_line(line);
      if (s.lines_logged_ < kMaxLogLines) {
        s.log_->info("[{}] {}: {}", s.id(), s.config_.source, line);
      } else if (s.lines_logged_ == kMaxLogLines) {
        s.log_->warn("[{}] {} output: further lines not logged", s.id(), s.config_.source);
      }
      ++s.lines_logged_;
    }
  }
  if (!pending.empty()) s.last_line_ = clean_output_line(pending, s.config_.strip_cr);
  s.output_done_ = true;
  s.changed_.notify_all();
}

net::awaitable<void> SandboxProcess::watch_exit(std::shared_ptr<SandboxProcess> self) {
  SandboxProcess& s = *self;
  const int status = co_await s.child_->wait();
  // The last lines explain an early failure; the pipe closes right after the child dies.
  co_await s.wait_output_done(500ms);
  const ExitCode code = s.child_->adopted() ? ExitCode{0, 0} : exit_code_of(status);
  s.reason_ = s.destroy_started_ ? "destroyed" : s.exit_reason(code);
  s.exited_ = true;
  s.log_->info("[{}] sandbox ended: {}", s.id(), s.reason_);
  s.changed_.notify_all();
}

net::awaitable<bool> SandboxProcess::wait_for(std::chrono::milliseconds timeout, const bool& flag) {
  const auto deadline = Clock::now() + timeout;
  while (!flag) {
    if (Clock::now() >= deadline) co_return false;
    co_await changed_.wait_until(deadline);
  }
  co_return true;
}

net::awaitable<bool> SandboxProcess::wait_exited(std::chrono::milliseconds timeout) {
  co_return co_await wait_for(timeout, exited_);
}

net::awaitable<bool> SandboxProcess::wait_output_done(std::chrono::milliseconds timeout) {
  co_return co_await wait_for(timeout, output_done_);
}

net::awaitable<std::string> SandboxProcess::wait_exit() {
  auto self = shared_from_this();
  while (!exited_) co_await changed_.wait_until(Clock::time_point::max());
  co_return reason_;
}

net::awaitable<void> SandboxProcess::destroy() {
  auto self = shared_from_this();
  if (destroy_started_) {
    while (!destroy_done_) co_await changed_.wait_until(Clock::time_point::max());
    co_return;
  }
  destroy_started_ = true;
  if (!exited_) {
    co_await ask_to_stop();
    if (!co_await wait_exited(config_.stop_timeout)) {
      log_->warn("[{}] {} did not stop in time; killing", id(), config_.what);
      child_->signal(SIGKILL);
      if (!co_await wait_exited(5s))
        log_->error("[{}] {} {} did not exit after SIGKILL", id(), config_.what, pid());
    }
  }
  co_await clean_up();
  // Only now, with every sandbox process dead, is a sandbox-writable dir safe to walk.
  if (!config_.run_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(config_.run_dir, ec);
    if (ec) log_->error("[{}] remove {}: {}", id(), config_.run_dir.string(), ec.message());
  }
  boost::system::error_code ignored;
  output_.close(ignored);
  destroy_done_ = true;
  changed_.notify_all();
}

void SandboxProcess::release() {
  released_ = true;
  child_->release();
  log_->info("[{}] {} left running for the next cabind", id(), config_.what);
}

void SandboxProcess::destroy_in_background() {
  if (destroy_started_ || released_) return;
  // Dropped without destroy(): clean up in the background rather than leak a sandbox.
  log_->warn("[{}] sandbox dropped without destroy(); destroying", id());
  cabin::spawn(
      executor_,
      [self = shared_from_this()]() -> net::awaitable<void> { co_await self->destroy(); },
      "[" + id() + "] destroy a dropped sandbox");
}

void SandboxProcess::disown() {
  destroy_started_ = true;
  destroy_done_ = true;
  changed_.notify_all();
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : std::to_string(sig);
}

}  // namespace cabin::drivers
