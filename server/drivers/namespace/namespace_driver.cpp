#include "server/drivers/namespace/namespace_driver.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>

#include "common/agent_protocol.h"
#include "common/child_process.h"
#include "common/cloexec.h"
#include "common/log.h"
#include "common/spawn.h"
#include "common/unique_fd.h"
#include "server/api/ids.h"
#include "server/drivers/namespace/cgroups.h"
#include "server/drivers/namespace/launcher_args.h"
#include "server/drivers/namespace/netns.h"
#include "server/drivers/namespace/sys_util.h"
#include "server/drivers/namespace/userns.h"
#include "server/drivers/sandbox_process.h"

namespace cabin::drivers {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using nsbox::CgroupLayout;
using Clock = std::chrono::steady_clock;

// Starts cabin-sandbox with a clean environment; agent_fd (if valid) becomes its fd 3.
Result<HostChild> spawn_launcher(net::any_io_executor ex, const std::vector<std::string>& argv,
                                 const std::vector<std::string>& env, int agent_fd = -1,
                                 const fs::path& output_fifo = {}) {
  HostSpawn s;
  s.argv = argv;
  s.env = env;
  s.pass_fd = agent_fd;
  s.output_fifo = output_fifo;
  return spawn_host_child(std::move(ex), s);
}

// Retries `done` with a short pause until it holds or `timeout` passes: an emptied cgroup gives
// no event a coroutine can wait on (v1 has none at all).
net::awaitable<bool> retry_until(net::any_io_executor ex, const std::function<bool()>& done,
                                 std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  net::steady_timer timer(ex);
  while (!done()) {
    if (Clock::now() >= deadline) co_return false;
    timer.expires_after(5ms);
    boost::system::error_code ec;
    co_await timer.async_wait(net::redirect_error(net::use_awaitable, ec));
  }
  co_return true;
}

// The agent's listening socket, bound at dir/agent.sock. cabind makes it in a dir the sandbox
// never sees, so nothing inside can unlink it or bind an impostor in its place.
Result<UniqueFd> listen_agent_socket(const fs::path& dir) {
  UniqueFd dfd(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dfd.valid()) return nsbox::sys_error("open " + dir.string());
  UniqueFd sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) return nsbox::sys_error("socket");
  // Through the dir's descriptor: the run dir may be longer than sun_path allows.
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string path =
      "/proc/self/fd/" + std::to_string(dfd.get()) + "/" + nsbox::kAgentSocketName;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  if (::bind(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    return nsbox::sys_error("bind agent socket");
  // The agent accepts one connection per request; a burst of them waits here.
  if (::listen(sock.get(), 128) != 0) return nsbox::sys_error("listen agent socket");
  return sock;
}

constexpr char kLauncherFileName[] = "launcher.pid";
// The key that seals sessions' handoffs lives in this run dir too (server/main.cpp).
constexpr char kHandoffKeyName[] = "handoff.key";

// "PID START_TICKS", mode 0600, in the sandbox's run dir (which the sandbox never sees).
void write_launcher_file(const fs::path& dir, pid_t pid) {
  const std::string text =
      std::to_string(pid) + " " + std::to_string(process_start_ticks(pid).value_or(0)) + "\n";
  if (auto w = write_private_file(dir / kLauncherFileName, text); !w)
    logger("driver.namespace")->warn("{}", w.error().message);
}

// Kills the launcher recorded in `dir`, if it still runs: PID 1 of its sandbox dies with it, and
// the pid namespace with PID 1. Start-up only: waits for it, briefly.
bool kill_recorded_launcher(const fs::path& dir) {
  auto text = nsbox::read_file((dir / kLauncherFileName).string(), 64);
  if (!text) return false;
  long long pid = 0;
  unsigned long long start = 0;
  if (std::sscanf(text->c_str(), "%lld %llu", &pid, &start) != 2 || pid <= 1) return false;
  UniqueFd pidfd(pidfd_open(static_cast<pid_t>(pid)));
  if (!pidfd.valid() || process_start_ticks(static_cast<pid_t>(pid)) != start) return false;
  if (pidfd_send_signal(pidfd.get(), SIGKILL) != 0) return false;
  struct pollfd p {
    pidfd.get(), POLLIN, 0
  };
  (void)::poll(&p, 1, 5000);
  return true;
}

// A directory inside the sandbox of launcher `launcher_pid`, by its path from the sandbox's root,
// opened read-only with every link and mount crossing into the host refused.
Result<UniqueFd> open_in_sandbox(int launcher_pid, const std::string& relative) {
  CABIN_ASSIGN_OR_RETURN(const int init, nsbox::sandbox_init_pid(launcher_pid));
  const std::string proc = "/proc/" + std::to_string(init);
  struct stat mine {}, theirs {};
  if (::stat("/proc/self/ns/mnt", &mine) != 0 || ::stat((proc + "/ns/mnt").c_str(), &theirs) != 0 ||
      (mine.st_ino == theirs.st_ino && mine.st_dev == theirs.st_dev)) {
    return make_error(Errc::kUnavailable, "sandbox_not_ready", "sandbox has no root of its own yet");
  }
  UniqueFd root(::open((proc + "/root").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root.valid()) return make_error(Errc::kUnavailable, "sandbox_not_ready", "its root is gone");
  struct open_how how {};
  how.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  const int fd = static_cast<int>(
      ::syscall(SYS_openat2, root.get(), relative.c_str(), &how, sizeof how));
  if (fd < 0) {
    return make_error(Errc::kUnavailable, "not_supported",
                      "open " + relative + " in the sandbox: " + std::strerror(errno));
  }
  return UniqueFd(fd);
}

// The launcher, and the cgroups it is confined to.
class NamespaceProcess final : public SandboxProcess {
 public:
  NamespaceProcess(net::any_io_executor ex, HostChild child, SandboxProcessConfig config,
                   std::vector<fs::path> cgroups)
      : SandboxProcess(std::move(ex), std::move(child), std::move(config)),
        cgroups_(std::move(cgroups)) {}

  const std::vector<fs::path>& cgroups() const { return cgroups_; }
  UniqueFd netns;  // the sandbox's network namespace, opened on first direct dial

 private:
  std::string exit_reason(ExitCode exit) override {
    return namespace_exit_reason(exit.code, exit.status, last_line());
  }

  // The launcher answers SIGTERM by SIGKILLing PID 1 and reaping it: the pid namespace is gone
  // and the cgroups are empty before the launcher itself exits. A paused sandbox is thawed
  // first: a frozen process takes no signal, SIGKILL included (v1).
  net::awaitable<void> ask_to_stop() override {
    if (auto dir = nsbox::freezer_dir(cgroups_); !dir.empty())
      (void)nsbox::request_freeze(dir, false);
    process().signal(SIGTERM);
    co_return;
  }

  // Anything still in the cgroups (a launcher that was SIGKILLed) is killed too.
  net::awaitable<void> clean_up() override {
    if (auto dir = nsbox::freezer_dir(cgroups_); !dir.empty())
      (void)nsbox::request_freeze(dir, false);
    auto empty = [&] {
      bool all = true;
      for (const auto& dir : cgroups_) {
        if (nsbox::kill_cgroup(dir) > 0) all = false;
      }
      return all;
    };
    if (!co_await retry_until(executor(), empty, 5s))
      log().error("[{}] cgroup processes survived SIGKILL", id());
    for (const auto& dir : cgroups_) {
      auto removed = [&] { return static_cast<bool>(nsbox::remove_cgroup(dir)); };
      if (!co_await retry_until(executor(), removed, 2s))
        log().error("[{}] cannot remove cgroup {}", id(), dir.string());
    }
  }

  std::vector<fs::path> cgroups_;
};

// A started or adopted launcher.
std::shared_ptr<NamespaceProcess> make_process(const net::any_io_executor& ex,
                                               const NamespaceDriverConfig& config, HostChild child,
                                               const std::string& id, const fs::path& dir,
                                               std::vector<fs::path> cgroups) {
  return std::make_shared<NamespaceProcess>(
      ex, std::move(child),
      SandboxProcessConfig{.logger = "driver.namespace",
                           .id = id,
                           .source = "sandbox",
                           .what = "launcher",
                           .run_dir = dir,
                           .stop_timeout = config.stop_timeout},
      std::move(cgroups));
}

class NamespaceSandbox final : public ProcessSandbox<NamespaceProcess> {
 public:
  using ProcessSandbox::ProcessSandbox;

  net::awaitable<Result<AgentStream>> dial_agent() override {
    CABIN_CO_TRY(p_->check_live());
    // cabind made the socket in a dir of its own; connect through a descriptor of it, as the
    // run dir's path may be longer than a socket address allows.
    UniqueFd sock(
        ::open((p_->run_dir() / nsbox::kAgentSocketName).c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (!sock.valid())
      co_return make_error(Errc::kUnavailable, "sandbox_ended", "the agent socket is gone");
    net::local::stream_protocol::socket socket(p_->executor());
    boost::system::error_code ec;
    open_cloexec(socket, net::local::stream_protocol(), ec);
    if (!ec) {
      co_await socket.async_connect(
          net::local::stream_protocol::endpoint("/proc/self/fd/" + std::to_string(sock.get())),
          net::redirect_error(net::use_awaitable, ec));
    }
    if (ec)
      co_return make_error(Errc::kUnavailable, "agent_not_ready",
                           "connect to agent: " + ec.message());
    co_return AgentStream(std::move(socket));
  }

  Result<UniqueFd> listen_loopback(uint16_t port) override {
    if (auto live = p_->check_live(); !live) return live.error();
    if (auto ns = netns(); !ns) return ns.error();
    return nsbox::tcp_listener_in_netns(p_->netns.get(), port);
  }

  net::awaitable<Result<AgentStream>> dial_loopback(int port) override {
    CABIN_CO_TRY(p_->check_live());
    if (auto ns = netns(); !ns) co_return ns.error();
    auto fd = nsbox::tcp_socket_in_netns(p_->netns.get());
    if (!fd) co_return fd.error();
    net::ip::tcp::socket socket(p_->executor());
    boost::system::error_code ec;
    socket.assign(net::ip::tcp::v4(), fd.value().release(), ec);
    if (!ec) {
      co_await socket.async_connect({net::ip::address_v4::loopback(), static_cast<uint16_t>(port)},
                                    net::redirect_error(net::use_awaitable, ec));
    }
    if (ec)
      co_return make_error(Errc::kBadGateway, "connect_failed",
                           "connect to 127.0.0.1:" + std::to_string(port) + ": " + ec.message());
    socket.set_option(net::ip::tcp::no_delay(true), ec);
    co_return AgentStream(std::move(socket));
  }

  // Through PID 1's root, resolved as the sandbox sees it: a link inside never leads out.
  Result<UniqueFd> open_browser_profile() override {
    CABIN_TRY(p_->check_live());
    return open_in_sandbox(p_->pid(), std::string(nsbox::kSandboxProfilePath).substr(1));
  }

  // The cgroup freezer stops every process of the sandbox where it is; its connections stay open.
  net::awaitable<Result<void>> pause() override { co_return co_await freeze(true); }
  net::awaitable<Result<void>> resume() override { co_return co_await freeze(false); }

  net::awaitable<Result<void>> freeze(bool frozen) {
    CABIN_CO_TRY(p_->check_live());
    const auto dir = nsbox::freezer_dir(p_->cgroups());
    if (dir.empty()) {
      co_return make_error(Errc::kUnavailable, "not_supported",
                           "the host gives sandboxes no cgroup freezer");
    }
    CABIN_CO_TRY(nsbox::request_freeze(dir, frozen));
    if (!co_await retry_until(
            p_->executor(), [&] { return nsbox::freeze_settled(dir, frozen); }, 5s)) {
      co_return make_error(
          Errc::kUnavailable, "not_supported",
          std::string("the sandbox did not ") + (frozen ? "freeze" : "thaw") + " within 5 s");
    }
    co_return Result<void>{};
  }

  std::string describe() const override {
    std::string cg;
    for (const auto& d : p_->cgroups()) cg += (cg.empty() ? "" : ",") + d.string();
    return "namespace sandbox pid=" + std::to_string(p_->pid()) +
           " cgroups=" + (cg.empty() ? "none" : cg) + " run_dir=" + p_->run_dir().string();
  }

  nlohmann::json handoff() const override {
    return {{"pid", p_->pid()}, {"start", process_start_ticks(p_->pid()).value_or(0)}};
  }

 private:
  // The sandbox's network namespace, opened once.
  Result<void> netns() {
    if (p_->netns.valid()) return {};
    auto ns = nsbox::open_sandbox_netns(p_->pid());
    if (!ns) return ns.error();
    p_->netns = std::move(ns.value());
    return {};
  }
};

// Hands a tree cabind just wrote to `uid`:`gid`, links included, following none.
Result<void> chown_tree(const fs::path& top, uint32_t uid, uint32_t gid) {
  auto give = [&](const fs::path& p) -> Result<void> {
    if (::lchown(p.c_str(), uid, gid) != 0)
      return make_error(Errc::kInternal, "profile_failed", "chown " + p.string() + ": " +
                                                                std::strerror(errno));
    return {};
  };
  CABIN_TRY(give(top));
  std::error_code ec;
  for (fs::recursive_directory_iterator it(top, ec), end; !ec && it != end; it.increment(ec))
    CABIN_TRY(give(it->path()));
  if (ec) return make_error(Errc::kInternal, "profile_failed", "walk the profile: " + ec.message());
  return {};
}

// The agent's argv inside the sandbox.
std::vector<std::string> agent_argv(const NamespaceDriverConfig& c, const SandboxSpec& spec,
                                    bool host_root) {
  if (!c.payload_override.empty()) return c.payload_override;
  std::vector<std::string> argv = {
      nsbox::kSandboxAgentPath,
      "--listen",
      "fd:" + std::to_string(nsbox::kAgentListenFd),
      "--width",
      std::to_string(spec.width),
      "--height",
      std::to_string(spec.height),
      "--chromium-sandbox",
      c.chromium_sandbox,
      "--home",
      nsbox::kSandboxHome,
      // Commands from the exec API get no user namespaces; Chromium keeps them (docs/security.md).
      "--exec-filter",
      "on",
  };
  // Only root can map a second uid for them; without it commands run as the agent's user.
  if (host_root) argv.insert(argv.end(), {"--exec-uid", std::to_string(nsbox::kSandboxExecUid)});
  if (!spec.start_url.empty()) argv.insert(argv.end(), {"--start-url", spec.start_url});
  if (!spec.wait_until.empty()) argv.insert(argv.end(), {"--wait-until", spec.wait_until});
  if (spec.egress_proxy_port != 0) {
    argv.insert(argv.end(), {"--egress-proxy", std::to_string(spec.egress_proxy_port)});
  }
  return argv;
}

}  // namespace

std::vector<std::string> namespace_launcher_argv(const NamespaceDriverConfig& config,
                                                 const SandboxSpec& spec, bool host_root,
                                                 const std::vector<std::string>& cgroup_procs) {
  nsbox::LauncherArgs a;
  a.id = spec.session_id;
  a.agent_fd = nsbox::kAgentListenFd;  // spawn_launcher's pass_fd lands there
  if (config.payload_override.empty()) a.agent = config.agent_path.string();
  if (config.payload_override.empty() && spec.egress_proxy_port != 0) {
    a.chromium_policy = config.chromium_policy.string();
  }
  if (host_root) {
    a.map_root = nsbox::HostIds{config.sandbox_root_uid, config.sandbox_root_gid};
    a.map_user = nsbox::HostIds{config.sandbox_uid, config.sandbox_gid};
    a.map_exec_uid = config.sandbox_exec_uid;
  }
  if (!spec.profile_dir.empty()) a.profile = spec.profile_dir.string();
  a.cgroup_procs = cgroup_procs;
  if (!cgroup_procs.empty()) a.cgroup_ns = config.cgroup_ns;
  a.tmpfs_bytes = sandbox_tmpfs_bytes(spec.memory_bytes);
  a.payload = agent_argv(config, spec, host_root);
  return nsbox::build_launcher_argv(config.launcher_path.string(), a);
}

std::string namespace_exit_reason(int code, int status, const std::string& last_line) {
  if (code == 0) {
    // Adopted: only the output says how it ended.
    const std::string_view failed = agent_protocol::kAgentFailureLinePrefix;
    if (last_line.rfind(failed, 0) == 0 && last_line.size() > failed.size())
      return last_line.substr(failed.size());
    return "sandbox exited" + (last_line.empty() ? "" : ": " + last_line);
  }
  if (code == CLD_EXITED) {
    if (status == nsbox::kSetupFailedStatus)
      return "sandbox setup failed: " + (last_line.empty() ? "no message" : last_line);
    if (status == nsbox::kExecFailedStatus && !last_line.empty())
      return "agent exited with status 127: " + last_line;
    // The agent's own account of what died: "chromium killed by signal 9 (Killed)".
    const std::string_view failed = agent_protocol::kAgentFailureLinePrefix;
    if (last_line.rfind(failed, 0) == 0 && last_line.size() > failed.size())
      return last_line.substr(failed.size());
    return "agent exited with status " + std::to_string(status);
  }
  // The launcher's account of a killed agent: "cabin-agent killed by signal 9 (Killed)".
  const std::string_view failed = agent_protocol::kAgentFailureLinePrefix;
  if (last_line.rfind(failed, 0) == 0 && last_line.size() > failed.size())
    return last_line.substr(failed.size());
  return "killed by signal " + std::to_string(status) + " (" + signal_name(status) + ")";
}

NamespaceDriver::NamespaceDriver(NamespaceDriverConfig config, net::any_io_executor executor)
    : config_(std::move(config)), executor_(std::move(executor)), host_root_(::geteuid() == 0) {
  auto log = logger("driver.namespace");
  auto layout = host_root_ ? nsbox::detect_cgroup_layout(config_.cgroup_root) : CgroupLayout::kNone;
  cgroup_layout_ = static_cast<int>(layout);
  if (!host_root_) {
    log->warn("not running as root: sandboxes get no cgroup limits (memory, pids, cpu)");
  } else if (layout == CgroupLayout::kNone) {
    log->warn("no usable cgroups under {}: sandboxes run without limits",
              config_.cgroup_root.string());
  }
  info_ = probe();
  if (info_.available) {
    log->info("namespace driver ready: cgroups {}, run dir {}", nsbox::layout_name(layout),
              config_.run_dir.string());
  } else {
    log->warn("namespace driver unavailable: {}", info_.unavailable_reason);
  }
}

DriverInfo NamespaceDriver::probe() const {
  DriverInfo info;
  info.name = "namespace";
  info.isolation = "namespace";
  info.detail = "shares the host kernel";
  // Paused by the cgroup freezer: v2 has it in every cgroup, v1 as a controller of its own.
  const auto layout = static_cast<CgroupLayout>(cgroup_layout_);
  info.supports_pause =
      layout == CgroupLayout::kV2 ||
      (layout == CgroupLayout::kV1 && fs::exists(config_.cgroup_root / "freezer" / "cgroup.procs"));
  info.supports_egress = true;
  info.supports_profiles = true;
  auto unavailable = [&](std::string why) { return unavailable_driver(info, std::move(why)); };
  if (!executable(config_.launcher_path))
    return unavailable("launcher not executable: " + config_.launcher_path.string());
  if (config_.payload_override.empty() && !executable(config_.agent_path))
    return unavailable("agent not executable: " + config_.agent_path.string());
  if (!host_root_) {
    // The launcher refuses them too; saying so here names the cause.
    auto kept = nsbox::groups_beyond(::getegid(), nsbox::own_groups());
    if (!kept.empty()) return unavailable(nsbox::kept_groups_problem(kept));
  }

  // A dry run builds a whole sandbox (namespaces, mounts, seccomp) and exits 0.
  nsbox::LauncherArgs a;
  a.id = "probe";
  a.probe = true;
  if (host_root_) {
    a.map_root = nsbox::HostIds{config_.sandbox_root_uid, config_.sandbox_root_gid};
    a.map_user = nsbox::HostIds{config_.sandbox_uid, config_.sandbox_gid};
    a.map_exec_uid = config_.sandbox_exec_uid;
  }
  net::io_context io;  // the probe's child is waited for here, before cabind runs
  auto spawned = spawn_launcher(io.get_executor(),
                                nsbox::build_launcher_argv(config_.launcher_path.string(), a), {});
  if (!spawned) return unavailable("cannot start launcher: " + spawned.error().message);
  // Runs once at start-up, before any session: blocking here is fine and bounded.
  spawned->process->wait_blocking(10s);
  const int status = *spawned->process->status();
  std::string out = read_finished_output(spawned->output, 4096);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    info.available = true;
    return info;
  }
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return unavailable("cannot build a namespace sandbox here (user namespaces?): " +
                     (out.empty() ? std::string("launcher failed") : clean_output_line(out, false)));
}

net::awaitable<Result<SandboxPtr>> NamespaceDriver::create(const SandboxSpec& spec) {
  auto log = logger("driver.namespace");
  const std::string& id = spec.session_id;
  CABIN_CO_ASSIGN_OR_RETURN(const fs::path dir, make_sandbox_dir(info_, spec, config_.run_dir));
  std::error_code ec;
  auto agent_sock = listen_agent_socket(dir);
  if (!agent_sock) {
    fs::remove_all(dir, ec);
    co_return agent_sock.error();
  }

  std::vector<fs::path> cgroups;
  std::vector<std::string> procs;
  auto layout = static_cast<CgroupLayout>(cgroup_layout_);
  if (layout != CgroupLayout::kNone) {
    nsbox::CgroupLimits limits;
    limits.memory_bytes = spec.memory_bytes;
    limits.pids_max = spec.pids_max;
    const double cpus = spec.vcpus > 0 ? spec.vcpus : config_.cpus;
    if (cpus > 0)
      limits.cpu_quota_us = static_cast<uint32_t>(std::lround(cpus * limits.cpu_period_us));
    auto made =
        nsbox::create_sandbox_cgroups(layout, config_.cgroup_root, config_.cgroup_name, id, limits);
    if (!made) {
      // Cgroups exist here, so a sandbox without them would be one without limits: refuse.
      fs::remove_all(dir, ec);
      co_return make_error(Errc::kUnavailable, "cgroups_failed",
                           "cannot create the sandbox's cgroups: " + made.error().message);
    }
    cgroups = std::move(made.value());
    for (const auto& d : cgroups) procs.push_back((d / "cgroup.procs").string());
  }

  if (!spec.profile_dir.empty() && host_root_) {
    // The sandbox's user owns its profile: inside, the host's sandbox uid is uid 1000.
    if (auto r = chown_tree(spec.profile_dir, config_.sandbox_uid, config_.sandbox_gid); !r) {
      for (const auto& d : cgroups) (void)nsbox::remove_cgroup(d);
      fs::remove_all(dir, ec);
      co_return r.error();
    }
  }
  auto argv = namespace_launcher_argv(config_, spec, host_root_, procs);
  std::vector<std::string> env = {"CABIN_AGENT_SECRET=" + spec.agent_secret};
  if (!spec.trusted_ca_pem.empty()) env.push_back("CABIN_TRUSTED_CA=" + spec.trusted_ca_pem);
  auto spawned = spawn_launcher(executor_, argv, env, agent_sock->get(), dir / kOutputFifoName);
  agent_sock->reset();  // the agent's alone from here; cabind connects by path
  if (!spawned) {
    for (const auto& d : cgroups) (void)nsbox::remove_cgroup(d);
    fs::remove_all(dir, ec);
    co_return spawned.error();
  }
  auto process = make_process(executor_, config_, std::move(spawned.value()), id, dir,
                              std::move(cgroups));
  process->start();
  // reap_leftovers() finds the launcher of a sandbox that no later cabind adopted through this
  // file, also where there are no cgroups to find it by.
  write_launcher_file(dir, process->pid());
  log->info("[{}] sandbox started: launcher pid {}", id, process->pid());
  co_return SandboxPtr(std::make_unique<NamespaceSandbox>(std::move(process)));
}

bool reapable_run_dir_entry(std::string_view name) {
  // "ses_" and 20 of [a-z0-9], or "ses_<node>_" and 20: a session's dir, of any node.
  if (!name.starts_with(api::kSessionIdPrefix) ||
      name.size() < api::kSessionIdPrefix.size() + api::kSessionIdRandomChars ||
      name.size() > api::kMaxSessionIdChars)
    return false;
  std::string_view rest = name.substr(api::kSessionIdPrefix.size());
  const size_t sep = rest.size() - api::kSessionIdRandomChars;
  if (sep > 0 && (sep == 1 || rest[sep - 1] != '_')) return false;
  for (size_t i = 0; i < rest.size(); ++i) {
    const char c = rest[i];
    if (sep > 0 && i == sep - 1) continue;
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) return false;
  }
  return true;
}

Result<void> check_reapable_run_dir(const fs::path& run_dir) {
  struct stat st {};
  if (::lstat(run_dir.c_str(), &st) != 0) return nsbox::sys_error("lstat " + run_dir.string());
  if (!S_ISDIR(st.st_mode))
    return make_error(Errc::kPermissionDenied, "run_dir_untrusted",
                      run_dir.string() + " is not a directory");
  if (st.st_uid != ::geteuid())
    return make_error(Errc::kPermissionDenied, "run_dir_untrusted",
                      run_dir.string() + " is owned by uid " + std::to_string(st.st_uid) +
                          ", not " + std::to_string(::geteuid()));
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return make_error(Errc::kPermissionDenied, "run_dir_untrusted",
                      run_dir.string() + " is writable by others");
  return {};
}

net::awaitable<Result<SandboxPtr>> NamespaceDriver::adopt(const std::string& id,
                                                          const nlohmann::json& handoff) {
  auto log = logger("driver.namespace");
  if (!info_.available)
    co_return make_error(Errc::kUnavailable, "driver_unavailable", info_.unavailable_reason);
  if (!reapable_run_dir_entry(id))
    co_return make_error(Errc::kInvalidArgument, "invalid_session_id", "not a session id");
  const fs::path dir = config_.run_dir / id;
  const auto [pid, start] = handoff_process(handoff);
  if (pid <= 1 || pid > std::numeric_limits<pid_t>::max())
    co_return make_error(Errc::kNotFound, "process_gone", "no launcher pid was recorded");
  auto child = adopt_host_child(executor_, static_cast<pid_t>(pid), start, dir / kOutputFifoName);
  if (!child) co_return child.error();
  // The cgroups are where create() made them, whatever was recorded.
  std::vector<fs::path> cgroups;
  auto layout = static_cast<CgroupLayout>(cgroup_layout_);
  if (layout != CgroupLayout::kNone) {
    for (auto& d :
         nsbox::sandbox_cgroup_dirs(layout, config_.cgroup_root, config_.cgroup_name, id)) {
      std::error_code ec;
      if (fs::is_directory(d, ec)) cgroups.push_back(std::move(d));
    }
  }
  auto process = make_process(executor_, config_, std::move(*child), id, dir, std::move(cgroups));
  process->start();
  log->info("[{}] sandbox adopted: launcher pid {}", id, process->pid());
  co_return SandboxPtr(std::make_unique<NamespaceSandbox>(std::move(process)));
}

void NamespaceDriver::reap_leftovers(const std::set<std::string>& keep) {
  auto log = logger("driver.namespace");
  // Only session dirs, and only in a run dir that is ours alone: a mistaken --run-dir (a home or
  // a shared dir) loses nothing, and nobody else can plant names to be removed.
  if (auto trusted = check_reapable_run_dir(config_.run_dir); !trusted) {
    std::error_code ec;
    if (fs::exists(config_.run_dir, ec))
      log->warn("not removing leftovers: {}", trusted.error().message);
    return;
  }
  // Launchers first, by the file each run dir keeps: this also finds sandboxes without cgroups.
  size_t killed = 0;
  {
    std::error_code ec;
    for (fs::directory_iterator it(config_.run_dir, ec), end; !ec && it != end; it.increment(ec)) {
      std::error_code ec2;
      const std::string name = it->path().filename().string();
      if (it->is_symlink(ec2) || !it->is_directory(ec2) || !reapable_run_dir_entry(name) ||
          keep.count(name))
        continue;
      killed += kill_recorded_launcher(it->path());
    }
  }
  auto layout = static_cast<CgroupLayout>(cgroup_layout_);
  // Only sandboxes whose run dir is ours: other cabind instances on this host (each with its own
  // run dir) share the cgroup parent and keep their sessions.
  auto dirs = nsbox::leftover_cgroups(layout, config_.cgroup_root, config_.cgroup_name);
  std::erase_if(dirs, [&](const fs::path& d) {
    std::error_code ec;
    const std::string name = d.filename().string();
    return keep.count(name) || !reapable_run_dir_entry(name) ||
           !fs::is_directory(config_.run_dir / name, ec);
  });
  // Start-up only, before any session: a short blocking wait is fine.
  const auto deadline = Clock::now() + 5s;
  for (bool busy = true; busy && Clock::now() < deadline;) {
    busy = false;
    for (const auto& d : dirs) {
      if (nsbox::kill_cgroup(d) > 0) busy = true;
    }
    if (busy) ::usleep(10000);
  }
  for (const auto& d : dirs) {
    Result<void> r = nsbox::remove_cgroup(d);
    while (!r && Clock::now() < deadline) {
      ::usleep(10000);
      r = nsbox::remove_cgroup(d);
    }
    if (!r) log->error("leftover cgroup: {}", r.error().message);
  }
  size_t removed_dirs = 0;
  std::error_code ec;
  for (fs::directory_iterator it(config_.run_dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code ec2;
    const std::string name = it->path().filename().string();
    const bool session_dir =
        !it->is_symlink(ec2) && it->is_directory(ec2) && reapable_run_dir_entry(name);
    if (session_dir && keep.count(name)) continue;
    if (name == kHandoffKeyName && it->is_regular_file(ec2)) continue;  // cabind's, not a sandbox's
    if (!session_dir) {
      log->warn("leaving unexpected entry in run dir: {}", it->path().string());
      continue;
    }
    fs::remove_all(it->path(), ec2);
    if (ec2)
      log->error("remove {}: {}", it->path().string(), ec2.message());
    else
      ++removed_dirs;
  }
  if (!dirs.empty() || removed_dirs || killed)
    log->info("removed leftovers: {} sandboxes killed, {} cgroups, {} run dirs", killed,
              dirs.size(), removed_dirs);
}

}  // namespace cabin::drivers
