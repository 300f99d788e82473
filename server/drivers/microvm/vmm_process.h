// Starting QEMU: posix_spawn (no fork of a threaded process) of cabin-vmm-wrap, which jails it,
// with QEMU's stdout and stderr on one pipe (or FIFO) and a pidfd to wait on.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"
#include "server/drivers/sandbox_process.h"

namespace cabin::drivers {

// The process is the wrapper, which is QEMU once it has exec'd; output: QEMU's stdout (the
// guest console) and stderr.
using VmmProcess = HostChild;

// Where cabin-vmm-wrap jails QEMU (see vmm_wrap_main.cpp); only as root.
struct VmmJail {
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::optional<uint32_t> kvm_gid;  // a group that may open /dev/kvm; unset: no /dev/kvm
  std::filesystem::path image_dir;
  std::filesystem::path run_dir;
  // cgroup.procs files the wrap joins first, so that QEMU lives in cgroups of its own and not
  // in cabind's (which a container runtime kills whole when it stops cabind's container).
  std::vector<std::string> cgroup_procs;
  std::string cgroup_ns;  // entered first (an nsfs file); empty: cabind's
};

struct VmmSpawn {
  std::filesystem::path wrap;     // cabin-vmm-wrap; empty: run QEMU directly (tests, probes)
  std::optional<VmmJail> jail;    // with wrap: jail QEMU
  std::vector<std::string> argv;  // QEMU's argv
  std::filesystem::path cwd;      // empty: cabind's
  int pass_fd = -1;               // if >= 0: given to QEMU as fd 3
  std::filesystem::path output_fifo;  // as HostSpawn's
};

Result<VmmProcess> spawn_vmm(net::any_io_executor ex, const VmmSpawn& s);

// The wrapper's argv: PATH [--jail ...] -- QEMU_ARGV...
std::vector<std::string> vmm_wrap_argv(const std::filesystem::path& wrap,
                                       const std::vector<std::string>& qemu_argv,
                                       const std::optional<VmmJail>& jail = std::nullopt,
                                       bool keep_fd3 = false);

}  // namespace cabin::drivers
