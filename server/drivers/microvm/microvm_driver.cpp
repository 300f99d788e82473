#include "server/drivers/microvm/microvm_driver.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <optional>

#include "common/cloexec.h"
#include "common/in_thread.h"
#include "common/log.h"
#include "common/notifier.h"
#include "common/profile_archive.h"
#include "common/sealed_stream.h"
#include "common/spawn.h"
#include "common/unique_fd.h"
#include "server/drivers/microvm/kvm_probe.h"
#include "server/drivers/microvm/qmp.h"
#include "server/drivers/microvm/vmm_process.h"
#include "server/drivers/namespace/cgroups.h"
#include "server/drivers/namespace/netns.h"
#include "server/drivers/namespace/sys_util.h"

namespace cabin::drivers {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A hostfwd port picked free can be taken before QEMU binds it; then QEMU exits and we retry.
constexpr int kMaxStartAttempts = 3;

bool is_init_line(const std::string& line) {
  return line.rfind("cabin-init: ", 0) == 0 || line.rfind("cabin-initramfs: ", 0) == 0;
}

}  // namespace

// QEMU (through cabin-vmm-wrap), and where its forward to the agent listens.
class VmProcess final : public SandboxProcess {
 public:
  VmProcess(net::any_io_executor ex, VmmProcess child, SandboxProcessConfig config,
            uint16_t host_port)
      : SandboxProcess(std::move(ex), std::move(child), std::move(config)), host_port(host_port) {}

  const uint16_t host_port;
  // A jailed QEMU's net namespace, where its forward to the agent listens; unset: the host's.
  UniqueFd netns;
  // A snapshottable VM's RAM: a memfd QEMU maps shared (unset: anonymous RAM), and the shape a
  // copy must have to map it.
  UniqueFd ram;
  uint64_t memory_mib = 0;
  int vcpus = 0;
  uint64_t profile_disk_bytes = 0;  // 0: no profile

  net::awaitable<Result<void>> qmp(std::string command) {
    auto self = shared_from_this();
    CABIN_CO_TRY(check_live());
    auto r = co_await qmp_execute(executor(), run_dir(), kQmpSocketName, command, 5s);
    if (!r) log().warn("[{}] QMP {}: {}", id(), command, r.error().message);
    co_return r;
  }

 private:
  std::string exit_reason(ExitCode exit) override {
    return microvm_exit_reason(exit.code, exit.status, last_init_line_, last_line());
  }

  // Nothing in the VM is worth saving (its writable layer is guest RAM): quit, or be killed.
  net::awaitable<void> ask_to_stop() override {
    auto self = shared_from_this();
    auto quit = co_await qmp_execute(executor(), run_dir(), kQmpSocketName, "quit", 1s);
    if (!quit) log().debug("[{}] QMP quit: {}", id(), quit.error().message);
  }

  void on_output_line(const std::string& line) override {
    if (is_init_line(line)) last_init_line_ = line;
  }

  std::string last_init_line_;
};

