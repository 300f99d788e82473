// The exec filter: its rules, the calls it denies in a process that installed it, and commands
// started through the real cabin-agent's helper.
#include "vm-images/agent/exec_filter.h"

#include <fcntl.h>
#include <sched.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <set>
#include <string>

#include "common/capabilities.h"
#include "tests/fakes/temp_dir.h"
#include "tests/unit/agent/test_util.h"
#include "vm-images/agent/exec.h"

using namespace cabin::agent;
using cabin::agent::testing::run_sync;

namespace {

// errno of a failed call, 0 when it succeeded.
int errno_of(long rc) { return rc < 0 ? errno : 0; }

// Runs `probe` in a forked child that first installs the exec filter; returns what it wrote.
std::string in_filtered_child(std::string (*probe)()) {
  return cabin::testing::run_in_child(
      [probe] { return install_exec_filter() ? probe() : std::string("install failed"); });
}

std::string probe_calls() {
  std::string r;
  auto add = [&](const char* what, int err) { r += std::string(what) + "=" + std::to_string(err) + " "; };
  add("clone3", errno_of(::syscall(SYS_clone3, nullptr, 0)));
  add("unshare_user", errno_of(::unshare(CLONE_NEWUSER)));
  add("unshare_user_net", errno_of(::unshare(CLONE_NEWUSER | CLONE_NEWNET)));
  add("unshare_none", errno_of(::unshare(0)));
  add("setns", errno_of(::syscall(SYS_setns, -1, 0)));
  // On our own pid: nothing but the filter stops these.
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0));
  add("pidfd_getfd", errno_of(::syscall(SYS_pidfd_getfd, pidfd, 0, 0)));
  if (pidfd >= 0) ::close(pidfd);
  char byte = 'x', got = 0;
  struct iovec local {
    &got, 1
  }, remote{&byte, 1};
  add("vm_readv", errno_of(::syscall(SYS_process_vm_readv, ::getpid(), &local, 1, &remote, 1, 0)));
  add("vm_writev",
      errno_of(::syscall(SYS_process_vm_writev, ::getpid(), &local, 1, &remote, 1, 0)));
  // fork and posix_spawn (clone3 first, then clone without namespaces) still work.
  pid_t child = ::fork();
  if (child == 0) ::_exit(7);
  int status = 0;
  add("fork", child > 0 && ::waitpid(child, &status, 0) == child && WEXITSTATUS(status) == 7
                  ? 0
                  : -1);
  const char* argv[] = {"/bin/true", nullptr};
  pid_t spawned = -1;
  int rc = ::posix_spawn(&spawned, argv[0], nullptr, nullptr, const_cast<char**>(argv), environ);
  add("spawn", rc == 0 && ::waitpid(spawned, &status, 0) == spawned && WEXITSTATUS(status) == 0
                   ? 0
                   : -1);
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  add("socket", s < 0 ? errno : 0);
  if (s >= 0) ::close(s);
  return r;
}

}  // namespace

TEST_CASE("exec filter rules: each says why, clone3, clone, unshare and setns", "[agent][exec]") {
  std::set<long> nrs;
  for (const auto& r : exec_filter_rules()) {
    CHECK(std::string(r.why).size() > 3);
    CHECK(r.err > 0);
    nrs.insert(r.nr);
  }
  CHECK(nrs == std::set<long>{SYS_clone3, SYS_clone, SYS_unshare, SYS_setns, SYS_process_vm_readv,
                              SYS_process_vm_writev, SYS_pidfd_getfd});
  // arch check, nr load, x32 check, then two or five instructions a rule and the final allow.
  CHECK(build_exec_filter({}).size() >= 5);
}

TEST_CASE("exec filter denies new namespaces and clone3, leaves fork and spawn", "[agent][exec]") {
  CHECK(in_filtered_child(probe_calls) ==
        "clone3=" + std::to_string(ENOSYS) + " unshare_user=" + std::to_string(EPERM) +
            " unshare_user_net=" + std::to_string(EPERM) +
            " unshare_none=0 setns=" + std::to_string(EPERM) +
            " pidfd_getfd=" + std::to_string(EPERM) + " vm_readv=" + std::to_string(EPERM) +
            " vm_writev=" + std::to_string(EPERM) + " fork=0 spawn=0 socket=0 ");
}

