// The microvm driver's parts without booting a VM: QEMU argv, guest config, exit reasons, the
// image manifest, the KVM probe's firmware and verdicts, QMP, and reaping an earlier run.
// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "common/crypto.h"
#include "common/unique_fd.h"
#include "server/drivers/microvm/image_manifest.h"
#include "server/drivers/microvm/kvm_probe.h"
#include "server/drivers/microvm/microvm_driver.h"
#include "server/drivers/microvm/qemu_args.h"
#include "server/drivers/microvm/qmp.h"
#include "server/drivers/microvm/vmm_process.h"
#include "tests/fakes/temp_dir.h"

namespace net = boost::asio;
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using namespace cabin::drivers;

namespace {

using cabin::testing::TempDir;

bool has_pair(const std::vector<std::string>& argv, const std::string& flag,
              const std::string& value) {
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == flag && argv[i + 1] == value) return true;
  }
  return false;
}

std::string value_of(const std::vector<std::string>& argv, const std::string& flag) {
  auto it = std::find(argv.begin(), argv.end(), flag);
  return it != argv.end() && it + 1 != argv.end() ? *(it + 1) : "";
}

const std::string kSha(64, 'a');

std::string manifest_json(int format = kImageFormat, uint64_t rootfs_size = 4) {
  return R"({"format": )" + std::to_string(format) + R"(, "input_hash": ")" + kSha +
         R"(", "built_at": "2025-01-01T00:00:00Z",
    "kernel": {"version": "6.1.0-57-cloud-amd64", "package": "p", "package_version": "v"},
    "packages": {"chromium": "120.0-1"},
    "files": {"vmlinuz": {"size": 2, "sha256": ")" +
         kSha + R"("}, "initramfs.cpio.gz": {"size": 3, "sha256": ")" + kSha +
         R"("}, "rootfs.erofs": {"size": )" + std::to_string(rootfs_size) + R"(, "sha256": ")" +
         kSha + R"("}}})";
}

// An image dir whose files have the sizes manifest_json() records.
void write_fake_image(const fs::path& dir) {
  fs::create_directories(dir);
  std::ofstream(dir / "manifest.json") << manifest_json();
  std::ofstream(dir / "vmlinuz") << "kk";
  std::ofstream(dir / "initramfs.cpio.gz") << "iii";
  std::ofstream(dir / "rootfs.erofs") << "rrrr";
}

template <typename T>
net::awaitable<void> store(net::awaitable<T> aw, std::optional<T>& out) {
  out.emplace(co_await std::move(aw));
}

}  // namespace

TEST_CASE("qemu argv for TCG", "[microvm]") {
  QemuLaunch l;
  l.qemu = "/usr/bin/qemu-system-x86_64";
  l.image_dir = "/img,dir";
  l.accel = Accel::kTcg;
  l.vcpus = 2;
  l.memory_mib = 2048;
  l.host_port = 40123;
  l.tsc_khz = 2300000;
  auto argv = qemu_argv(l);
  CHECK(argv[0] == "/usr/bin/qemu-system-x86_64");
  CHECK(has_pair(argv, "-M", "microvm,memory-backend=ram0"));
  CHECK(has_pair(argv, "-object", "memory-backend-ram,id=ram0,size=2048M"));
  CHECK(has_pair(argv, "-accel", "tcg,thread=multi"));
  CHECK(has_pair(argv, "-cpu", "max,vendor=GenuineIntel"));
  CHECK(has_pair(argv, "-smp", "2"));
  CHECK(has_pair(argv, "-m", "2048"));
  CHECK(has_pair(argv, "-kernel", "/img,dir/vmlinuz"));
  CHECK(has_pair(argv, "-initrd", "/img,dir/initramfs.cpio.gz"));
  // Commas in option values are doubled; the rootfs is read-only for QEMU too.
  CHECK(has_pair(argv, "-drive",
                 "file=/img,,dir/rootfs.erofs,if=none,id=root,format=raw,readonly=on"));
  CHECK(has_pair(argv, "-netdev", "user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:40123-:7000"));
  CHECK(has_pair(argv, "-fw_cfg", "name=opt/cabin/config,file=config"));
  CHECK(has_pair(argv, "-qmp", "unix:qmp.sock,server=on,wait=off"));
  CHECK(has_pair(argv, "-sandbox",
                 "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"));
  CHECK(std::count(argv.begin(), argv.end(), "-nodefaults") == 1);
  CHECK(std::count(argv.begin(), argv.end(), "-no-reboot") == 1);
  const auto append = value_of(argv, "-append");
  CHECK(append.find("console=ttyS0") != std::string::npos);
  CHECK(append.find("tsc_early_khz=2300000") != std::string::npos);
  CHECK(append.find("tsc=reliable") != std::string::npos);

  l.tcg_tb_mib = 256;
  CHECK(has_pair(qemu_argv(l), "-accel", "tcg,thread=multi,tb-size=256"));
  CHECK(std::count(argv.begin(), argv.end(), "-object") == 1);  // anonymous RAM by default
  CHECK(std::count(argv.begin(), argv.end(), "-incoming") == 0);
}

