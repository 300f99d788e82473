#include "vm-images/agent/exec.h"

#include <signal.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/unit/agent/test_util.h"

using namespace cabin::agent;
using cabin::agent::testing::run_sync;
using cabin::agent::testing::TempDir;

namespace {

ExecResult exec_ok(ExecRequest spec, ExecOptions opts = {}) {
  net::io_context io;
  auto r = run_sync(io, run_exec(std::move(spec), opts));
  REQUIRE(r.ok());
  return std::move(r).value();
}

// The pid a script wrote, or -1.
pid_t read_pid(const std::string& path) {
  std::ifstream in(path);
  pid_t pid = -1;
  in >> pid;
  return pid;
}

// True once `pid` no longer runs (gone, or a zombie awaiting its reaper); polls until `limit`.
bool wait_gone(pid_t pid, std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) return true;
    auto close = line.rfind(')');
    if (close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z')
      return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // polling /proc; nothing to await
  }
}

ExecRequest sh(std::string script) {
  ExecRequest s;
  s.argv = {"sh", "-c", std::move(script)};
  return s;
}

}  // namespace

TEST_CASE("exec: echo and exit codes", "[agent][exec]") {
  auto r = exec_ok(sh("echo hi; echo oops >&2; exit 3"));
  CHECK(r.exit_code == 3);
  CHECK_FALSE(r.signal.has_value());
  CHECK_FALSE(r.timed_out);
  CHECK(r.stdout_data == "hi\n");
  CHECK(r.stderr_data == "oops\n");
  CHECK_FALSE(r.stdout_truncated);

  ExecRequest e;
  e.argv = {"echo", "a b", "c"};  // no shell: arguments pass through untouched
  CHECK(exec_ok(e).stdout_data == "a b c\n");
}

TEST_CASE("exec: signal that ends the command is reported", "[agent][exec]") {
  auto r = exec_ok(sh("kill -TERM $$"));
  CHECK_FALSE(r.exit_code.has_value());
  CHECK(r.signal == SIGTERM);
  CHECK_FALSE(r.timed_out);
}

TEST_CASE("exec: timeout kills the whole process group", "[agent][exec]") {
  TempDir dir;
  const std::string pidfile = dir.path() + "/bg.pid";
  // A background child in the same group must die with the command.
  auto spec = sh("sleep 30 & echo $! > " + pidfile + "; exec sleep 30");
  spec.timeout_ms = 200;
  auto r = exec_ok(spec);
  CHECK(r.timed_out);
  CHECK(r.signal == SIGKILL);
  CHECK(r.duration_ms < 5000);
  pid_t bg = read_pid(pidfile);
  REQUIRE(bg > 0);
  CHECK(wait_gone(bg));
}

TEST_CASE("exec: output cap truncates but keeps draining", "[agent][exec]") {
  // 1 MiB per stream through 64 KiB pipes: the command blocks unless the agent keeps reading.
  auto spec = sh("head -c 1048576 /dev/zero; head -c 1048576 /dev/zero >&2; echo done");
  spec.max_output_bytes = 1000;
  auto r = exec_ok(spec);
  CHECK(r.exit_code == 0);
  CHECK(r.stdout_data.size() == 1000);
  CHECK(r.stderr_data.size() == 1000);
  CHECK(r.stdout_truncated);
  CHECK(r.stderr_truncated);

  auto exact = sh("printf 12345");
  exact.max_output_bytes = 5;
  auto e = exec_ok(exact);
  CHECK(e.stdout_data == "12345");
  CHECK_FALSE(e.stdout_truncated);
}

TEST_CASE("exec: stdin, env and cwd", "[agent][exec]") {
  auto spec = sh("cat; printf '%s' \"$GREETING\"; pwd");
  spec.stdin_data = "from stdin|";
  spec.env = {{"GREETING", "hello"}};
  spec.cwd = "/";
  auto r = exec_ok(spec);
  CHECK(r.stdout_data == "from stdin|hello/\n");

  // A command that never reads its (large) stdin must not wedge the agent.
  auto ignore = sh("exit 0");
  ignore.stdin_data = std::string(1 << 20, 'x');
  CHECK(exec_ok(ignore).exit_code == 0);
}

TEST_CASE("exec: the agent's secret is not inherited", "[agent][exec]") {
  // main() unsets it; here we only check that children see the agent's current environment.
  ::setenv("CABIN_AGENT_TEST_VISIBLE", "yes", 1);
  auto r = exec_ok(sh("printf '%s' \"$CABIN_AGENT_TEST_VISIBLE\""));
  CHECK(r.stdout_data == "yes");
  ::unsetenv("CABIN_AGENT_TEST_VISIBLE");
}

TEST_CASE("exec: background process holding the pipes does not stall the answer", "[agent][exec]") {
  TempDir dir;
  const std::string pidfile = dir.path() + "/bg.pid";
  auto spec = sh("echo started; sleep 30 & echo $! > " + pidfile);
  ExecOptions opts;
  opts.drain_grace = std::chrono::milliseconds(50);
  auto r = exec_ok(spec, opts);
  CHECK(r.exit_code == 0);
  CHECK(r.stdout_data == "started\n");
  CHECK(r.duration_ms < 5000);
  // It was meant to outlive the command (think dev servers); clean it up here.
  pid_t bg = read_pid(pidfile);
  REQUIRE(bg > 0);
  CHECK_FALSE(wait_gone(bg, std::chrono::milliseconds(0)));
  ::kill(bg, SIGKILL);
}

TEST_CASE("exec: spawn failures are 400 spawn_failed", "[agent][exec]") {
  net::io_context io;
  ExecRequest missing;
  missing.argv = {"/nonexistent/program"};
  auto r = run_sync(io, run_exec(missing));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == "spawn_failed");
  CHECK(r.error().errc == cabin::Errc::kInvalidArgument);
  CHECK_THAT(r.error().message, Catch::Contains("No such file"));

  ExecRequest bad_cwd = sh("true");
  bad_cwd.cwd = "/nonexistent";
  auto c = run_sync(io, run_exec(bad_cwd));
  REQUIRE_FALSE(c.ok());
  CHECK(c.error().code == "spawn_failed");
}

TEST_CASE("exec: result JSON replaces invalid UTF-8", "[agent][exec]") {
  auto r = exec_ok(sh("printf 'a\\377b'"));
  auto j = nlohmann::json::parse(cabin::agent_protocol::to_json(r).dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace));
  CHECK(j["stdout"] ==
        "a\xEF\xBF\xBD"
        "b");
  CHECK(j["exit_code"] == 0);
  CHECK(j["signal"].is_null());
  CHECK(j["timed_out"] == false);
}
