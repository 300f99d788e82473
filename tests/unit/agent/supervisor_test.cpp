#include "vm-images/agent/supervisor.h"

#include <signal.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <catch2/catch.hpp>
#include <fstream>

#include "tests/unit/agent/test_util.h"

using namespace cabin::agent;
using cabin::agent::testing::run_sync;
using cabin::agent::testing::TempDir;
using cabin::agent::testing::write_script;
using tcp = net::ip::tcp;
namespace beast = boost::beast;
namespace http = beast::http;

namespace {

constexpr const char* kUuid = "08523fd9-3f35-41d2-87a3-cd2989f6fd79";

// Stand-ins that follow the real programs' contracts: Xvfb writes its display to -displayfd,
// Chromium writes DevToolsActivePort into --user-data-dir (here naming a port the test listens
// on) and records its pid so the test can kill it.
struct FakeBrowser {
  FakeBrowser() {
    write_script(xvfb, "echo 42 >&3\nexec 3>&-\nexec sleep 60\n");
    write_script(chromium,
                 "for a in \"$@\"; do case \"$a\" in --user-data-dir=*) dir=\"${a#*=}\";; "
                 "esac; done\n"
                 "echo $$ > \"" +
                     dir.path() +
                     "/chromium.pid\"\n"
                     "printf '%s\\n/devtools/browser/%s' \"$FAKE_DEVTOOLS_PORT\" " +
                     kUuid +
                     " > \"$dir/DevToolsActivePort\"\n"
                     "printf '%s\\n%s\\n' \"$DISPLAY\" \"$*\" > \"" +
                     dir.path() +
                     "/chromium.args\"\n"
                     "exec sleep 60\n");
  }
  // `listening` is where the test accepts; the agent passes --remote-debugging-port=0, so the
  // fake reports that port in DevToolsActivePort as Chromium would.
  SupervisorOptions options(uint16_t listening, uint16_t port_flag = 0) const {
    ::setenv("FAKE_DEVTOOLS_PORT", std::to_string(listening).c_str(), 1);
    SupervisorOptions o;
    o.xvfb = xvfb;
    o.chromium = chromium;
    o.home = dir.path() + "/home";
    o.devtools_port = port_flag;
    o.startup_timeout = std::chrono::seconds(10);
    o.stop_grace = std::chrono::milliseconds(500);
    o.wait_for_desktop = false;  // no X server behind the fake Xvfb
    o.probe_cdp = false;         // nor a WebSocket behind the fake DevTools
    return o;
  }
  pid_t chromium_pid() const {
    std::ifstream in(dir.path() + "/chromium.pid");
    pid_t pid = -1;
    in >> pid;
    return pid;
  }
  TempDir dir;
  std::string xvfb = dir.path() + "/fake-xvfb";
  std::string chromium = dir.path() + "/fake-chromium";
};

}  // namespace

TEST_CASE("supervisor: ready, then a Chromium exit fails the agent", "[agent][supervisor]") {
  FakeBrowser fake;
  net::io_context io;
  tcp::acceptor devtools(io, tcp::endpoint(net::ip::address_v4::loopback(), 0));
  AgentState state(io.get_executor(), 1280, 800);
  Supervisor sup(io.get_executor(), fake.options(devtools.local_endpoint().port()), state);

  std::optional<cabin::Result<void>> result;
  net::co_spawn(
      io, [&]() -> net::awaitable<void> { result.emplace(co_await sup.run()); }, net::detached);
  run_sync(io, [&]() -> net::awaitable<int> {
    co_await state.wait_settled(std::chrono::seconds(10));
    co_return 0;
  }());

  const auto& snap = state.snapshot();
  REQUIRE(snap.phase == Phase::kReady);
  CHECK(snap.display == ":42");
  REQUIRE(snap.devtools.has_value());
  CHECK(snap.devtools->port == devtools.local_endpoint().port());
  CHECK(snap.devtools->browser_path == std::string("/devtools/browser/") + kUuid);

  std::ifstream args(fake.dir.path() + "/chromium.args");
  std::string display, argline;
  std::getline(args, display);
  std::getline(args, argline);
  CHECK(display == ":42");
  CHECK_THAT(argline, Catch::Contains("--remote-debugging-address=127.0.0.1"));
  CHECK_THAT(argline, Catch::Contains("--remote-debugging-port=0"));
  CHECK_THAT(argline, Catch::EndsWith("-- about:blank"));

  REQUIRE(fake.chromium_pid() > 0);
  ::kill(fake.chromium_pid(), SIGKILL);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!result && std::chrono::steady_clock::now() < deadline) io.run_one_until(deadline);
  REQUIRE(result.has_value());
  REQUIRE_FALSE(result->ok());
  CHECK_THAT(result->error().message, Catch::Contains("Chromium killed by signal 9"));
  CHECK(state.snapshot().phase == Phase::kFailed);
  CHECK_THAT(state.snapshot().error, Catch::Contains("Chromium"));
}