TEST_CASE("qemu argv: a template's RAM in a shared file, a restore's mapped privately", "[microvm]") {
  QemuLaunch l;
  l.qemu = "qemu";
  l.image_dir = "/img";
  l.memory_mib = 1024;
  l.ram_file = "/dev/shm/t,1.ram";
  auto tpl = qemu_argv(l);
  CHECK(has_pair(tpl, "-M", "microvm,memory-backend=ram0"));
  CHECK(has_pair(tpl, "-object",
                 "memory-backend-file,id=ram0,size=1024M,mem-path=/dev/shm/t,,1.ram,share=on"));
  CHECK(has_pair(tpl, "-m", "1024"));  // the same size as the backend, or QEMU refuses
  CHECK(std::count(tpl.begin(), tpl.end(), "-incoming") == 0);
  l.ram_shared = false;
  l.incoming = true;
  auto clone = qemu_argv(l);
  CHECK(has_pair(clone, "-object",
                 "memory-backend-file,id=ram0,size=1024M,mem-path=/dev/shm/t,,1.ram,share=off"));
  CHECK(has_pair(clone, "-incoming", "defer"));
  // Everything else is the template's: a saved state loads only into the same machine.
  std::vector<std::string> rest_tpl, rest_clone;
  for (const auto& a : tpl) if (a.find("share=") == std::string::npos) rest_tpl.push_back(a);
  for (const auto& a : clone) if (a.find("share=") == std::string::npos) rest_clone.push_back(a);
  rest_clone.resize(rest_clone.size() - 2);  // -incoming defer
  CHECK(rest_tpl == rest_clone);
}

TEST_CASE("qemu argv for KVM", "[microvm]") {
  QemuLaunch l;
  l.qemu = "qemu";
  l.image_dir = "/img";
  l.accel = Accel::kKvm;
  l.tsc_khz = 2300000;
  l.tcg_tb_mib = 256;
  auto argv = qemu_argv(l);
  CHECK(has_pair(argv, "-accel", "kvm"));
  CHECK(has_pair(argv, "-cpu", "host"));
  // KVM guests calibrate their TSC through kvm-clock.
  CHECK(value_of(argv, "-append").find("tsc_early_khz") == std::string::npos);
}

TEST_CASE("qemu option escaping", "[microvm]") {
  CHECK(qemu_opt_escape("a,b,,c") == "a,,b,,,,c");
  CHECK(qemu_opt_escape("") == "");
  CHECK(qemu_opt_escape("/plain/path") == "/plain/path");
}

TEST_CASE("guest config carries the session, never on the command line", "[microvm]") {
  SandboxSpec spec;
  spec.session_id = "s_1";
  spec.agent_secret = "secret_value_123";
  spec.width = 1024;
  spec.height = 768;
  auto text = guest_config_text(spec);
  REQUIRE(text.ok());
  CHECK(*text == "secret=secret_value_123\nwidth=1024\nheight=768\n");
  spec.start_url = "https://example.com/?a=b&c=d e";
  CHECK(guest_config_text(spec).value() ==
        "secret=secret_value_123\nwidth=1024\nheight=768\nstart_url=https://example.com/?a=b&c=d "
        "e\n");
  // Egress: the port the agent's door listens on, and the certificates to trust, in one line.
  spec.start_url.clear();
  spec.egress_proxy_port = 3128;
  spec.trusted_ca_pem = "-----BEGIN CERTIFICATE-----\nAB\n-----END CERTIFICATE-----\n";
  CHECK(guest_config_text(spec).value() ==
        "secret=secret_value_123\nwidth=1024\nheight=768\negress_proxy=3128\ntrusted_ca=" +
            cabin::base64_encode(spec.trusted_ca_pem) + "\n");

  QemuLaunch l;
  l.qemu = "qemu";
  l.image_dir = "/img";
  for (const auto& a : qemu_argv(l)) CHECK(a.find(spec.agent_secret) == std::string::npos);

  SECTION("a newline would inject a key") {
    spec.start_url = "about:blank\nsecret=other";
    auto bad = guest_config_text(spec);
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.error().code == "invalid_spec");
  }
  SECTION("empty secret") {
    spec.agent_secret = "";
    CHECK_FALSE(guest_config_text(spec).ok());
  }
  SECTION("control characters in the secret") {
    spec.agent_secret = "a\rb";
    CHECK_FALSE(guest_config_text(spec).ok());
  }
}

