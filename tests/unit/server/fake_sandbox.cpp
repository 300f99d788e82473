#include "tests/unit/server/fake_sandbox.h"

#include <sys/socket.h>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <nlohmann/json.hpp>

#include "common/agent_protocol.h"
#include "common/socket_pair.h"
#include "common/frame_stream.h"
#include "common/spawn.h"

namespace cabin::testing {

using Socket = net::generic::stream_protocol::socket;

AgentResponse json_answer(http::status status, const std::string& body) {
  AgentResponse res{status, 11};
  res.set(http::field::content_type, "application/json");
  res.body() = body;
  res.prepare_payload();
  return res;
}

AgentResponse frames_answer(const std::vector<std::string>& frames) {
  AgentResponse res{http::status::ok, 11};
  res.set(http::field::content_type, "application/octet-stream");
  res.set("X-Fake-Hold", "1");
  for (const auto& f : frames) {
    auto head = frames::encode_header({static_cast<uint32_t>(f.size()), 64, 64});
    res.body().append(reinterpret_cast<const char*>(head.data()), head.size());
    res.body() += f;
  }
  // Written as it is: the stream's records follow the header, no framing of HTTP's.
  res.content_length(boost::none);
  return res;
}

AgentResponse default_agent_answer(const AgentRequest& req) {
  const std::string target(req.target());
  if (target.starts_with(agent_protocol::kHealthPath)) {
    return json_answer(http::status::ok, R"({"state":"ready","devtools":{"port":9222,)"
                                         R"("browser_path":"/devtools/browser/fake"}})");
  }
  if (target == agent_protocol::kExecPath) {
    auto r = agent_protocol::parse_exec_request(req.body());
    if (!r) return json_answer(http::status::bad_request, "{}");
    agent_protocol::ExecResult out;
    out.exit_code = 0;
    for (const auto& a : r->argv) out.stdout_data += (out.stdout_data.empty() ? "" : " ") + a;
    return json_answer(http::status::ok, agent_protocol::to_json(out).dump());
  }
  if (target.starts_with(agent_protocol::kFramesPath)) return frames_answer({"jpeg-bytes-1"});
  if (target == agent_protocol::kNavigatePath) {
    return agent_protocol::parse_navigate_request(req.body())
               ? json_answer(http::status::ok, "{}")
               : json_answer(http::status::bad_request, "{}");
  }
  return json_answer(http::status::not_found, R"({"error":{"code":"not_found","message":"no"}})");
}

void FakeSandboxState::exit(std::string why) {
  if (exited) return;
  exited = true;
  held.clear();
  exit_reason = std::move(why);
  changed.notify_all();
}

namespace {

// One request, one answer, then the connection closes (as cabin-agent does for cabind).
net::awaitable<void> serve_agent(std::shared_ptr<FakeSandboxState> s, Socket socket) {
  boost::beast::flat_buffer buf;
  AgentRequest req;
  boost::system::error_code ec;
  co_await http::async_read(socket, buf, req, net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return;
  s->targets.emplace_back(req.target());
  s->secrets.emplace_back(req[agent_protocol::kSecretHeader]);
  AgentResponse res = s->handler(req);
  res.keep_alive(false);
  const bool hold = res.find("X-Fake-Hold") != res.end();
  co_await http::async_write(socket, res, net::redirect_error(net::use_awaitable, ec));
  if (hold && !s->exited) {
    s->held.push_back(std::move(socket));
    co_return;
  }
  socket.shutdown(Socket::shutdown_send, ec);
}

}  // namespace

net::awaitable<Result<drivers::AgentStream>> FakeSandbox::dial_agent() {
  if (s_->exited || s_->destroyed)
    co_return make_error(Errc::kUnavailable, "sandbox_ended", "the sandbox has ended");
  auto ex = co_await net::this_coro::executor;
  auto pair = local_socket_pair(ex);
  if (!pair) co_return pair.error();
  cabin::spawn(ex, serve_agent(s_, std::move(pair->second)), "fake agent");
  co_return std::move(pair->first);
}

net::awaitable<Result<drivers::AgentStream>> FakeSandbox::dial_loopback(int port) {
  (void)port;
  if (!s_->loopback) co_return make_error(Errc::kUnavailable, "not_supported", "no direct path");
  auto pair = local_socket_pair(co_await net::this_coro::executor);
  if (!pair) co_return pair.error();
  s_->loopback(std::move(pair->second));
  co_return std::move(pair->first);
}

net::awaitable<Result<void>> FakeSandbox::pause() {
  if (s_->exited) co_return make_error(Errc::kUnavailable, "sandbox_ended", "fake ended");
  s_->paused = true;
  co_return Result<void>{};
}

net::awaitable<Result<void>> FakeSandbox::resume() {
  if (s_->exited) co_return make_error(Errc::kUnavailable, "sandbox_ended", "fake ended");
  s_->paused = false;
  co_return Result<void>{};
}

net::awaitable<void> FakeSandbox::destroy() {
  auto s = s_;
  ++s->destroys;
  if (s->destroyed) co_return;
  s->destroy_began = std::chrono::steady_clock::now();
  if (s->destroy_takes.count() > 0) {
    net::steady_timer t(co_await net::this_coro::executor, s->destroy_takes);
    boost::system::error_code ec;
    co_await t.async_wait(net::redirect_error(net::use_awaitable, ec));
  }
  s->destroy_ended = std::chrono::steady_clock::now();
  s->destroyed = true;
  s->exit("destroyed");
}

net::awaitable<std::string> FakeSandbox::wait_exit() {
  auto s = s_;
  while (!s->exited) co_await s->changed.wait_until(Notifier::Clock::time_point::max());
  co_return s->exit_reason;
}

drivers::DriverInfo FakeDriver::info() const {
  drivers::DriverInfo i;
  i.name = name_;
  i.isolation = "none";
  i.detail = "fake";
  i.available = true;
  i.supports_pause = true;
  return i;
}

net::awaitable<Result<drivers::SandboxPtr>> FakeDriver::create(const drivers::SandboxSpec& spec) {
  specs.push_back(spec);
  if (fail_create)
    co_return make_error(Errc::kUnavailable, "fake_failure", "the fake driver was told to fail");
  auto s = std::make_shared<FakeSandboxState>(ex_);
  s->id = spec.session_id;
  s->secret = spec.agent_secret;
  s->handler = handler;
  s->loopback = loopback;
  s->destroy_takes = destroy_takes;
  sandboxes.push_back(s);
  co_return drivers::SandboxPtr(std::make_unique<FakeSandbox>(s));
}

net::awaitable<Result<drivers::SandboxPtr>> FakeDriver::adopt(const std::string& session_id,
                                                              const nlohmann::json& handoff) {
  for (auto& s : sandboxes) {
    if (s->id == session_id && s->released && !s->exited &&
        handoff.value("fake", std::string()) == session_id) {
      s->released = false;
      co_return drivers::SandboxPtr(std::make_unique<FakeSandbox>(s));
    }
  }
  co_return make_error(Errc::kNotFound, "process_gone", "no such fake sandbox");
}

void FakeDriver::reap_leftovers(const std::set<std::string>& keep) {
  for (auto& s : sandboxes) {
    if (s->released && !s->exited && !keep.count(s->id)) {
      s->released = false;
      s->destroyed = true;
      ++s->destroys;
      s->exit("reaped");
    }
  }
}

}  // namespace cabin::testing
