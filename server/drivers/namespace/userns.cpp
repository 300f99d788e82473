#include "server/drivers/namespace/userns.h"

#include <unistd.h>

#include <algorithm>

#include "server/drivers/namespace/sys_util.h"

namespace cabin::nsbox {

IdMaps plan_id_maps(bool host_root, uint32_t own_uid, uint32_t own_gid,
                    const std::optional<HostIds>& map_root, const std::optional<HostIds>& map_user,
                    const std::optional<uint32_t>& map_exec_uid) {
  IdMaps m;
  if (host_root && map_root && map_user && map_exec_uid) {
    m.uid = {{0, map_root->uid, 1},
             {kSandboxUid, map_user->uid, 1},
             {kSandboxExecUid, *map_exec_uid, 1}};
    m.gid = {{0, map_root->gid, 1}, {kSandboxGid, map_user->gid, 1}};
    m.setup_uid = 0;
    m.setup_gid = 0;
    m.exec_uid_mapped = true;
    return m;
  }
  // Without CAP_SETUID in the parent namespace only one line, naming our own id, is allowed: no
  // exec uid, so commands run as the agent's user.
  m.uid = {{kSandboxUid, own_uid, 1}};
  m.gid = {{kSandboxGid, own_gid, 1}};
  m.deny_setgroups = true;
  m.setup_uid = kSandboxUid;
  m.setup_gid = kSandboxGid;
  return m;
}

std::vector<uint32_t> groups_beyond(uint32_t primary, const std::vector<uint32_t>& groups) {
  std::vector<uint32_t> out;
  for (uint32_t g : groups) {
    if (g != primary && std::find(out.begin(), out.end(), g) == out.end()) out.push_back(g);
  }
  return out;
}

std::vector<uint32_t> own_groups() {
  int n = ::getgroups(0, nullptr);
  if (n <= 0) return {};
  std::vector<gid_t> g(static_cast<size_t>(n));
  n = ::getgroups(n, g.data());
  if (n < 0) return {};
  return std::vector<uint32_t>(g.begin(), g.begin() + n);
}

std::string kept_groups_problem(const std::vector<uint32_t>& kept) {
  if (kept.empty()) return "";
  std::string list;
  for (uint32_t g : kept) list += (list.empty() ? "" : ", ") + std::to_string(g);
  return "not root and in supplementary groups " + list +
         ", which the sandbox could not drop (files those groups may read would be readable "
         "inside): run cabind without them (systemd: SupplementaryGroups= empty; "
         "setpriv --clear-groups) or as root";
}

std::string id_map_text(const std::vector<IdMapping>& maps) {
  std::string out;
  for (const auto& m : maps) {
    out += std::to_string(m.inside) + " " + std::to_string(m.outside) + " " +
           std::to_string(m.count) + "\n";
  }
  return out;
}

Result<void> write_id_maps(pid_t child, const IdMaps& maps) {
  const std::string proc = "/proc/" + std::to_string(child) + "/";
  if (maps.deny_setgroups) {
    if (auto r = write_file(proc + "setgroups", "deny"); !r) return r;
  }
  if (auto r = write_file(proc + "uid_map", id_map_text(maps.uid)); !r) return r;
  return write_file(proc + "gid_map", id_map_text(maps.gid));
}

}  // namespace cabin::nsbox