TEST_CASE("guest memory has a floor", "[microvm]") {
  CHECK(guest_memory_mib(2ull << 30) == 2048);
  CHECK(guest_memory_mib(100ull << 20) == 512);
  CHECK(guest_memory_mib(0) == 512);
}

TEST_CASE("microvm exit reasons", "[microvm]") {
  CHECK(microvm_exit_reason(CLD_EXITED, 0, "cabin-init: agent exited with status 1", "x") ==
        "agent exited with status 1");
  CHECK(microvm_exit_reason(CLD_EXITED, 0, "cabin-initramfs: no root disk /dev/vda", "") ==
        "guest setup failed: no root disk /dev/vda");
  CHECK(microvm_exit_reason(CLD_EXITED, 0, "", "") == "the VM powered off");
  CHECK(microvm_exit_reason(CLD_EXITED, 1, "", "qemu-system-x86_64: -m: bad") ==
        "qemu exited with status 1: qemu-system-x86_64: -m: bad");
  CHECK(microvm_exit_reason(CLD_KILLED, SIGKILL, "cabin-init: x", "") ==
        "qemu killed by signal 9 (SIGKILL)");
  // Adopted (no wait status): the wrap's last word, else what QEMU said last.
  CHECK(microvm_exit_reason(0, 0, "", "cabin-vmm-wrap: qemu killed by signal 9 (Killed)") ==
        "qemu killed by signal 9 (Killed)");
  CHECK(microvm_exit_reason(0, 0, "", "qemu: terminating") == "qemu exited: qemu: terminating");
  CHECK(microvm_exit_reason(0, 0, "cabin-init: agent exited with status 1", "") ==
        "agent exited with status 1");
}

TEST_CASE("image manifest parsing", "[microvm]") {
  auto m = parse_image_manifest(manifest_json());
  REQUIRE(m.ok());
  CHECK(m->format == kImageFormat);
  CHECK(m->input_hash == kSha);
  CHECK(m->kernel_version == "6.1.0-57-cloud-amd64");
  CHECK(m->packages.at("chromium") == "120.0-1");
  CHECK(m->files.at("rootfs.erofs").size == 4);

  auto expect_bad = [](const std::string& text, const std::string& needle) {
    auto r = parse_image_manifest(text);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == "invalid_image_manifest");
    CHECK(r.error().message.find(needle) != std::string::npos);
  };
  expect_bad("not json", "not a JSON object");
  expect_bad("[1]", "not a JSON object");
  expect_bad(manifest_json(kImageFormat + 1), "rebuild the image");
  std::string no_rootfs = manifest_json();
  no_rootfs.replace(no_rootfs.find("rootfs.erofs"), 12, "rootfs.other");
  expect_bad(no_rootfs, "files.rootfs.erofs");
  std::string bad_hash = manifest_json();
  bad_hash.replace(bad_hash.find(kSha), 64, std::string(64, 'z'));
  expect_bad(bad_hash, "input_hash");
  expect_bad(manifest_json(kImageFormat, 0), "size");
}

TEST_CASE("load_image checks the files against the manifest", "[microvm]") {
  TempDir t;
  auto missing = load_image(t.path / "none");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code == "image_missing");
  CHECK(missing.error().message.find("build-image") != std::string::npos);

  write_fake_image(t.path);
  CHECK(load_image(t.path).ok());
  std::ofstream(t.path / "rootfs.erofs", std::ios::app) << "truncated or grown";
  auto corrupt = load_image(t.path);
  REQUIRE_FALSE(corrupt.ok());
  CHECK(corrupt.error().code == "image_corrupt");
  std::ofstream(t.path / "rootfs.erofs", std::ios::trunc) << "rrrr";
  fs::remove(t.path / "vmlinuz");
  CHECK(load_image(t.path).error().code == "image_missing");
}

