// cabin-vmm-wrap: jails QEMU, then becomes (or, jailed, runs) QEMU.
//
//   cabin-vmm-wrap [--jail UID:GID --image DIR --run DIR [--kvm-gid GID]] [--keep-fd 3]
//                  [--cgroup-ns FILE] [--cgroup-procs FILE]...
//                  -- /usr/bin/qemu-system-x86_64 ARGS...
//
// --cgroup-procs: the wrap (and so QEMU) joins these cgroups before anything else, out of
// cabind's: a container runtime that stops cabind's container kills every process in its
// cgroup, and QEMU is to outlive cabind there too. --cgroup-ns: the cgroup namespace (an nsfs
// file) to enter first, where cabind's is a container's and those cgroups lie outside its root.
//
// --keep-fd 3: QEMU gets descriptor 3 (guest RAM cabind made, which QEMU opens as
// /proc/self/fd/3); jailed, QEMU then gets a procfs that shows only its own pid namespace.
//
// QEMU outlives a cabind that restarts or dies: the next cabind adopts the VM, or kills it if it
// does not know it.
//
// The jail (as root, in the manner of Firecracker's jailer): QEMU gets a mount namespace whose
// root holds only the host's /usr (its libraries and firmware), the image dir (read-only), its
// session's run dir, /dev/null, /dev/urandom and /dev/kvm; its own ipc, uts and pid namespaces
// (it is PID 1 there and sees no other process) and net namespace (loopback only: its forward
// to the guest's agent listens there, and cabind connects from inside); and it runs as an unprivileged uid with no
// capabilities and no_new_privs, so that its own seccomp filter (-sandbox on,
// elevateprivileges=deny) never has to let a set*id call through. With a pid namespace QEMU
// must be a child: the wrap stays as its parent, passes termination signals on, dies with it
// (and it with the wrap), and exits as it did.
#include <fcntl.h>
#include <grp.h>
#include <linux/close_range.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "server/drivers/microvm/wrap_line.h"
#include "server/drivers/namespace/cgroups.h"
#include "server/drivers/namespace/mounts.h"
#include "server/drivers/namespace/netns.h"
#include "server/drivers/namespace/sys_util.h"