namespace {

// A started or adopted QEMU, whose forward to the agent listens on `port`.
std::shared_ptr<VmProcess> make_vm(const net::any_io_executor& ex, const MicrovmDriverConfig& config,
                                   HostChild child, const std::string& id, const fs::path& dir,
                                   uint16_t port) {
  return std::make_shared<VmProcess>(ex, std::move(child),
                                     SandboxProcessConfig{.logger = "driver.microvm",
                                                          .id = id,
                                                          .source = "vm",
                                                          .what = "qemu",
                                                          .strip_cr = true,
                                                          .run_dir = dir,
                                                          .stop_timeout = config.stop_timeout},
                                     port);
}

// The VM's profile disk: `bytes` long (sparse; 0 for a VM without a profile), starting with
// `archive` where there is one. The guest reads it at boot and writes it when its browser closes.
Result<void> make_profile_disk(const fs::path& file, uint64_t bytes, const std::string& archive) {
  UniqueFd fd(::open(file.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd.valid()) return nsbox::sys_error("create " + file.string());
  if (bytes > 0 && ::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0)
    return nsbox::sys_error("size " + file.string());
  if (!archive.empty()) CABIN_TRY(profiles::write_disk(fd.get(), archive));
  return {};
}

// A handoff's profile disk size: a profile's or none.
uint64_t handoff_profile_disk(const nlohmann::json& handoff) {
  auto it = handoff.find("profile_disk_bytes");
  if (it == handoff.end() || !it->is_number_unsigned()) return 0;
  return it->get<uint64_t>() == profiles::kDiskBytes ? profiles::kDiskBytes : 0;
}

// A stopped VM: its RAM (a memfd sealed against every write, which copies map privately) and
// its device state (a small memfd, read afresh by each restore); or, saved running, its state
// alone with every page of RAM in it.
class VmSnapshot final : public Snapshot {
 public:
  UniqueFd ram;
  UniqueFd state;
  uint64_t memory_mib = 0;
  int vcpus = 0;
  std::string describe() const override {
    return std::string(ram.valid() ? "microvm snapshot: " : "microvm saved running: ") +
           std::to_string(memory_mib) + " MiB, " + std::to_string(vcpus) + " vCPUs";
  }
};

Result<UniqueFd> make_memfd(const char* name, uint64_t size) {
  UniqueFd fd(::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) return nsbox::sys_error("memfd_create");
  if (size > 0 && ::ftruncate(fd.get(), static_cast<off_t>(size)) != 0)
    return nsbox::sys_error("ftruncate memfd");
  return fd;
}

// No process may change it from now on: not QEMU's shared mapping (F_SEAL_WRITE fails while
// one exists), not a write, not a resize, not a later seal's removal.
Result<void> seal(int fd) {
  if (::fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) != 0)
    return nsbox::sys_error("seal memfd");
  return {};
}

// A VM, or a hibernated one: saved to a file, with no QEMU (p_ is the ended one's, or null when
// this cabind adopted it hibernated) until resume() starts one from the file.
class MicrovmSandbox final : public ProcessSandbox<VmProcess> {
 public:
  // `driver` outlives its sandboxes (the session manager owns both, and its sessions go first).
  MicrovmSandbox(std::shared_ptr<VmProcess> p, MicrovmDriver& driver)
      : ProcessSandbox(std::move(p)),
        driver_(driver),
        id_(p_->id()),
        memory_mib_(p_->memory_mib),
        vcpus_(p_->vcpus),
        profile_disk_bytes_(p_->profile_disk_bytes),
        changed_(p_->executor()) {}
  // Adopted hibernated, in `saved`.
  MicrovmSandbox(MicrovmDriver& driver, net::any_io_executor ex, std::string id,
                 std::filesystem::path saved, uint64_t memory_mib, int vcpus,
                 uint64_t profile_disk_bytes)
      : ProcessSandbox(nullptr),
        driver_(driver),
        id_(std::move(id)),
        memory_mib_(memory_mib),
        vcpus_(vcpus),
        profile_disk_bytes_(profile_disk_bytes),
        saved_(std::move(saved)),
        changed_(std::move(ex)) {}
  ~MicrovmSandbox() override {
    std::error_code ec;
    if (!released_ && !saved_.empty()) fs::remove(saved_, ec);
  }

  bool hibernated() const override { return !saved_.empty(); }