// A DevTools stand-in that answers GET /json/version like Chromium does.
net::awaitable<void> fake_devtools(tcp::acceptor& acc) {
  for (;;) {
    tcp::socket s(acc.get_executor());
    boost::system::error_code ec;
    co_await acc.async_accept(s, net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return;
    beast::flat_buffer buf;
    http::request<http::string_body> req;
    co_await http::async_read(s, buf, req, net::redirect_error(net::use_awaitable, ec));
    if (ec) continue;
    http::response<http::string_body> res{http::status::ok, 11};
    res.body() = R"({"Browser":"Fake/1","webSocketDebuggerUrl":"ws://127.0.0.1:)" +
                 std::to_string(acc.local_endpoint().port()) + "/devtools/browser/" + kUuid + "\"}";
    res.prepare_payload();
    co_await http::async_write(s, res, net::redirect_error(net::use_awaitable, ec));
  }
}

TEST_CASE("supervisor: a fixed DevTools port is probed with /json/version", "[agent][supervisor]") {
  FakeBrowser fake;
  write_script(fake.chromium, "exec sleep 60\n");  // no DevToolsActivePort with a fixed port
  net::io_context io;
  tcp::acceptor devtools(io, tcp::endpoint(net::ip::address_v4::loopback(), 0));
  const uint16_t port = devtools.local_endpoint().port();
  net::co_spawn(io, fake_devtools(devtools), net::detached);
  AgentState state(io.get_executor(), 1280, 800);
  Supervisor sup(io.get_executor(), fake.options(port, port), state);
  net::co_spawn(
      io,
      [&]() -> net::awaitable<void> {
        co_await state.wait_settled(std::chrono::seconds(10));
        sup.request_stop();
      },
      net::detached);
  CHECK(run_sync(io, sup.run()).ok());
  REQUIRE(state.snapshot().phase == Phase::kReady);
  CHECK(state.snapshot().devtools->port == port);
  CHECK(state.snapshot().devtools->browser_path == std::string("/devtools/browser/") + kUuid);
  devtools.close();
}

TEST_CASE("supervisor: request_stop ends the children and returns ok", "[agent][supervisor]") {
  FakeBrowser fake;
  net::io_context io;
  tcp::acceptor devtools(io, tcp::endpoint(net::ip::address_v4::loopback(), 0));
  AgentState state(io.get_executor(), 1280, 800);
  Supervisor sup(io.get_executor(), fake.options(devtools.local_endpoint().port()), state);

  net::co_spawn(
      io,
      [&]() -> net::awaitable<void> {
        co_await state.wait_settled(std::chrono::seconds(10));
        sup.request_stop();
      },
      net::detached);
  auto run = run_sync(io, sup.run());
  CHECK(run.ok());
  CHECK(state.snapshot().phase == Phase::kReady);  // a requested stop is not a failure
  // The fake Chromium got SIGTERM (sleep dies of it) and was reaped.
  CHECK(::kill(fake.chromium_pid(), 0) != 0);
}

TEST_CASE("supervisor: a missing Xvfb fails fast", "[agent][supervisor]") {
  FakeBrowser fake;
  net::io_context io;
  AgentState state(io.get_executor(), 1280, 800);
  auto o = fake.options(1);
  o.xvfb = fake.dir.path() + "/no-such-xvfb";
  Supervisor sup(io.get_executor(), o, state);
  auto r = run_sync(io, sup.run());
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message, Catch::Contains("Xvfb"));
  CHECK(state.snapshot().phase == Phase::kFailed);
}

TEST_CASE("supervisor: an Xvfb that dies before reporting a display fails", "[agent][supervisor]") {
  FakeBrowser fake;
  write_script(fake.xvfb, "exit 1\n");
  net::io_context io;
  AgentState state(io.get_executor(), 1280, 800);
  Supervisor sup(io.get_executor(), fake.options(1), state);
  auto r = run_sync(io, sup.run());
  REQUIRE_FALSE(r.ok());
  CHECK(state.snapshot().phase == Phase::kFailed);
}
