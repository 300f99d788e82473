#include "server/drivers/namespace/seccomp_policy.h"

#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>

#include <cerrno>
#include <memory>
#include <string>

#include "server/drivers/namespace/sys_util.h"

namespace cabin::nsbox {

const std::vector<SyscallRule>& seccomp_denylist() {
  static const std::vector<SyscallRule> rules = {
      {"kexec_load", EPERM, -1, 0, "would replace the running kernel"},
      {"kexec_file_load", EPERM, -1, 0, "would replace the running kernel"},
      {"init_module", EPERM, -1, 0, "kernel code from the sandbox"},
      {"finit_module", EPERM, -1, 0, "kernel code from the sandbox"},
      {"delete_module", EPERM, -1, 0, "unloading host kernel modules"},
      {"bpf", EPERM, -1, 0, "the verifier and JIT are a large kernel attack surface"},
      {"perf_event_open", EPERM, -1, 0, "side channels and a history of kernel bugs"},
      {"keyctl", EPERM, -1, 0, "the kernel keyring is not namespaced"},
      {"add_key", EPERM, -1, 0, "the kernel keyring is not namespaced"},
      {"request_key", EPERM, -1, 0, "the kernel keyring is not namespaced"},
      {"userfaultfd", EPERM, -1, 0, "used to stretch kernel race windows in exploits"},
      {"open_by_handle_at", EPERM, -1, 0, "opens files by handle, bypassing the mount view"},
      {"name_to_handle_at", EPERM, -1, 0, "pairs with open_by_handle_at"},
      {"mount", EPERM, -1, 0, "the mount table is fixed once the sandbox is built"},
      {"umount2", EPERM, -1, 0, "would uncover what the sandbox's mounts hide"},
      {"pivot_root", EPERM, -1, 0, "the root is fixed"},
      {"move_mount", EPERM, -1, 0, "new mount API: same as mount"},
      {"open_tree", EPERM, -1, 0, "new mount API: clones mounts"},
      {"fsopen", EPERM, -1, 0, "new mount API: new superblocks"},
      {"fsconfig", EPERM, -1, 0, "new mount API"},
      {"fsmount", EPERM, -1, 0, "new mount API"},
      {"fspick", EPERM, -1, 0, "new mount API: reconfigures mounts"},
      {"mount_setattr", EPERM, -1, 0, "would clear read-only on mounts"},
      {"swapon", EPERM, -1, 0, "host swap configuration"},
      {"swapoff", EPERM, -1, 0, "host swap configuration"},
      {"reboot", EPERM, -1, 0, "in a pid namespace it kills the sandbox's init: use exit"},
      {"acct", EPERM, -1, 0, "process accounting is host-wide"},
      {"quotactl", EPERM, -1, 0, "host filesystem quotas"},
      {"quotactl_fd", EPERM, -1, 0, "host filesystem quotas"},
      {"iopl", EPERM, -1, 0, "raw I/O port access"},
      {"ioperm", EPERM, -1, 0, "raw I/O port access"},
      {"syslog", EPERM, -1, 0, "the kernel log leaks host addresses and activity"},
      {"ptrace", EPERM, -1, 0, "no debugging of other processes; a frequent kernel bug source"},
      {"process_vm_writev", EPERM, -1, 0, "writes another process's memory, like ptrace"},
      {"process_vm_readv", EPERM, -1, 0,
       "reads another process's memory (keys, tokens), like ptrace"},
      {"pidfd_getfd", EPERM, -1, 0, "takes a copy of another process's descriptor"},
      {"io_uring_setup", EPERM, -1, 0, "large kernel attack surface; nothing here needs it"},
      {"io_uring_enter", EPERM, -1, 0, "as io_uring_setup"},
      {"io_uring_register", EPERM, -1, 0, "as io_uring_setup"},
      {"setns", EPERM, -1, 0, "joining namespaces: nothing outside is reachable anyway"},
      {"settimeofday", EPERM, -1, 0, "the clock is host-wide"},
      {"clock_settime", EPERM, -1, 0, "the clock is host-wide"},
      {"clock_adjtime", EPERM, -1, 0, "the clock is host-wide"},
      {"lookup_dcookie", EPERM, -1, 0, "profiling interface, host-wide"},
      {"uselib", EPERM, -1, 0, "obsolete loader call"},
      {"vhangup", EPERM, -1, 0, "terminal hangup of others"},
      {"ioctl", EPERM, 1, TIOCSTI, "TIOCSTI injects input into a terminal"},
      {"ioctl", EPERM, 1, TIOCLINUX, "TIOCLINUX can read and inject console contents"},
      {"socket", EAFNOSUPPORT, 0, AF_VSOCK,
       "vsock is not scoped by the net namespace: it reaches the host and its VMs past 'only lo'"},
  };
  return rules;
}

Result<void> install_seccomp(const std::vector<SyscallRule>& rules) {
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return sys_error("PR_SET_NO_NEW_PRIVS");
  std::unique_ptr<void, void (*)(scmp_filter_ctx)> ctx(seccomp_init(SCMP_ACT_ALLOW),
                                                       seccomp_release);
  if (!ctx) return sys_error("seccomp_init", ENOMEM);
  for (const auto& r : rules) {
    int nr = seccomp_syscall_resolve_name(r.name);
    if (nr == __NR_SCMP_ERROR) continue;  // not a syscall on this architecture
    int rc;
    if (r.arg_index >= 0) {
      // Compare the low 32 bits only: ioctl's command is an unsigned int, socket's domain an int.
      rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(r.err), nr, 1,
                            SCMP_CMP(static_cast<unsigned>(r.arg_index), SCMP_CMP_MASKED_EQ,
                                     0xffffffffu, r.arg_value));
    } else {
      rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(r.err), nr, 0);
    }
    if (rc != 0) return sys_error(std::string("seccomp rule ") + r.name, -rc);
  }
  if (int rc = seccomp_load(ctx.get()); rc != 0) return sys_error("seccomp_load", -rc);
  return {};
}

}  // namespace cabin::nsbox
