// SandboxProcess: the life every driver's sandbox shares. One host process (the namespace
// launcher, or QEMU) whose output is logged and whose exit is watched, and one destroy() that
// stops it, cleans up and removes the run dir, however often and by whomever it is called. A
// driver supplies only how to ask the process to stop, why it ended, and its own extra cleanup.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <chrono>
#include <deque>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/child_process.h"
#include "common/log.h"
#include "common/notifier.h"
#include "common/result.h"
#include "common/unique_fd.h"
#include "server/drivers/sandbox_driver.h"

namespace cabin::drivers {

namespace net = boost::asio;

// A started host process and the read end of its stdout and stderr (one pipe).
struct HostChild {
  std::unique_ptr<ChildProcess> process;
  UniqueFd output;
};

struct HostSpawn {
  std::vector<std::string> argv;  // argv[0] is the path run
  std::vector<std::string> env;   // the child's whole environment
  std::filesystem::path cwd;      // empty: cabind's
  int pass_fd = -1;               // if >= 0: given to the child as fd 3
  // Non-empty: the output goes through a FIFO made at this path rather than a pipe, so that a
  // later cabind can read a sandbox that outlived this one (open_output_fifo).
  std::filesystem::path output_fifo;
};

// stdin /dev/null, stdout and stderr on one pipe (or FIFO); otherwise as ChildProcess::spawn. A
// start-up probe without an io_context passes a local one's executor.
Result<HostChild> spawn_host_child(net::any_io_executor ex, const HostSpawn& s);

// The FIFO in a sandbox's run dir that its host process writes its output to (the launcher's and
// everything in the sandbox, or QEMU's guest console).
inline constexpr char kOutputFifoName[] = "output";

// The read end of an adopted sandbox's output FIFO. While no cabind reads it, its writers get
// EPIPE (they ignore SIGPIPE) and lose those lines; once it is open again their output flows.
Result<UniqueFd> open_output_fifo(const std::filesystem::path& path);

// The pid and start ticks a handoff() recorded as {"pid", "start"}; zeros where missing.
std::pair<int64_t, uint64_t> handoff_process(const nlohmann::json& handoff);

// A process an earlier cabind started (ChildProcess::adopt) with its output FIFO.
Result<HostChild> adopt_host_child(net::any_io_executor ex, pid_t pid, uint64_t start_ticks,
                                   const std::filesystem::path& output_fifo);

// Reads what a finished child printed, at most `limit` bytes; for start-up probes.
std::string read_finished_output(const UniqueFd& output, size_t limit);

// What every driver's create() checks first, then the sandbox's own run dir under `run_root`
// (mode 0700): kUnavailable from a driver that cannot run here, kInvalidArgument for an id that
// is unsafe in paths, kConflict for a dir left by an earlier sandbox of that id.
Result<std::filesystem::path> make_sandbox_dir(const DriverInfo& info, const SandboxSpec& spec,
                                               const std::filesystem::path& run_root);

// A driver's info when it cannot run here, and why.
DriverInfo unavailable_driver(DriverInfo info, std::string why);

bool executable(const std::filesystem::path& p);

// A new file of cabind's alone (mode 0600; an existing file or a link is refused) holding `data`.
Result<void> write_private_file(const std::filesystem::path& path, std::string_view data);

// "SIGKILL" for 9; the number where the signal has no name.
std::string signal_name(int sig);

// A wait status as waitid() reports it: {CLD_EXITED, status} or {CLD_KILLED, signal}; code 0
// when it is not known (an adopted process, whose parent was not us).
struct ExitCode {
  int code;
  int status;
};
ExitCode exit_code_of(int wait_status);

// Bounds on what a child may make cabind log: it is hostile.
constexpr size_t kMaxLogLine = 2048;
constexpr size_t kMaxLogLines = 10000;
constexpr size_t kMaxTailLines = 500;

// The first kMaxLogLine bytes of `raw`, control characters (not tabs) as '?'.
std::string clean_output_line(std::string_view raw, bool strip_cr);

struct SandboxProcessConfig {
  std::string logger;                            // "driver.namespace"
  std::string id;                                // the session id, in every log line
  std::string source;                            // names the output in the log: "[ID] SOURCE: LINE"
  std::string what;                              // names the process in the log: "launcher", "qemu"
  bool strip_cr = false;                         // drop trailing '\r's (a serial console's)
  std::filesystem::path run_dir;                 // removed by destroy(), once the process is dead
  std::chrono::milliseconds stop_timeout{2000};  // from ask_to_stop() to SIGKILL
};

class SandboxProcess : public std::enable_shared_from_this<SandboxProcess> {
 public:
  SandboxProcess(net::any_io_executor ex, HostChild child, SandboxProcessConfig config);
  SandboxProcess(const SandboxProcess&) = delete;
  SandboxProcess& operator=(const SandboxProcess&) = delete;
  virtual ~SandboxProcess() = default;

