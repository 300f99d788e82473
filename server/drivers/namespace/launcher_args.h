// cabin-sandbox's command line: the typed arguments, built by the driver and parsed by the
// launcher.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"

namespace cabin::nsbox {

// Fixed paths inside every sandbox.
inline constexpr char kSandboxAgentPath[] = "/opt/cabin/bin/cabin-agent";
inline constexpr char kSandboxHome[] = "/home/cabin";
// Chromium's user data directory: the agent starts it with --user-data-dir=HOME/chromium.
inline constexpr char kSandboxProfilePath[] = "/home/cabin/chromium";
// Where Chromium on Linux reads managed (enterprise) policies.
inline constexpr char kSandboxChromiumPolicyPath[] = "/etc/chromium/policies/managed/cabin.json";
inline constexpr char kAgentSocketName[] = "agent.sock";  // in the host's <run-dir>/<id>/
// The descriptor the payload finds the agent's listening socket on (made and bound by cabind).
inline constexpr int kAgentListenFd = 3;
// The unprivileged user every payload runs as, inside the sandbox's user namespace.
inline constexpr uint32_t kSandboxUid = 1000;
inline constexpr uint32_t kSandboxGid = 1000;
// The user exec'd commands run as when cabind is root (its own host uid): another uid than the
// agent's, Xvfb's and Chromium's, so a command cannot write their memory, take their descriptors
// or signal them. Its group stays kSandboxGid, the group their shared files belong to.
inline constexpr uint32_t kSandboxExecUid = 1001;
// The payload's umask: files the agent, the browser and exec'd commands make are their group's
// to read and write.
inline constexpr unsigned kSandboxUmask = 0002;
// Exit status of cabin-sandbox when building the sandbox failed (stderr says which step).
inline constexpr int kSetupFailedStatus = 125;
// Exit status when the payload could not be executed.
inline constexpr int kExecFailedStatus = 127;

struct HostIds {
  uint32_t uid = 0;
  uint32_t gid = 0;
};

struct LauncherArgs {
  std::string id;       // session id: names the sandbox in messages
  // The payload gets this fd as kAgentListenFd: the agent's listening socket, which cabind
  // binds in a host dir the sandbox never sees. -1: none (probe).
  int agent_fd = -1;
  std::string agent;    // host binary bound read-only at kSandboxAgentPath; empty: none
  // Host file bound read-only as Chromium's managed policy (kSandboxChromiumPolicyPath); empty:
  // none.
  std::string chromium_policy;
  // Host dir bound writable as Chromium's profile (kSandboxProfilePath), owned by map_user's
  // host ids; empty: the profile starts empty in the home tmpfs.
  std::string profile;
  // Host ids for inside-root and inside-1000; only used (and required) when the launcher is root.
  std::optional<HostIds> map_root;
  std::optional<HostIds> map_user;
  // Host uid for inside-kSandboxExecUid; given (and required) with map_root.
  std::optional<uint32_t> map_exec_uid;
  std::vector<std::string> cgroup_procs;  // cgroup.procs files the launcher joins first
  // A cgroup namespace (an nsfs file) entered before joining them: the host's, when cabind's
  // own is a container's, whose root the cgroups lie outside of. Empty: cabind's.
  std::string cgroup_ns;
  uint64_t tmpfs_bytes = 512ull << 20;    // size of each of /tmp, /home/cabin and /dev/shm
  bool probe = false;                     // build the sandbox, then exit 0 instead of the payload
  std::vector<std::string> payload;       // argv run inside the sandbox as uid 1000
};

// argv for posix_spawn: launcher_path, flags, "--", payload.
std::vector<std::string> build_launcher_argv(const std::string& launcher_path,
                                             const LauncherArgs& args);
// Parses argv[1..]; the first error wins.
Result<LauncherArgs> parse_launcher_args(const std::vector<std::string>& argv);

}  // namespace cabin::nsbox
