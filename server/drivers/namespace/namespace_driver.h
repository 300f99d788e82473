// NamespaceDriver: sandboxes built from Linux namespaces, cgroups and seccomp by the cabin-sandbox
// launcher.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

#include "server/drivers/sandbox_driver.h"

namespace cabin::drivers {

struct NamespaceDriverConfig {
  // Host dir for per-session dirs: <run_dir>/<id>/ holds agent.sock, which cabind binds and hands
  // the agent as a listening descriptor; the sandbox never sees the dir. cabind reaches the socket
  // through a descriptor, so the path's length is not limited.
  std::filesystem::path run_dir = "/run/cabin";
  std::filesystem::path agent_path;     // host path of cabin-agent
  // Chromium's managed policy for sandboxes with egress (vm-images/chromium-policy.json); empty:
  // none.
  std::filesystem::path chromium_policy;
  std::filesystem::path launcher_path;  // host path of cabin-sandbox
  // When cabind runs as root: the host ids of the sandbox user (uid 1000 inside), of exec'd
  // commands (uid 1001 inside, group 1000's) and of the sandbox's root (only PID 1 uses it, while
  // it builds the sandbox). All must be unused on the host and distinct. Without root the sandbox
  // user is cabind's own uid, and commands run as it too.
  uint32_t sandbox_uid = 601000;
  uint32_t sandbox_gid = 601000;
  uint32_t sandbox_exec_uid = 601001;
  uint32_t sandbox_root_uid = 600000;
  uint32_t sandbox_root_gid = 600000;
  std::string cgroup_name = "cabin";  // sandboxes live in <cgroup_root>/[controller/]<name>/<id>
  std::filesystem::path cgroup_root = "/sys/fs/cgroup";
  // The cgroup namespace the launcher enters before joining its cgroups (nsbox::foreign_cgroup_ns);
  // empty: cabind's.
  std::string cgroup_ns;
  // Passed to cabin-agent --chromium-sandbox. Chromium's own (user namespace) sandbox was checked
  // to work nested inside this one, so it stays on.
  std::string chromium_sandbox = "on";
  double cpus = 0;  // cpu quota in CPUs; 0: none
  // destroy(): how long the launcher gets to kill and reap the sandbox before SIGKILL.
  std::chrono::milliseconds stop_timeout{2000};
  // Tests only: the argv run inside the sandbox instead of cabin-agent.
  std::vector<std::string> payload_override;
};

// The launcher argv create() uses (pure; `host_root` says whether cabind runs as root).
std::vector<std::string> namespace_launcher_argv(const NamespaceDriverConfig& config,
                                                 const SandboxSpec& spec, bool host_root,
                                                 const std::vector<std::string>& cgroup_procs);

// "agent exited with status 1", "killed by signal 9 (SIGKILL)", "sandbox setup failed: ..." from
// a waitid() si_code and si_status and the last line the launcher wrote to stderr.
std::string namespace_exit_reason(int code, int status, const std::string& last_line);

// reap_leftovers() removes only these run dir entries: session ids (ses_ and 20 of [a-z0-9]).
bool reapable_run_dir_entry(std::string_view name);
// And only in a run dir that is a real directory owned by our euid, writable by nobody else.
Result<void> check_reapable_run_dir(const std::filesystem::path& run_dir);

// Requires a single-threaded executor (cabind runs one io_context thread): sandbox state is not
// locked.
class NamespaceDriver final : public SandboxDriver {
 public:
  NamespaceDriver(NamespaceDriverConfig config, net::any_io_executor executor);

  DriverInfo info() const override { return info_; }
  net::awaitable<Result<SandboxPtr>> create(const SandboxSpec& spec) override;
  net::awaitable<Result<SandboxPtr>> adopt(const std::string& session_id,
                                           const nlohmann::json& handoff) override;
  void reap_leftovers(const std::set<std::string>& keep) override;

 private:
  DriverInfo probe() const;

  NamespaceDriverConfig config_;
  net::any_io_executor executor_;
  bool host_root_;
  int cgroup_layout_;  // nsbox::CgroupLayout, kept out of this header
  DriverInfo info_;
};

}  // namespace cabin::drivers
