// MicrovmDriver: one QEMU `-M microvm` per session (KVM where a vCPU really runs, else TCG),
// booting the guest image from vm-images/build-image.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on
#include <boost/asio/any_io_executor.hpp>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>

#include "server/drivers/microvm/image_manifest.h"
#include "server/drivers/microvm/qemu_args.h"
#include "server/drivers/sandbox_driver.h"

namespace cabin::drivers {

struct MicrovmDriverConfig {
  // Per-session dirs <run_dir>/<id>/ (config, QMP socket, pid). Owned by this driver alone:
  // reap_leftovers() empties it, so it must not be the namespace driver's run dir.
  std::filesystem::path run_dir = "/run/cabin-vm";
  std::filesystem::path image_dir;  // manifest.json, vmlinuz, initramfs.cpio.gz, rootfs.erofs
  std::filesystem::path qemu_path = "/usr/bin/qemu-system-x86_64";
  std::filesystem::path wrap_path;  // cabin-vmm-wrap
  std::string accel = "auto";       // auto (probe KVM, else TCG) | kvm | tcg
  int vcpus = 2;
  uint64_t tcg_tb_mib = 0;  // TCG translation cache size; 0: QEMU's default (1 GiB, lazily used)
  std::chrono::milliseconds kvm_probe_timeout{2000};
  // create(): how long QEMU gets until its monitor answers (the machine is built by then).
  std::chrono::milliseconds start_timeout{10000};
  // destroy(): how long QEMU gets to quit over QMP before SIGKILL.
  std::chrono::milliseconds stop_timeout{2000};
  // Where hibernated VMs are saved, one file each (on disk: not a tmpfs, whose pages are RAM).
  // Empty: VMs cannot hibernate. reap_leftovers() removes the files of sessions not kept.
  std::filesystem::path hibernate_dir;
  // Hibernated VMs' files are sealed with this (32 bytes; all the guest's RAM is in them: its
  // cookies, typed passwords, its agent's secret), each bound to its session's id.
  std::string hibernate_key;
  // When cabind is root, QEMU runs jailed as this unprivileged host uid and gid (unused on the
  // host, like the namespace driver's sandbox ids).
  uint32_t vmm_uid = 602000;
  uint32_t vmm_gid = 602000;
  // Jailed QEMUs join <cgroup_root>/[controller/]<cgroup_name>: out of cabind's cgroup, they
  // outlive a container runtime's stop of cabind's container, as they outlive cabind.
  std::filesystem::path cgroup_root = "/sys/fs/cgroup";
  std::string cgroup_name = "cabin-vm";
  std::string cgroup_ns;  // entered before joining it, as the namespace driver's launcher does
};

class VmProcess;

// Requires a single-threaded executor (cabind runs one io_context thread): sandbox state is not
// locked, and QEMU's PR_SET_PDEATHSIG is tied to the thread that spawns it.
class MicrovmDriver final : public SandboxDriver {
 public:
  MicrovmDriver(MicrovmDriverConfig config, net::any_io_executor executor);

  DriverInfo info() const override { return info_; }
  net::awaitable<Result<SandboxPtr>> create(const SandboxSpec& spec) override;
  net::awaitable<Result<SandboxPtr>> adopt(const std::string& session_id,
                                           const nlohmann::json& handoff) override;
  void reap_leftovers(const std::set<std::string>& keep) override;
  net::awaitable<Result<SandboxPtr>> restore(const Snapshot& snapshot,
                                             const SandboxSpec& spec) override;

  // The hibernated VM of session `id` started again from its file: a VmProcess running on where
  // it was saved, with an empty profile disk of the size it had.
  net::awaitable<Result<std::shared_ptr<VmProcess>>> wake(const std::string& id,
                                                          uint64_t memory_mib, int vcpus,
                                                          uint64_t profile_disk_bytes);
  // Where the session `id`'s VM is saved while it hibernates.
  std::filesystem::path hibernation_file(const std::string& id) const {
    return config_.hibernate_dir / (id + ".vmstate");
  }
  const std::string& hibernate_key() const { return config_.hibernate_key; }
  static std::string hibernate_context(const std::string& id) {
    return "cabin hibernated VM " + id;
  }

  // What start-up decided; for tests and logs.
  Accel accel() const { return accel_; }
  const ImageManifest& image() const { return image_; }

 private:
  DriverInfo probe();
  // How start_vm() builds QEMU: RAM from a memfd (shared, or a copy's private mapping waiting
  // for the snapshot's state), and the guest's shape.
  struct VmStart {
    int ram_fd = -1;
    bool incoming = false;
    uint64_t memory_mib = 0;
    int vcpus = 0;
    // The profile disk's size (0: a VM without a profile) and the archive it starts with.
    uint64_t profile_disk_bytes = 0;
    std::string profile;
  };
  net::awaitable<Result<std::shared_ptr<VmProcess>>> start_vm(const SandboxSpec& spec,
                                                                   const VmStart& start);
  // start_vm() waiting for a state, then that state read from `state_fd`: a VM running on.
  net::awaitable<Result<std::shared_ptr<VmProcess>>> restore_vm(const SandboxSpec& spec,
                                                                     const VmStart& start,
                                                                     int state_fd);

  MicrovmDriverConfig config_;
  net::any_io_executor executor_;
  Accel accel_ = Accel::kTcg;
  uint64_t tsc_khz_ = 0;
  ImageManifest image_;
  DriverInfo info_;
};

}  // namespace cabin::drivers
