#include "server/drivers/microvm/kvm_probe.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <cerrno>
#include <cstring>

#include "common/unique_fd.h"
#include "server/drivers/microvm/vmm_process.h"
#include "server/drivers/namespace/sys_util.h"

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace cabin::drivers {
namespace {

using Clock = std::chrono::steady_clock;

// Assembled from (GNU as --64, ld -Ttext=0xFF000 --oformat binary); it sits at ROM offset 0xF000,
// which QEMU also maps at 0xFF000 below 1 MiB:
//   .code16
//     cli
//     ljmp $0xF000, $(real - 0xF0000)       # CS base 0xF0000
//   real:
//     xor %ax,%ax; mov %ax,%ds; mov %ax,%es
//     mov $0x1000,%di; mov $0xC00,%cx; xor %eax,%eax; cld; rep stosl   # zero 0x1000..0x3fff
//     movl $0x2003,0x1000; movl $0x3003,0x2000; movl $0x83,0x3000      # PML4→PDPT→2 MiB page
//     mov $0xF000,%ax; mov %ax,%ds; lgdtl (gdtr - 0xF0000)
//     mov %cr4,%eax; or $0x20,%eax; mov %eax,%cr4                      # PAE
//     mov $0x1000,%eax; mov %eax,%cr3
//     mov $0xC0000080,%ecx; rdmsr; or $0x100,%eax; wrmsr               # EFER.LME
//     mov %cr0,%eax; or $0x80000001,%eax; mov %eax,%cr0                # PE, PG
//     ljmpl $0x08, $long64
//   .code64
//   long64:
//     mov $0x1000000,%ecx
//   1: dec %ecx; jnz 1b
//     mov $0x42,%al; out %al,$0xf4; hlt
//   .align 8
//   gdt: .quad 0, 0x00209A0000000000, 0x0000920000000000              # null, code64, data
//   gdtr: .word 23; .long gdt
constexpr uint8_t kProbeCode[] = {
    0xfa, 0xea, 0x06, 0xf0, 0x00, 0xf0, 0x31, 0xc0, 0x8e, 0xd8, 0x8e, 0xc0, 0xbf, 0x00, 0x10, 0xb9,
    0x00, 0x0c, 0x66, 0x31, 0xc0, 0xfc, 0x66, 0xf3, 0xab, 0x66, 0xc7, 0x06, 0x00, 0x10, 0x03, 0x20,
    0x00, 0x00, 0x66, 0xc7, 0x06, 0x00, 0x20, 0x03, 0x30, 0x00, 0x00, 0x66, 0xc7, 0x06, 0x00, 0x30,
    0x83, 0x00, 0x00, 0x00, 0xb8, 0x00, 0xf0, 0x8e, 0xd8, 0x66, 0x0f, 0x01, 0x16, 0xa0, 0xf0, 0x0f,
    0x20, 0xe0, 0x66, 0x83, 0xc8, 0x20, 0x0f, 0x22, 0xe0, 0x66, 0xb8, 0x00, 0x10, 0x00, 0x00, 0x0f,
    0x22, 0xd8, 0x66, 0xb9, 0x80, 0x00, 0x00, 0xc0, 0x0f, 0x32, 0x66, 0x0d, 0x00, 0x01, 0x00, 0x00,
    0x0f, 0x30, 0x0f, 0x20, 0xc0, 0x66, 0x0d, 0x01, 0x00, 0x00, 0x80, 0x0f, 0x22, 0xc0, 0x66, 0xea,
    0x76, 0xf0, 0x0f, 0x00, 0x08, 0x00, 0xb9, 0x00, 0x00, 0x00, 0x01, 0xff, 0xc9, 0x75, 0xfc, 0xb0,
    0x42, 0xe6, 0xf4, 0xf4, 0x0f, 0x1f, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x9a, 0x20, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x92, 0x00, 0x00,
    0x17, 0x00, 0x88, 0xf0, 0x0f, 0x00};
constexpr size_t kRomSize = 64 * 1024;  // QEMU wants a multiple of 64 KiB
constexpr size_t kCodeOffset = 0xF000;
constexpr size_t kResetVector = 0xFFF0;  // CS base 0xFFFF0000, IP 0xFFF0 at reset

std::string last_line(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  auto nl = s.rfind('\n');
  if (nl != std::string::npos) s.erase(0, nl + 1);
  for (char& c : s) {
    if (static_cast<unsigned char>(c) < 0x20) c = '?';
  }
  return s.substr(0, 300);
}

}  // namespace

std::vector<uint8_t> kvm_probe_firmware() {
  std::vector<uint8_t> rom(kRomSize, 0xf4);  // hlt everywhere else
  std::memcpy(rom.data() + kCodeOffset, kProbeCode, sizeof kProbeCode);
  // jmp near (E9 rel16) from the reset vector to the code.
  const uint16_t rel = static_cast<uint16_t>(kCodeOffset - (kResetVector + 3));
  rom[kResetVector] = 0xe9;
  rom[kResetVector + 1] = static_cast<uint8_t>(rel & 0xff);
  rom[kResetVector + 2] = static_cast<uint8_t>(rel >> 8);
  return rom;
}

KvmProbeResult classify_kvm_probe(bool finished, int code, int status, std::string_view output_tail,
                                  std::chrono::milliseconds bound) {
  if (!finished)
    return {false, "a KVM vCPU did not finish a 2^24-iteration loop in " +
                       std::to_string(bound.count()) + " ms (it runs, but far too slowly)"};
  if (code == CLD_EXITED && status == kKvmProbeExitStatus) return {true, ""};
  std::string why = code == CLD_EXITED
                        ? "qemu -accel kvm exited with status " + std::to_string(status)
                        : "qemu -accel kvm killed by signal " + std::to_string(status);
  if (!output_tail.empty()) why += ": " + std::string(output_tail);
  return {false, why};
}

KvmProbeResult probe_kvm(const std::filesystem::path& qemu, std::chrono::milliseconds bound) {
  if (::access("/dev/kvm", R_OK | W_OK) != 0)
    return {false, std::string("/dev/kvm: ") + std::strerror(errno)};
  UniqueFd rom(::memfd_create("cabin-kvm-probe", MFD_CLOEXEC));
  if (!rom.valid()) return {false, std::string("memfd_create: ") + std::strerror(errno)};
  const auto bytes = kvm_probe_firmware();
  if (::write(rom.get(), bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size()))
    return {false, "cannot write the probe firmware"};

  VmmSpawn s;
  s.argv = {qemu.string(),
            "-M",
            "microvm",
            "-accel",
            "kvm",
            "-cpu",
            "host",
            "-smp",
            "1",
            "-m",
            "16",
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-bios",
            "/dev/fd/3",
            "-device",
            "isa-debug-exit,iobase=0xf4,iosize=1"};
  s.pass_fd = rom.get();
  net::io_context io;  // the probe's child is waited for here, before cabind runs
  auto p = spawn_vmm(io.get_executor(), s);
  if (!p) return {false, "cannot start " + qemu.string() + ": " + p.error().message};
  // Start-up only, before any session: blocking here is bounded by `bound`.
  const bool finished = p->process->wait_blocking(bound);
  const ExitCode exit = exit_code_of(*p->process->status());
  std::string out = read_finished_output(p->output, 8192);
  return classify_kvm_probe(finished, exit.code, exit.status, last_line(out), bound);
}

uint64_t measure_tsc_khz() {
#if defined(__x86_64__)
  timespec t0{}, t1{};
  ::clock_gettime(CLOCK_MONOTONIC_RAW, &t0);
  const uint64_t c0 = __rdtsc();
  timespec pause{0, 20'000'000};
  while (::nanosleep(&pause, &pause) != 0 && errno == EINTR) {
  }
  const uint64_t c1 = __rdtsc();
  ::clock_gettime(CLOCK_MONOTONIC_RAW, &t1);
  const int64_t ns = (t1.tv_sec - t0.tv_sec) * 1'000'000'000LL + (t1.tv_nsec - t0.tv_nsec);
  if (ns <= 0 || c1 <= c0) return 0;
  // Rounded to 1 MHz: the measurement is not more precise than that.
  const uint64_t khz = static_cast<uint64_t>((c1 - c0) * 1'000'000.0 / static_cast<double>(ns));
  return (khz + 500) / 1000 * 1000;
#else
  return 0;
#endif
}

}  // namespace cabin::drivers