  // Starts logging the output and watching for the exit; once, right after make_shared.
  void start();

  const std::string& id() const { return config_.id; }
  pid_t pid() const { return child_->pid(); }
  const std::filesystem::path& run_dir() const { return config_.run_dir; }
  const net::any_io_executor& executor() const { return executor_; }
  spdlog::logger& log() const { return *log_; }

  bool exited() const { return exited_; }
  // Exited, or being destroyed: nothing new may be started in it.
  bool ended() const { return exited_ || destroy_started_; }
  // kUnavailable "sandbox_ended" once ended().
  Result<void> check_live() const;
  const std::string& last_line() const { return last_line_; }
  std::vector<std::string> recent_output() const { return {tail_.begin(), tail_.end()}; }

  // Idempotent: the first call stops the process (ask_to_stop(), then SIGKILL after the stop
  // timeout), runs clean_up() and removes the run dir; later and concurrent calls wait for it.
  net::awaitable<void> destroy();
  // For a Sandbox dropped without destroy(): destroys in the background.
  void destroy_in_background();
  // Completes when the process ended; says why ("destroyed" when destroy() ended it).
  net::awaitable<std::string> wait_exit();
  // True once the process has exited, false when `timeout` passed first.
  net::awaitable<bool> wait_exited(std::chrono::milliseconds timeout);
  // True once the output pipe is drained, false when `timeout` passed first.
  net::awaitable<bool> wait_output_done(std::chrono::milliseconds timeout);
  // A process that ended while the driver was still starting it: there is nothing to destroy,
  // and the run dir stays the driver's (to retry in, or to remove).
  void disown();
  // Leaves the process and its run dir for the next cabind: nothing is stopped or removed when
  // the last reference goes.
  void release();
  bool adopted() const { return child_->adopted(); }

 protected:
  ChildProcess& process() { return *child_; }
  // Why the process ended by itself: from its exit and the output's last line.
  virtual std::string exit_reason(ExitCode exit) = 0;
  // Asks the process to stop; destroy() SIGKILLs it if it has not exited by the stop timeout.
  virtual net::awaitable<void> ask_to_stop() = 0;
  // After the process is gone, before the run dir is removed: what else of the sandbox is left.
  virtual net::awaitable<void> clean_up() { co_return; }
  // Each line of output, as it is logged.
  virtual void on_output_line(const std::string& line) { (void)line; }

 private:
  static net::awaitable<void> pump_output(std::shared_ptr<SandboxProcess> self);
  static net::awaitable<void> watch_exit(std::shared_ptr<SandboxProcess> self);
  net::awaitable<bool> wait_for(std::chrono::milliseconds timeout, const bool& flag);

  net::any_io_executor executor_;
  SandboxProcessConfig config_;
  std::shared_ptr<spdlog::logger> log_;
  std::unique_ptr<ChildProcess> child_;
  net::posix::stream_descriptor output_;
  Notifier changed_;  // on exit, on the output's end, when destroy() is done

  bool exited_ = false;
  bool output_done_ = false;
  bool destroy_started_ = false;
  bool destroy_done_ = false;
  bool released_ = false;
  std::string reason_;
  std::string last_line_;
  size_t lines_logged_ = 0;
  std::deque<std::string> tail_;  // the newest lines, for GET /v1/sessions/{id}/logs
};

// The Sandbox methods that are the same for every driver; a driver's sandbox derives from it
// with its own SandboxProcess type.
template <class Process>
class ProcessSandbox : public Sandbox {
 public:
  explicit ProcessSandbox(std::shared_ptr<Process> p) : p_(std::move(p)) {}
  ProcessSandbox(const ProcessSandbox&) = delete;
  ProcessSandbox& operator=(const ProcessSandbox&) = delete;
  ~ProcessSandbox() override {
    if (p_) p_->destroy_in_background();
  }

  net::awaitable<void> destroy() override { co_await p_->destroy(); }
  void release() override { p_->release(); }
  net::awaitable<std::string> wait_exit() override { co_return co_await p_->wait_exit(); }
  std::vector<std::string> recent_output() const override { return p_->recent_output(); }

 protected:
  std::shared_ptr<Process> p_;
};

}  // namespace cabin::drivers
