// One suite, both real drivers: what every sandbox does the same, whatever isolates it. A sandbox
// running the real cabin-agent is created, answers health, loses its agent, reports that it
// ended and why, and once destroyed leaves no process and no run dir.
// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "common/spawn.h"
#include "server/drivers/microvm/microvm_driver.h"
#include "server/drivers/namespace/cgroups.h"
#include "server/drivers/namespace/namespace_driver.h"
#include "server/sessions/agent_client.h"
#include "tests/unit/run_sync.h"

namespace {

namespace fs = std::filesystem;
namespace net = boost::asio;
using namespace std::chrono_literals;
using cabin::testing::run_sync;
using cabin::testing::run_until;
using Clock = std::chrono::steady_clock;

struct TempRoot {
  TempRoot() {
    char tmpl[] = "/tmp/cabin-contract-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempRoot() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  fs::path path;
};

pid_t host_pid_of(const cabin::drivers::Sandbox& s) {
  const std::string d = s.describe();
  const auto at = d.find("pid=");
  REQUIRE(at != std::string::npos);
  return static_cast<pid_t>(std::stoi(d.substr(at + 4)));
}

// Health long-polls; before the agent listens, a stream just ends, so it is asked again.
net::awaitable<cabin::Result<cabin::sessions::AgentHealth>> wait_ready(
    cabin::sessions::AgentClient& agent, std::chrono::seconds within) {
  const auto deadline = Clock::now() + within;
  cabin::Result<cabin::sessions::AgentHealth> h =
      cabin::make_error(cabin::Errc::kTimeout, "timeout", "no answer");
  while (Clock::now() < deadline) {
    h = co_await agent.health(10000);
    if (h && h->state != "starting") break;
    net::steady_timer t(co_await net::this_coro::executor, 100ms);
    boost::system::error_code ec;
    co_await t.async_wait(net::redirect_error(net::use_awaitable, ec));
  }
  co_return h;
}

// `vcpus`: how many lines the driver's stall report has (0: it has none).
void check_lifecycle(net::io_context& io, cabin::drivers::SandboxDriver& driver,
                     const fs::path& run_dir, std::chrono::seconds boot, int vcpus) {
  INFO(driver.info().unavailable_reason);
  REQUIRE(driver.info().available);
  cabin::drivers::SandboxSpec spec;
  spec.session_id = "ses_contract" + std::to_string(::getpid());
  spec.agent_secret = "contract-secret";
  spec.width = 800;
  spec.height = 600;
  auto created = run_sync(io, driver.create(spec), boot);
  REQUIRE(created.ok());
  cabin::drivers::SandboxPtr sandbox = std::move(*created);
  const pid_t pid = host_pid_of(*sandbox);
  CHECK(fs::is_directory(run_dir / spec.session_id));

  // The same id twice is refused while the first lives.
  auto twin = run_sync(io, driver.create(spec), boot);
  REQUIRE_FALSE(twin.ok());
  CHECK(twin.error().code == "sandbox_exists");

  cabin::sessions::AgentClient agent(*sandbox, spec.agent_secret);
  auto health = run_sync(io, wait_ready(agent, boot), boot + 10s);
  if (!health.ok()) {
    // Where a machine that never became ready stands, for whoever reads the failure.
    const std::string report = run_sync(io, sandbox->stall_report(), 10s);
    UNSCOPED_INFO("machine: " << report);
  }
  REQUIRE(health.ok());
  REQUIRE(health->state == "ready");
  CHECK(health->devtools_port > 0);

  // A running machine reports where each vCPU stands.
  const std::string report = run_sync(io, sandbox->stall_report(), 10s);
  if (vcpus == 0) {
    CHECK(report.empty());
  } else {
    INFO(report);
    CHECK(std::count(report.begin(), report.end(), '\n') == vcpus - 1);
    CHECK(report.rfind("CPU#0 RIP=", 0) == 0);
    CHECK(report.find("CPU#" + std::to_string(vcpus - 1) + " RIP=") != std::string::npos);
    CHECK(report.find(" HLT=") != std::string::npos);
  }

  // The sandbox's process is killed, the agent with it: the end is reported by itself.
  bool ended = false;
  std::string reason;
  cabin::spawn(
      io,
      [&]() -> net::awaitable<void> {
        reason = co_await sandbox->wait_exit();
        ended = true;
      },
      "wait_exit");
  // From the host: an exec'd command runs as a uid of its own and can no longer kill the agent.
  REQUIRE(::kill(pid, SIGKILL) == 0);
  run_until(io, [&] { return ended; }, 60s);
  CHECK_FALSE(reason.empty());
  CHECK(reason != "destroyed");
  // Nothing new starts in a sandbox that has ended.
  auto dialed = run_sync(io, sandbox->dial_agent());
  REQUIRE_FALSE(dialed.ok());
  CHECK(dialed.error().code == "sandbox_ended");

  run_sync(io, [&]() -> net::awaitable<bool> {
    co_await sandbox->destroy();
    co_await sandbox->destroy();  // idempotent
    co_return true;
  }());
  CHECK_FALSE(fs::exists(run_dir / spec.session_id));
  CHECK_FALSE(fs::exists("/proc/" + std::to_string(pid)));
  CHECK(run_sync(io, sandbox->wait_exit()) == reason);
}

}  // namespace

TEST_CASE("namespace driver: create, health, the agent dies, the end is reported, destroy "
          "leaves nothing",
          "[contract][namespace]") {
  TempRoot root;
  net::io_context io;
  cabin::drivers::NamespaceDriverConfig c;
  c.run_dir = root.path / "run";
  c.agent_path = CABIN_AGENT_PATH;
  c.launcher_path = CABIN_SANDBOX_PATH;
  c.cgroup_name = "cabin-contract-" + std::to_string(::getpid());
  // The driver makes the per-test cgroup parents; destroy() removes only the sandbox's own.
  struct RemoveParents {
    const cabin::drivers::NamespaceDriverConfig& c;
    ~RemoveParents() {
      const auto layout = cabin::nsbox::detect_cgroup_layout(c.cgroup_root);
      for (const auto& p : cabin::nsbox::cgroup_parents(layout, c.cgroup_root, c.cgroup_name))
        ::rmdir(p.c_str());
    }
  } remove_parents{c};
  cabin::drivers::NamespaceDriver driver(c, io.get_executor());
  check_lifecycle(io, driver, c.run_dir, 30s, 0);
}

TEST_CASE("microvm driver: create, health, the agent dies, the end is reported, destroy "
          "leaves nothing",
          "[contract][microvm][slow]") {
  TempRoot root;
  net::io_context io;
  cabin::drivers::MicrovmDriverConfig c;
  c.run_dir = root.path / "run";
  const char* image_env = std::getenv("CABIN_VM_IMAGE_DIR");
  c.image_dir = image_env && *image_env ? image_env : CABIN_VM_IMAGE_DIR;
  c.wrap_path = CABIN_VMM_WRAP_PATH;
  cabin::drivers::MicrovmDriver driver(c, io.get_executor());
  check_lifecycle(io, driver, c.run_dir, 180s, c.vcpus);
}
