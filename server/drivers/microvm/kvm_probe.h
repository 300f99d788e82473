// KVM probe: whether a vCPU really runs here, checked by booting a tiny guest with a time bound.
// /dev/kvm can exist and still be useless (nested virtualisation that crawls), so its presence
// proves nothing.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace cabin::drivers {

// QEMU's isa-debug-exit turns the byte the probe writes (0x42) into exit status (0x42 << 1) | 1.
inline constexpr int kKvmProbeExitStatus = 0x85;

// A 64 KiB firmware image for -bios: from the reset vector it enters long mode with paging (as a
// kernel does), counts down 2^24 iterations, and writes 0x42 to port 0xf4. A working vCPU takes
// milliseconds; where KVM only crawls, it does not finish within seconds.
std::vector<uint8_t> kvm_probe_firmware();

struct KvmProbeResult {
  bool usable = false;
  std::string why;  // when not usable: for logs and DriverInfo::detail
};

// Classifies one probe run: `finished` false when it was killed at `bound`; otherwise the
// waitid() si_code and si_status; `output_tail` is QEMU's last output line.
KvmProbeResult classify_kvm_probe(bool finished, int code, int status, std::string_view output_tail,
                                  std::chrono::milliseconds bound);

// Checks /dev/kvm and runs the probe firmware under `qemu -accel kvm`; blocks for at most
// about `bound` (start-up only).
KvmProbeResult probe_kvm(const std::filesystem::path& qemu, std::chrono::milliseconds bound);

// The host's TSC rate in kHz, measured against CLOCK_MONOTONIC_RAW over ~20 ms; 0 if unknown.
// Under TCG the guest's TSC is the host's, and the guest kernel needs its rate (see qemu_args).
uint64_t measure_tsc_khz();

}  // namespace cabin::drivers
