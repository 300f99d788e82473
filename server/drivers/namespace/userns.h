// User namespace id maps: which host ids the sandbox's root and user become, and writing them.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "server/drivers/namespace/launcher_args.h"

namespace cabin::nsbox {

struct IdMapping {
  uint32_t inside = 0;
  uint32_t outside = 0;
  uint32_t count = 1;
};

struct IdMaps {
  std::vector<IdMapping> uid;
  std::vector<IdMapping> gid;
  // Unprivileged writers must deny setgroups before writing gid_map.
  bool deny_setgroups = false;
  // The inside uid/gid the sandbox's PID 1 switches to for setup (root when it is mapped).
  uint32_t setup_uid = 0;
  uint32_t setup_gid = 0;
  // kSandboxExecUid is mapped: the agent gets what it needs to start commands as that uid.
  bool exec_uid_mapped = false;
};

// As host root: inside 0 -> map_root, inside 1000 -> map_user and uid 1001 (exec'd commands) ->
// map_exec_uid (distinct unprivileged host ids; host root is never mapped). Otherwise: the
// caller's own ids -> 1000, one line each.
IdMaps plan_id_maps(bool host_root, uint32_t own_uid, uint32_t own_gid,
                    const std::optional<HostIds>& map_root, const std::optional<HostIds>& map_user,
                    const std::optional<uint32_t>& map_exec_uid);

// "inside outside count\n" per line, as /proc/PID/uid_map wants it.
std::string id_map_text(const std::vector<IdMapping>& maps);

// The supplementary groups in `groups` besides `primary`. An unprivileged launcher cannot drop
// them (setgroups needs CAP_SETGID in the host's namespace) and "setgroups deny" locks them in,
// so they would follow into the sandbox and open the host files those groups may read.
std::vector<uint32_t> groups_beyond(uint32_t primary, const std::vector<uint32_t>& groups);
// getgroups() of this process.
std::vector<uint32_t> own_groups();
// "cabind runs with supplementary groups 4, 42: ..." for groups_beyond()'s answer; empty: none.
std::string kept_groups_problem(const std::vector<uint32_t>& kept);

// Writes setgroups (when denied), uid_map and gid_map of `child`.
Result<void> write_id_maps(pid_t child, const IdMaps& maps);

}  // namespace cabin::nsbox
