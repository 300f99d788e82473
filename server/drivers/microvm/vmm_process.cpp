#include "server/drivers/microvm/vmm_process.h"

#include <unistd.h>

namespace cabin::drivers {

std::vector<std::string> vmm_wrap_argv(const std::filesystem::path& wrap,
                                       const std::vector<std::string>& qemu_argv,
                                       const std::optional<VmmJail>& jail) {
  std::vector<std::string> argv = {wrap.string()};
  if (jail) {
    argv.insert(argv.end(), {"--jail", std::to_string(jail->uid) + ":" + std::to_string(jail->gid),
                             "--image", jail->image_dir.string(), "--run", jail->run_dir.string()});
    if (jail->kvm_gid) argv.insert(argv.end(), {"--kvm-gid", std::to_string(*jail->kvm_gid)});
  }
  argv.push_back("--");
  argv.insert(argv.end(), qemu_argv.begin(), qemu_argv.end());
  return argv;
}

Result<VmmProcess> spawn_vmm(net::any_io_executor ex, const VmmSpawn& s) {
  // The wrapper closes every descriptor above stdio before it becomes QEMU.
  if (!s.wrap.empty() && s.pass_fd >= 0)
    return make_error(Errc::kInternal, "vmm_pass_fd", "cabin-vmm-wrap passes no descriptor");
  HostSpawn c;
  c.argv = s.wrap.empty() ? s.argv : vmm_wrap_argv(s.wrap, s.argv, s.jail);
  // QEMU needs nothing from cabind's environment; a fixed one keeps secrets and locale out.
  c.env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin"};
  c.cwd = s.cwd;
  c.pass_fd = s.pass_fd;
  c.output_fifo = s.output_fifo;
  return spawn_host_child(std::move(ex), c);
}

}  // namespace cabin::drivers
