#include "vm-images/agent/exec_filter.h"

#include <linux/audit.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdio>
#include <cstring>

#include "common/capabilities.h"

namespace cabin::agent {
namespace {

#if defined(__x86_64__)
constexpr uint32_t kNativeArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr uint32_t kNativeArch = AUDIT_ARCH_AARCH64;
#else
#error "exec filter: unsupported architecture"
#endif
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "argument low halves come first");

#ifndef CLONE_NEWTIME
constexpr uint32_t CLONE_NEWTIME = 0x80;
#endif

// Every namespace clone() can make. CLONE_NEWTIME shares its bit with clone()'s exit signal, so
// only unshare() checks it (clone() cannot make a time namespace).
constexpr uint32_t kCloneNamespaces = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC |
                                      CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET;

sock_filter stmt(uint16_t code, uint32_t k) { return BPF_STMT(code, k); }
sock_filter jump(uint16_t code, uint32_t k, uint8_t jt, uint8_t jf) {
  return BPF_JUMP(code, k, jt, jf);
}

}  // namespace

const std::vector<ExecSyscallRule>& exec_filter_rules() {
  static const std::vector<ExecSyscallRule> rules = {
      {SYS_clone3, ENOSYS, -1, 0,
       "its flags lie in memory a filter cannot read; ENOSYS makes glibc fall back to clone"},
      {SYS_clone, EPERM, 0, kCloneNamespaces,
       "no new namespaces: a new user namespace gives CAP_NET_ADMIN and CAP_NET_RAW over a fresh "
       "net namespace (nf_tables, packet sockets, tc), a large kernel attack surface"},
      {SYS_unshare, EPERM, 0, kCloneNamespaces | CLONE_NEWTIME, "as clone"},
      {SYS_setns, EPERM, -1, 0, "no joining namespaces that some other process made"},
      {SYS_process_vm_readv, EPERM, -1, 0, "reads another process's memory, as ptrace would"},
      {SYS_process_vm_writev, EPERM, -1, 0, "writes another process's memory, as ptrace would"},
      {SYS_pidfd_getfd, EPERM, -1, 0, "takes a copy of another process's descriptor"},
  };
  return rules;
}

std::vector<sock_filter> build_exec_filter(const std::vector<ExecSyscallRule>& rules) {
  constexpr uint32_t kNr = offsetof(seccomp_data, nr);
  std::vector<sock_filter> p = {
      stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      jump(BPF_JMP | BPF_JEQ | BPF_K, kNativeArch, 1, 0),
      stmt(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
      stmt(BPF_LD | BPF_W | BPF_ABS, kNr),
  };
#if defined(__x86_64__)
  // x32 numbers would slip past the native ones below.
  p.push_back(jump(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1));
  p.push_back(stmt(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS));
#endif
  for (const auto& r : rules) {
    const uint32_t deny = SECCOMP_RET_ERRNO | (static_cast<uint32_t>(r.err) & SECCOMP_RET_DATA);
    if (r.arg_index < 0) {
      p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(r.nr), 0, 1));
      p.push_back(stmt(BPF_RET | BPF_K, deny));
      continue;
    }
    // nr matches: load the argument, deny when a masked bit is set, else reload nr.
    const uint32_t arg = offsetof(seccomp_data, args) + 8 * static_cast<uint32_t>(r.arg_index);
    p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(r.nr), 0, 4));
    p.push_back(stmt(BPF_LD | BPF_W | BPF_ABS, arg));
    p.push_back(jump(BPF_JMP | BPF_JSET | BPF_K, r.arg_mask, 0, 1));
    p.push_back(stmt(BPF_RET | BPF_K, deny));
    p.push_back(stmt(BPF_LD | BPF_W | BPF_ABS, kNr));
  }
  p.push_back(stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  return p;
}

Result<void> install_exec_filter() {
  auto fail = [](const char* what) {
    return make_error(Errc::kInternal, "exec_filter", std::string(what) + ": " + strerror(errno));
  };
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return fail("PR_SET_NO_NEW_PRIVS");
  auto program = build_exec_filter(exec_filter_rules());
  sock_fprog prog{static_cast<unsigned short>(program.size()), program.data()};
  if (::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0) return fail("seccomp");
  return {};
}

Result<FilteredExec> parse_filtered_exec(const std::vector<std::string>& argv) {
  auto usage = [](const std::string& why) {
    return make_error(Errc::kInvalidArgument, "exec_filter",
                      std::string(kExecFilteredFlag) + " USER PATH ARGV0 [ARGS...]: " + why);
  };
  if (argv.size() < 3) return usage("too few arguments");
  FilteredExec out;
  if (argv[0] != "-") {
    uid_t uid = 0;
    const auto& u = argv[0];
    auto [end, ec] = std::from_chars(u.data(), u.data() + u.size(), uid);
    if (ec != std::errc() || end != u.data() + u.size() || u.empty() || uid == 0)
      return usage("USER must be a non-zero uid or -");
    out.uid = uid;
  }
  if (argv[1].empty()) return usage("PATH is empty");
  out.argv.assign(argv.begin() + 1, argv.end());
  return out;
}

std::vector<std::string> filtered_exec_argv(const std::string& helper, std::optional<uid_t> uid,
                                            const std::string& path,
                                            const std::vector<std::string>& argv) {
  std::vector<std::string> out = {helper, kExecFilteredFlag, uid ? std::to_string(*uid) : "-",
                                  path};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

Result<void> become_exec_user(std::optional<uid_t> uid) {
  auto fail = [](const std::string& what) {
    return make_error(Errc::kInternal, "exec_filter", what + ": " + strerror(errno));
  };
  if (uid) {
    // Real, effective and saved: nothing leads back to the agent's uid.
    if (::setresuid(*uid, *uid, *uid) != 0) return fail("setresuid " + std::to_string(*uid));
    uid_t r = 0, e = 0, s = 0;
    if (::getresuid(&r, &e, &s) != 0 || r != *uid || e != *uid || s != *uid)
      return fail("uid did not change");
  }
  if (auto r = caps::set({}); !r) return r;
  if (auto r = caps::clear_ambient(); !r) return r;
  auto now = caps::get();
  if (!now) return now.error();
  if (!(*now == caps::Sets{}) || !caps::ambient_empty()) {
    errno = EPERM;
    return fail("capabilities left");
  }
  return {};
}

int run_filtered_exec(int argc, char** argv) {
  auto parsed = parse_filtered_exec(std::vector<std::string>(argv, argv + argc));
  if (!parsed) {
    std::fprintf(stderr, "cabin-agent: %s\n", parsed.error().message.c_str());
    return 127;
  }
  if (auto r = become_exec_user(parsed->uid); !r) {
    std::fprintf(stderr, "cabin-agent: %s\n", r.error().message.c_str());
    return 126;
  }
  if (auto r = install_exec_filter(); !r) {
    std::fprintf(stderr, "cabin-agent: %s\n", r.error().message.c_str());
    return 126;
  }
  std::vector<char*> args;
  for (auto& a : parsed->argv) args.push_back(a.data());
  args.push_back(nullptr);
  ::execv(args[0], args.data() + 1);
  std::fprintf(stderr, "cabin-agent: exec %s: %s\n", args[0], strerror(errno));
  return 127;
}

}  // namespace cabin::agent
