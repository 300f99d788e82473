// The exec filter: a seccomp filter, stricter than the sandbox's, that exec'd commands run under.
#pragma once

#include <linux/filter.h>

#include <cstdint>
#include <vector>

#include "common/result.h"

namespace cabin::agent {

// One denied call. Everything not listed is left to the filters below this one.
struct ExecSyscallRule {
  long nr;                // native syscall number
  int err;                // errno the call fails with
  int arg_index = -1;     // >= 0: only when this argument has a bit of arg_mask set
  uint32_t arg_mask = 0;  // compared with the argument's low 32 bits
  const char* why = "";
};

const std::vector<ExecSyscallRule>& exec_filter_rules();

// The classic BPF program for `rules`: another architecture is killed, x32 calls fail ENOSYS.
std::vector<sock_filter> build_exec_filter(const std::vector<ExecSyscallRule>& rules);

// Sets no_new_privs and stacks the filter on this process and everything it starts.
Result<void> install_exec_filter();

// `cabin-agent --exec-filtered PATH ARGV0 ARGS...`: installs the filter and execs PATH. The agent
// itself keeps no such filter, because Chromium, which it also starts, needs user namespaces.
inline constexpr char kExecFilteredFlag[] = "--exec-filtered";
// argv[0] is PATH, argv[1..] the command's argv. Returns only on failure (the exit status).
int run_filtered_exec(int argc, char** argv);

}  // namespace cabin::agent
