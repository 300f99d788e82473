#include "server/drivers/microvm/vmm_process.h"

#include <unistd.h>

namespace cabin::drivers {

std::vector<std::string> vmm_wrap_argv(const std::filesystem::path& wrap,
                                       const std::vector<std::string>& qemu_argv,
                                       const std::optional<VmmJail>& jail, bool keep_fd3) {
  std::vector<std::string> argv = {wrap.string()};
  if (keep_fd3) argv.insert(argv.end(), {"--keep-fd", "3"});
  if (jail) {
    argv.insert(argv.end(), {"--jail", std::to_string(jail->uid) + ":" + std::to_string(jail->gid),
                             "--image", jail->image_dir.string(), "--run", jail->run_dir.string()});
    if (jail->kvm_gid) argv.insert(argv.end(), {"--kvm-gid", std::to_string(*jail->kvm_gid)});
    if (!jail->cgroup_ns.empty()) argv.insert(argv.end(), {"--cgroup-ns", jail->cgroup_ns});
    for (const auto& f : jail->cgroup_procs) argv.insert(argv.end(), {"--cgroup-procs", f});
  }
  argv.push_back("--");
  argv.insert(argv.end(), qemu_argv.begin(), qemu_argv.end());
  return argv;
}

Result<VmmProcess> spawn_vmm(net::any_io_executor ex, const VmmSpawn& s) {
  HostSpawn c;
  // The wrapper closes every descriptor above stdio before it becomes QEMU but this one.
  c.argv = s.wrap.empty() ? s.argv : vmm_wrap_argv(s.wrap, s.argv, s.jail, s.pass_fd >= 0);
  // QEMU needs nothing from cabind's environment; a fixed one keeps secrets and locale out.
  c.env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin"};
  c.cwd = s.cwd;
  c.pass_fd = s.pass_fd;
  c.output_fifo = s.output_fifo;
  return spawn_host_child(std::move(ex), c);
}

}  // namespace cabin::drivers
