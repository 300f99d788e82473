#include "server/drivers/microvm/qmp.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <string_view>

#include "common/bounded_json.h"
#include "common/cloexec.h"
#include "common/unique_fd.h"

namespace cabin::drivers {
namespace {

using nlohmann::json;
using local = net::local::stream_protocol;

// QEMU is a host process, but it runs guest-controlled device models: bound what we read.
constexpr size_t kMaxQmpLine = 64 * 1024;
// Events QEMU may interleave before a command's answer (STOP, RESUME, ...).
constexpr int kMaxEventsPerCommand = 64;

Error qmp_error(std::string what) {
  return make_error(Errc::kBadGateway, "qmp_failed", "QMP: " + std::move(what));
}

// The name a state file's descriptor gets in QEMU's monitor (getfd).
constexpr const char* kStateFdName = "cabin-state";
// A migration's max-bandwidth that never throttles (QEMU takes at most SIZE_MAX).
constexpr uint64_t kUnthrottledBytesPerSecond = uint64_t{1} << 40;

// One connection to a QEMU's monitor, capabilities negotiated, everything on it bounded by one
// deadline: a timer closes the socket when it passes.
class QmpSession {
 public:
  QmpSession(net::any_io_executor ex, std::chrono::milliseconds timeout)
      : sock_(std::make_shared<local::socket>(ex)), timer_(ex), buf_(kMaxQmpLine) {
    timer_.expires_after(timeout);
    // The socket is shared with the timer's handler, so a late expiry never touches a dead one.
    timer_.async_wait([sock = sock_](boost::system::error_code ec) {
      if (!ec) {
        boost::system::error_code ignored;
        sock->close(ignored);
      }
    });
  }
  ~QmpSession() {
    timer_.cancel();
    boost::system::error_code ignored;
    sock_->close(ignored);
  }
  QmpSession(const QmpSession&) = delete;
  QmpSession& operator=(const QmpSession&) = delete;

  net::awaitable<Result<void>> open(const std::filesystem::path& dir,
                                    const std::string& socket_name) {
    // Through a descriptor of the dir: the socket path then never exceeds sun_path's 108 bytes.
    UniqueFd dirfd(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!dirfd.valid()) co_return qmp_error("cannot open " + dir.string());
    boost::system::error_code ec;
    open_cloexec(*sock_, local(), ec);
    if (!ec) {
      co_await sock_->async_connect(
          local::endpoint("/proc/self/fd/" + std::to_string(dirfd.get()) + "/" + socket_name),
          net::redirect_error(net::use_awaitable, ec));
    }
    if (ec) co_return qmp_error("connect: " + ec.message());
    auto greeting = co_await read_message();
    if (!greeting) co_return greeting.error();
    if (greeting->kind != QmpKind::kGreeting) co_return qmp_error("no greeting");
    json none = json::value_t::discarded;
    auto caps = co_await execute("qmp_capabilities", std::move(none), -1);
    if (!caps) co_return caps.error();
    co_return Result<void>{};
  }

  // Runs one command and answers what it returned, skipping events. With `fd`, the descriptor
  // travels with the command's bytes (SCM_RIGHTS), as getfd wants it.
  // (No default arguments: GCC 12 destroys their temporaries twice in a coroutine.)
  net::awaitable<Result<json>> execute(const std::string& name, json arguments, int fd) {
    json request = {{"execute", name}};
    if (!arguments.is_discarded()) request["arguments"] = std::move(arguments);
    const std::string req = request.dump() + "\n";
    boost::system::error_code wec;
    if (fd >= 0) {
      wec = co_await send_with_fd(req, fd);
    } else {
      co_await net::async_write(*sock_, net::buffer(req),
                                net::redirect_error(net::use_awaitable, wec));
    }
    if (wec) co_return qmp_error("write: " + wec.message());
    for (int i = 0; i <= kMaxEventsPerCommand; ++i) {
      auto m = co_await read_message();
      if (!m) co_return m.error();
      switch (m->kind) {
        case QmpKind::kReturn:
          co_return std::move(m->value);
        case QmpKind::kError:
          co_return qmp_error(name + ": " + m->text);
        case QmpKind::kEvent:
          continue;
        default:
          co_return qmp_error(name + ": unexpected answer (" + m->text + ")");
      }
    }
    co_return qmp_error(name + ": no answer among the events");
  }