TEST_CASE("KVM probe firmware jumps from the reset vector to its code", "[microvm]") {
  auto rom = kvm_probe_firmware();
  REQUIRE(rom.size() == 64 * 1024);
  REQUIRE(rom[0xFFF0] == 0xe9);  // jmp rel16
  const uint16_t rel = static_cast<uint16_t>(rom[0xFFF1] | (rom[0xFFF2] << 8));
  const uint16_t target = static_cast<uint16_t>(0xFFF3 + rel);
  CHECK(target == 0xF000);
  CHECK(rom[target] == 0xfa);  // cli
  // It ends with: mov $0x42,%al; out %al,$0xf4; hlt.
  const uint8_t tail[] = {0xb0, 0x42, 0xe6, 0xf4, 0xf4};
  CHECK(std::search(rom.begin() + 0xF000, rom.begin() + 0xF100, std::begin(tail), std::end(tail)) !=
        rom.begin() + 0xF100);
}

TEST_CASE("KVM probe verdicts", "[microvm]") {
  auto ok = classify_kvm_probe(true, CLD_EXITED, kKvmProbeExitStatus, "", 2000ms);
  CHECK(ok.usable);
  auto slow = classify_kvm_probe(false, 0, 0, "", 2000ms);
  CHECK_FALSE(slow.usable);
  CHECK(slow.why.find("2000 ms") != std::string::npos);
  auto refused = classify_kvm_probe(
      true, CLD_EXITED, 1, "Could not access KVM kernel module: Permission denied", 2000ms);
  CHECK_FALSE(refused.usable);
  CHECK(refused.why ==
        "qemu -accel kvm exited with status 1: Could not access KVM kernel module: Permission "
        "denied");
  CHECK_FALSE(classify_kvm_probe(true, CLD_KILLED, SIGSEGV, "", 2000ms).usable);
}

