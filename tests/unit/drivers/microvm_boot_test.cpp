// Boots the real guest image through MicrovmDriver (KVM or TCG, whatever this machine has), talks
// to cabin-agent in it, and checks that destroy() leaves no process, port or file behind.
// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "server/drivers/microvm/microvm_driver.h"
#include "tests/unit/run_sync.h"

namespace net = boost::asio;
namespace http = boost::beast::http;
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using cabin::drivers::MicrovmDriver;
using cabin::drivers::MicrovmDriverConfig;
using cabin::drivers::Sandbox;
using cabin::drivers::SandboxPtr;
using cabin::drivers::SandboxSpec;
using Clock = std::chrono::steady_clock;
using cabin::testing::run_sync;

namespace {

struct Answer {
  int status = 0;  // 0: no HTTP answer (the agent is not listening yet)
  std::string body;
};

// One request to the agent over a fresh dial_agent() stream, as cabind's AgentClient does.
net::awaitable<Answer> agent_request(Sandbox& sandbox, http::verb method, std::string target,
                                     std::string body, std::string secret,
                                     std::chrono::milliseconds timeout) {
  auto dialed = co_await sandbox.dial_agent();
  if (!dialed) co_return Answer{};
  auto stream = std::make_shared<cabin::drivers::AgentStream>(std::move(dialed.value()));
  net::steady_timer timer(stream->get_executor(), timeout);
  timer.async_wait([stream](boost::system::error_code ec) {
    if (!ec) stream->close(ec);
  });
  http::request<http::string_body> req{method, target, 11};
  req.set(http::field::host, "agent");
  req.set("X-Cabin-Agent-Secret", secret);
  if (!body.empty()) req.set(http::field::content_type, "application/json");
  req.body() = std::move(body);
  req.prepare_payload();
  req.keep_alive(false);
  boost::system::error_code ec;
  co_await http::async_write(*stream, req, net::redirect_error(net::use_awaitable, ec));
  boost::beast::flat_buffer buf;
  http::response<http::string_body> res;
  if (!ec)
    co_await http::async_read(*stream, buf, res, net::redirect_error(net::use_awaitable, ec));
  timer.cancel();
  if (ec) co_return Answer{};
  co_return Answer{static_cast<int>(res.result_int()), res.body()};
}

net::awaitable<void> sleep_for(std::chrono::milliseconds d) {
  net::steady_timer t(co_await net::this_coro::executor, d);
  co_await t.async_wait(net::use_awaitable);
}

bool port_listening(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

TEST_CASE(
    "a microVM boots the guest image, runs the agent as uid 1000, commands as 1001, and leaves "
    "nothing",
    "[microvm][slow]") {
  char tmpl[] = "/tmp/cabin-vmboot-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const fs::path root = tmpl;
  net::io_context io;
  MicrovmDriverConfig c;
  c.run_dir = root / "run";
  const char* image_env = std::getenv("CABIN_VM_IMAGE_DIR");
  c.image_dir = image_env && *image_env ? image_env : CABIN_VM_IMAGE_DIR;
  c.wrap_path = CABIN_VMM_WRAP_PATH;
  MicrovmDriver driver(c, io.get_executor());
  auto info = driver.info();
  INFO("image " << c.image_dir << ": " << info.unavailable_reason);
  REQUIRE(info.available);
  std::cout << "microvm driver: " << info.detail << "\n";

  SandboxSpec spec;
  spec.session_id = "boot_1";
  spec.agent_secret = "boot_secret_" + std::to_string(::getpid());
  spec.width = 1024;
  spec.height = 768;
  const auto t0 = Clock::now();
  auto created = run_sync(io, driver.create(spec));
  REQUIRE(created.ok());
  SandboxPtr sandbox = std::move(created.value());
  std::cout << "qemu up after " << seconds_since(t0) << " s: " << sandbox->describe() << "\n";
  const std::string desc = sandbox->describe();
  const pid_t qemu_pid = std::stoi(desc.substr(desc.find("pid=") + 4));
  const uint16_t port = static_cast<uint16_t>(std::stoi(desc.substr(desc.find("127.0.0.1:") + 10)));
  const fs::path dir = c.run_dir / spec.session_id;
  CHECK(fs::exists(dir / "qmp.sock"));
  {
    // The secret reaches the guest through fw_cfg, not QEMU's command line.
    std::ifstream in("/proc/" + std::to_string(qemu_pid) + "/cmdline");
    std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(cmdline.find("microvm") != std::string::npos);
    CHECK(cmdline.find(spec.agent_secret) == std::string::npos);
  }

  // Health long-polls until the browser is up; before the agent listens, streams just end.
  std::string state;
  nlohmann::json health;
  const auto deadline = Clock::now() + 120s;
  while (state != "ready" && state != "failed" && Clock::now() < deadline) {
    auto a = run_sync(io, agent_request(*sandbox, http::verb::get, "/agent/v1/health?wait_ms=20000",
                                        "", spec.agent_secret, 25s));
    if (a.status == 200) {
      health = nlohmann::json::parse(a.body, nullptr, false);
      state = health.value("state", "");
    } else {
      run_sync(io, sleep_for(200ms));
    }
  }
  INFO(health.dump());
  REQUIRE(state == "ready");
  std::cout << "agent ready (DevTools up) after " << seconds_since(t0) << " s\n";
  CHECK(health["width"] == 1024);
  CHECK(health["height"] == 768);

  // A wrong secret is refused.
  CHECK(run_sync(io, agent_request(*sandbox, http::verb::get, "/agent/v1/health", "", "wrong", 10s))
            .status == 401);

  nlohmann::json exec = {{"argv", {"sh", "-c", "id -u; cat /proc/net/dev; touch /x"}},
                         {"timeout_ms", 20000}};
  auto a = run_sync(io, agent_request(*sandbox, http::verb::post, "/agent/v1/exec", exec.dump(),
                                      spec.agent_secret, 30s));
  REQUIRE(a.status == 200);
  auto r = nlohmann::json::parse(a.body, nullptr, false);
  INFO(a.body);
  const std::string out = r.value("stdout", "");
  // Commands run as a uid of their own, not the browser's.
  CHECK(out.rfind("1001\n", 0) == 0);
  CHECK(out.find("lo:") != std::string::npos);
  CHECK(out.find("eth0:") != std::string::npos);
  CHECK(r.value("stderr", "").find("Read-only file system") != std::string::npos);
  CHECK(r["exit_code"] == 1);

  // Pause and resume through QMP.
  CHECK(run_sync(io, sandbox->pause()).ok());
  CHECK(run_sync(io, sandbox->resume()).ok());

  run_sync(io, sandbox->destroy());
  run_sync(io, sandbox->destroy());  // idempotent
  CHECK(run_sync(io, sandbox->wait_exit()) == "destroyed");
  CHECK_FALSE(fs::exists("/proc/" + std::to_string(qemu_pid)));
  CHECK_FALSE(port_listening(port));
  CHECK_FALSE(fs::exists(dir));
  CHECK(fs::is_empty(c.run_dir));
  CHECK_FALSE(run_sync(io, sandbox->dial_agent()).ok());
  std::error_code ec;
  fs::remove_all(root, ec);
}
