// Cgroups for sandboxes: layout detection (v2 or v1 hybrid), per-sandbox dirs, limits, freezing,
// kill and removal.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "common/result.h"

namespace cabin::nsbox {

namespace fs = std::filesystem;

enum class CgroupLayout {
  kNone,  // no usable controllers: run without limits
  kV1,    // one hierarchy per controller: <root>/memory, <root>/pids, <root>/cpu
  kV2,    // unified: <root>/cgroup.controllers exists
};

struct CgroupLimits {
  uint64_t memory_bytes = 0;  // 0: no limit
  int pids_max = 0;           // 0: no limit
  uint32_t cpu_quota_us = 0;  // per cpu_period_us; 0: no limit
  uint32_t cpu_period_us = 100000;
};

// One file to write while creating a sandbox's cgroups.
struct CgroupWrite {
  fs::path file;
  std::string value;
  bool required = true;  // optional writes (swap, cpu) are skipped where the kernel lacks them
};

CgroupLayout detect_cgroup_layout(const fs::path& root);
const char* layout_name(CgroupLayout layout);

// Where a name (e.g. "cabin") lives: v2 one dir, v1 one per controller that we use.
std::vector<fs::path> cgroup_parents(CgroupLayout layout, const fs::path& root,
                                     const std::string& name);
// The sandbox's own dirs: each parent / id.
std::vector<fs::path> sandbox_cgroup_dirs(CgroupLayout layout, const fs::path& root,
                                          const std::string& name, const std::string& id);
// The limit files and values, in the order they must be written.
std::vector<CgroupWrite> cgroup_limit_writes(CgroupLayout layout, const fs::path& root,
                                             const std::string& name, const std::string& id,
                                             const CgroupLimits& limits);

// What the shared parent dirs get: a lower CPU weight, so that all sandboxes together yield to
// their sibling cgroups (cabind's service among them) when the CPUs are busy.
std::vector<CgroupWrite> cgroup_parent_writes(CgroupLayout layout, const fs::path& root,
                                              const std::string& name);
inline constexpr int kParentCpuWeight = 50;    // v2 cpu.weight; the kernel's default is 100
inline constexpr int kParentCpuShares = 512;   // v1 cpu.shares; the default is 1024

// Creates the parent dirs of `name` (cgroup_parents) with their CPU weight and returns them.
// with_children: v2 hands the controllers on to child dirs (then the parent holds no process).
Result<std::vector<fs::path>> create_cgroup_parents(CgroupLayout layout, const fs::path& root,
                                                    const std::string& name, bool with_children);
// Creates the parents and the sandbox's dirs and writes the limits; on error removes what it made.
Result<std::vector<fs::path>> create_sandbox_cgroups(CgroupLayout layout, const fs::path& root,
                                                     const std::string& name, const std::string& id,
                                                     const CgroupLimits& limits);

// The host's cgroup namespace when this process is in another one (a container's, whose root
// cgroup is the container's): `init_ns` (/proc/1/ns/cgroup, the host's init when the container
// shares the host's pids) if it differs from ours and can be opened; else empty. Joining a cgroup
// outside our namespace's root is refused where the hierarchy delegates by namespace (cgroup v2
// mounted with nsdelegate, as systemd does), so sandboxes enter that namespace first.
std::string foreign_cgroup_ns(const fs::path& init_ns = "/proc/1/ns/cgroup");
// Moves the calling process into the cgroup of each cgroup.procs file, from the cgroup namespace
// of `ns_file` (an nsfs file, as foreign_cgroup_ns names) when it is not empty.
Result<void> join_cgroups(const std::string& ns_file, const std::vector<std::string>& procs_files);

// Pids listed in dir/cgroup.procs.
std::vector<int> cgroup_pids(const fs::path& dir);
// Where a sandbox's processes are frozen: the one of its dirs with cgroup.freeze (v2), or the
// one under the v1 freezer controller; empty when there is none (the sandbox cannot pause).
fs::path freezer_dir(const std::vector<fs::path>& dirs);
// Asks the kernel to freeze (or thaw) every process under `dir`; freeze_settled says when it has.
Result<void> request_freeze(const fs::path& dir, bool frozen);
// v2: cgroup.events says "frozen 1" (or 0); v1: freezer.state is FROZEN (or THAWED).
bool freeze_settled(const fs::path& dir, bool frozen);

// SIGKILLs every process in the cgroup (cgroup.kill where the kernel has it); returns how many
// pids were listed.
size_t kill_cgroup(const fs::path& dir);
// rmdir; succeeds when the dir is already gone. Fails with EBUSY while processes remain.
Result<void> remove_cgroup(const fs::path& dir);
// Every sandbox dir under the parents (left by an earlier run).
std::vector<fs::path> leftover_cgroups(CgroupLayout layout, const fs::path& root,
                                       const std::string& name);

}  // namespace cabin::nsbox