TEST_CASE("the host TSC rate is measured", "[microvm]") {
#if defined(__x86_64__)
  const uint64_t khz = measure_tsc_khz();
  CHECK(khz >= 100'000);     // 100 MHz
  CHECK(khz <= 10'000'000);  // 10 GHz
#endif
}

TEST_CASE("the wrapper's argv puts QEMU's after --", "[microvm]") {
  auto argv = vmm_wrap_argv("/bin/cabin-vmm-wrap", {"qemu", "-M", "microvm"});
  CHECK(argv == std::vector<std::string>{"/bin/cabin-vmm-wrap", "--", "qemu",
                                         "-M", "microvm"});
  VmmJail jail{602000, 602001, 108, "/img", "/run/cabin-vm/s_1", {}, {}};
  CHECK(vmm_wrap_argv("/w", {"qemu"}, jail) ==
        std::vector<std::string>{"/w", "--jail", "602000:602001", "--image",
                                 "/img", "--run", "/run/cabin-vm/s_1", "--kvm-gid", "108", "--",
                                 "qemu"});
  jail.cgroup_procs = {"/cg/pids/cabin-vm/cgroup.procs", "/cg/memory/cabin-vm/cgroup.procs"};
  CHECK(vmm_wrap_argv("/w", {"qemu"}, jail) ==
        std::vector<std::string>{"/w", "--jail", "602000:602001", "--image", "/img", "--run",
                                 "/run/cabin-vm/s_1", "--kvm-gid", "108", "--cgroup-procs",
                                 "/cg/pids/cabin-vm/cgroup.procs", "--cgroup-procs",
                                 "/cg/memory/cabin-vm/cgroup.procs", "--", "qemu"});
  jail.cgroup_ns = "/proc/1/ns/cgroup";
  CHECK(vmm_wrap_argv("/w", {"qemu"}, jail)[9] == "--cgroup-ns");
}

TEST_CASE("a vCPU's state from its register dump", "[microvm]") {
  const std::string dump =
      "RAX=0000000000000000 RBX=ffffffff82a1a940 RCX=0000000000000001 RDX=0000000000000000\r\n"
      "R8 =0000000000000000 R9 =0000000000000000 R10=0000000000000000 R11=0000000000000000\r\n"
      "RIP=ffffffff81c6f6a4 RFL=00000246 [---Z-P-] CPL=0 II=0 A20=1 SMM=0 HLT=1\r\n"
      "ES =0000 0000000000000000 00000000 00000000\r\n";
  CHECK(vcpu_state_of(dump) == "RIP=ffffffff81c6f6a4 HLT=1");
  // A name that merely ends in RIP= is not the field.
  CHECK(vcpu_state_of("XRIP=1 RIP=2 HLT=0") == "RIP=2 HLT=0");
  CHECK(vcpu_state_of("RIP=ffffffff81000000") == "RIP=ffffffff81000000");
  CHECK(vcpu_state_of("") == "");
}

TEST_CASE("QMP lines", "[microvm]") {
  CHECK(parse_qmp_line(R"({"QMP": {"version": {}, "capabilities": []}})").kind ==
        QmpKind::kGreeting);
  CHECK(parse_qmp_line(R"({"return": {}})").kind == QmpKind::kReturn);
  auto err = parse_qmp_line(R"({"error": {"class": "GenericError", "desc": "nope"}})");
  CHECK(err.kind == QmpKind::kError);
  CHECK(err.text == "GenericError: nope");
  auto ev = parse_qmp_line(R"({"event": "STOP", "timestamp": {}})");
  CHECK(ev.kind == QmpKind::kEvent);
  CHECK(ev.text == "STOP");
  CHECK(parse_qmp_line("garbage").kind == QmpKind::kInvalid);
  CHECK(parse_qmp_line(R"({"other": 1})").kind == QmpKind::kInvalid);
}

TEST_CASE("qmp_execute negotiates, skips events and reports errors", "[microvm]") {
  TempDir t;
  net::io_context io;
  using local = net::local::stream_protocol;
  local::acceptor acceptor(io, local::endpoint((t.path / "qmp.sock").string()));
  std::vector<std::string> received;
  // A stand-in QEMU: greeting, then answers each command; "stop" gets an event first, "bad" an
  // error.
  auto server = [&]() -> net::awaitable<void> {
    for (int conn = 0; conn < 2; ++conn) {
      auto sock = co_await acceptor.async_accept(net::use_awaitable);
      std::string greeting = R"({"QMP": {"version": {}, "capabilities": []}})"
                             "\n";
      co_await net::async_write(sock, net::buffer(greeting), net::use_awaitable);
      net::streambuf buf;
      for (int i = 0; i < 2; ++i) {
        size_t n = co_await net::async_read_until(sock, buf, '\n', net::use_awaitable);
        std::string line(net::buffers_begin(buf.data()), net::buffers_begin(buf.data()) + n);
        buf.consume(n);
        received.push_back(line);
        std::string answer = R"({"return": {}})"
                             "\n";
        if (line.find("\"stop\"") != std::string::npos)
          answer = R"({"event": "STOP"})"
                   "\n" +
                   answer;
        if (line.find("\"bad\"") != std::string::npos)
          answer = R"({"error": {"class": "CommandNotFound", "desc": "no bad"}})"
                   "\n";
        co_await net::async_write(sock, net::buffer(answer), net::use_awaitable);
      }
    }
  };
  net::co_spawn(io, server(), net::detached);
  std::optional<cabin::Result<void>> stop, bad;
  net::co_spawn(
      io,
      [&]() -> net::awaitable<void> {
        co_await store(qmp_execute(io.get_executor(), t.path, "qmp.sock", "stop", 5s), stop);
        co_await store(qmp_execute(io.get_executor(), t.path, "qmp.sock", "bad", 5s), bad);
      },
      net::detached);
  io.run_for(10s);
  REQUIRE(stop.has_value());
  CHECK(stop->ok());
  REQUIRE(bad.has_value());
  REQUIRE_FALSE(bad->ok());
  CHECK(bad->error().message.find("CommandNotFound: no bad") != std::string::npos);
  REQUIRE(received.size() == 4);
  CHECK(received[0] == "{\"execute\":\"qmp_capabilities\"}\n");
  CHECK(received[1] == "{\"execute\":\"stop\"}\n");

  // Nobody listening: an error, not a hang.
  std::optional<cabin::Result<void>> none;
  io.restart();
  net::co_spawn(io, store(qmp_execute(io.get_executor(), t.path, "absent.sock", "stop", 1s), none),
                net::detached);
  io.run_for(3s);
  REQUIRE(none.has_value());
  CHECK_FALSE(none->ok());
}

TEST_CASE("driver info says why it is unavailable", "[microvm]") {
  TempDir t;
  net::io_context io;
  MicrovmDriverConfig c;
  c.run_dir = t.path / "run";
  c.image_dir = t.path / "image";
  c.qemu_path = "/bin/true";
  c.wrap_path = "/bin/true";
  c.accel = "tcg";
  {
    MicrovmDriver d(c, io.get_executor());
    CHECK(d.info().name == "microvm");
    CHECK(d.info().isolation == "microvm");
    CHECK_FALSE(d.info().available);
    CHECK(d.info().unavailable_reason.find("guest image") != std::string::npos);
  }
  write_fake_image(c.image_dir);
  {
    MicrovmDriver d(c, io.get_executor());
    CHECK(d.info().available);
    CHECK(d.info().supports_pause);
    CHECK(d.info().detail.rfind("TCG (configured); software emulation is a weaker boundary", 0) == 0);
    CHECK(d.accel() == Accel::kTcg);
    CHECK(d.image().kernel_version == "6.1.0-57-cloud-amd64");
  }
  c.accel = "fast";
  CHECK(MicrovmDriver(c, io.get_executor()).info().unavailable_reason.find("accel") !=
        std::string::npos);
  c.accel = "tcg";
  c.qemu_path = t.path / "no-qemu";
  CHECK(MicrovmDriver(c, io.get_executor()).info().unavailable_reason.find("qemu not executable") !=
        std::string::npos);
}

TEST_CASE("microvm reap_leftovers kills only its own earlier VMs", "[microvm]") {
  TempDir t;
  net::io_context io;
  MicrovmDriverConfig c;
  c.run_dir = t.path / "run";
  c.image_dir = t.path / "image";
  c.qemu_path = "/bin/true";
  c.wrap_path = "/bin/true";
  c.accel = "tcg";
  write_fake_image(c.image_dir);

  // Stand-ins for QEMUs: one started in its session dir (ours), one elsewhere whose pid an old
  // pid file happens to name (a recycled pid).
  auto start_sleep = [](const fs::path& cwd) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str());
    const char* argv[] = {"/bin/sleep", "600", nullptr};
    pid_t pid = -1;
    REQUIRE(::posix_spawn(&pid, argv[0], &fa, nullptr, const_cast<char**>(argv), environ) == 0);
    posix_spawn_file_actions_destroy(&fa);
    return pid;
  };
  fs::create_directories(c.run_dir / "old_1");
  fs::create_directories(c.run_dir / "old_2" / "sub");
  const pid_t ours = start_sleep(c.run_dir / "old_1");
  const pid_t foreign = start_sleep(t.path);
  std::ofstream(c.run_dir / "old_1" / "pid") << ours << "\n";
  std::ofstream(c.run_dir / "old_2" / "pid") << foreign << "\n";
  std::ofstream(c.run_dir / "stray-file") << "x";
  // posix_spawn returns after the child's chdir and exec, so both cwds are settled here.
  MicrovmDriver d(c, io.get_executor());
  d.reap_leftovers({});

  int status = 0;
  REQUIRE(::waitpid(ours, &status, 0) == ours);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
  CHECK(::waitpid(foreign, &status, WNOHANG) == 0);  // still running
  CHECK_FALSE(fs::exists(c.run_dir / "old_1"));
  CHECK_FALSE(fs::exists(c.run_dir / "old_2"));
  CHECK(fs::exists(c.run_dir / "stray-file"));
  ::kill(foreign, SIGKILL);
  ::waitpid(foreign, nullptr, 0);
}

