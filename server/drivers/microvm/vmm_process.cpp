#include "server/drivers/microvm/vmm_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "server/drivers/namespace/sys_util.h"

namespace cabin::drivers {

std::vector<std::string> vmm_wrap_argv(const std::filesystem::path& wrap, pid_t parent,
                                       const std::vector<std::string>& qemu_argv) {
  std::vector<std::string> argv = {wrap.string(), "--parent", std::to_string(parent), "--"};
  argv.insert(argv.end(), qemu_argv.begin(), qemu_argv.end());
  return argv;
}

Result<VmmProcess> spawn_vmm(const VmmSpawn& s) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return nsbox::sys_error("pipe");
  UniqueFd out_r(out[0]), out_w(out[1]);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_w.get(), 1);
  posix_spawn_file_actions_adddup2(&fa, out_w.get(), 2);
  // dup2 clears FD_CLOEXEC on the copy, so QEMU inherits exactly this one extra descriptor.
  if (s.pass_fd >= 0) posix_spawn_file_actions_adddup2(&fa, s.pass_fd, 3);
  if (!s.cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, s.cwd.c_str());
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  // cabind ignores SIGPIPE and may block signals; QEMU gets the defaults.
  for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGCHLD, SIGQUIT, SIGUSR1, SIGUSR2})
    sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  // Its own process group: a terminal's Ctrl-C goes to cabind, which decides.
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);

  std::vector<std::string> argv =
      s.wrap.empty() ? s.argv : vmm_wrap_argv(s.wrap, ::getpid(), s.argv);
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  // QEMU needs nothing from cabind's environment; a fixed one keeps secrets and locale out.
  std::string path_env = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";
  char* envp[] = {path_env.data(), nullptr};

  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, cargv[0], &fa, &attr, cargv.data(), envp);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return nsbox::sys_error("spawn " + argv[0], rc);

  VmmProcess p;
  p.pid = pid;
  p.output = std::move(out_r);
  // We are the parent and have not reaped it, so the pid cannot have been reused.
  p.pidfd = UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!p.pidfd.valid()) {
    int err = errno;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return nsbox::sys_error("pidfd_open", err);
  }
  return p;
}

}  // namespace cabin::drivers
