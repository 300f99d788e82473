// ServerConfig: cabind's configuration from flags, environment (CABIN_*) and an optional file.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"

namespace cabin {

struct ServerConfig {
  std::string listen_host = "127.0.0.1";
  uint16_t listen_port = 8080;
  // A second, plain-HTTP address that serves GET /metrics without the key; empty host: none.
  std::string metrics_host;
  uint16_t metrics_port = 0;
  std::filesystem::path state_dir;
  std::filesystem::path run_dir;
  std::filesystem::path profile_key_file;  // empty: <state_dir>/profile.key
  // The cgroup hierarchy sandboxes and QEMUs are placed in (a container mounts the host's here).
  std::filesystem::path cgroup_root = "/sys/fs/cgroup";
  std::string public_url;  // e.g. "https://cabin.example.com"; empty: from the Host header
  // One node of several behind cabin-gateway: its id is in every session id (docs/scale-out.md).
  std::string node_id;
  // Token signing keys; empty: <state-dir>/keys. Re-read when its files change.
  std::filesystem::path token_key_dir;
  // Tenant keys kept in a file (shared by the nodes behind a gateway); re-read when it changes.
  std::filesystem::path tenant_keys_file;
  std::string default_driver = "namespace";
  int max_sessions = 16;
  // Creates that find no room wait for it, oldest first: this many at most (0: none wait),
  // each this long at most; then 503 capacity.
  int create_queue = 16;
  std::vector<std::string> pools;  // --pool DRIVER:WIDTHxHEIGHT:COUNT
  int64_t create_queue_timeout_s = 30;
  int start_timeout_ms = 30000;             // namespace sessions
  int microvm_start_timeout_ms = 180000;    // microVMs boot a kernel, under TCG slowly
  int microvm_max_sessions = 4;             // each holds its guest memory on the host
  std::filesystem::path microvm_image_dir;  // empty: <bin-dir>/../vm-image
  std::string microvm_accel = "auto";       // auto | kvm | tcg
  int microvm_vcpus = 2;
  // on: microVM sessions are copies of a template VM per shape, booted once and snapshotted.
  std::string microvm_templates = "on";
  // Adds the "sim" driver: sessions without a sandbox or a browser, to measure the server itself.
  bool sim_driver = false;
  int64_t default_timeout_s = 3600;
  int64_t max_timeout_s = 86400;
  int64_t default_idle_timeout_s = 300;  // 0: sessions are never idle unless they ask
  // On SIGTERM: "keep" leaves running sessions to the next cabind; "delete" ends them all.
  std::string on_shutdown = "keep";
  int64_t shutdown_timeout_s = 25;  // SIGTERM until exit, at most
  int64_t cdp_token_ttl_s = 3600;
  int64_t max_token_ttl_s = 86400;  // POST /tokens and previews: the longest ttl_s allowed
  bool rotate_token_key = false;    // write a new signing key at start (old ones keep verifying)
  // TLS: both set, or tls_self_signed (a pair generated into <state-dir>/tls on first use).
  std::filesystem::path tls_cert;
  std::filesystem::path tls_key;
  bool tls_self_signed = false;
  bool allow_plain_http = false;  // plain HTTP beyond loopback
  // Host-based previews: https://p-<port>-<session>.<preview_domain>/; empty: path-based only.
  std::string preview_domain;
  // How long a preview's app may take to start answering a request (then 504).
  int64_t preview_answer_timeout_s = 60;
  // Client connections open at once, in all and from one address; 0: derived from the
  // descriptor limit (RLIMIT_NOFILE), which cabind raises to its hard limit at start.
  int max_connections = 0;
  int max_connections_per_peer = 256;
  // Threads that carry the byte pumps (CDP, RFB, preview WebSockets); 0: one per core.
  int threads = 0;
  // Token-authenticated long-lived connections (CDP, VNC, frames, previews) per session.
  int max_token_connections_per_session = 256;
  // The largest file PUT /files takes, in MiB.
  uint64_t max_upload_mb = 512;
  // A recording's stop and copy out of its sandbox end within this; then it is kept as failed.
  int64_t recording_copy_timeout_s = 300;
  // What ended sessions left in the state dir (logs, recordings) is removed after this many
  // hours (0: kept), and the oldest first while it all takes more than retention_max_mb (0: any).
  int64_t retention_hours = 168;
  uint64_t retention_max_mb = 20480;
  // Creates are refused while the state dir's file system has less than this free (0: never).
  uint64_t state_min_free_mb = 1024;
  bool tls() const { return !tls_cert.empty() || tls_self_signed; }
  uint64_t sandbox_memory_mb = 2048;
  // What one session may ask for (resources); 0 until parsed: the host's memory and CPUs.
  uint64_t max_sandbox_memory_mb = 0;
  int max_sandbox_vcpus = 0;
  // The memory limits of all sessions together stay within this share of the host's memory.
  int sessions_memory_percent = 100;
  int sandbox_pids_max = 2048;
  // CPUs one namespace sandbox may use (cpu.max) unless its session asks for vcpus; 0: no limit.
  // The default, the host's CPUs less one (at least one), leaves cabind a CPU to answer on.
  double sandbox_cpus = 1;
  std::string chromium_sandbox = "auto";  // auto | on | off
  std::filesystem::path bin_dir;          // where cabin-agent and cabin-sandbox live
  std::filesystem::path web_ui_dir;       // built web UI; empty: <bin-dir>/../web-ui
  std::string log_level = "info";
  std::string log_format = "text";  // or json: one object per line
  // Egress. What a session whose spec names no policy gets: "none" or "open".
  std::string default_network = "none";
  std::string egress_dns;                       // IP:PORT; empty: /etc/resolv.conf's servers
  std::vector<std::string> egress_resolve;      // NAME=IP: answered without DNS
  std::vector<std::string> egress_allow_cidrs;  // opened despite the always-denied set
  std::vector<std::string> egress_allow_host_cidrs;  // the host's own addresses, metadata
  std::string egress_upstream_proxy;            // http:// or socks5:// URL; empty: none
  std::filesystem::path extra_ca_file;          // a CA sandboxes and the proxy's own TLS trust too
};

// `cabind vnc-forward SESSION`'s flags.
struct VncForwardConfig {
  std::string session;
  std::string server = "http://127.0.0.1:8080";
  std::string ca_file;  // empty: the system's trusted certificates
  int port = 5900;      // on 127.0.0.1; 0: any free one
  std::string log_level = "info";
};

// A parsed command line, or, when the program should exit instead (`exit`), its status (help:
// 0, bad flags: 2) and the help or diagnostic to print.
template <typename Config>
struct Parsed {
  Config config;
  bool exit = false;
  int exit_code = 0;
  std::string message;
};
using ParsedConfig = Parsed<ServerConfig>;

// Both parsers live here, the one file that compiles CLI11.
ParsedConfig parse_config(int argc, char** argv);
// argv[0] is "vnc-forward".
Parsed<VncForwardConfig> parse_vnc_forward_config(int argc, char** argv);

// Where per-session sockets live unless --run-dir says: /run/cabin as root; otherwise
// $XDG_RUNTIME_DIR/cabin when that is an absolute path, else <state_dir>/run.
std::filesystem::path default_run_dir(uid_t euid, const char* xdg_runtime_dir,
                                      const std::filesystem::path& state_dir);

// Creates `dir` (mode 0700) if missing; then checks, without following a symlink, that it is a
// directory owned by our euid with mode 0700. Anything else is refused with a message that says
// what to fix: whoever else owns or can write it could swap session dirs and sockets.
Result<void> ensure_private_dir(const std::filesystem::path& dir);

// Holds an exclusive lock (flock) on `<dir>/cabind.lock`, with our pid in it, for as long as the
// descriptor is open: two servers on one run dir kill each other's sandboxes, two on one state
// dir share a store. `flag` names the option that chose `dir`, for the refusal's message. The
// descriptor is close-on-exec, so a sandbox that outlives cabind does not keep the lock.
Result<UniqueFd> lock_dir(const std::filesystem::path& dir, std::string_view flag);

// The host's CPUs (this process's affinity) less one, at least one.
double default_sandbox_cpus();
// The host's CPUs (this process's affinity), at least one.
int host_cpus();
// The host's memory (MemTotal of /proc/meminfo) in MiB; 0 if unknown.
uint64_t host_memory_mb();

}  // namespace cabin