namespace {

// A stand-in QEMU monitor for one connection: a greeting, then an answer per command line, the
// descriptors that come with getfd kept. query-migrate says "active" once, then `final`.
struct FakeMonitor {
  std::vector<std::string> commands;
  std::vector<std::string> fd_contents;  // what each passed descriptor's file held
  std::string final_status = "completed";

  net::awaitable<void> serve(net::local::stream_protocol::acceptor& acceptor) {
    auto sock = co_await acceptor.async_accept(net::use_awaitable);
    std::string greeting = R"({"QMP": {"version": {}, "capabilities": []}})" "\n";
    co_await net::async_write(sock, net::buffer(greeting), net::use_awaitable);
    int polls = 0;
    std::string pending;
    for (;;) {
      co_await sock.async_wait(net::local::stream_protocol::socket::wait_read, net::use_awaitable);
      char data[4096];
      alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))];
      struct iovec iov {data, sizeof data};
      struct msghdr msg {};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      const ssize_t n = ::recvmsg(sock.native_handle(), &msg, 0);
      if (n <= 0) co_return;
      for (auto* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        int fd = -1;
        std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
        char got[64] = {};
        const ssize_t r = ::pread(fd, got, sizeof got - 1, 0);
        fd_contents.push_back(r > 0 ? std::string(got, static_cast<size_t>(r)) : "");
        ::close(fd);
      }
      pending.append(data, static_cast<size_t>(n));
      for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
        const std::string line = pending.substr(0, nl);
        pending.erase(0, nl + 1);
        commands.push_back(line);
        std::string answer = R"({"return": {}})";
        if (line.find("query-migrate") != std::string::npos) {
          answer = std::string(R"({"return": {"status": ")") +
                   (polls++ == 0 ? "active" : final_status) + R"(", "error-desc": "boom"}})";
        }
        answer += "\n";
        co_await net::async_write(sock, net::buffer(answer), net::use_awaitable);
      }
    }
  }
};

