#include "vm-images/agent/restore.h"

#include <fcntl.h>
#include <linux/random.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include <boost/asio/read_until.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "common/unique_fd.h"

namespace cabin::agent {
namespace {

int64_t monotonic_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

Error sys_error(const std::string& what) {
  return make_error(Errc::kInternal, "restore_failed", what + ": " + std::strerror(errno));
}

// The helper's descriptors share their open files with the agent's, which its event loop makes
// non-blocking: so the helper waits with poll() and takes EAGAIN as "not yet".
bool wait_for(int fd, short events) {
  pollfd p{fd, events, 0};
  while (::poll(&p, 1, -1) < 0) {
    if (errno != EINTR) return false;
  }
  return true;
}

bool write_all(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t n = ::write(fd, s.data(), s.size());
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
      if (!wait_for(fd, POLLOUT)) return false;
      continue;
    }
    if (n <= 0) return false;
    s.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

}  // namespace

Result<void> apply_restore_line(const agent_protocol::RestoreLine& line,
                                const std::string& machine_id_path) {
  // The clock first: it is what the host's figure goes stale for.
  const int64_t target = line.unix_ns + std::max<int64_t>(0, monotonic_ns() - line.monotonic_ns);
  const timespec ts{static_cast<time_t>(target / 1000000000), static_cast<long>(target % 1000000000)};
  if (::clock_settime(CLOCK_REALTIME, &ts) != 0) return sys_error("clock_settime");

  // Mixed in and credited, then the CRNG rekeyed at once: a write to /dev/urandom alone leaves
  // every copy drawing the same bytes until the kernel's next scheduled reseed.
  UniqueFd rnd(::open("/dev/urandom", O_RDWR | O_CLOEXEC));
  if (!rnd.valid()) return sys_error("open /dev/urandom");
  std::vector<char> buf(sizeof(rand_pool_info) + line.seed.size());
  auto* info = reinterpret_cast<rand_pool_info*>(buf.data());
  info->entropy_count = static_cast<int>(line.seed.size() * 8);
  info->buf_size = static_cast<int>(line.seed.size());
  std::memcpy(info->buf, line.seed.data(), line.seed.size());
  if (::ioctl(rnd.get(), RNDADDENTROPY, info) != 0) return sys_error("RNDADDENTROPY");
  if (::ioctl(rnd.get(), RNDRESEEDCRNG) != 0) return sys_error("RNDRESEEDCRNG");

  if (line.machine_id.empty()) return {};  // resumed: still the same machine
  UniqueFd id(::open(machine_id_path.c_str(), O_WRONLY | O_TRUNC | O_NOFOLLOW | O_CLOEXEC));
  if (!id.valid()) return sys_error("open " + machine_id_path);
  if (!write_all(id.get(), line.machine_id + "\n")) return sys_error("write machine-id");
  return {};
}

int run_restore_helper(int in_fd, int out_fd) {
  std::string pending;
  char chunk[256];
  for (;;) {
    const size_t nl = pending.find('\n');
    if (nl == std::string::npos) {
      if (pending.size() > agent_protocol::kMaxRestoreLine) {
        // Not a line the agent writes: drop it and answer, so that the agent does not hang.
        pending.clear();
        if (!write_all(out_fd, "error: line too long\n")) return 1;
        continue;
      }
      if (!wait_for(in_fd, POLLIN)) return 1;
      const ssize_t n = ::read(in_fd, chunk, sizeof chunk);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) return 0;
      pending.append(chunk, static_cast<size_t>(n));
      continue;
    }
    const std::string line = pending.substr(0, nl + 1);
    pending.erase(0, nl + 1);
    auto parsed = agent_protocol::parse_restore_line(line);
    Result<void> done = parsed ? apply_restore_line(*parsed, "/run/machine-id") : parsed.error();
    std::string answer = done ? "ok" : "error: " + done.error().message;
    std::replace(answer.begin(), answer.end(), '\n', ' ');
    if (!write_all(out_fd, answer + "\n")) return 1;
  }
}

RestoreChannel::RestoreChannel(net::any_io_executor ex, int to_helper, int from_helper)
    : out_(ex), in_(ex) {
  out_.assign(to_helper);
  in_.assign(from_helper);
}

net::awaitable<Result<void>> RestoreChannel::apply(const agent_protocol::RestoredRequest& r,
                                                   std::chrono::milliseconds timeout) {
  net::steady_timer timer(out_.get_executor());
  timer.expires_after(timeout);
  bool timed_out = false;
  timer.async_wait([&](const boost::system::error_code& ec) {
    if (ec) return;
    timed_out = true;
    out_.cancel();
    in_.cancel();
  });
  const std::string line = agent_protocol::format_restore_line(r, monotonic_ns());
  boost::system::error_code ec;
  co_await net::async_write(out_, net::buffer(line), net::redirect_error(net::use_awaitable, ec));
  std::string answer;
  if (!ec) {
    co_await net::async_read_until(in_, net::dynamic_buffer(answer, 1024), '\n',
                                   net::redirect_error(net::use_awaitable, ec));
  }
  timer.cancel();
  if (timed_out)
    co_return make_error(Errc::kTimeout, "restore_timeout", "the guest's restore helper did not answer");
  if (ec)
    co_return make_error(Errc::kInternal, "restore_failed", "restore helper: " + ec.message());
  answer.resize(answer.find('\n'));
  if (answer != "ok")
    co_return make_error(Errc::kInternal, "restore_failed", "restore helper: " + answer);
  co_return Result<void>{};
}

}  // namespace cabin::agent