  // `verb` (migrate, migrate-incoming) of a VM's state over `fd`, with x-ignore-shared (RAM in
  // a shared file stays out of the stream); answers once the migration has completed.
  net::awaitable<Result<void>> migrate_over_fd(const char* verb, int fd) {
    // (Arguments are built before each co_await: GCC 12 mishandles braced lists inside one.)
    json ignore_shared = {
        {"capabilities", json::array({{{"capability", "x-ignore-shared"}, {"state", true}}})}};
    json fd_name = {{"fdname", kStateFdName}};
    json uri = {{"uri", std::string("fd:") + kStateFdName}};
    auto caps = co_await execute("migrate-set-capabilities", std::move(ignore_shared), -1);
    if (!caps) co_return caps.error();
    if (std::string_view(verb) == "migrate") {
      // QEMU throttles a migration to 128 MiB/s unless told otherwise, which is for a VM that
      // runs on while its RAM crosses a network: a stopped one into a local file has no reason.
      json unlimited = {{"max-bandwidth", kUnthrottledBytesPerSecond}};
      auto set = co_await execute("migrate-set-parameters", std::move(unlimited), -1);
      if (!set) co_return set.error();
    }
    auto got = co_await execute("getfd", std::move(fd_name), fd);
    if (!got) co_return got.error();
    auto started = co_await execute(verb, std::move(uri), -1);
    if (!started) co_return started.error();
    co_return co_await wait_migrated();
  }

  // Polls query-migrate until the migration completed; an error when it failed or was cancelled.
  net::awaitable<Result<void>> wait_migrated() {
    for (;;) {
      json none = json::value_t::discarded;
      auto q = co_await execute("query-migrate", std::move(none), -1);
      if (!q) co_return q.error();
      const std::string status = q->is_object() ? q->value("status", "") : "";
      if (status == "completed") co_return Result<void>{};
      if (status == "failed" || status == "cancelled") {
        co_return qmp_error("migration " + status +
                            (q->contains("error-desc") && (*q)["error-desc"].is_string()
                                 ? ": " + (*q)["error-desc"].get<std::string>()
                                 : std::string()));
      }
      net::steady_timer pause(sock_->get_executor(), std::chrono::milliseconds(5));
      co_await pause.async_wait(net::use_awaitable);
    }
  }

 private:
  net::awaitable<Result<QmpMessage>> read_message() {
    boost::system::error_code rec;
    size_t n = co_await net::async_read_until(*sock_, buf_, '\n',
                                              net::redirect_error(net::use_awaitable, rec));
    if (rec) co_return qmp_error("read: " + rec.message());
    std::string line(net::buffers_begin(buf_.data()), net::buffers_begin(buf_.data()) + n);
    buf_.consume(n);
    co_return parse_qmp_line(line);
  }

  net::awaitable<boost::system::error_code> send_with_fd(const std::string& bytes, int fd) {
    for (;;) {
      struct iovec iov {const_cast<char*>(bytes.data()), bytes.size()};
      alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
      struct msghdr msg {};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
      const ssize_t sent = ::sendmsg(sock_->native_handle(), &msg, MSG_NOSIGNAL);
      if (sent == static_cast<ssize_t>(bytes.size())) co_return boost::system::error_code{};
      if (sent >= 0) co_return make_error_code(boost::system::errc::message_size);
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        co_return boost::system::error_code(errno, boost::system::system_category());
      boost::system::error_code ec;
      co_await sock_->async_wait(local::socket::wait_write,
                                 net::redirect_error(net::use_awaitable, ec));
      if (ec) co_return ec;
    }
  }

