// cabin-sandbox: starts one namespace sandbox and its payload; see launcher_args.h for the flags.
#include <linux/close_range.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "server/drivers/namespace/launcher.h"
#include "server/drivers/namespace/launcher_args.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  auto parsed = cabin::nsbox::parse_launcher_args(args);
  if (!parsed) {
    std::fprintf(stderr,
                 "cabin-sandbox: %s\n"
                 "usage: cabin-sandbox --id ID [--run-dir DIR] [--agent PATH]\n"
                 "         [--map-root UID:GID --map-user UID:GID] [--cgroup-procs FILE]...\n"
                 "         [--tmpfs-size BYTES] [--probe] -- ARGV...\n",
                 parsed.error().message.c_str());
    return cabin::nsbox::kSetupFailedStatus;
  }
  // Nothing of the caller's but the agent's socket may reach the sandbox, whatever the caller
  // forgot to mark CLOEXEC.
  const int keep = parsed.value().agent_fd;
  if (keep > 3 && ::syscall(SYS_close_range, 3u, static_cast<unsigned>(keep - 1), 0u) != 0)
    return cabin::nsbox::kSetupFailedStatus;
  if (::syscall(SYS_close_range, static_cast<unsigned>(keep >= 3 ? keep + 1 : 3), ~0u, 0u) != 0) {
    std::fprintf(stderr, "cabin-sandbox: close_range: %s\n", std::strerror(errno));
    return cabin::nsbox::kSetupFailedStatus;
  }
  // The sandbox's PID 1 inherits this argument memory, and its /proc/1/cmdline is readable
  // inside: leave only the name and the session id there, not host paths and cgroups.
  char* begin = argv[0];
  char* end = argv[argc - 1] + std::strlen(argv[argc - 1]);
  std::memset(begin, 0, static_cast<size_t>(end - begin));
  std::string shown = "cabin-sandbox";
  shown.push_back('\0');
  shown += parsed.value().id;
  std::memcpy(begin, shown.data(), std::min(shown.size(), static_cast<size_t>(end - begin)));
  return cabin::nsbox::run_launcher(parsed.value());
}
