#include "server/drivers/sim/sim_driver.h"

#include <sys/socket.h>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/websocket/stream.hpp>
#include <nlohmann/json.hpp>

#include "common/agent_protocol.h"
#include "common/socket_pair.h"
#include "common/notifier.h"
#include "common/spawn.h"

namespace cabin::drivers {

namespace {

namespace http = boost::beast::http;
namespace websocket = boost::beast::websocket;
using Socket = net::generic::stream_protocol::socket;
using nlohmann::json;

constexpr int kDevtoolsPort = 9222;
// Agent requests and CDP messages are small; anything larger is not the sim's to answer.
constexpr size_t kMaxMessage = 1 << 20;

struct SimState {
  explicit SimState(net::any_io_executor ex) : changed(std::move(ex)) {}
  std::string id;
  bool exited = false;
  std::string exit_reason;
  Notifier changed;
  void exit(std::string why) {
    if (exited) return;
    exited = true;
    exit_reason = std::move(why);
    changed.notify_all();
  }
};

http::response<http::string_body> answer(http::status status, std::string body) {
  http::response<http::string_body> res{status, 11};
  res.set(http::field::content_type, "application/json");
  res.body() = std::move(body);
  res.keep_alive(false);
  res.prepare_payload();
  return res;
}

http::response<http::string_body> agent_answer(const http::request<http::string_body>& req) {
  const std::string_view target = req.target();
  if (target.starts_with(agent_protocol::kHealthPath)) {
    json health = {{"state", "ready"},
                   {"devtools", {{"port", kDevtoolsPort}, {"browser_path", "/devtools/browser/sim"}}}};
    return answer(http::status::ok, health.dump());
  }
  if (target == agent_protocol::kExecPath) {
    auto r = agent_protocol::parse_exec_request(req.body());
    if (!r) return answer(http::status::bad_request, R"({"error":{"code":"invalid","message":"bad exec"}})");
    agent_protocol::ExecResult out;
    out.exit_code = 0;
    for (const auto& a : r->argv) out.stdout_data += (out.stdout_data.empty() ? "" : " ") + a;
    return answer(http::status::ok, agent_protocol::to_json(out).dump());
  }
  if (target == agent_protocol::kNavigatePath) return answer(http::status::ok, "{}");
  return answer(http::status::not_found,
                R"({"error":{"code":"not_found","message":"the sim agent has no such endpoint"}})");
}

// One request, one answer, then the connection closes, as cabin-agent does.
net::awaitable<void> serve_agent(Socket socket) {
  boost::beast::flat_buffer buf;
  http::request_parser<http::string_body> parser;
  parser.body_limit(kMaxMessage);
  boost::system::error_code ec;
  co_await http::async_read(socket, buf, parser, net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return;
  auto res = agent_answer(parser.get());
  co_await http::async_write(socket, res, net::redirect_error(net::use_awaitable, ec));
  socket.shutdown(Socket::shutdown_send, ec);
}

// The browser's CDP endpoint: each command {"id": N, ...} is answered {"id": N, "result": {}}.
net::awaitable<void> serve_cdp(Socket socket) {
  websocket::stream<Socket> ws(std::move(socket));
  ws.read_message_max(kMaxMessage);
  boost::system::error_code ec;
  co_await ws.async_accept(net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return;
  boost::beast::flat_buffer buf;
  for (;;) {
    co_await ws.async_read(buf, net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return;
    const auto data = buf.data();
    const json msg = json::parse(std::string_view(static_cast<const char*>(data.data()), data.size()),
                                 nullptr, false);
    buf.consume(buf.size());
    if (!msg.is_object() || !msg.contains("id")) continue;
    const std::string out = json{{"id", msg["id"]}, {"result", json::object()}}.dump();
    ws.text(true);
    co_await ws.async_write(net::buffer(out), net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return;
  }
}

class SimSandbox final : public Sandbox {
 public:
  explicit SimSandbox(std::shared_ptr<SimState> s) : s_(std::move(s)) {}

  net::awaitable<Result<AgentStream>> dial_agent() override {
    if (s_->exited) co_return make_error(Errc::kUnavailable, "sandbox_ended", "the sandbox has ended");
    auto ex = co_await net::this_coro::executor;
    auto pair = local_socket_pair(ex);
    if (!pair) co_return pair.error();
    cabin::spawn(ex, serve_agent(std::move(pair->second)), "sim agent");
    co_return std::move(pair->first);
  }
  net::awaitable<Result<AgentStream>> dial_loopback(int port) override {
    if (s_->exited) co_return make_error(Errc::kUnavailable, "sandbox_ended", "the sandbox has ended");
    if (port != kDevtoolsPort)
      co_return make_error(Errc::kUnavailable, "not_supported", "nothing listens there");
    auto ex = co_await net::this_coro::executor;
    auto pair = local_socket_pair(ex);
    if (!pair) co_return pair.error();
    cabin::spawn(ex, serve_cdp(std::move(pair->second)), "sim cdp");
    co_return std::move(pair->first);
  }
  net::awaitable<Result<void>> pause() override { co_return Result<void>{}; }
  net::awaitable<Result<void>> resume() override { co_return Result<void>{}; }
  net::awaitable<void> destroy() override {
    s_->exit("destroyed");
    co_return;
  }
  net::awaitable<std::string> wait_exit() override {
    auto s = s_;
    while (!s->exited) co_await s->changed.wait_until(Notifier::Clock::time_point::max());
    co_return s->exit_reason;
  }
  std::string describe() const override { return "sim sandbox (nothing runs)"; }
  nlohmann::json handoff() const override { return {{"sim", s_->id}}; }
  void release() override {}

 private:
  std::shared_ptr<SimState> s_;
};

}  // namespace

DriverInfo SimDriver::info() const {
  DriverInfo i;
  i.name = "sim";
  i.isolation = "none";
  i.detail = "simulated: no sandbox and no browser (--sim-driver, for benchmarks)";
  i.available = true;
  i.supports_pause = true;
  return i;
}

net::awaitable<Result<SandboxPtr>> SimDriver::create(const SandboxSpec& spec) {
  auto s = std::make_shared<SimState>(ex_);
  s->id = spec.session_id;
  co_return SandboxPtr(std::make_unique<SimSandbox>(std::move(s)));
}

net::awaitable<Result<SandboxPtr>> SimDriver::adopt(const std::string& session_id,
                                                    const nlohmann::json& handoff) {
  (void)session_id;
  (void)handoff;
  co_return make_error(Errc::kNotFound, "process_gone", "sim sandboxes end with cabind");
}

}  // namespace cabin::drivers