  std::shared_ptr<local::socket> sock_;
  net::steady_timer timer_;
  net::streambuf buf_;
};

}  // namespace

QmpMessage parse_qmp_line(std::string_view line) {
  // Lines are at most kMaxQmpLine; QMP answers nest a few levels.
  auto parsed = parse_bounded(line, {kMaxQmpLine, 16, 1u << 14});
  if (!parsed) return {QmpKind::kInvalid, parsed.error().message};
  const json& j = *parsed;
  if (!j.is_object()) return {QmpKind::kInvalid, "not a JSON object"};
  if (j.contains("QMP")) return {QmpKind::kGreeting, ""};
  if (j.contains("return")) return {QmpKind::kReturn, "", j["return"]};
  if (j.contains("error")) {
    const json& e = j["error"];
    std::string text;
    if (e.is_object()) {
      if (e.contains("class") && e["class"].is_string()) text = e["class"].get<std::string>();
      if (e.contains("desc") && e["desc"].is_string())
        text += (text.empty() ? "" : ": ") + e["desc"].get<std::string>();
    }
    return {QmpKind::kError, text.empty() ? "unknown error" : text};
  }
  if (j.contains("event") && j["event"].is_string())
    return {QmpKind::kEvent, j["event"].get<std::string>()};
  return {QmpKind::kInvalid, "unknown message"};
}

std::string vcpu_state_of(std::string_view text) {
  std::string out;
  for (const char* field : {"RIP=", "HLT="}) {
    size_t at = text.find(field);
    // A field name starts a line or follows a space (RIP= is not inside another name).
    while (at != std::string_view::npos && at > 0 && text[at - 1] != ' ' && text[at - 1] != '\n')
      at = text.find(field, at + 1);
    if (at == std::string_view::npos) continue;
    const size_t end = text.find_first_of(" \r\n", at);
    if (!out.empty()) out += ' ';
    out += text.substr(at, (end == std::string_view::npos ? text.size() : end) - at);
  }
  return out;
}

net::awaitable<Result<std::string>> qmp_vcpu_states(net::any_io_executor ex,
                                                    std::filesystem::path dir,
                                                    std::string socket_name, int vcpus,
                                                    std::chrono::milliseconds timeout) {
  QmpSession qmp(ex, timeout);
  CABIN_CO_TRY(co_await qmp.open(dir, socket_name));
  std::string report;
  for (int cpu = 0; cpu < std::min(vcpus, kMaxReportedVcpus); ++cpu) {
    json args = {{"command-line", "info registers"}, {"cpu-index", cpu}};
    auto text = co_await qmp.execute("human-monitor-command", std::move(args), -1);
    if (!text) co_return text.error();
    if (!report.empty()) report += '\n';
    report += "CPU#" + std::to_string(cpu) + ' ' +
              vcpu_state_of(text->is_string() ? text->get_ref<const std::string&>() : "");
  }
  co_return report;
}

net::awaitable<Result<void>> qmp_execute(net::any_io_executor ex, std::filesystem::path dir,
                                         std::string socket_name, std::string command,
                                         std::chrono::milliseconds timeout) {
  QmpSession qmp(ex, timeout);
  CABIN_CO_TRY(co_await qmp.open(dir, socket_name));
  json none = json::value_t::discarded;
  auto done = co_await qmp.execute(command, std::move(none), -1);
  if (!done) co_return done.error();
  co_return Result<void>{};
}

net::awaitable<Result<void>> qmp_save_state(net::any_io_executor ex, std::filesystem::path dir,
                                            std::string socket_name, int state_fd,
                                            std::chrono::milliseconds timeout) {
  QmpSession qmp(ex, timeout);
  CABIN_CO_TRY(co_await qmp.open(dir, socket_name));
  json none = json::value_t::discarded;
  auto stopped = co_await qmp.execute("stop", std::move(none), -1);
  if (!stopped) co_return stopped.error();
  co_return co_await qmp.migrate_over_fd("migrate", state_fd);
}

net::awaitable<Result<void>> qmp_restore_state(net::any_io_executor ex, std::filesystem::path dir,
                                               std::string socket_name, int state_fd,
                                               std::chrono::milliseconds timeout) {
  QmpSession qmp(ex, timeout);
  CABIN_CO_TRY(co_await qmp.open(dir, socket_name));
  CABIN_CO_TRY(co_await qmp.migrate_over_fd("migrate-incoming", state_fd));
  json none = json::value_t::discarded;
  auto resumed = co_await qmp.execute("cont", std::move(none), -1);
  if (!resumed) co_return resumed.error();
  co_return Result<void>{};
}

}  // namespace cabin::drivers