  Result<std::optional<std::string>> guest_profile() override {
    if (profile_disk_bytes_ == 0) return std::optional<std::string>();
    CABIN_TRY(check_running());
    // QEMU, which is hostile once the guest owns it, could have put anything there: a regular
    // file is read, within the disk's bounds, and nothing else.
    const fs::path file = p_->run_dir() / kProfileDiskName;
    UniqueFd fd(::open(file.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    struct stat st {};
    if (!fd.valid() || ::fstat(fd.get(), &st) != 0) return nsbox::sys_error("open " + file.string());
    if (!S_ISREG(st.st_mode))
      return make_error(Errc::kInternal, "profile_corrupt", "the profile disk is not a file");
    CABIN_ASSIGN_OR_RETURN(auto archive,
                           profiles::read_disk(fd.get(), profiles::kMaxDiskArchiveBytes));
    return std::optional<std::string>(std::move(archive));
  }

  net::awaitable<Result<void>> hibernate() override {
    if (hibernated()) co_return Result<void>{};
    CABIN_CO_TRY(check_running());
    if (memory_mib_ == 0 || vcpus_ == 0 || !driver_.info().supports_hibernate)
      co_return make_error(Errc::kUnavailable, "not_supported", "this VM cannot hibernate");
    const fs::path file = driver_.hibernation_file(id_);
    std::error_code ec;
    fs::create_directories(file.parent_path(), ec);
    ::chmod(file.parent_path().c_str(), 0700);
    fs::remove(file, ec);  // an earlier try's, cut short
    UniqueFd out(::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!out.valid()) co_return nsbox::sys_error("create " + file.string());
    int ends[2];
    if (::pipe2(ends, O_CLOEXEC) != 0) co_return nsbox::sys_error("pipe");
    UniqueFd from_qemu(ends[0]), to_cabind(ends[1]);
    // QEMU writes the state into a pipe; a thread of cabind's seals it into the file as it comes.
    InThread<Result<uint64_t>> sealing(
        p_->executor(),
        [in = std::move(from_qemu), out = std::move(out), file, key = driver_.hibernate_key(),
         context = MicrovmDriver::hibernate_context(id_)]() -> Result<uint64_t> {
          auto n = seal_stream(in.get(), out.get(), key, context);
          if (n && ::fsync(out.get()) != 0) return nsbox::sys_error("fsync " + file.string());
          return n;
        });
    // Its RAM is its own (a copy's private mapping, or anonymous): the state carries every page.
    auto saved = co_await qmp_save_state(p_->executor(), p_->run_dir(), kQmpSocketName,
                                         to_cabind.get(), std::chrono::seconds(300));
    to_cabind.reset();  // QEMU's own copy ended with the migration: the thread reads to the end
    auto sealed = co_await sealing.result();
    if (saved && !sealed) saved = sealed.error();
    if (!saved) {
      fs::remove(file, ec);
      // Not saved: it runs on as it was.
      (void)co_await p_->qmp("cont");
      co_return saved.error();
    }
    saved_ = file;
    co_await p_->destroy();
    changed_.notify_all();
    co_return Result<void>{};
  }

  net::awaitable<Result<void>> resume() override {
    if (!hibernated()) {
      CABIN_CO_TRY(check_running());
      co_return co_await p_->qmp("cont");
    }
    if (destroyed_) co_return make_error(Errc::kUnavailable, "sandbox_ended", "the sandbox ended");
    auto vm = co_await driver_.wake(id_, memory_mib_, vcpus_, profile_disk_bytes_);
    if (!vm) co_return vm.error();
    if (destroyed_) {
      co_await (*vm)->destroy();
      co_return make_error(Errc::kUnavailable, "sandbox_ended", "the sandbox ended");
    }
    p_ = std::move(*vm);
    std::error_code ec;
    fs::remove(saved_, ec);
    saved_.clear();
    changed_.notify_all();
    co_return Result<void>{};
  }

  net::awaitable<void> destroy() override {
    if (p_ && p_->exited() && !hibernated() && ended_why_.empty())
      ended_why_ = co_await p_->wait_exit();
    destroyed_ = true;
    if (p_) co_await p_->destroy();
    std::error_code ec;
    if (!saved_.empty()) fs::remove(saved_, ec);
    saved_.clear();
    changed_.notify_all();
  }

  void release() override {
    released_ = true;
    if (p_ && !hibernated()) p_->release();
  }

  // Ends when the VM it runs ends, or destroy(); not when hibernating ends one VM for the next.
  net::awaitable<std::string> wait_exit() override {
    for (;;) {
      // The first end is the one reported, also after a later destroy().
      if (!ended_why_.empty()) co_return ended_why_;
      if (destroyed_) co_return "destroyed";
      if (hibernated() || !p_) {
        (void)co_await changed_.wait_until(Clock::now() + std::chrono::hours(24));
        continue;
      }
      auto p = p_;
      std::string why = co_await p->wait_exit();
      if (p == p_ && !hibernated() && !destroyed_) {
        if (ended_why_.empty()) ended_why_ = why;
        co_return ended_why_;
      }
    }
  }

  std::vector<std::string> recent_output() const override {
    return p_ ? p_->recent_output() : std::vector<std::string>{};
  }

  net::awaitable<std::string> stall_report() override {
    auto p = p_;
    if (!p || !p->check_live()) co_return "the VM is not running";
    auto states = co_await qmp_vcpu_states(p->executor(), p->run_dir(), kQmpSocketName, p->vcpus,
                                           2s);
    co_return states ? *states : "QMP: " + states.error().message;
  }

  net::awaitable<Result<SnapshotPtr>> snapshot() override {
    CABIN_CO_TRY(check_running());
    if (!p_->ram.valid())
      co_return make_error(Errc::kUnavailable, "not_snapshottable", "the VM's RAM is not shared");
    auto saved = co_await save_stopped(std::chrono::seconds(60));
    // Saved or not, this VM is done: stopped, and its RAM about to belong to its copies.
    co_await destroy();
    if (!saved) co_return saved.error();
    (*saved)->ram = std::move(p_->ram);
    CABIN_CO_TRY(seal((*saved)->ram.get()));
    co_return SnapshotPtr(std::move(*saved));
  }

  // The guest's agent listens on the egress port itself; QEMU spawns nothing (spawn=deny).
  bool egress_through_agent() const override { return true; }

  net::awaitable<Result<AgentStream>> dial_agent() override {
    CABIN_CO_TRY(check_running());
    // QEMU's user network accepts on the host side at once and only then connects in the guest;
    // while the agent is not listening yet, the stream ends at the first read.
    net::ip::tcp::endpoint ep(net::ip::address_v4::loopback(), p_->host_port);
    AgentStream socket(p_->executor());
    boost::system::error_code ec;
    const net::generic::stream_protocol::endpoint gep(ep);
    if (p_->netns.valid()) {
      auto fd = nsbox::tcp_socket_in_netns(p_->netns.get());
      if (!fd) co_return fd.error();
      socket.assign(gep.protocol(), fd->release(), ec);
    } else {
      open_cloexec(socket, gep.protocol(), ec);
    }
    if (!ec)
      co_await socket.async_connect(gep, net::redirect_error(net::use_awaitable, ec));
    if (ec)
      co_return make_error(Errc::kUnavailable, "agent_not_ready",
                           "connect to agent: " + ec.message());
    co_return std::move(socket);
  }

  net::awaitable<Result<SnapshotPtr>> save_running() override {
    CABIN_CO_TRY(check_running());
    if (p_->memory_mib == 0 || p_->vcpus == 0)
      co_return make_error(Errc::kUnavailable, "not_supported", "the VM's shape is not known");
    // Its RAM is its own (a private mapping, or anonymous): the state carries every page.
    auto saved = co_await save_stopped(std::chrono::seconds(120));
    // Saved or not, it runs on from where it stopped.
    auto resumed = co_await p_->qmp("cont");
    if (!saved) co_return saved.error();
    if (!resumed) co_return resumed.error();
    co_return SnapshotPtr(std::move(*saved));
  }

  net::awaitable<Result<void>> pause() override {
    if (hibernated()) co_return Result<void>{};  // nothing of it runs
    CABIN_CO_TRY(check_running());
    co_return co_await p_->qmp("stop");
  }

  nlohmann::json handoff() const override {
    // The file's place follows from the id; a handoff names no path.
    if (hibernated()) {
      return {{"hibernated", true},
              {"memory_mib", memory_mib_},
              {"vcpus", vcpus_},
              {"profile_disk_bytes", profile_disk_bytes_}};
    }
    return {{"pid", p_->pid()},
            {"start", process_start_ticks(p_->pid()).value_or(0)},
            {"port", p_->host_port},
            {"memory_mib", p_->memory_mib},
            {"vcpus", p_->vcpus},
            {"profile_disk_bytes", p_->profile_disk_bytes}};
  }

  std::string describe() const override {
    if (hibernated()) return "microvm hibernated in " + saved_.string();
    return "microvm qemu pid=" + std::to_string(p_->pid()) +
           " agent=127.0.0.1:" + std::to_string(p_->host_port) + " dir=" + p_->run_dir().string();
  }

 private:
  // Stops the VM and saves its device state, and whatever of its RAM is not shared, into a new
  // sealed memfd, with its shape; the VM stays stopped.
  net::awaitable<Result<std::shared_ptr<VmSnapshot>>> save_stopped(std::chrono::seconds timeout) {
    auto snap = std::make_shared<VmSnapshot>();
    CABIN_CO_ASSIGN_OR_RETURN(snap->state, make_memfd("cabin-vm-state", 0));
    CABIN_CO_TRY(co_await qmp_save_state(p_->executor(), p_->run_dir(), kQmpSocketName,
                                         snap->state.get(), timeout));
    CABIN_CO_TRY(seal(snap->state.get()));
    snap->memory_mib = p_->memory_mib;
    snap->vcpus = p_->vcpus;
    co_return snap;
  }

  Result<void> check_running() const {
    if (hibernated() || !p_)
      return make_error(Errc::kUnavailable, "sandbox_hibernated", "the VM is hibernated");
    return p_->check_live();
  }

  MicrovmDriver& driver_;
  const std::string id_;
  const uint64_t memory_mib_;
  const int vcpus_;
  const uint64_t profile_disk_bytes_;
  fs::path saved_;  // the hibernated VM's file; empty while it runs
  bool destroyed_ = false;
  bool released_ = false;
  std::string ended_why_;  // why the VM ended by itself, once it did
  Notifier changed_;  // hibernated, woken or destroyed
};

// A free port on the host's loopback, for QEMU's hostfwd. QEMU binds it a moment later; if
// something else took it in between, QEMU fails to start and create() picks another.
Result<uint16_t> pick_loopback_port() {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return nsbox::sys_error("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    return nsbox::sys_error("bind 127.0.0.1:0");
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    return nsbox::sys_error("getsockname");
  return ntohs(addr.sin_port);
}

}  // namespace

MicrovmDriver::MicrovmDriver(MicrovmDriverConfig config, net::any_io_executor executor)
    : config_(std::move(config)), executor_(std::move(executor)) {
  auto log = logger("driver.microvm");
  info_ = probe();
  if (!info_.available) {
    log->warn("microvm driver unavailable: {}", info_.unavailable_reason);
  } else if (accel_ == Accel::kTcg) {
    // Said loudly: TCG works, but every guest instruction is emulated.
    log->warn("microvm driver ready on {}; image {} (kernel {}), run dir {}", info_.detail,
              config_.image_dir.string(), image_.kernel_version, config_.run_dir.string());
  } else {
    log->info("microvm driver ready on KVM; image {} (kernel {}), run dir {}",
              config_.image_dir.string(), image_.kernel_version, config_.run_dir.string());
  }
}

DriverInfo MicrovmDriver::probe() {
  DriverInfo info;
  info.name = "microvm";
  info.isolation = "microvm";
  info.supports_pause = true;
  info.supports_egress = true;  // through the agent's door (no listener in the guest for cabind)
  info.supports_snapshots = true;
  info.supports_hibernate = !config_.hibernate_dir.empty();
  // On a disk of its own: the guest reads it at boot and the agent writes it back.
  info.supports_profiles = true;
  auto unavailable = [&](std::string why) { return unavailable_driver(info, std::move(why)); };
  if (!executable(config_.qemu_path))
    return unavailable("qemu not executable: " + config_.qemu_path.string());
  if (!executable(config_.wrap_path))
    return unavailable("cabin-vmm-wrap not executable: " + config_.wrap_path.string());
  if (config_.vcpus < 1 || config_.vcpus > 64) return unavailable("vcpus must be 1..64");
  auto image = load_image(config_.image_dir);
  if (!image) return unavailable("guest image: " + image.error().message);
  image_ = std::move(image.value());

  if (config_.accel == "tcg") {
    accel_ = Accel::kTcg;
    info.detail = "TCG (configured)";
  } else if (config_.accel == "kvm" || config_.accel == "auto") {
    auto kvm = probe_kvm(config_.qemu_path, config_.kvm_probe_timeout);
    if (kvm.usable) {
      accel_ = Accel::kKvm;
      info.detail = "KVM";
    } else if (config_.accel == "kvm") {
      return unavailable("KVM was asked for, but there is no working KVM: " + kvm.why);
    } else {
      accel_ = Accel::kTcg;
      info.detail = "TCG (no working KVM: " + kvm.why + ")";
    }
  } else {
    return unavailable("accel must be auto, kvm or tcg, not " + config_.accel);
  }
  if (accel_ == Accel::kTcg) {
    tsc_khz_ = measure_tsc_khz();
    // QEMU does not treat TCG's guest/host boundary as a security boundary; say so.
    info.detail += "; software emulation is a weaker boundary than KVM";
  }
  if (::geteuid() != 0) info.detail += "; QEMU runs unjailed (cabind is not root)";
  info.available = true;
  return info;
}

net::awaitable<Result<SandboxPtr>> MicrovmDriver::create(const SandboxSpec& spec) {
  VmStart start;
  start.memory_mib = guest_memory_mib(spec.memory_bytes);
  start.vcpus = spec.vcpus > 0 ? spec.vcpus : config_.vcpus;
  if (!spec.profile_dir.empty()) {
    // The host dir cabind filled from the saved profile: the VM's disk starts with it packed.
    auto packed = profiles::pack(spec.profile_dir, {}, profiles::kChromiumCacheDirs);
    if (!packed) co_return packed.error();
    start.profile = std::move(*packed);
    start.profile_disk_bytes = profiles::kDiskBytes;
  }
  UniqueFd ram;  // a snapshottable VM's: shared, so that its copies can map it
  if (spec.snapshottable) {
    CABIN_CO_ASSIGN_OR_RETURN(ram, make_memfd("cabin-vm-ram", start.memory_mib << 20));
    start.ram_fd = ram.get();
  }
  auto vm = co_await start_vm(spec, start);
  if (!vm) co_return vm.error();
  (*vm)->ram = std::move(ram);
  co_return SandboxPtr(std::make_unique<MicrovmSandbox>(std::move(*vm), *this));
}

net::awaitable<Result<SandboxPtr>> MicrovmDriver::restore(const Snapshot& snapshot,
                                                          const SandboxSpec& spec) {
  const auto* snap = dynamic_cast<const VmSnapshot*>(&snapshot);
  if (!snap) co_return make_error(Errc::kInvalidArgument, "foreign_snapshot", "not a VM snapshot");
  VmStart start;
  start.memory_mib = snap->memory_mib;
  start.vcpus = snap->vcpus;
  start.ram_fd = snap->ram.valid() ? snap->ram.get() : -1;  // else RAM comes in the state
  start.incoming = true;
  // A descriptor of its own, at offset 0: QEMU reads the state through it.
  UniqueFd state(::open(("/proc/self/fd/" + std::to_string(snap->state.get())).c_str(),
                        O_RDONLY | O_CLOEXEC));
  if (!state.valid()) co_return nsbox::sys_error("reopen the snapshot's state");
  auto vm = co_await restore_vm(spec, start, state.get());
  if (!vm) co_return vm.error();
  co_return SandboxPtr(std::make_unique<MicrovmSandbox>(std::move(*vm), *this));
}

net::awaitable<Result<std::shared_ptr<VmProcess>>> MicrovmDriver::wake(
    const std::string& id, uint64_t memory_mib, int vcpus, uint64_t profile_disk_bytes) {
  const fs::path file = hibernation_file(id);
  UniqueFd sealed(::open(file.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!sealed.valid()) co_return nsbox::sys_error("open " + file.string());
  int ends[2];
  if (::pipe2(ends, O_CLOEXEC) != 0) co_return nsbox::sys_error("pipe");
  UniqueFd state(ends[0]), to_qemu(ends[1]);
  // A thread of cabind's opens the file into a pipe as QEMU reads the state from it; a file that
  // does not open whole (changed, or another server's) ends the pipe early and fails the wake.
  InThread<Result<uint64_t>> opening(
      executor_, [in = std::move(sealed), out = std::move(to_qemu), key = config_.hibernate_key,
                  context = hibernate_context(id)]() {
        return open_stream(in.get(), out.get(), key, context);
      });
  SandboxSpec spec;
  spec.session_id = id;
  VmStart start;
  start.memory_mib = memory_mib;
  start.vcpus = vcpus;
  start.incoming = true;
  // Read once at its boot; the agent writes the profile anew when the browser closes.
  start.profile_disk_bytes = profile_disk_bytes;
  // Its RAM comes whole in the state, into anonymous memory of its own.
  auto vm = co_await restore_vm(spec, start, state.get());
  state.reset();
  auto opened = co_await opening.result();
  if (!opened) {
    if (vm) co_await (*vm)->destroy();
    co_return make_error(Errc::kUnavailable, "sandbox_hibernated",
                         "the hibernated VM's file does not open: " + opened.error().message);
  }
  co_return vm;
}

net::awaitable<Result<std::shared_ptr<VmProcess>>> MicrovmDriver::restore_vm(
    const SandboxSpec& spec, const VmStart& start, int state_fd) {
  auto log = logger("driver.microvm");
  auto vm = co_await start_vm(spec, start);
  if (!vm) co_return vm.error();
  const auto began = Clock::now();
  auto restored = co_await qmp_restore_state(executor_, (*vm)->run_dir(), kQmpSocketName,
                                             state_fd, std::chrono::seconds(300));
  if (!restored) {
    log->warn("[{}] restore failed: {}", spec.session_id, restored.error().message);
    co_await (*vm)->destroy();
    co_return restored.error();
  }
  log->info("[{}] vm restored in {} ms", spec.session_id,
            std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - began).count());
  co_return std::move(*vm);
}

net::awaitable<Result<std::shared_ptr<VmProcess>>> MicrovmDriver::start_vm(const SandboxSpec& spec,
                                                                           const VmStart& start) {
  auto log = logger("driver.microvm");
  // The guest reads its config when it boots; one restored from a state booted long before.
  auto config_text = start.incoming ? Result<std::string>(std::string("restored=1\n"))
                                    : guest_config_text(spec);
  if (!config_text) co_return config_text.error();
  const std::string& id = spec.session_id;

  std::error_code ec;
  fs::create_directories(config_.run_dir, ec);
  ::chmod(config_.run_dir.c_str(), 0700);
  CABIN_CO_ASSIGN_OR_RETURN(const fs::path dir, make_sandbox_dir(info_, spec, config_.run_dir));
  auto fail = [&](Error e) {
    fs::remove_all(dir, ec);
    return e;
  };
  if (auto w = write_private_file(dir / kGuestConfigName, *config_text); !w)
    co_return fail(w.error());
  if (auto d = make_profile_disk(dir / kProfileDiskName, start.profile_disk_bytes, start.profile);
      !d)
    co_return fail(d.error());
  // A jailed QEMU reads the config and makes its QMP socket here as its own uid.
  std::optional<VmmJail> jail;
  if (::geteuid() == 0) {
    jail = VmmJail{config_.vmm_uid, config_.vmm_gid, std::nullopt, config_.image_dir, dir, {}, {}};
    if (accel_ == Accel::kKvm) {
      // The jailed QEMU opens /dev/kvm through a group: udev's default is 0660 root:kvm.
      struct stat kvm {};
      if (::stat("/dev/kvm", &kvm) != 0 || kvm.st_gid == 0 ||
          (kvm.st_mode & (S_IRGRP | S_IWGRP)) != (S_IRGRP | S_IWGRP)) {
        co_return fail(make_error(Errc::kUnavailable, "vmm_jail",
                                  "/dev/kvm must be read-write for a group other than root's "
                                  "(udev's default is 0660 root:kvm) for the jailed QEMU"));
      }
      jail->kvm_gid = kvm.st_gid;
    }
    const auto layout = nsbox::detect_cgroup_layout(config_.cgroup_root);
    if (layout != nsbox::CgroupLayout::kNone) {
      auto parents = nsbox::create_cgroup_parents(layout, config_.cgroup_root,
                                                  config_.cgroup_name, false);
      if (!parents)
        co_return fail(make_error(Errc::kUnavailable, "cgroups_failed",
                                  "cannot create QEMU's cgroup: " + parents.error().message));
      for (const auto& d : *parents) jail->cgroup_procs.push_back((d / "cgroup.procs").string());
      jail->cgroup_ns = config_.cgroup_ns;
    }
    for (const fs::path& p : {dir, dir / kGuestConfigName, dir / kProfileDiskName}) {
      if (::chown(p.c_str(), config_.vmm_uid, config_.vmm_gid) != 0)
        co_return fail(nsbox::sys_error("chown " + p.string()));
    }
  }

  QemuLaunch launch;
  launch.qemu = config_.qemu_path;
  launch.image_dir = config_.image_dir;
  launch.accel = accel_;
  launch.vcpus = start.vcpus;
  launch.memory_mib = start.memory_mib;
  launch.tsc_khz = tsc_khz_;
  launch.tcg_tb_mib = config_.tcg_tb_mib;
  launch.incoming = start.incoming;
  if (start.ram_fd >= 0) {
    // Handed over as descriptor 3: the jailed QEMU can open no file of cabind's by name.
    launch.ram_file = "/proc/self/fd/3";
    launch.ram_shared = !start.incoming;
  }

  std::string last_failure;
  for (int attempt = 1; attempt <= kMaxStartAttempts; ++attempt) {
    auto port = pick_loopback_port();
    if (!port) co_return fail(port.error());
    launch.host_port = *port;
    VmmSpawn s;
    s.wrap = config_.wrap_path;
    s.jail = jail;
    s.argv = qemu_argv(launch);
    s.cwd = dir;
    s.output_fifo = dir / kOutputFifoName;
    s.pass_fd = start.ram_fd;
    fs::remove(s.output_fifo, ec);  // an earlier attempt's
    auto spawned = spawn_vmm(executor_, s);
    if (!spawned) co_return fail(spawned.error());
    auto vm = make_vm(executor_, config_, std::move(spawned.value()), id, dir, launch.host_port);
    // reap_leftovers() finds QEMUs of an earlier run through this file (and QEMU's cwd).
    fs::remove(dir / kPidFileName, ec);
    if (auto w = write_private_file(dir / kPidFileName, std::to_string(vm->pid()) + "\n"); !w)
      log->warn("[{}] {}", id, w.error().message);
    vm->start();

    // QEMU answers its monitor only once the machine is built, hostfwd port bound included.
    const auto deadline = Clock::now() + config_.start_timeout;
    bool up = false;
    std::string qmp_error;
    while (!vm->exited() && Clock::now() < deadline) {
      auto r = co_await qmp_execute(executor_, dir, kQmpSocketName, "query-status", 1s);
      if (r) {
        up = true;
        break;
      }
      qmp_error = r.error().message;
      // QEMU gives no sign that its monitor is up but the monitor itself; its exit ends the wait.
      co_await vm->wait_exited(20ms);
    }
    if (up && jail) {
      // By now the wrap has unshared (QEMU answers only after it was started in there).
      auto ns = nsbox::open_own_netns_of(vm->pid());
      if (!ns) {
        co_await vm->destroy();
        co_return fail(ns.error());
      }
      vm->netns = std::move(*ns);
    }
    if (up) {
      log->info("[{}] vm {}: qemu pid {}, {}, {} MiB, {} vCPUs, agent on 127.0.0.1:{}", id,
                start.incoming ? "waiting for its snapshot" : "started", vm->pid(),
                accel_ == Accel::kKvm ? "KVM" : "TCG", launch.memory_mib, launch.vcpus,
                launch.host_port);
      vm->memory_mib = launch.memory_mib;
      vm->vcpus = launch.vcpus;
      vm->profile_disk_bytes = start.profile_disk_bytes;
      co_return vm;
    }
    if (!vm->exited()) {
      log->error("[{}] qemu did not come up in {} ms: {}", id, config_.start_timeout.count(),
                 qmp_error);
      co_await vm->destroy();
      co_return make_error(Errc::kTimeout, "vm_start_timeout",
                           "qemu did not come up: " + qmp_error);
    }
    co_await vm->wait_output_done(500ms);
    last_failure = vm->last_line();
    if (last_failure.empty()) last_failure = co_await vm->wait_exit();
    vm->disown();  // nothing left to kill; the dir is reused or removed below
    if (last_failure.find("hostfwd") == std::string::npos &&
        last_failure.find("host forwarding") == std::string::npos)
      break;
    log->warn("[{}] port {} was taken; retrying: {}", id, launch.host_port, last_failure);
  }
  co_return fail(
      make_error(Errc::kUnavailable, "vm_start_failed", "qemu failed to start: " + last_failure));
}

net::awaitable<Result<SandboxPtr>> MicrovmDriver::adopt(const std::string& id,
                                                        const nlohmann::json& handoff) {
  auto log = logger("driver.microvm");
  if (!info_.available)
    co_return make_error(Errc::kUnavailable, "driver_unavailable", info_.unavailable_reason);
  if (!nsbox::valid_sandbox_id(id))
    co_return make_error(Errc::kInvalidArgument, "invalid_session_id", "not a session id");
  if (handoff.value("hibernated", false)) {
    const fs::path file = hibernation_file(id);
    std::error_code ec;
    if (config_.hibernate_dir.empty() || !fs::is_regular_file(file, ec))
      co_return make_error(Errc::kNotFound, "process_gone", "the hibernated VM's file is gone");
    const auto memory = handoff.value("memory_mib", uint64_t{0});
    const auto vcpus = handoff.value("vcpus", 0);
    if (memory == 0 || memory > (1u << 20) || vcpus < 1 || vcpus > 64)
      co_return make_error(Errc::kNotFound, "process_gone", "the hibernated VM's shape is lost");
    log->info("[{}] vm adopted hibernated in {}", id, file.string());
    co_return SandboxPtr(std::make_unique<MicrovmSandbox>(*this, executor_, id, file, memory,
                                                          vcpus, handoff_profile_disk(handoff)));
  }
  const fs::path dir = config_.run_dir / id;
  const auto [pid, start] = handoff_process(handoff);
  int64_t port = 0;
  if (auto p = handoff.find("port"); p != handoff.end() && p->is_number_integer())
    port = p->get<int64_t>();
  if (pid <= 1 || pid > std::numeric_limits<pid_t>::max() || port <= 0 || port > 65535)
    co_return make_error(Errc::kNotFound, "process_gone", "no QEMU pid or port was recorded");
  auto child = adopt_host_child(executor_, static_cast<pid_t>(pid), start, dir / kOutputFifoName);
  if (!child) co_return child.error();
  auto vm = make_vm(executor_, config_, std::move(*child), id, dir, static_cast<uint16_t>(port));
  // Its shape, for a copy of it (a fork) to have the same; 0 where an older handoff lacks it.
  if (auto m = handoff.find("memory_mib"); m != handoff.end() && m->is_number_unsigned())
    vm->memory_mib = std::min<uint64_t>(m->get<uint64_t>(), 1u << 20);
  if (auto v = handoff.find("vcpus"); v != handoff.end() && v->is_number_integer())
    vm->vcpus = static_cast<int>(std::clamp<int64_t>(v->get<int64_t>(), 0, 64));
  vm->profile_disk_bytes = handoff_profile_disk(handoff);
  vm->start();
  if (::geteuid() == 0) {
    auto ns = nsbox::open_own_netns_of(vm->pid());
    if (!ns) {
      co_await vm->destroy();
      co_return ns.error();
    }
    vm->netns = std::move(*ns);
  }
  log->info("[{}] vm adopted: qemu pid {}, agent on 127.0.0.1:{}", id, vm->pid(), port);
  co_return SandboxPtr(std::make_unique<MicrovmSandbox>(std::move(vm), *this));
}

void MicrovmDriver::reap_leftovers(const std::set<std::string>& keep) {
  auto log = logger("driver.microvm");
  size_t killed = 0, removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(config_.run_dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code ec2;
    const fs::path dir = it->path();
    if (!it->is_directory(ec2) || it->is_symlink(ec2) ||
        !nsbox::valid_sandbox_id(dir.filename().string())) {
      log->warn("leaving unexpected entry in run dir: {}", dir.string());
      continue;
    }
    if (keep.count(dir.filename().string())) continue;
    // Only a QEMU whose working directory is this session dir is ours: a recycled pid is not.
    auto pid_text = nsbox::read_file((dir / kPidFileName).string(), 32);
    const pid_t pid = pid_text ? static_cast<pid_t>(std::atoi(pid_text->c_str())) : 0;
    if (pid > 1) {
      std::error_code ec3;
      auto cwd = fs::read_symlink("/proc/" + std::to_string(pid) + "/cwd", ec3).string();
      if (!ec3 && (cwd == dir.string() || cwd == dir.string() + " (deleted)")) {
        UniqueFd pidfd(pidfd_open(pid));
        if (pidfd.valid() && pidfd_send_signal(pidfd.get(), SIGKILL) == 0) {
          ++killed;
          // Start-up only, before any session: a short blocking wait is fine. Its parent (the
          // earlier cabind) is gone, so init reaps it.
          const auto deadline = Clock::now() + 5s;
          while (fs::exists("/proc/" + std::to_string(pid) + "/cwd", ec3) &&
                 Clock::now() < deadline)
            ::usleep(10000);
        }
      }
    }
    fs::remove_all(dir, ec2);
    if (ec2)
      log->error("remove {}: {}", dir.string(), ec2.message());
    else
      ++removed;
  }
  size_t files = 0;
  for (fs::directory_iterator it(config_.hibernate_dir, ec), end;
       !config_.hibernate_dir.empty() && !ec && it != end; it.increment(ec)) {
    const fs::path f = it->path();
    if (f.extension() == ".vmstate" && keep.count(f.stem().string())) continue;
    std::error_code ec2;
    if (fs::remove(f, ec2)) ++files;
  }
  if (killed || removed || files)
    log->info("removed leftovers: {} VMs killed, {} run dirs, {} hibernated VMs", killed, removed,
              files);
}

}  // namespace cabin::drivers
