// The QEMU command line of one microVM and the per-session config it hands the guest (pure
// functions, so tests can check them without starting anything).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "server/drivers/sandbox_driver.h"

namespace cabin::drivers {

enum class Accel { kKvm, kTcg };

// Files QEMU creates or reads in the session dir. QEMU runs with that dir as its working
// directory, so these stay relative and a long run dir cannot overflow a UNIX socket path.
inline constexpr const char* kQmpSocketName = "qmp.sock";
inline constexpr const char* kGuestConfigName = "config";
// The VM's profile disk (a file in its dir; common/profile_archive.h's disk format).
inline constexpr const char* kProfileDiskName = "profile.img";
inline constexpr const char* kPidFileName = "pid";
inline constexpr uint16_t kGuestAgentPort = 7000;

struct QemuLaunch {
  std::filesystem::path qemu;       // qemu-system-x86_64
  std::filesystem::path image_dir;  // vmlinuz, initramfs.cpio.gz, rootfs.erofs
  Accel accel = Accel::kTcg;
  int vcpus = 2;
  uint64_t memory_mib = 2048;
  uint16_t host_port = 0;   // host loopback port forwarded to the agent's port in the guest
  uint64_t tsc_khz = 0;     // TCG only: the host TSC rate the guest's TSC runs at; 0: unknown
  uint64_t tcg_tb_mib = 0;  // TCG translation cache; 0: QEMU's default
  // Guest RAM in a file (a template's, on tmpfs) instead of anonymous memory: shared, the file
  // is the RAM and a saved state leaves it out (x-ignore-shared); private, it is mapped
  // copy-on-write, as every restore of the template maps it. Empty: anonymous RAM.
  std::filesystem::path ram_file;
  bool ram_shared = true;
  // Waits for a saved state (QMP migrate-incoming) instead of booting.
  bool incoming = false;
};

// Escapes a value for QEMU's key=value,... option syntax (a comma is written twice).
std::string qemu_opt_escape(std::string_view value);

// The guest kernel's command line. The session config is not on it: every guest process can
// read /proc/cmdline, so the secret travels through fw_cfg (root-only in the guest).
std::string guest_kernel_cmdline(Accel accel, uint64_t tsc_khz);

// argv for QEMU (argv[0] is launch.qemu), run in the session dir.
std::vector<std::string> qemu_argv(const QemuLaunch& launch);

// The key=value lines the guest init reads from fw_cfg opt/cabin/config. Values must be single
// lines without control characters (the guest reads them line by line).
Result<std::string> guest_config_text(const SandboxSpec& spec);

// Guest RAM from the spec's memory budget: at least 512 MiB (Chromium needs it), in MiB.
uint64_t guest_memory_mib(uint64_t memory_bytes);

// Why a microVM ended, from a waitid() si_code and si_status and the last guest init line
// ("cabin-init: ..." or "cabin-initramfs: ...") and last output line seen on the console.
std::string microvm_exit_reason(int code, int status, const std::string& last_init_line,
                                const std::string& last_line);

}  // namespace cabin::drivers