TEST_CASE("exec through the agent's filter helper", "[agent][exec]") {
  ExecOptions opts;
  opts.filter_helper = CABIN_AGENT_PATH;
  net::io_context io;
  ExecRequest spec;
  // unshare(1) from util-linux asks for a new user namespace.
  spec.argv = {"sh", "-c", "unshare -U true; echo rc=$?; exec echo argv0=$0", "name0"};
  auto r = run_sync(io, run_exec(spec, opts));
  REQUIRE(r.ok());
  CHECK(r->exit_code.value_or(-1) == 0);
  CHECK(r->stdout_data == "rc=1\nargv0=name0\n");
  CHECK_THAT(r->stderr_data, Catch::Contains("Operation not permitted"));

  ExecRequest missing;
  missing.argv = {"no-such-command-cabin"};
  auto m = run_sync(io, run_exec(missing, opts));
  REQUIRE_FALSE(m.ok());
  CHECK(m.error().code == "spawn_failed");
  CHECK_THAT(m.error().message, Catch::Contains("No such file"));
}

TEST_CASE("exec filter helper's command line", "[agent][exec]") {
  CHECK(filtered_exec_argv("/h", std::nullopt, "/bin/echo", {"echo", "hi"}) ==
        std::vector<std::string>{"/h", kExecFilteredFlag, "-", "/bin/echo", "echo", "hi"});
  CHECK(filtered_exec_argv("/h", 1001, "/x", {"x"}) ==
        std::vector<std::string>{"/h", kExecFilteredFlag, "1001", "/x", "x"});
  auto as_is = parse_filtered_exec({"-", "/bin/echo", "echo", "hi"});
  REQUIRE(as_is.ok());
  CHECK_FALSE(as_is->uid.has_value());
  CHECK(as_is->argv == std::vector<std::string>{"/bin/echo", "echo", "hi"});
  auto as_1001 = parse_filtered_exec({"1001", "/x", "x"});
  REQUIRE(as_1001.ok());
  CHECK(as_1001->uid == 1001u);
  // A program named like a uid is still the program: USER is positional.
  auto named = parse_filtered_exec({"-", "1001", "1001"});
  REQUIRE(named.ok());
  CHECK(named->argv == std::vector<std::string>{"1001", "1001"});
  CHECK_FALSE(parse_filtered_exec({"0", "/x", "x"}).ok());  // never root
  CHECK_FALSE(parse_filtered_exec({"12a", "/x", "x"}).ok());
  CHECK_FALSE(parse_filtered_exec({"", "/x", "x"}).ok());
  CHECK_FALSE(parse_filtered_exec({"-", "/x"}).ok());  // no argv0
  CHECK_FALSE(parse_filtered_exec({"-", "", "x"}).ok());
}

TEST_CASE("exec through the helper as a uid of its own, with no capability", "[agent][exec]") {
  if (::geteuid() != 0) {
    WARN("skipped: needs CAP_SETUID, which the namespace sandbox's agent holds as root gives it");
    return;
  }
  auto before = cabin::caps::get();
  REQUIRE(before.ok());
  ExecOptions opts;
  opts.filter_helper = CABIN_AGENT_PATH;
  opts.exec_uid = 65533;
  net::io_context io;
  ExecRequest spec;
  spec.argv = {"sh", "-c", "id -u; id -G; grep -E '^Cap(Inh|Prm|Eff|Amb)' /proc/self/status"};
  auto r = run_sync(io, run_exec(spec, opts));
  REQUIRE(r.ok());
  CHECK(r->exit_code.value_or(-1) == 0);
  CHECK(r->stdout_data == "65533\n" + std::to_string(::getegid()) +
                              "\nCapInh:\t0000000000000000\nCapPrm:\t0000000000000000\n"
                              "CapEff:\t0000000000000000\nCapAmb:\t0000000000000000\n");
  // The spawn lent CAP_SETUID to that child alone: this thread's sets are as they were.
  auto after = cabin::caps::get();
  REQUIRE(after.ok());
  CHECK(*after == *before);
  CHECK(cabin::caps::ambient_empty());
}
