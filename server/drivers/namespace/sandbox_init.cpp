#include "server/drivers/namespace/sandbox_init.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/securebits.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/capabilities.h"
#include "common/unique_fd.h"
#include "server/drivers/namespace/mounts.h"
#include "server/drivers/namespace/netns.h"
#include "server/drivers/namespace/seccomp_policy.h"
#include "server/drivers/namespace/sys_util.h"

namespace cabin::nsbox {
namespace {

// Where the new root is assembled before pivot_root; private to our mount namespace, and the
// run dir and agent are bound through O_PATH fds so this may hide them.
constexpr char kNewRoot[] = "/tmp";
constexpr char kHostname[] = "cabin";

const LauncherArgs* g_args = nullptr;

[[noreturn]] void fail(const std::string& step, const std::string& message) {
  std::fprintf(stderr, "cabin-sandbox[%s]: %s: %s\n", g_args ? g_args->id.c_str() : "?",
               step.c_str(), message.c_str());
  ::_exit(kSetupFailedStatus);
}

[[noreturn]] void fail_errno(const std::string& step) { fail(step, std::strerror(errno)); }

void check(const Result<void>& r, const std::string& step) {
  if (!r) fail(step, r.error().message);
}

UniqueFd open_path(const std::string& path, int extra_flags, const char* step) {
  if (path.empty()) return {};
  UniqueFd fd(::open(path.c_str(), O_PATH | O_CLOEXEC | extra_flags));
  if (!fd.valid()) fail_errno(std::string(step) + " " + path);
  return fd;
}

void on_signal(int) {}  // PID 1 drops signals without a handler; sigwaitinfo takes them

// What the agent keeps when exec'd commands have a uid of their own, in the user namespace only,
// and nothing else (the bounding set holds just these): CAP_SETUID, which it hands only to the
// helper that becomes that uid before each command (cabin-agent --exec-filtered); CAP_KILL, to
// end a timed-out command's process group, which is another uid's; CAP_FOWNER, so that the files
// API may still replace or remove a command's file in the sticky /tmp.
constexpr uint64_t kAgentCaps = caps::bit(CAP_SETUID) | caps::bit(CAP_KILL) | caps::bit(CAP_FOWNER);

// Before the uid change: nothing beyond kAgentCaps can ever be regained, and uid 0 (which the
// agent could become with CAP_SETUID) gets no capabilities from execve.
void limit_payload_caps() {
  check(caps::limit_bounding_set(kAgentCaps), "bounding set");
  if (::prctl(PR_SET_SECUREBITS, SECBIT_KEEP_CAPS | SECBIT_NOROOT | SECBIT_NOROOT_LOCKED, 0, 0,
              0) != 0)
    fail_errno("securebits");
}

// After it: kAgentCaps permitted and ambient, so they survive the agent's execve (a file without
// capabilities, under no_new_privs). The agent drops the ambient and inheritable sets at once, so
// Xvfb, Chromium and its other children start with none.
void hand_agent_caps() {
  check(caps::set({0, kAgentCaps, kAgentCaps}), "capabilities");
  check(caps::raise_ambient(kAgentCaps), "ambient capabilities");
}

// Forked child of PID 1: drops to the sandbox user and execs the payload. Never returns.
[[noreturn]] void exec_payload(const LauncherArgs& args, const IdMaps& maps, int report_fd) {
  ::close(report_fd);
  // The agent's listening socket at the fd it expects; nothing else of the launcher's passes on
  // (the launcher closed every other descriptor at start, and ours are CLOEXEC).
  if (args.agent_fd >= 0) {
    if (args.agent_fd != kAgentListenFd && ::dup2(args.agent_fd, kAgentListenFd) < 0)
      fail_errno("dup2 agent socket");
    int flags = ::fcntl(kAgentListenFd, F_GETFD);
    if (flags < 0 || ::fcntl(kAgentListenFd, F_SETFD, flags & ~FD_CLOEXEC) != 0)
      fail_errno("agent socket fd");
  }
  sigset_t none;
  sigemptyset(&none);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGCHLD}) ::signal(sig, SIG_DFL);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  // Its own session: the payload's process groups are its business.
  ::setsid();
  ::umask(kSandboxUmask);
  if (!maps.deny_setgroups && ::setgroups(0, nullptr) != 0) fail_errno("setgroups");
  if (maps.exec_uid_mapped) limit_payload_caps();
  if (::setresgid(kSandboxGid, kSandboxGid, kSandboxGid) != 0) fail_errno("setresgid 1000");
  if (::setresuid(kSandboxUid, kSandboxUid, kSandboxUid) != 0) fail_errno("setresuid 1000");
  if (maps.exec_uid_mapped) hand_agent_caps();
  if (::chdir(kSandboxHome) != 0) fail_errno("chdir home");
  std::vector<std::string> env =
      payload_environment(std::getenv("CABIN_AGENT_SECRET"), std::getenv("CABIN_TRUSTED_CA"));
  std::vector<char*> envp, argv;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args_copy = args.payload;
  for (auto& a : args_copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execve(argv[0], argv.data(), envp.data());
  std::fprintf(stderr, "cabin-sandbox[%s]: exec %s: %s\n", args.id.c_str(), argv[0],
               std::strerror(errno));
  ::_exit(kExecFailedStatus);
}

// Reaps every zombie; forwards termination signals to the payload; returns its wait status.
int supervise(pid_t payload) {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGCHLD}) sigaddset(&set, sig);
  for (;;) {
    siginfo_t info{};
    if (::sigwaitinfo(&set, &info) < 0) {
      if (errno == EINTR) continue;
      fail_errno("sigwaitinfo");
    }
    if (info.si_signo != SIGCHLD) {
      ::kill(payload, SIGTERM);
      continue;
    }
    for (;;) {
      int status = 0;
      pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid <= 0) break;
      // Our exit ends the pid namespace: the kernel kills whatever the payload left.
      if (pid == payload) return status;
    }
  }
}

}  // namespace

