// cabin-vmm-wrap's jail, run for real with a shell standing in for QEMU: the VMM is PID 1 of its
// own pid and net namespaces, termination signals reach it, the wrap exits as it did, and the
// VMM dies with the wrap. Needs root (the jail does); skipped otherwise.
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "server/drivers/namespace/cgroups.h"
#include "tests/fakes/temp_dir.h"

extern char** environ;

namespace {

using cabin::testing::TempDir;
namespace fs = std::filesystem;

constexpr int kJailId = 602000;

// The wrap, jailed, running `script` under /usr/bin/sh with pipes on its stdin and stdout.
struct Wrapped {
  // `prefix`: a command the wrap runs under (it execs the wrap, keeping its pid).
  explicit Wrapped(const std::string& script, const std::vector<std::string>& flags = {},
                   const std::vector<std::string>& prefix = {}) {
    REQUIRE(::chown(run.path.c_str(), kJailId, kJailId) == 0);
    int in[2], out[2];
    REQUIRE(::pipe2(in, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    const std::string ids = std::to_string(kJailId) + ":" + std::to_string(kJailId);
    std::vector<std::string> args = prefix;
    args.insert(args.end(), {CABIN_VMM_WRAP_PATH, "--jail", ids, "--image", image.path.string(),
                             "--run", run.path.string()});
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(), {"--", "/usr/bin/sh", "-c", script});
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    REQUIRE(::posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ) == 0);
    posix_spawn_file_actions_destroy(&fa);
    ::close(in[0]);
    ::close(out[1]);
    stdin_fd = in[1];
    stdout_fd = out[0];
  }
  ~Wrapped() {
    if (stdin_fd >= 0) ::close(stdin_fd);
    ::close(stdout_fd);
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      int st = 0;
      ::waitpid(pid, &st, 0);
    }
  }

  // The next line the VMM writes (empty after 10 s or at EOF).
  std::string line() {
    std::string s;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (s.empty() || s.back() != '\n') {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd p{stdout_fd, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) return {};
      char c = 0;
      if (::read(stdout_fd, &c, 1) != 1) return {};
      s.push_back(c);
    }
    s.pop_back();
    return s;
  }

  // The VMM's pid as the host sees it: the wrap's one child.
  pid_t vmm() const {
    std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
    long child = 0;
    in >> child;
    return static_cast<pid_t>(child);
  }

  int wait_status() {
    int st = 0;
    REQUIRE(::waitpid(pid, &st, 0) == pid);
    pid = -1;
    return st;
  }

  TempDir image{"cabin-wrap-image"};
  TempDir run{"cabin-wrap-run"};
  pid_t pid = -1;
  int stdin_fd = -1;
  int stdout_fd = -1;
};

std::string ns_of(pid_t pid, const char* ns) {
  return fs::read_symlink("/proc/" + std::to_string(pid) + "/ns/" + ns).string();
}

// A pidfd becomes readable when its process has exited.
int pidfd_of(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

bool exits_within(int pidfd, std::chrono::milliseconds timeout) {
  pollfd p{pidfd, POLLIN, 0};
  return ::poll(&p, 1, static_cast<int>(timeout.count())) == 1;
}

}  // namespace

TEST_CASE("a jailed VMM is the first process of its own pid and net namespaces", "[vmm_wrap]") {
  if (::geteuid() != 0) {
    WARN("skipped: the jail needs root");
    return;
  }
  Wrapped w("echo pid $$; read done; exit 3");
  REQUIRE(w.line() == "pid 1");
  const pid_t vmm = w.vmm();
  REQUIRE(vmm > 0);
  CHECK(ns_of(vmm, "pid") != ns_of(::getpid(), "pid"));
  CHECK(ns_of(vmm, "net") != ns_of(::getpid(), "net"));
  struct stat st {};
  REQUIRE(::stat(("/proc/" + std::to_string(vmm)).c_str(), &st) == 0);
  CHECK(st.st_uid == static_cast<uid_t>(kJailId));
  ::close(std::exchange(w.stdin_fd, -1));  // `read` ends: the VMM exits 3
  const int status = w.wait_status();
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 3);
}

TEST_CASE("SIGTERM to the wrap reaches the VMM, and the wrap ends as the VMM did", "[vmm_wrap]") {
  if (::geteuid() != 0) {
    WARN("skipped: the jail needs root");
    return;
  }
  SECTION("the VMM handles it and exits") {
    Wrapped w("trap 'exit 7' TERM; echo ready; while :; do sleep 1 & wait $!; done");
    REQUIRE(w.line() == "ready");
    REQUIRE(::kill(w.pid, SIGTERM) == 0);
    const int status = w.wait_status();
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 7);
  }
  SECTION("the VMM is killed by a signal") {
    Wrapped w("echo ready; read done");
    REQUIRE(w.line() == "ready");
    const pid_t vmm = w.vmm();
    REQUIRE(vmm > 0);
    REQUIRE(::kill(vmm, SIGKILL) == 0);
    const int status = w.wait_status();
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGKILL);
  }
}

