#include "server/drivers/namespace/launcher_args.h"

#include <charconv>
#include <string_view>

#include "server/drivers/namespace/sys_util.h"

namespace cabin::nsbox {
namespace {

std::string ids_text(const HostIds& ids) {
  return std::to_string(ids.uid) + ":" + std::to_string(ids.gid);
}

template <typename T>
std::optional<T> parse_number(std::string_view s) {
  T v{};
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

std::optional<HostIds> parse_ids(std::string_view s) {
  auto colon = s.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  auto uid = parse_number<uint32_t>(s.substr(0, colon));
  auto gid = parse_number<uint32_t>(s.substr(colon + 1));
  // Host root must never be the target of a sandbox mapping.
  if (!uid || !gid || *uid == 0 || *gid == 0) return std::nullopt;
  return HostIds{*uid, *gid};
}

Error usage(std::string message) {
  return make_error(Errc::kInvalidArgument, "launcher_usage", std::move(message));
}

}  // namespace

std::vector<std::string> build_launcher_argv(const std::string& launcher_path,
                                             const LauncherArgs& args) {
  std::vector<std::string> argv{launcher_path, "--id", args.id};
  if (args.agent_fd >= 0) argv.insert(argv.end(), {"--agent-fd", std::to_string(args.agent_fd)});
  if (!args.agent.empty()) argv.insert(argv.end(), {"--agent", args.agent});
  if (!args.chromium_policy.empty())
    argv.insert(argv.end(), {"--chromium-policy", args.chromium_policy});
  if (!args.profile.empty()) argv.insert(argv.end(), {"--profile", args.profile});
  if (args.map_root) argv.insert(argv.end(), {"--map-root", ids_text(*args.map_root)});
  if (args.map_user) argv.insert(argv.end(), {"--map-user", ids_text(*args.map_user)});
  if (args.map_exec_uid)
    argv.insert(argv.end(), {"--map-exec-uid", std::to_string(*args.map_exec_uid)});
  if (!args.cgroup_ns.empty()) argv.insert(argv.end(), {"--cgroup-ns", args.cgroup_ns});
  for (const auto& f : args.cgroup_procs) argv.insert(argv.end(), {"--cgroup-procs", f});
  argv.insert(argv.end(), {"--tmpfs-size", std::to_string(args.tmpfs_bytes)});
  if (args.probe) argv.push_back("--probe");
  argv.push_back("--");
  argv.insert(argv.end(), args.payload.begin(), args.payload.end());
  return argv;
}

Result<LauncherArgs> parse_launcher_args(const std::vector<std::string>& argv) {
  LauncherArgs a;
  size_t i = 1;
  for (; i < argv.size(); ++i) {
    const std::string& flag = argv[i];
    if (flag == "--") {
      ++i;
      break;
    }
    if (flag == "--probe") {
      a.probe = true;
      continue;
    }
    if (i + 1 >= argv.size()) return usage(flag + " needs a value");
    const std::string& v = argv[++i];
    if (flag == "--id") {
      if (!valid_sandbox_id(v)) return usage("--id must be [a-z0-9_]{1,64}");
      a.id = v;
    } else if (flag == "--agent-fd") {
      auto fd = parse_number<int>(v);
      if (!fd || *fd < 3) return usage("--agent-fd needs a descriptor number, at least 3");
      a.agent_fd = *fd;
    } else if (flag == "--agent" || flag == "--cgroup-procs" || flag == "--chromium-policy" ||
               flag == "--profile" || flag == "--cgroup-ns") {
      if (v.empty() || v[0] != '/') return usage(flag + " needs an absolute path");
      if (flag == "--agent")
        a.agent = v;
      else if (flag == "--cgroup-ns")
        a.cgroup_ns = v;
      else if (flag == "--chromium-policy")
        a.chromium_policy = v;
      else if (flag == "--profile")
        a.profile = v;
      else
        a.cgroup_procs.push_back(v);
    } else if (flag == "--map-root" || flag == "--map-user") {
      auto ids = parse_ids(v);
      if (!ids) return usage(flag + " needs UID:GID, both non-zero");
      (flag == "--map-root" ? a.map_root : a.map_user) = ids;
    } else if (flag == "--map-exec-uid") {
      auto uid = parse_number<uint32_t>(v);
      if (!uid || *uid == 0) return usage("--map-exec-uid needs a non-zero UID");
      a.map_exec_uid = *uid;
    } else if (flag == "--tmpfs-size") {
      auto n = parse_number<uint64_t>(v);
      if (!n || *n < (1u << 20)) return usage("--tmpfs-size needs bytes, at least 1 MiB");
      a.tmpfs_bytes = *n;
    } else {
      return usage("unknown flag " + flag);
    }
  }
  a.payload.assign(argv.begin() + static_cast<std::ptrdiff_t>(std::min(i, argv.size())),
                   argv.end());
  if (a.id.empty()) return usage("--id is required");
  if (!a.probe && a.payload.empty()) return usage("a payload argv after -- is required");
  if (!a.probe && a.agent_fd < 0) return usage("--agent-fd is required");
  if (a.map_root.has_value() != a.map_user.has_value() ||
      a.map_root.has_value() != a.map_exec_uid.has_value())
    return usage("--map-root, --map-user and --map-exec-uid go together");
  if (a.map_exec_uid && (*a.map_exec_uid == a.map_root->uid || *a.map_exec_uid == a.map_user->uid))
    return usage("--map-exec-uid needs a host uid of its own");
  if (a.map_root && a.map_root->uid == a.map_user->uid)
    return usage("--map-root and --map-user need distinct host uids");
  if (a.map_root && a.map_root->gid == a.map_user->gid)
    return usage("--map-root and --map-user need distinct host gids");
  return a;
}

}  // namespace cabin::nsbox
