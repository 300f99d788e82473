// The exec filter: a seccomp filter, stricter than the sandbox's, that exec'd commands run under.
#pragma once

#include <linux/filter.h>
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
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

// `cabin-agent --exec-filtered USER PATH ARGV0 ARGS...`: becomes USER (a uid, or "-" to stay),
// drops every capability, installs the filter and execs PATH. The agent itself keeps no such
// filter, because Chromium, which it also starts, needs user namespaces.
inline constexpr char kExecFilteredFlag[] = "--exec-filtered";

struct FilteredExec {
  std::optional<uid_t> uid;       // none: the caller's
  std::vector<std::string> argv;  // [0] the program's path, then its argv
};
// argv as run_filtered_exec gets it (USER PATH ARGV0...); the first error wins.
Result<FilteredExec> parse_filtered_exec(const std::vector<std::string>& argv);
// The helper's whole argv: `helper --exec-filtered USER path argv...`.
std::vector<std::string> filtered_exec_argv(const std::string& helper, std::optional<uid_t> uid,
                                            const std::string& path,
                                            const std::vector<std::string>& argv);

// Switches all three uids to `uid` (CAP_SETUID from the agent, through the ambient set), then
// clears every capability set; checks that both held.
Result<void> become_exec_user(std::optional<uid_t> uid);

// argv[0..] are what follows the flag. Returns only on failure (the exit status).
int run_filtered_exec(int argc, char** argv);

}  // namespace cabin::agent
