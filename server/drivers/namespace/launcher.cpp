#include "server/drivers/namespace/launcher.h"

#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "common/agent_protocol.h"
#include "common/unique_fd.h"
#include "server/drivers/namespace/cgroups.h"
#include "server/drivers/namespace/sandbox_init.h"
#include "server/drivers/namespace/sys_util.h"
#include "server/drivers/namespace/userns.h"

namespace cabin::nsbox {
namespace {

// CLONE_NEWCGROUP after joining the sandbox's cgroups: inside, /proc/self/cgroup shows "/", not
// the host's cgroup paths.
constexpr unsigned long kNamespaces = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET |
                                      CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP;

int fail(const LauncherArgs& args, const std::string& step, const std::string& message) {
  std::fprintf(stderr, "cabin-sandbox[%s]: %s: %s\n", args.id.c_str(), step.c_str(),
               message.c_str());
  return kSetupFailedStatus;
}

int fail_errno(const LauncherArgs& args, const std::string& step) {
  return fail(args, step, std::strerror(errno));
}

}  // namespace

int run_launcher(const LauncherArgs& args) {
  // No parent-death signal: the sandbox outlives a cabind that restarts or dies, and the next
  // one adopts it (or kills it, if it does not know it).
  const bool host_root = ::geteuid() == 0;
  // cabind's supplementary groups must not follow the sandbox.
  if (host_root && ::setgroups(0, nullptr) != 0) return fail_errno(args, "setgroups");
  if (!host_root) {
    // Without root they cannot be dropped, so the sandbox is refused.
    auto kept = groups_beyond(::getegid(), own_groups());
    if (!kept.empty()) return fail(args, "supplementary groups", kept_groups_problem(kept));
  }
  if (auto r = join_cgroups(args.cgroup_ns, args.cgroup_procs); !r)
    return fail(args, "join cgroup", r.error().message);
  if (host_root && !args.map_root)
    return fail(args, "id maps", "--map-root/--map-user required as root");
  IdMaps maps = plan_id_maps(host_root, ::getuid(), ::getgid(), args.map_root, args.map_user,
                             args.map_exec_uid);

  int release[2], report[2];
  if (::pipe2(release, O_CLOEXEC) != 0 || ::pipe2(report, O_CLOEXEC) != 0)
    return fail_errno(args, "pipe");
  UniqueFd release_r(release[0]), release_w(release[1]), report_r(report[0]), report_w(report[1]);

  // Blocked before clone so neither side loses a signal; PID 1 inherits the mask.
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGCHLD}) sigaddset(&set, sig);
  if (::sigprocmask(SIG_BLOCK, &set, nullptr) != 0) return fail_errno(args, "sigprocmask");

  // Raw clone without a new stack behaves like fork; this process is single-threaded.
  pid_t child =
      static_cast<pid_t>(::syscall(SYS_clone, kNamespaces | SIGCHLD, nullptr, nullptr, nullptr, 0));
  if (child < 0) return fail_errno(args, "clone namespaces");
  if (child == 0) {
    release_w.reset();
    report_r.reset();
    run_sandbox_init(args, maps, InitFds{release_r.get(), report_w.get()});
  }
  release_r.reset();
  report_w.reset();

  if (auto r = write_id_maps(child, maps); !r) {
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    return fail(args, "id maps", r.error().message);
  }
  char go = 1;
  if (retry_eintr([&] { return ::write(release_w.get(), &go, 1); }) != 1) {
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    return fail_errno(args, "release sandbox");
  }
  release_w.reset();

  int child_status = 0;
  for (;;) {
    siginfo_t info{};
    if (::sigwaitinfo(&set, &info) < 0) {
      if (errno == EINTR) continue;
      ::kill(child, SIGKILL);
    } else if (info.si_signo != SIGCHLD) {
      // Asked to stop: PID 1's death takes the whole pid namespace with it.
      ::kill(child, SIGKILL);
    }
    pid_t done = retry_eintr([&] { return ::waitpid(child, &child_status, WNOHANG); });
    if (done == child) break;
  }
  // PID 1 reports the payload's status before it exits; without a report (setup failed, or PID 1
  // was killed) PID 1's own status is the answer.
  int payload_status = 0;
  ssize_t n =
      retry_eintr([&] { return ::read(report_r.get(), &payload_status, sizeof payload_status); });
  if (n == sizeof payload_status && WIFSIGNALED(payload_status)) {
    // A killed agent leaves no word of its own: this line, in the agent's failure form, is what
    // cabind records as the end reason.
    const int sig = WTERMSIG(payload_status);
    std::fprintf(stderr, "%scabin-agent killed by signal %d (%s)\n",
                 agent_protocol::kAgentFailureLinePrefix, sig, ::strsignal(sig));
  }
  return mirror_wait_status(n == sizeof payload_status ? payload_status : child_status,
                            kSetupFailedStatus);
}

}  // namespace cabin::nsbox