namespace {

using cabin::nsbox::MountEntry;
using cabin::nsbox::MountKind;

struct Jail {
  uid_t uid = 0;
  gid_t gid = 0;
  std::optional<gid_t> kvm_gid;  // a supplementary group that may open /dev/kvm
  std::string image_dir;
  std::string run_dir;
  bool proc = false;  // a procfs of QEMU's pid namespace, for /proc/self/fd
};

int usage(const char* why) {
  std::fprintf(stderr,
               "cabin-vmm-wrap: %s\n"
               "usage: cabin-vmm-wrap [--jail UID:GID --image DIR --run DIR "
               "[--kvm-gid GID]] [--keep-fd 3] [--cgroup-ns FILE] [--cgroup-procs FILE]... "
               "-- QEMU [ARGS...]\n",
               why);
  return 125;
}

bool parse_id(const char* s, unsigned long& out) {
  char* end = nullptr;
  errno = 0;
  out = std::strtoul(s, &end, 10);
  return errno == 0 && end != s && *end == '\0' && out > 0 && out < 0xffffffffUL;
}

int fail(const std::string& step) {
  std::fprintf(stderr, "cabin-vmm-wrap: %s: %s\n", step.c_str(), std::strerror(errno));
  return 125;
}

// Drops to the jail's uid, with no capabilities and no way back; runs in the wrap and in QEMU's
// process before its exec.
int drop_privileges(const Jail& j) {
  std::vector<gid_t> groups;
  if (j.kvm_gid) groups.push_back(*j.kvm_gid);
  if (::setgroups(groups.size(), groups.data()) != 0) return fail("setgroups");
  if (::setresgid(j.gid, j.gid, j.gid) != 0) return fail("setresgid");
  if (::setresuid(j.uid, j.uid, j.uid) != 0) return fail("setresuid");
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return fail("no_new_privs");
  if (::chdir(j.run_dir.c_str()) != 0) return fail("chdir run dir");
  return 0;
}

// Builds the jail's root and enters it, still as root (drop_privileges follows). Returns an
// exit status on failure, 0 on success.
int enter_jail(const Jail& j) {
  if (::unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWPID | CLONE_NEWNET) != 0) {
    return fail("unshare");
  }
  // QEMU's forward to the agent listens on this namespace's loopback; cabind connects from
  // inside it.
  if (auto lo = cabin::nsbox::bring_up_loopback(); !lo) {
    std::fprintf(stderr, "cabin-vmm-wrap: %s\n", lo.error().message.c_str());
    return 125;
  }
  // Through descriptors: the new root is assembled on /tmp, which may hold the run dir.
  int image_fd = ::open(j.image_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  int run_fd = ::open(j.run_dir.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (image_fd < 0 || run_fd < 0) return fail("open image or run dir");
  const auto fd_path = [](int fd) { return "/proc/self/fd/" + std::to_string(fd); };
  constexpr unsigned long kNoSuidDev = MS_NOSUID | MS_NODEV;
  std::vector<MountEntry> table = {
      {MountKind::kBindRo, "/usr", "/usr", kNoSuidDev, "", false, "QEMU's libraries and firmware"},
      {MountKind::kHostEntry, "/lib", "/lib", kNoSuidDev, "", true, "the loader's path"},
      {MountKind::kHostEntry, "/lib64", "/lib64", kNoSuidDev, "", true, "the loader's path"},
      {MountKind::kBindRo, fd_path(image_fd), j.image_dir, kNoSuidDev | MS_NOEXEC, "", false,
       "the guest image, read-only"},
      {MountKind::kBindRw, fd_path(run_fd), j.run_dir, kNoSuidDev | MS_NOEXEC, "", false,
       "the session's dir: the guest config, the QMP socket"},
      {MountKind::kBindDev, "/dev/null", "/dev/null", MS_NOSUID | MS_NOEXEC, "", false, "stdin"},
      {MountKind::kBindDev, "/dev/urandom", "/dev/urandom", MS_NOSUID | MS_NOEXEC, "", false,
       "QEMU's and virtio-rng's entropy"},
  };
  if (j.kvm_gid) {
    table.push_back({MountKind::kBindDev, "/dev/kvm", "/dev/kvm", MS_NOSUID | MS_NOEXEC, "", false,
                     "the vCPUs"});
  }
  if (j.proc) {
    // Only a mount point here: procfs takes the pid namespace of whoever mounts it, so QEMU's
    // own process mounts it, inside that namespace (run_in_pid_namespace).
    table.push_back({MountKind::kTmpfs, "", "/proc", kNoSuidDev | MS_NOEXEC, "size=4k,mode=0555",
                     false, "where QEMU's procfs goes"});
  }
  if (auto r = cabin::nsbox::build_and_enter_root(table, "/tmp", nullptr); !r) {
    std::fprintf(stderr, "cabin-vmm-wrap: jail: %s\n", r.error().message.c_str());
    return 125;
  }
  ::close(image_fd);
  ::close(run_fd);
  if (::sethostname("cabin-vmm", 9) != 0) return fail("sethostname");
  return 0;
}

// Runs QEMU as the first process of the pid namespace enter_jail() made, passes SIGTERM,
// SIGINT, SIGHUP and SIGQUIT on to it, and ends as it ended.
int run_in_pid_namespace(const Jail& j, char** qemu_argv) {
  sigset_t relayed, old;
  sigemptyset(&relayed);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGCHLD}) sigaddset(&relayed, sig);
  if (::sigprocmask(SIG_BLOCK, &relayed, &old) != 0) return fail("sigprocmask");
  int alive[2];
  if (::pipe2(alive, O_CLOEXEC) != 0) return fail("pipe");
  const pid_t child = ::fork();
  if (child < 0) return fail("fork");
  if (child == 0) {
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
    // subset=pid: the pid dirs and nothing else (no /proc/sys, no sysrq-trigger).
    if (j.proc && ::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                          "subset=pid,hidepid=invisible") != 0)
      _exit(fail("mount /proc"));
    if (int rc = drop_privileges(j); rc != 0) _exit(rc);
    // After the uid change, which clears it. The wrap's death (cabind's SIGKILL, or cabind's
    // death) takes QEMU with it.
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) _exit(fail("PR_SET_PDEATHSIG"));
    // The wrap died before the prctl took effect (its pid is outside, getppid() says 0): the
    // pipe's write end is then closed.
    ::close(alive[1]);
    pollfd p{alive[0], POLLIN, 0};
    if (::poll(&p, 1, 0) != 0) _exit(125);
    ::execv(qemu_argv[0], qemu_argv);
    std::fprintf(stderr, "cabin-vmm-wrap: exec %s: %s\n", qemu_argv[0], std::strerror(errno));
    _exit(127);
  }
  ::close(alive[0]);  // alive[1] stays open as long as the wrap lives
  if (int rc = drop_privileges(j); rc != 0) {
    ::kill(child, SIGKILL);
    return rc;
  }
  int status = 0;
  for (;;) {
    const int sig = ::sigwaitinfo(&relayed, nullptr);
    if (sig < 0) continue;  // EINTR
    if (sig != SIGCHLD) {
      ::kill(child, sig);
      continue;
    }
    const pid_t done = ::waitpid(child, &status, WNOHANG);
    if (done == child) break;
  }
  if (WIFSIGNALED(status)) {
    std::fprintf(stderr, "%sqemu killed by signal %d (%s)\n", cabin::drivers::kWrapFailurePrefix, WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
  }
  return cabin::nsbox::mirror_wait_status(status, 125);
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<Jail> jail;
  bool keep_fd3 = false;
  std::vector<std::string> cgroup_procs;
  std::string cgroup_ns;
  int i = 1;
  for (; i + 1 < argc && std::strcmp(argv[i], "--") != 0; i += 2) {
    const char* flag = argv[i];
    const char* v = argv[i + 1];
    unsigned long n = 0;
    if (std::strcmp(flag, "--jail") == 0) {
      const char* colon = std::strchr(v, ':');
      unsigned long u = 0, g = 0;
      if (!colon || !parse_id(std::string(v, colon).c_str(), u) || !parse_id(colon + 1, g))
        return usage("--jail needs UID:GID, both non-zero");
      if (!jail) jail.emplace();
      jail->uid = static_cast<uid_t>(u);
      jail->gid = static_cast<gid_t>(g);
    } else if (std::strcmp(flag, "--image") == 0 || std::strcmp(flag, "--run") == 0) {
      if (v[0] != '/') return usage("--image and --run need absolute paths");
      if (!jail) jail.emplace();
      (flag[2] == 'i' ? jail->image_dir : jail->run_dir) = v;
    } else if (std::strcmp(flag, "--keep-fd") == 0) {
      if (std::strcmp(v, "3") != 0) return usage("--keep-fd takes 3 only");
      keep_fd3 = true;
    } else if (std::strcmp(flag, "--cgroup-procs") == 0) {
      const size_t len = std::strlen(v);
      if (v[0] != '/' || len < 13 || std::strcmp(v + len - 13, "/cgroup.procs") != 0)
        return usage("--cgroup-procs needs an absolute path to a cgroup.procs file");
      cgroup_procs.push_back(v);
    } else if (std::strcmp(flag, "--cgroup-ns") == 0) {
      if (v[0] != '/') return usage("--cgroup-ns needs an absolute path");
      cgroup_ns = v;
    } else if (std::strcmp(flag, "--kvm-gid") == 0) {
      if (!parse_id(v, n)) return usage("bad --kvm-gid");
      if (!jail) jail.emplace();
      jail->kvm_gid = static_cast<gid_t>(n);
    } else {
      return usage("unknown flag");
    }
  }
  // QEMU gets no descriptor of cabind's but stdio (and the one it was meant to have), whatever
  // cabind forgot to mark CLOEXEC: a VMM holding cabind's sockets could accept its clients or
  // talk to other sessions' agents. Nothing was opened above.
  if (::syscall(SYS_close_range, keep_fd3 ? 4u : 3u, ~0u, 0u) != 0) return fail("close_range");
  if (keep_fd3 && ::fcntl(3, F_GETFD) < 0) return usage("--keep-fd 3, but 3 is not open");
  if (i >= argc || std::strcmp(argv[i], "--") != 0 || i + 1 >= argc)
    return usage("-- QEMU is required");
  if (jail && (jail->uid == 0 || jail->image_dir.empty() || jail->run_dir.empty()))
    return usage("--jail needs --image and --run");
  // QEMU, the wrap's child or the wrap itself after the exec, is born in these cgroups.
  if (auto r = cabin::nsbox::join_cgroups(cgroup_ns, cgroup_procs); !r) {
    std::fprintf(stderr, "cabin-vmm-wrap: join cgroup: %s\n", r.error().message.c_str());
    return 125;
  }
  if (jail) {
    jail->proc = keep_fd3;
    if (int rc = enter_jail(*jail); rc != 0) return rc;
    return run_in_pid_namespace(*jail, argv + i + 1);
  }
  ::execv(argv[i + 1], argv + i + 1);
  std::fprintf(stderr, "cabin-vmm-wrap: exec %s: %s\n", argv[i + 1], std::strerror(errno));
  return 127;
}
