#include "server/drivers/microvm/qemu_args.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstring>

#include "common/crypto.h"
#include "server/drivers/microvm/image_manifest.h"
#include "server/drivers/microvm/wrap_line.h"
#include "server/drivers/sandbox_process.h"

namespace cabin::drivers {
namespace {

constexpr size_t kMaxUrlLength = 8192;

bool single_line(std::string_view v) {
  return std::none_of(v.begin(), v.end(),
                      [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

}  // namespace

std::string qemu_opt_escape(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    out += c;
    if (c == ',') out += ',';
  }
  return out;
}

std::string guest_kernel_cmdline(Accel accel, uint64_t tsc_khz) {
  // panic=-1 with -no-reboot: a guest kernel panic ends QEMU instead of hanging the session.
  // quiet: the serial console costs a VM exit per byte, and is slow under TCG.
  std::string cmdline = "console=ttyS0 panic=-1 quiet";
  // Under TCG the kernel often fails to calibrate the TSC against the PIT (emulation is too
  // uneven) and then hangs without a clocksource; the guest's TSC is the host's, so say its rate.
  // And trust it: its watchdog, run on emulated timers, would drop it for jiffies, which fall
  // behind by a tenth of a second every few seconds whenever the host is busy.
  if (accel == Accel::kTcg && tsc_khz > 0)
    cmdline += " tsc_early_khz=" + std::to_string(tsc_khz) + " tsc=reliable";
  return cmdline;
}

std::vector<std::string> qemu_argv(const QemuLaunch& l) {
  const auto img = [&](const char* name) { return qemu_opt_escape((l.image_dir / name).string()); };
  std::string accel = "tcg,thread=multi";
  if (l.accel == Accel::kTcg && l.tcg_tb_mib > 0)
    accel += ",tb-size=" + std::to_string(l.tcg_tb_mib);
  if (l.accel == Accel::kKvm) accel = "kvm";
  // One flag and its value per line.
  // clang-format off
  std::vector<std::string> argv = {
      l.qemu.string(),
      // microvm: no PCI, no firmware tables beyond ACPI, virtio-mmio devices only.
      // RAM is always the backend ram0, whatever holds it: a fork's copy restores a saved
      // state only into a machine whose RAM has the same name.
      "-M", "microvm,memory-backend=ram0",
      "-accel", accel,
      // TCG says Intel: BoringSSL (Chromium's TLS keys, crypto.getRandomValues) mixes RDRAND,
      // which QEMU answers from the host's RNG, into every draw only on an Intel CPU. Otherwise
      // each copy of a template draws from the template's per-thread generator state.
      "-cpu", l.accel == Accel::kKvm ? "host" : "max,vendor=GenuineIntel",
      "-smp", std::to_string(l.vcpus),
      "-m", std::to_string(l.memory_mib),
      "-nodefaults", "-no-user-config",
      // QEMU's own seccomp filter: no exec, no set*id (cabin-vmm-wrap dropped privileges
      // already), no obsolete calls, no scheduler or affinity changes.
      "-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
      "-display", "none",
      "-no-reboot",  // a reboot or panic ends the VM
      "-kernel", (l.image_dir / kImageKernel).string(),
      "-initrd", (l.image_dir / kImageInitramfs).string(),
      "-append", guest_kernel_cmdline(l.accel, l.tsc_khz),
      // The shared rootfs, read-only for QEMU as well as the guest.
      "-drive", "file=" + img(kImageRootfs) + ",if=none,id=root,format=raw,readonly=on",
      "-device", "virtio-blk-device,drive=root,serial=cabin-rootfs",
      // The profile disk, in the VM's dir: the profile its browser starts from, and where the
      // agent leaves it. Every VM has one (empty without a profile), so that a saved machine
      // restores into any VM of its shape.
      "-drive", std::string("file=") + kProfileDiskName + ",if=none,id=profile,format=raw",
      "-device", "virtio-blk-device,drive=profile,serial=cabin-profile",
      // restrict=on: the guest reaches nothing; one forward from a host loopback port to the agent.
      "-netdev", "user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:" + std::to_string(l.host_port) +
                     "-:" + std::to_string(kGuestAgentPort),
      "-device", "virtio-net-device,netdev=n0",
      "-device", "virtio-rng-device",
      "-fw_cfg", std::string("name=opt/cabin/config,file=") + kGuestConfigName,
      // The serial console goes to QEMU's stdout, which the driver reads and logs.
      "-chardev", "stdio,id=con,signal=off",
      "-serial", "chardev:con",
      "-qmp", std::string("unix:") + kQmpSocketName + ",server=on,wait=off",
  };
  // clang-format on
  const std::string size = "id=ram0,size=" + std::to_string(l.memory_mib) + "M";
  argv.insert(argv.begin() + 1,
              {"-object", l.ram_file.empty()
                              ? "memory-backend-ram," + size
                              : "memory-backend-file," + size + ",mem-path=" +
                                    qemu_opt_escape(l.ram_file.string()) +
                                    ",share=" + (l.ram_shared ? "on" : "off")});
  if (l.incoming) argv.insert(argv.end(), {"-incoming", "defer"});
  return argv;
}

Result<std::string> guest_config_text(const SandboxSpec& spec) {
  auto invalid = [](std::string what) {
    return make_error(Errc::kInvalidArgument, "invalid_spec", std::move(what));
  };
  if (spec.agent_secret.empty() || !single_line(spec.agent_secret))
    return invalid("agent secret must be one line without control characters");
  if (spec.width < 1 || spec.height < 1) return invalid("width and height must be positive");
  if (spec.start_url.size() > kMaxUrlLength || !single_line(spec.start_url))
    return invalid("start URL must be one line without control characters, at most 8 KiB");
  std::string text = "secret=" + spec.agent_secret + "\n" + "width=" + std::to_string(spec.width) +
                     "\n" + "height=" + std::to_string(spec.height) + "\n";
  if (!spec.start_url.empty()) text += "start_url=" + spec.start_url + "\n";
  if (!spec.wait_until.empty()) {
    if (!single_line(spec.wait_until)) return invalid("wait_until must be one line");
    text += "wait_until=" + spec.wait_until + "\n";
  }
  if (spec.egress_proxy_port != 0) {
    text += "egress_proxy=" + std::to_string(spec.egress_proxy_port) + "\n";
  }
  if (!spec.trusted_ca_pem.empty())
    text += "trusted_ca=" + base64_encode(spec.trusted_ca_pem) + "\n";
  if (!spec.profile_dir.empty()) text += "profile=1\n";
  return text;
}

uint64_t guest_memory_mib(uint64_t memory_bytes) {
  return std::max<uint64_t>(512, memory_bytes >> 20);
}

std::string microvm_exit_reason(int code, int status, const std::string& last_init_line,
                                const std::string& last_line) {
  if (code == CLD_EXITED || code == 0) {
    // The guest powers off after its init reported why.
    constexpr std::string_view kInit = "cabin-init: ", kInitramfs = "cabin-initramfs: ";
    if (last_init_line.rfind(kInit, 0) == 0) return last_init_line.substr(kInit.size());
    if (last_init_line.rfind(kInitramfs, 0) == 0)
      return "guest setup failed: " + last_init_line.substr(kInitramfs.size());
    if (code == 0) {
      // Adopted: the wrap's last word says how, where there is one.
      const std::string_view wrap = kWrapFailurePrefix;
      if (last_line.rfind(wrap, 0) == 0) return last_line.substr(wrap.size());
      return "qemu exited" + (last_line.empty() ? "" : ": " + last_line);
    }
    if (status == 0) return "the VM powered off";
    return "qemu exited with status " + std::to_string(status) +
           (last_line.empty() ? "" : ": " + last_line);
  }
  return "qemu killed by signal " + std::to_string(status) + " (" + signal_name(status) + ")";
}

}  // namespace cabin::drivers