std::vector<std::string> payload_environment(const char* agent_secret, const char* trusted_ca) {
  std::vector<std::string> env = {
      std::string("HOME=") + kSandboxHome,
      "PATH=/usr/local/bin:/usr/bin:/bin",
      "LANG=C.UTF-8",
      "USER=cabin",
      "LOGNAME=cabin",
  };
  if (agent_secret) env.push_back(std::string("CABIN_AGENT_SECRET=") + agent_secret);
  if (trusted_ca && *trusted_ca) env.push_back(std::string("CABIN_TRUSTED_CA=") + trusted_ca);
  return env;
}

void run_sandbox_init(const LauncherArgs& args, const IdMaps& maps, const InitFds& fds) {
  g_args = &args;
  // Dies with the launcher; the release pipe covers a launcher that died before this line.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail_errno("PR_SET_PDEATHSIG");
  char byte = 0;
  if (retry_eintr([&] { return ::read(fds.release, &byte, 1); }) != 1)
    fail("wait for id maps", "launcher went away");
  ::close(fds.release);

  // Opened in our own mount namespace (a descriptor from the launcher's would name the host's
  // mounts, which bind refuses) and with the host uid we started with, before anything hides them.
  UniqueFd agent = open_path(args.agent, 0, "open agent");
  UniqueFd policy = open_path(args.chromium_policy, 0, "open chromium policy");
  UniqueFd profile = open_path(args.profile, O_DIRECTORY | O_NOFOLLOW, "open profile");

  if (::setresgid(maps.setup_gid, maps.setup_gid, maps.setup_gid) != 0)
    fail_errno("setresgid setup");
  if (::setresuid(maps.setup_uid, maps.setup_uid, maps.setup_uid) != 0)
    fail_errno("setresuid setup");
  // A uid change clears the parent-death signal: arm it again, then make sure the launcher did
  // not die in between (the read end of the report pipe closes with it).
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail_errno("PR_SET_PDEATHSIG");
  struct pollfd report{fds.report, 0, 0};
  if (::poll(&report, 1, 0) > 0 && (report.revents & POLLERR)) {
    fail("re-arm parent-death signal", "launcher went away");
  }
  if (::sethostname(kHostname, sizeof kHostname - 1) != 0) fail_errno("sethostname");

  MountPlan plan;
  if (agent.valid()) plan.agent_source = "/proc/self/fd/" + std::to_string(agent.get());
  if (policy.valid()) plan.chromium_policy_source = "/proc/self/fd/" + std::to_string(policy.get());
  if (profile.valid()) plan.profile_source = "/proc/self/fd/" + std::to_string(profile.get());
  plan.tmpfs_bytes = args.tmpfs_bytes;
  std::vector<std::string> warnings;
  check(build_and_enter_root(sandbox_mounts(plan), kNewRoot, &warnings), "mounts");
  for (const auto& w : warnings)
    std::fprintf(stderr, "cabin-sandbox[%s]: warning: optional mount: %s\n", args.id.c_str(),
                 w.c_str());
  agent.reset();
  policy.reset();
  profile.reset();

  check(bring_up_loopback(), "loopback");
  check(install_seccomp(seccomp_denylist()), "seccomp");
  if (args.probe) ::_exit(0);

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGCHLD}) ::sigaction(sig, &sa, nullptr);
  // The signals stay blocked (from the launcher) until the payload's fork unblocks them.
  pid_t payload = ::fork();
  if (payload < 0) fail_errno("fork payload");
  if (payload == 0) exec_payload(args, maps, fds.report);
  // The listening socket is the payload's alone.
  if (args.agent_fd >= 0) ::close(args.agent_fd);

  int status = supervise(payload);
  (void)retry_eintr([&] { return ::write(fds.report, &status, sizeof status); });
  ::_exit(0);
}

}  // namespace cabin::nsbox