TEST_CASE("the VMM dies with its wrap", "[vmm_wrap]") {
  if (::geteuid() != 0) {
    WARN("skipped: the jail needs root");
    return;
  }
  Wrapped w("echo ready; while :; do sleep 1; done");
  REQUIRE(w.line() == "ready");
  const pid_t vmm = w.vmm();
  REQUIRE(vmm > 0);
  const int pidfd = pidfd_of(vmm);
  REQUIRE(pidfd >= 0);
  REQUIRE(::kill(w.pid, SIGKILL) == 0);
  (void)w.wait_status();
  CHECK(exits_within(pidfd, std::chrono::seconds(10)));
  ::close(pidfd);
}

TEST_CASE("the wrap and its VMM join the cgroups named, out of the caller's", "[vmm_wrap]") {
  namespace nsbox = cabin::nsbox;
  const auto layout = nsbox::detect_cgroup_layout("/sys/fs/cgroup");
  if (::geteuid() != 0 || layout == nsbox::CgroupLayout::kNone) {
    WARN("skipped: needs root and cgroups");
    return;
  }
  const std::string name = "cabin-wrap-test-" + std::to_string(::getpid());
  auto dirs = nsbox::create_cgroup_parents(layout, "/sys/fs/cgroup", name, false);
  REQUIRE(dirs);
  REQUIRE(!dirs->empty());
  std::vector<std::string> flags;
  for (const auto& d : *dirs)
    flags.insert(flags.end(), {"--cgroup-procs", (d / "cgroup.procs").string()});
  {
    Wrapped w("echo ready; read done", flags);
    REQUIRE(w.line() == "ready");
    const pid_t vmm = w.vmm();
    REQUIRE(vmm > 0);
    for (const auto& d : *dirs) {
      const auto pids = nsbox::cgroup_pids(d);
      CHECK(std::find(pids.begin(), pids.end(), w.pid) != pids.end());
      CHECK(std::find(pids.begin(), pids.end(), vmm) != pids.end());
    }
    ::close(std::exchange(w.stdin_fd, -1));
    (void)w.wait_status();
  }
  for (const auto& d : *dirs) CHECK(nsbox::remove_cgroup(d));
}

TEST_CASE("the wrap refuses a cgroup it cannot join, and runs nothing", "[vmm_wrap]") {
  if (::geteuid() != 0) {
    WARN("skipped: the jail needs root");
    return;
  }
  TempDir nowhere{"cabin-wrap-cgroup"};
  Wrapped w("echo ran", {"--cgroup-procs", (nowhere.path / "none" / "cgroup.procs").string()});
  CHECK(w.line().empty());
  const int status = w.wait_status();
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 125);
}

TEST_CASE("started in a container's cgroup namespace, the wrap enters the host's first", "[vmm_wrap]") {
  namespace nsbox = cabin::nsbox;
  if (::geteuid() != 0 || !fs::exists("/usr/bin/unshare")) {
    WARN("skipped: needs root and unshare");
    return;
  }
  const std::string ours = "/proc/" + std::to_string(::getpid()) + "/ns/cgroup";
  CHECK(nsbox::foreign_cgroup_ns(ours).empty());  // the same namespace is no other
  // unshare -C: the wrap starts in a cgroup namespace of its own, as in a container.
  Wrapped w("echo ready; read done", {"--cgroup-ns", ours}, {"/usr/bin/unshare", "-C"});
  REQUIRE(w.line() == "ready");
  const pid_t vmm = w.vmm();
  REQUIRE(vmm > 0);
  CHECK(ns_of(vmm, "cgroup") == ns_of(::getpid(), "cgroup"));
  CHECK(nsbox::foreign_cgroup_ns("/proc/" + std::to_string(w.pid) + "/ns/cgroup").empty());
  ::close(std::exchange(w.stdin_fd, -1));
  (void)w.wait_status();
}

TEST_CASE("a cgroup namespace that is not ours is named as the host's", "[vmm_wrap]") {
  namespace nsbox = cabin::nsbox;
  if (::geteuid() != 0 || !fs::exists("/usr/bin/unshare")) {
    WARN("skipped: needs root and unshare");
    return;
  }
  Wrapped w("echo ready; read done", {}, {"/usr/bin/unshare", "-C"});
  REQUIRE(w.line() == "ready");
  const std::string theirs = "/proc/" + std::to_string(w.pid) + "/ns/cgroup";
  CHECK(nsbox::foreign_cgroup_ns(theirs) == theirs);
  CHECK(nsbox::foreign_cgroup_ns("/proc/0/none").empty());
  ::close(std::exchange(w.stdin_fd, -1));
  (void)w.wait_status();
}
