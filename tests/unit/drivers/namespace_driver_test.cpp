// Launches real namespace sandboxes through NamespaceDriver and checks isolation and cleanup.
#include "server/drivers/namespace/namespace_driver.h"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>

#include "server/drivers/namespace/cgroups.h"
#include "server/drivers/namespace/sys_util.h"
#include "tests/fakes/temp_dir.h"
#include "tests/unit/run_sync.h"

namespace net = boost::asio;
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using cabin::drivers::NamespaceDriver;
using cabin::drivers::NamespaceDriverConfig;
using cabin::drivers::SandboxPtr;
using cabin::drivers::SandboxSpec;
using Clock = std::chrono::steady_clock;
using cabin::testing::run_sync;
using cabin::testing::run_until;

namespace {

std::string ns_link(const std::string& pid, const char* ns) {
  std::error_code ec;
  return fs::read_symlink("/proc/" + pid + "/ns/" + ns, ec).string();
}

// The payload's "key=value" lines, once its "report_done=1" line has been logged.
std::map<std::string, std::string> read_report(const std::vector<std::string>& lines) {
  std::map<std::string, std::string> kv;
  for (const auto& line : lines) {
    auto eq = line.find('=');
    if (eq != std::string::npos) kv[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return kv;
}

bool reported(const SandboxPtr& sandbox) {
  auto lines = sandbox->recent_output();
  return std::find(lines.begin(), lines.end(), "report_done=1") != lines.end();
}

// A temp run dir and a per-test cgroup name; both removed at the end.
struct Fixture {
  Fixture() {
    char tmpl[] = "/tmp/cabin-nstest-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    root = tmpl;
    config.run_dir = root / "run";
    config.launcher_path = CABIN_SANDBOX_PATH;
    config.cgroup_name = "cabin-test-" + std::to_string(::getpid());
    config.stop_timeout = 2s;
  }
  ~Fixture() {
    auto layout = cabin::nsbox::detect_cgroup_layout(config.cgroup_root);
    for (const auto& p :
         cabin::nsbox::cgroup_parents(layout, config.cgroup_root, config.cgroup_name))
      ::rmdir(p.c_str());
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  fs::path root;
  NamespaceDriverConfig config;
  net::io_context io;
};

SandboxSpec spec_for(const std::string& id) {
  SandboxSpec spec;
  spec.session_id = id;
  spec.agent_secret = "test_secret_42";
  spec.memory_bytes = 256ull << 20;
  spec.pids_max = 128;
  return spec;
}

}  // namespace

TEST_CASE("namespace sandbox isolates the payload and leaves nothing behind", "[sandbox]") {
  Fixture f;
  const std::string marker = "private_" + std::to_string(::getpid());
  f.config.payload_override = {"/bin/sh", "-c",
                               R"SH(
    {
      echo "uid=$(id -u)"
      if touch /root_probe 2>/dev/null; then echo root_rw=yes; else echo root_rw=no; fi
      if echo x > /tmp/)SH" + marker +
                                   R"SH( 2>/dev/null; then echo tmp_rw=yes; else echo tmp_rw=no; fi
      echo "tmp=$(ls -A /tmp | tr '\n' ' ')"
      echo "ifaces=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\n' ' ')"
      echo "secret=$CABIN_AGENT_SECRET"
      echo "pid=$$"
      echo "cgroup=$(cut -d: -f3 /proc/self/cgroup | sort -u | tr '\n' ' ')"
      # The shell's own descriptors, listed by a child so that listing adds none.
      python3 -c "import os; print('fds=' + ' '.join(sorted(os.listdir('/proc/%d/fd' % os.getppid()), key=int)))"
      if ls /run/cabin >/dev/null 2>&1; then echo run_dir=visible; else echo run_dir=none; fi
      echo "umask=$(umask)"
      echo "proc=$(awk '$2 == "/proc" { print $4 }' /proc/self/mounts)"
      grep -E '^Cap(Prm|Eff|Amb|Bnd)' /proc/self/status | tr -d ':\t' | sed 's/^Cap\([A-Za-z]*\)/cap_\1=/'
      echo report_done=1
    }
    exec sleep 600)SH"};
  f.config.cpus = 1.5;
  NamespaceDriver driver(f.config, f.io.get_executor());
  auto info = driver.info();
  CHECK(info.name == "namespace");
  CHECK(info.detail == "shares the host kernel");
  if (!info.available) {
    WARN("namespace sandboxes unavailable here: " << info.unavailable_reason);
    return;
  }
  auto spec = spec_for("iso_1");
  auto created = run_sync(f.io, driver.create(spec));
  REQUIRE(created.ok());
  SandboxPtr sandbox = std::move(created.value());
  INFO(sandbox->describe());

  const fs::path run_dir = f.config.run_dir / spec.session_id;
  run_until(
      f.io, [&] { return reported(sandbox); }, 10s);
  auto report = read_report(sandbox->recent_output());
  CHECK(report["uid"] == "1000");
  CHECK(report["root_rw"] == "no");
  CHECK(report["tmp_rw"] == "yes");
  CHECK(report["tmp"] == marker + " ");  // a fresh /tmp: only what the payload wrote
  CHECK_FALSE(fs::exists("/tmp/" + marker));
  CHECK(report["ifaces"] == "lo ");
  CHECK(report["secret"] == spec.agent_secret);
  CHECK(report["pid"] == "2");  // PID 1 is the sandbox's init
  // stdio and the agent's listening socket, nothing of cabind's or the launcher's.
  CHECK(report["fds"] == "0 1 2 3");
  CHECK(report["run_dir"] == "none");  // the host's session dir is not bound inside
  // Its own cgroup namespace: no host cgroup path shows inside.
  CHECK(report["cgroup"] == "/ ");
  CHECK(report["umask"] == "0002");  // the group shared with exec'd commands may write
  CHECK(report["proc"].find("hidepid=invisible") != std::string::npos);

  const bool root = ::geteuid() == 0;
  // As root, the payload (the agent) holds CAP_SETUID, CAP_KILL and CAP_FOWNER, and can never hold
  // more: the exec helper becomes uid 1001 with the first; the others end that uid's commands and
  // replace its files in /tmp.
  const std::string agent_caps = root ? "00000000000000a8" : "0000000000000000";
  CHECK(report["cap_Prm"] == agent_caps);
  CHECK(report["cap_Amb"] == agent_caps);
  if (root) CHECK(report["cap_Bnd"] == agent_caps);
  auto layout = cabin::nsbox::detect_cgroup_layout(f.config.cgroup_root);
  auto cgroups = cabin::nsbox::sandbox_cgroup_dirs(layout, f.config.cgroup_root,
                                                   f.config.cgroup_name, spec.session_id);
  std::vector<int> pids;
  if (root && layout != cabin::nsbox::CgroupLayout::kNone) {
    for (const auto& d : cgroups) CHECK(fs::is_directory(d));
    using cabin::nsbox::read_file;
    if (layout == cabin::nsbox::CgroupLayout::kV1) {
      CHECK(read_file((f.config.cgroup_root / "memory" / f.config.cgroup_name / spec.session_id /
                       "memory.limit_in_bytes")
                          .string()) == "268435456\n");
      CHECK(read_file((f.config.cgroup_root / "pids" / f.config.cgroup_name / spec.session_id /
                       "pids.max")
                          .string()) == "128\n");
      const fs::path cpu = f.config.cgroup_root / "cpu" / f.config.cgroup_name;
      if (fs::exists(cpu / spec.session_id / "cpu.cfs_quota_us")) {
        CHECK(read_file((cpu / spec.session_id / "cpu.cfs_quota_us").string()) == "150000\n");
        CHECK(read_file((cpu / "cpu.shares").string()) == "512\n");
      }
    } else {
      CHECK(read_file((cgroups[0] / "memory.max").string()) == "268435456\n");
      CHECK(read_file((cgroups[0] / "pids.max").string()) == "128\n");
      if (fs::exists(cgroups[0] / "cpu.max")) {
        CHECK(read_file((cgroups[0] / "cpu.max").string()) == "150000 100000\n");
        CHECK(read_file((cgroups[0].parent_path() / "cpu.weight").string()) == "50\n");
      }
    }
    pids = cabin::nsbox::cgroup_pids(cgroups[0]);
    // The launcher, PID 1 and the payload at least.
    CHECK(pids.size() >= 3);
    bool isolated = false;
    for (int pid : pids) {
      const std::string p = std::to_string(pid);
      bool all = true;
      for (const char* ns : {"user", "pid", "net", "mnt", "ipc", "uts", "cgroup"})
        all = all && !ns_link(p, ns).empty() && ns_link(p, ns) != ns_link("self", ns);
      isolated = isolated || all;
    }
    CHECK(isolated);
  } else {
    WARN("not root or no cgroups: cgroup checks skipped");
  }

  run_sync(f.io, sandbox->destroy());
  run_sync(f.io, sandbox->destroy());  // idempotent
  CHECK(run_sync(f.io, sandbox->wait_exit()) == "destroyed");
  for (int pid : pids) CHECK_FALSE(fs::exists("/proc/" + std::to_string(pid)));
  for (const auto& d : cgroups) CHECK_FALSE(fs::exists(d));
  CHECK_FALSE(fs::exists(run_dir));
  auto dial = run_sync(f.io, sandbox->dial_agent());
  CHECK_FALSE(dial.ok());
}

TEST_CASE("wait_exit reports a payload that ends on its own", "[sandbox]") {
  Fixture f;
  std::string script;
  std::string expected;
  SECTION("exit status") {
    script = "exit 3";
    expected = "agent exited with status 3";
  }
  SECTION("signal") {
    script = "kill -9 $$";
    // The launcher names the payload in the agent's place.
    expected = "cabin-agent killed by signal 9 (Killed)";
  }
  f.config.payload_override = {"/bin/sh", "-c", script};
  NamespaceDriver driver(f.config, f.io.get_executor());
  if (!driver.info().available) {
    WARN(driver.info().unavailable_reason);
    return;
  }
  auto created = run_sync(f.io, driver.create(spec_for("exit_1")));
  REQUIRE(created.ok());
  SandboxPtr sandbox = std::move(created.value());
  CHECK(run_sync(f.io, sandbox->wait_exit()) == expected);
  run_sync(f.io, sandbox->destroy());
  CHECK(run_sync(f.io, sandbox->wait_exit()) == expected);  // destroy() keeps the real reason
  CHECK_FALSE(fs::exists(f.config.run_dir / "exit_1"));
}

TEST_CASE("a payload that cannot start is reported", "[sandbox]") {
  Fixture f;
  f.config.payload_override = {"/nonexistent/agent"};
  NamespaceDriver driver(f.config, f.io.get_executor());
  if (!driver.info().available) return;
  auto created = run_sync(f.io, driver.create(spec_for("bad_1")));
  REQUIRE(created.ok());
  SandboxPtr sandbox = std::move(created.value());
  auto reason = run_sync(f.io, sandbox->wait_exit());
  CHECK(reason.rfind("agent exited with status 127: ", 0) == 0);
  CHECK(reason.find("/nonexistent/agent") != std::string::npos);
  run_sync(f.io, sandbox->destroy());
}

TEST_CASE("dial_agent reaches the socket cabind passed, which the sandbox cannot replace",
          "[sandbox]") {
  Fixture f;
  // A stand-in agent on the listening socket it was given as fd 3; before it serves, it tries to
  // put an impostor where the socket used to be reachable.
  const std::string server =
      "import os,socket\n"
      "s=socket.socket(fileno=3)\n"
      "i=socket.socket(socket.AF_UNIX)\n"
      "try:\n"
      "  i.bind('/run/cabin/agent.sock'); print('impostor=bound', flush=True)\n"
      "except OSError:\n"
      "  print('impostor=refused', flush=True)\n"
      "while True:\n"
      "  c,_=s.accept(); c.sendall(('hello '+os.environ['CABIN_AGENT_SECRET']+'\\n').encode());"
      " c.close()\n";
  f.config.payload_override = {"/usr/bin/python3", "-c", server};
  NamespaceDriver driver(f.config, f.io.get_executor());
  if (!driver.info().available) return;
  auto spec = spec_for("dial_1");
  auto created = run_sync(f.io, driver.create(spec));
  REQUIRE(created.ok());
  SandboxPtr sandbox = std::move(created.value());

  // Made by cabind before the sandbox started, in a dir only cabind may write.
  auto agent_sock = f.config.run_dir / spec.session_id / "agent.sock";
  struct stat st {};
  REQUIRE(::lstat(agent_sock.c_str(), &st) == 0);
  CHECK(S_ISSOCK(st.st_mode));
  CHECK(st.st_uid == ::geteuid());
  REQUIRE(::stat(agent_sock.parent_path().c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);

  auto dial = run_sync(f.io, sandbox->dial_agent());
  REQUIRE(dial.ok());
  net::streambuf sb;
  auto n = run_sync(f.io, [&]() -> net::awaitable<size_t> {
    co_return co_await net::async_read_until(dial.value(), sb, '\n', net::use_awaitable);
  }());
  std::string line(net::buffers_begin(sb.data()), net::buffers_begin(sb.data()) + n);
  CHECK(line == "hello " + spec.agent_secret + "\n");
  run_until(f.io, [&] {
    auto lines = sandbox->recent_output();
    return std::find_if(lines.begin(), lines.end(), [](const std::string& l) {
             return l.rfind("impostor=", 0) == 0;
           }) != lines.end();
  });
  auto report = read_report(sandbox->recent_output());
  CHECK(report["impostor"] == "refused");
  run_sync(f.io, sandbox->destroy());
  CHECK_FALSE(fs::exists(f.config.run_dir / spec.session_id));
}

TEST_CASE("reap_leftovers removes what an earlier run left", "[sandbox]") {
  Fixture f;
  f.config.payload_override = {"/bin/true"};
  NamespaceDriver driver(f.config, f.io.get_executor());
  const std::string kOld = "ses_0ld0000000000000000a", kOther = "ses_0ther00000000000000b";
  fs::create_directories(f.config.run_dir / kOld / "sub");
  // Not a session's dir: kept, though its name is a valid sandbox id.
  fs::create_directories(f.config.run_dir / "data_1");
  std::ofstream(f.config.run_dir / kOld / "sub" / "file") << "x";
  std::vector<fs::path> cgroups;
  pid_t child = -1;
  auto layout = cabin::nsbox::detect_cgroup_layout(f.config.cgroup_root);
  if (::geteuid() == 0 && layout != cabin::nsbox::CgroupLayout::kNone) {
    auto made = cabin::nsbox::create_sandbox_cgroups(layout, f.config.cgroup_root,
                                                     f.config.cgroup_name, kOld, {});
    REQUIRE(made.ok());
    cgroups = made.value();
    // A process left in the cgroup, as from a crashed run.
    const char* argv[] = {"/bin/sleep", "600", nullptr};
    REQUIRE(::posix_spawn(&child, argv[0], nullptr, nullptr, const_cast<char**>(argv), environ) ==
            0);
    for (const auto& d : cgroups)
      REQUIRE(cabin::nsbox::write_file((d / "cgroup.procs").string(), std::to_string(child)));
  }
  // A sandbox of another cabind instance (no run dir here) is left alone.
  std::vector<fs::path> foreign;
  if (!cgroups.empty()) {
    auto made = cabin::nsbox::create_sandbox_cgroups(layout, f.config.cgroup_root,
                                                     f.config.cgroup_name, kOther, {});
    REQUIRE(made.ok());
    foreign = made.value();
  }
  driver.reap_leftovers({});
  CHECK_FALSE(fs::exists(f.config.run_dir / kOld));
  CHECK(fs::exists(f.config.run_dir / "data_1"));
  for (const auto& d : cgroups) CHECK_FALSE(fs::exists(d));
  for (const auto& d : foreign) {
    CHECK(fs::exists(d));
    REQUIRE(cabin::nsbox::remove_cgroup(d).ok());
  }
  if (child > 0) {
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    CHECK(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGKILL);
  }
}

TEST_CASE("a released sandbox runs on: a new driver adopts it, and reaps one it does not keep",
          "[sandbox]") {
  Fixture f;
  f.config.payload_override = {"/bin/sh", "-c", "while :; do echo tick; sleep 0.1; done"};
  NamespaceDriver first(f.config, f.io.get_executor());
  if (!first.info().available) {
    WARN("namespace sandboxes unavailable here: " << first.info().unavailable_reason);
    return;
  }
  const std::string kept = "ses_kept000000000000000a", dropped = "ses_drop000000000000000b";
  std::map<std::string, nlohmann::json> handoffs;
  for (const auto& id : {kept, dropped}) {
    auto made = run_sync(f.io, first.create(spec_for(id)));
    REQUIRE(made.ok());
    handoffs[id] = (*made)->handoff();
    (*made)->release();
  }  // dropped without destroy(), but released: nothing is killed
  auto pid_of = [&](const std::string& id) { return handoffs[id]["pid"].get<pid_t>(); };
  // This process started them: a dead one is a zombie until reaped, or gone.
  auto exited = [](pid_t pid) {
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0)
      return info.si_pid == pid;
    return errno == ECHILD;
  };
  CHECK_FALSE(exited(pid_of(kept)));
  CHECK_FALSE(exited(pid_of(dropped)));

  NamespaceDriver next(f.config, f.io.get_executor());
  auto wrong = handoffs[kept];
  wrong["start"] = wrong["start"].get<uint64_t>() + 1;  // a recycled pid would differ here
  auto refused = run_sync(f.io, next.adopt(kept, wrong));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == "process_gone");
  auto adopted = run_sync(f.io, next.adopt(kept, handoffs[kept]));
  REQUIRE(adopted.ok());
  next.reap_leftovers({kept});
  CHECK(fs::exists(f.config.run_dir / kept));
  CHECK_FALSE(fs::exists(f.config.run_dir / dropped));
  run_until(f.io, [&] { return exited(pid_of(dropped)); }, 5s);
  CHECK(exited(pid_of(dropped)));
  // The adopted sandbox's output reaches the new driver through its FIFO.
  run_until(
      f.io,
      [&] {
        auto out = (*adopted)->recent_output();
        return std::find(out.begin(), out.end(), "tick") != out.end();
      },
      5s);
  auto out = (*adopted)->recent_output();
  CHECK(std::find(out.begin(), out.end(), "tick") != out.end());
  run_sync(f.io, (*adopted)->destroy());
  CHECK(exited(pid_of(kept)));
  CHECK_FALSE(fs::exists(f.config.run_dir / kept));
  for (const auto& [id, _] : handoffs) ::waitpid(pid_of(id), nullptr, 0);
}

TEST_CASE("reap_leftovers leaves a run dir that others can write or that is not ours",
          "[sandbox]") {
  Fixture f;
  f.config.payload_override = {"/bin/true"};
  NamespaceDriver driver(f.config, f.io.get_executor());
  const fs::path session = f.config.run_dir / "ses_aaaaaaaaaaaaaaaaaaaa";
  fs::create_directories(session);
  CHECK(cabin::drivers::check_reapable_run_dir(f.config.run_dir).ok());

  fs::permissions(f.config.run_dir, fs::perms::all);  // 0777
  CHECK_FALSE(cabin::drivers::check_reapable_run_dir(f.config.run_dir).ok());
  driver.reap_leftovers({});
  CHECK(fs::exists(session));

  fs::permissions(f.config.run_dir, fs::perms::owner_all);
  if (::geteuid() == 0) {
    REQUIRE(::chown(f.config.run_dir.c_str(), 65534, 65534) == 0);
    CHECK_FALSE(cabin::drivers::check_reapable_run_dir(f.config.run_dir).ok());
    driver.reap_leftovers({});
    CHECK(fs::exists(session));
    REQUIRE(::chown(f.config.run_dir.c_str(), 0, 0) == 0);
  }
  // A symlink to a dir is not the dir.
  const fs::path link = f.root / "link";
  fs::create_directory_symlink(f.config.run_dir, link);
  CHECK_FALSE(cabin::drivers::check_reapable_run_dir(link).ok());

  driver.reap_leftovers({});
  CHECK_FALSE(fs::exists(session));
}

TEST_CASE("run dir entries reaped are session ids only") {
  using cabin::drivers::reapable_run_dir_entry;
  CHECK(reapable_run_dir_entry("ses_abcdefghij0123456789"));
  CHECK_FALSE(reapable_run_dir_entry("ses_abcdefghij012345678"));     // 19
  CHECK_FALSE(reapable_run_dir_entry("ses_abcdefghij01234567890"));   // 21
  CHECK_FALSE(reapable_run_dir_entry("ses_ABCDEFGHIJ0123456789"));
  CHECK_FALSE(reapable_run_dir_entry("old_1"));
  CHECK_FALSE(reapable_run_dir_entry("home"));
  CHECK_FALSE(reapable_run_dir_entry("ses__bcdefghij0123456789"));
}

TEST_CASE("unprivileged with supplementary groups, the driver is unavailable and says why",
          "[sandbox]") {
  if (::geteuid() != 0) {
    WARN("needs root to take on another uid and groups");
    return;
  }
  // In a child that becomes nobody, once with an extra group and once without. /bin/true as the
  // launcher stands for a sandbox that builds fine, so only the group check can refuse.
  auto probe_as_nobody = [](std::vector<gid_t> groups) {
    return cabin::testing::run_in_child([&] {
      if (::setgroups(groups.size(), groups.data()) != 0 ||
          ::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0)
        return std::string("setup failed");
      NamespaceDriverConfig c;
      c.launcher_path = "/bin/true";
      c.payload_override = {"/bin/true"};
      net::io_context io;
      NamespaceDriver driver(c, io.get_executor());
      auto info = driver.info();
      return info.available ? std::string("available") : "unavailable: " + info.unavailable_reason;
    });
  };
  CHECK(probe_as_nobody({65534}) == "available");
  auto with_group = probe_as_nobody({65534, 42});
  CHECK(with_group.rfind("unavailable: ", 0) == 0);
  CHECK_THAT(with_group, Catch::Contains("supplementary groups 42"));
}

TEST_CASE("cgroups that exist but cannot be made refuse the sandbox", "[sandbox]") {
  if (::geteuid() != 0) {
    WARN("cgroups are used only as root");
    return;
  }
  Fixture f;
  // A v2 root where the parent is a file: detection succeeds, mkdir of the sandbox's dir fails.
  f.config.cgroup_root = f.root / "cgroup";
  fs::create_directories(f.config.cgroup_root);
  std::ofstream(f.config.cgroup_root / "cgroup.controllers") << "memory pids cpu\n";
  std::ofstream(f.config.cgroup_root / f.config.cgroup_name) << "not a dir\n";
  f.config.payload_override = {"/bin/sleep", "600"};
  NamespaceDriver driver(f.config, f.io.get_executor());
  if (!driver.info().available) {
    WARN("namespace sandboxes unavailable here: " << driver.info().unavailable_reason);
    return;
  }
  auto created = run_sync(f.io, driver.create(spec_for("nocg_1")));
  if (created.ok()) run_sync(f.io, created.value()->destroy());
  REQUIRE_FALSE(created.ok());
  CHECK(created.error().code == "cgroups_failed");
  CHECK_THAT(created.error().message, Catch::Contains("cgroup"));
  CHECK_FALSE(fs::exists(f.config.run_dir / "nocg_1"));
}