// The "execute" names of the commands, in order, and the first's arguments where it has some.
std::vector<std::string> executed(const std::vector<std::string>& lines) {
  std::vector<std::string> out;
  for (const auto& l : lines) out.push_back(nlohmann::json::parse(l)["execute"]);
  return out;
}

}  // namespace

TEST_CASE("a VM's state is saved and restored over QMP with the file's descriptor", "[microvm]") {
  TempDir t;
  const auto state = t.path / "state";
  std::ofstream(state) << "device state";
  for (bool restore : {false, true}) {
    INFO((restore ? "restore" : "save"));
    net::io_context io;
    std::filesystem::remove(t.path / "qmp.sock");
    net::local::stream_protocol::acceptor acceptor(io, (t.path / "qmp.sock").string());
    FakeMonitor qemu;
    net::co_spawn(io, qemu.serve(acceptor), net::detached);
    cabin::UniqueFd fd(::open(state.c_str(), O_RDONLY | O_CLOEXEC));
    std::optional<cabin::Result<void>> done;
    auto run = restore ? qmp_restore_state(io.get_executor(), t.path, "qmp.sock", fd.get(), 5s)
                       : qmp_save_state(io.get_executor(), t.path, "qmp.sock", fd.get(), 5s);
    net::co_spawn(io, store(std::move(run), done), net::detached);
    io.run_for(10s);
    REQUIRE(done.has_value());
    CHECK(done->ok());
    const std::vector<std::string> want =
        restore ? std::vector<std::string>{"qmp_capabilities", "migrate-set-capabilities", "getfd",
                                           "migrate-incoming", "query-migrate", "query-migrate",
                                           "cont"}
                : std::vector<std::string>{"qmp_capabilities", "stop", "migrate-set-capabilities",
                                           "migrate-set-parameters", "getfd", "migrate",
                                           "query-migrate", "query-migrate"};
    CHECK(executed(qemu.commands) == want);
    auto caps = nlohmann::json::parse(qemu.commands[restore ? 1 : 2]);
    CHECK(caps["arguments"]["capabilities"][0]["capability"] == "x-ignore-shared");
    CHECK(caps["arguments"]["capabilities"][0]["state"] == true);
    if (!restore) {
      // Saving to a file is not throttled to QEMU's default of 128 MiB/s.
      auto params = nlohmann::json::parse(qemu.commands[3]);
      CHECK(params["arguments"]["max-bandwidth"].get<int64_t>() >= int64_t{1} << 40);
    }
    auto getfd = nlohmann::json::parse(qemu.commands[restore ? 2 : 4]);
    auto migrate = nlohmann::json::parse(qemu.commands[restore ? 3 : 5]);
    CHECK(migrate["arguments"]["uri"] == "fd:" + getfd["arguments"]["fdname"].get<std::string>());
    // The descriptor came with getfd, and it is the state file's.
    CHECK(qemu.fd_contents == std::vector<std::string>{"device state"});
  }
}

