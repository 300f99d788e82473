#include "server/drivers/microvm/qmp.h"

#include <fcntl.h>

#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <memory>
#include <nlohmann/json.hpp>

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

}  // namespace

QmpMessage parse_qmp_line(std::string_view line) {
  // Lines are at most kMaxQmpLine; QMP answers nest a few levels.
  auto parsed = parse_bounded(line, {kMaxQmpLine, 16, 1u << 14});
  if (!parsed) return {QmpKind::kInvalid, parsed.error().message};
  const json& j = *parsed;
  if (!j.is_object()) return {QmpKind::kInvalid, "not a JSON object"};
  if (j.contains("QMP")) return {QmpKind::kGreeting, ""};
  if (j.contains("return")) return {QmpKind::kReturn, ""};
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

net::awaitable<Result<void>> qmp_execute(net::any_io_executor ex, std::filesystem::path dir,
                                         std::string socket_name, std::string command,
                                         std::chrono::milliseconds timeout) {
  // Through a descriptor of the dir: the socket path then never exceeds sun_path's 108 bytes.
  UniqueFd dirfd(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dirfd.valid()) co_return qmp_error("cannot open " + dir.string());
  auto sock = std::make_shared<local::socket>(ex);
  net::steady_timer timer(ex);
  timer.expires_after(timeout);
  // The socket is shared with the timer's handler, so a late expiry never touches a dead socket.
  timer.async_wait([sock](boost::system::error_code ec) {
    if (!ec) {
      boost::system::error_code ignored;
      sock->close(ignored);
    }
  });
  boost::system::error_code ec;
  open_cloexec(*sock, local(), ec);
  if (!ec) {
    co_await sock->async_connect(
        local::endpoint("/proc/self/fd/" + std::to_string(dirfd.get()) + "/" + socket_name),
        net::redirect_error(net::use_awaitable, ec));
  }
  if (ec) {
    timer.cancel();
    co_return qmp_error("connect: " + ec.message());
  }

  net::streambuf buf(kMaxQmpLine);
  auto read_message = [&]() -> net::awaitable<Result<QmpMessage>> {
    boost::system::error_code rec;
    size_t n = co_await net::async_read_until(*sock, buf, '\n',
                                              net::redirect_error(net::use_awaitable, rec));
    if (rec) co_return qmp_error("read: " + rec.message());
    std::string line(net::buffers_begin(buf.data()), net::buffers_begin(buf.data()) + n);
    buf.consume(n);
    co_return parse_qmp_line(line);
  };
  // Sends one command and waits for its answer, skipping events.
  auto run = [&](const std::string& name) -> net::awaitable<Result<void>> {
    std::string req = json{{"execute", name}}.dump() + "\n";
    boost::system::error_code wec;
    co_await net::async_write(*sock, net::buffer(req),
                              net::redirect_error(net::use_awaitable, wec));
    if (wec) co_return qmp_error("write: " + wec.message());
    for (int i = 0; i <= kMaxEventsPerCommand; ++i) {
      auto m = co_await read_message();
      if (!m) co_return m.error();
      switch (m->kind) {
        case QmpKind::kReturn:
          co_return Result<void>();
        case QmpKind::kError:
          co_return qmp_error(name + ": " + m->text);
        case QmpKind::kEvent:
          continue;
        default:
          co_return qmp_error(name + ": unexpected answer (" + m->text + ")");
      }
    }
    co_return qmp_error(name + ": no answer among the events");
  };

  Result<void> result;
  auto greeting = co_await read_message();
  if (!greeting) {
    result = greeting.error();
  } else if (greeting->kind != QmpKind::kGreeting) {
    result = qmp_error("no greeting");
  } else if (auto caps = co_await run("qmp_capabilities"); !caps) {
    result = caps;
  } else {
    result = co_await run(command);
  }
  timer.cancel();
  sock->close(ec);
  co_return result;
}

}  // namespace cabin::drivers
