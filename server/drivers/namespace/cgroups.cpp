#include "server/drivers/namespace/cgroups.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <system_error>

#include "server/drivers/namespace/sys_util.h"

namespace cabin::nsbox {
namespace {

// v1 controllers a sandbox joins where the host has them; cpu is only used for a cpu quota,
// freezer for pausing.
constexpr const char* kV1Controllers[] = {"memory", "pids", "cpu", "freezer"};
// v2 controllers enabled for children of the parent dirs.
constexpr const char* kV2Controllers[] = {"memory", "pids", "cpu"};

bool path_exists(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

Result<void> make_dir(const fs::path& dir) {
  if (::mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST) return {};
  return sys_error("mkdir " + dir.string());
}

}  // namespace

CgroupLayout detect_cgroup_layout(const fs::path& root) {
  if (path_exists(root / "cgroup.controllers")) return CgroupLayout::kV2;
  if (path_exists(root / "memory" / "cgroup.procs") && path_exists(root / "pids" / "cgroup.procs"))
    return CgroupLayout::kV1;
  return CgroupLayout::kNone;
}

const char* layout_name(CgroupLayout layout) {
  switch (layout) {
    case CgroupLayout::kV1:
      return "v1";
    case CgroupLayout::kV2:
      return "v2";
    case CgroupLayout::kNone:
      break;
  }
  return "none";
}

std::vector<fs::path> cgroup_parents(CgroupLayout layout, const fs::path& root,
                                     const std::string& name) {
  std::vector<fs::path> out;
  if (layout == CgroupLayout::kV2) {
    out.push_back(root / name);
  } else if (layout == CgroupLayout::kV1) {
    for (const char* c : kV1Controllers) {
      if (path_exists(root / c / "cgroup.procs")) out.push_back(root / c / name);
    }
  }
  return out;
}

std::vector<fs::path> sandbox_cgroup_dirs(CgroupLayout layout, const fs::path& root,
                                          const std::string& name, const std::string& id) {
  auto dirs = cgroup_parents(layout, root, name);
  for (auto& d : dirs) d /= id;
  return dirs;
}

std::vector<CgroupWrite> cgroup_limit_writes(CgroupLayout layout, const fs::path& root,
                                             const std::string& name, const std::string& id,
                                             const CgroupLimits& limits) {
  std::vector<CgroupWrite> w;
  const std::string quota = std::to_string(limits.cpu_quota_us);
  const std::string period = std::to_string(limits.cpu_period_us);
  if (layout == CgroupLayout::kV2) {
    const fs::path dir = root / name / id;
    if (limits.memory_bytes) {
      w.push_back({dir / "memory.max", std::to_string(limits.memory_bytes)});
      // No swap: the memory limit is the whole budget.
      w.push_back({dir / "memory.swap.max", "0", false});
    }
    if (limits.pids_max) w.push_back({dir / "pids.max", std::to_string(limits.pids_max)});
    if (limits.cpu_quota_us) w.push_back({dir / "cpu.max", quota + " " + period, false});
  } else if (layout == CgroupLayout::kV1) {
    const fs::path mem = root / "memory" / name / id;
    if (limits.memory_bytes) {
      const std::string bytes = std::to_string(limits.memory_bytes);
      w.push_back({mem / "memory.limit_in_bytes", bytes});
      // memsw must be >= limit_in_bytes, so it is written after; absent without swap accounting.
      w.push_back({mem / "memory.memsw.limit_in_bytes", bytes, false});
    }
    if (limits.pids_max)
      w.push_back({root / "pids" / name / id / "pids.max", std::to_string(limits.pids_max)});
    if (limits.cpu_quota_us) {
      const fs::path cpu = root / "cpu" / name / id;
      w.push_back({cpu / "cpu.cfs_period_us", period, false});
      w.push_back({cpu / "cpu.cfs_quota_us", quota, false});
    }
  }
  return w;
}

std::vector<CgroupWrite> cgroup_parent_writes(CgroupLayout layout, const fs::path& root,
                                              const std::string& name) {
  if (layout == CgroupLayout::kV2)
    return {{root / name / "cpu.weight", std::to_string(kParentCpuWeight), false}};
  if (layout == CgroupLayout::kV1)
    return {{root / "cpu" / name / "cpu.shares", std::to_string(kParentCpuShares), false}};
  return {};
}

Result<std::vector<fs::path>> create_cgroup_parents(CgroupLayout layout, const fs::path& root,
                                                    const std::string& name, bool with_children) {
  if (layout == CgroupLayout::kNone)
    return make_error(Errc::kUnavailable, "no_cgroups", "no usable cgroup controllers");
  auto parents = cgroup_parents(layout, root, name);
  for (const auto& parent : parents) {
    if (auto r = make_dir(parent); !r) return r.error();
    if (layout == CgroupLayout::kV2) {
      // Children only get a controller the parent enables; each one separately so a missing
      // controller (cpu) does not block the others. A v2 cgroup that hands controllers on may
      // hold no process itself, so one that holds them enables none.
      for (const char* c : kV2Controllers) {
        (void)write_file((parent.parent_path() / "cgroup.subtree_control").string(),
                         std::string("+") + c);
        if (with_children)
          (void)write_file((parent / "cgroup.subtree_control").string(), std::string("+") + c);
      }
    }
    for (const auto& w : cgroup_parent_writes(layout, root, name)) {
      if (w.file.parent_path() == parent && path_exists(w.file))
        (void)write_file(w.file.string(), w.value);
    }
  }
  return parents;
}

Result<std::vector<fs::path>> create_sandbox_cgroups(CgroupLayout layout, const fs::path& root,
                                                     const std::string& name, const std::string& id,
                                                     const CgroupLimits& limits) {
  auto parents = create_cgroup_parents(layout, root, name, true);
  if (!parents) return parents.error();
  std::vector<fs::path> made;
  auto fail = [&](Error e) -> Result<std::vector<fs::path>> {
    for (auto it = made.rbegin(); it != made.rend(); ++it) (void)remove_cgroup(*it);
    return e;
  };
  for (const auto& parent : *parents) {
    fs::path dir = parent / id;
    if (::mkdir(dir.c_str(), 0755) != 0) return fail(sys_error("mkdir " + dir.string()));
    made.push_back(dir);
  }
  for (const auto& w : cgroup_limit_writes(layout, root, name, id, limits)) {
    if (!w.required && !path_exists(w.file)) continue;
    auto r = write_file(w.file.string(), w.value);
    if (!r && w.required) return fail(r.error());
  }
  return made;
}

std::string foreign_cgroup_ns(const fs::path& init_ns) {
  struct stat theirs {}, ours {};
  if (::stat(init_ns.c_str(), &theirs) != 0 || ::stat("/proc/self/ns/cgroup", &ours) != 0)
    return {};
  if (theirs.st_dev == ours.st_dev && theirs.st_ino == ours.st_ino) return {};
  const int fd = ::open(init_ns.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  ::close(fd);
  return init_ns.string();
}

Result<void> join_cgroups(const std::string& ns_file, const std::vector<std::string>& procs_files) {
  if (!ns_file.empty()) {
    const int fd = ::open(ns_file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return sys_error("open " + ns_file);
    const int rc = ::setns(fd, CLONE_NEWCGROUP);
    const int err = errno;
    ::close(fd);
    if (rc != 0) return sys_error("setns " + ns_file, err);
  }
  for (const auto& procs : procs_files) {
    // "0": the writer itself; what it forks or execs is born in the cgroup.
    if (auto r = write_file(procs, "0"); !r) return r;
  }
  return {};
}

std::vector<int> cgroup_pids(const fs::path& dir) {
  std::vector<int> pids;
  auto text = read_file((dir / "cgroup.procs").string());
  if (!text) return pids;
  size_t pos = 0;
  while (pos < text->size()) {
    size_t end = text->find('\n', pos);
    if (end == std::string::npos) end = text->size();
    int pid = 0;
    auto [p, ec] = std::from_chars(text->data() + pos, text->data() + end, pid);
    if (ec == std::errc() && p == text->data() + end && pid > 0) pids.push_back(pid);
    pos = end + 1;
  }
  return pids;
}

fs::path freezer_dir(const std::vector<fs::path>& dirs) {
  for (const auto& d : dirs) {
    if (path_exists(d / "cgroup.freeze") || path_exists(d / "freezer.state")) return d;
  }
  return {};
}

Result<void> request_freeze(const fs::path& dir, bool frozen) {
  if (path_exists(dir / "cgroup.freeze"))
    return write_file((dir / "cgroup.freeze").string(), frozen ? "1" : "0");
  return write_file((dir / "freezer.state").string(), frozen ? "FROZEN" : "THAWED");
}

bool freeze_settled(const fs::path& dir, bool frozen) {
  if (path_exists(dir / "cgroup.freeze")) {
    auto events = read_file((dir / "cgroup.events").string());
    return events && events->find(frozen ? "frozen 1" : "frozen 0") != std::string::npos;
  }
  auto state = read_file((dir / "freezer.state").string());
  // v1 shows FREEZING until every task has stopped.
  return state && state->rfind(frozen ? "FROZEN" : "THAWED", 0) == 0;
}

size_t kill_cgroup(const fs::path& dir) {
  auto pids = cgroup_pids(dir);
  // cgroup.kill (v2, Linux 5.14) kills atomically, racing no fork.
  if (path_exists(dir / "cgroup.kill") && write_file((dir / "cgroup.kill").string(), "1")) {
    return pids.size();
  }
  for (int pid : pids) ::kill(pid, SIGKILL);
  return pids.size();
}

Result<void> remove_cgroup(const fs::path& dir) {
  if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) return {};
  return sys_error("rmdir " + dir.string());
}

std::vector<fs::path> leftover_cgroups(CgroupLayout layout, const fs::path& root,
                                       const std::string& name) {
  std::vector<fs::path> out;
  for (const auto& parent : cgroup_parents(layout, root, name)) {
    std::error_code ec;
    for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->is_directory(ec) && valid_sandbox_id(it->path().filename().string()))
        out.push_back(it->path());
    }
  }
  return out;
}

}  // namespace cabin::nsbox