TEST_CASE("a failed migration is an error with QEMU's reason", "[microvm]") {
  TempDir t;
  net::io_context io;
  net::local::stream_protocol::acceptor acceptor(io, (t.path / "qmp.sock").string());
  FakeMonitor qemu;
  qemu.final_status = "failed";
  net::co_spawn(io, qemu.serve(acceptor), net::detached);
  cabin::UniqueFd fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  std::optional<cabin::Result<void>> done;
  net::co_spawn(io, store(qmp_save_state(io.get_executor(), t.path, "qmp.sock", fd.get(), 5s), done),
                net::detached);
  io.run_for(10s);
  REQUIRE(done.has_value());
  REQUIRE_FALSE(done->ok());
  CHECK(done->error().message.find("migration failed: boom") != std::string::npos);
}

namespace {

// A real QEMU with no guest (-S: it never runs an instruction), its RAM in `ram`, its monitor at
// <dir>/qmp.sock. Killed and reaped when the holder goes.
struct BareQemu {
  pid_t pid = -1;
  BareQemu(const std::filesystem::path& dir, const std::filesystem::path& ram, bool shared,
           bool incoming) {
    std::vector<std::string> argv = {
        "qemu-system-x86_64", "-M", "microvm,memory-backend=ram0", "-object",
        "memory-backend-file,id=ram0,size=64M,mem-path=" + ram.string() +
            ",share=" + (shared ? "on" : "off"),
        "-m", "64", "-nodefaults", "-no-user-config", "-display", "none", "-S", "-accel", "tcg",
        "-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
        "-qmp", "unix:" + (dir / "qmp.sock").string() + ",server=on,wait=off"};
    if (incoming) argv.insert(argv.end(), {"-incoming", "defer"});
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
    if (posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ) != 0) pid = -1;
    posix_spawn_file_actions_destroy(&actions);
  }
  ~BareQemu() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
  // Whether its monitor socket appeared within `within` (QEMU takes a moment to start).
  bool monitor_up(const std::filesystem::path& dir, std::chrono::seconds within) const {
    const auto until = std::chrono::steady_clock::now() + within;
    while (std::chrono::steady_clock::now() < until) {
      if (std::filesystem::exists(dir / "qmp.sock")) return true;
      if (::waitpid(pid, nullptr, WNOHANG) == pid) return false;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }
};

bool have_qemu() { return ::system("command -v qemu-system-x86_64 >/dev/null 2>&1") == 0; }

}  // namespace

TEST_CASE("a real QEMU saves its state beside its RAM file and a private clone loads it",
          "[microvm]") {
  if (!have_qemu()) {
    WARN("qemu-system-x86_64 is not installed");
    return;
  }
  TempDir t;
  const auto ram = t.path / "ram";
  const auto state = t.path / "state";
  std::filesystem::create_directories(t.path / "tpl");
  std::filesystem::create_directories(t.path / "clone");
  {
    BareQemu tpl(t.path / "tpl", ram, true, false);
    REQUIRE(tpl.monitor_up(t.path / "tpl", 30s));
    net::io_context io;
    cabin::UniqueFd out(::open(state.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    std::optional<cabin::Result<void>> saved;
    net::co_spawn(io, store(qmp_save_state(io.get_executor(), t.path / "tpl", "qmp.sock",
                                           out.get(), 20s), saved),
                  net::detached);
    io.run_for(30s);
    REQUIRE(saved.has_value());
    INFO((saved->ok() ? "" : saved->error().message));
    REQUIRE(saved->ok());
  }
  // Only the device state went into the stream: the 64 MiB of RAM stayed in its file.
  const auto size = std::filesystem::file_size(state);
  CHECK(size > 0);
  CHECK(size < (4u << 20));
  CHECK(std::filesystem::file_size(ram) == (64u << 20));

  BareQemu clone(t.path / "clone", ram, false, true);
  REQUIRE(clone.monitor_up(t.path / "clone", 30s));
  net::io_context io;
  cabin::UniqueFd in(::open(state.c_str(), O_RDONLY | O_CLOEXEC));
  std::optional<cabin::Result<void>> restored;
  net::co_spawn(io, store(qmp_restore_state(io.get_executor(), t.path / "clone", "qmp.sock",
                                            in.get(), 20s), restored),
                net::detached);
  io.run_for(30s);
  REQUIRE(restored.has_value());
  INFO((restored->ok() ? "" : restored->error().message));
  CHECK(restored->ok());
}
