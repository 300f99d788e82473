#include "server/config.h"

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <fcntl.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>

#include "server/api/ids.h"
#include "server/egress/host.h"
#include "server/egress/proxy_request.h"
#include "server/egress/upstream.h"

namespace cabin {
namespace {

// Runs `app` on argv; false, with `out` saying what to print and the exit status, when the
// program should exit instead (help, bad flags).
template <typename Config>
bool parse_args(CLI::App& app, int argc, char** argv, Parsed<Config>& out) {
  try {
    app.parse(argc, argv);
    return true;
  } catch (const CLI::ParseError& e) {
    out.exit = true;
    out.exit_code = e.get_exit_code();
    out.message = e.get_exit_code() == 0 ? app.help() : std::string(e.what());
    return false;
  }
}

std::filesystem::path default_state_dir() {
  if (geteuid() == 0) return "/var/lib/cabin";
  const char* home = getenv("HOME");
  return std::filesystem::path(home ? home : "/tmp") / ".cabin";
}


std::filesystem::path self_dir() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path(".") : exe.parent_path();
}

bool split_listen(const std::string& s, std::string& host, uint16_t& port) {
  size_t colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  host = s.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  std::string p = s.substr(colon + 1);
  unsigned v = 0;
  auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), v);
  if (ec != std::errc() || end != p.data() + p.size() || v > 65535) return false;
  port = static_cast<uint16_t>(v);
  return true;
}

}  // namespace

std::filesystem::path default_run_dir(uid_t euid, const char* xdg_runtime_dir,
                                      const std::filesystem::path& state_dir) {
  if (euid == 0) return "/run/cabin";
  // Never a fixed name in a world-writable dir, which another local user could create first.
  if (xdg_runtime_dir && xdg_runtime_dir[0] == '/')
    return std::filesystem::path(xdg_runtime_dir) / "cabin";
  return state_dir / "run";
}

Result<void> ensure_private_dir(const std::filesystem::path& dir) {
  auto refuse = [&](const std::string& why) {
    return make_error(Errc::kPermissionDenied, "dir_not_private",
                      dir.string() + " " + why + ": it must be a directory owned by uid " +
                          std::to_string(geteuid()) +
                          " with mode 0700 (fix it with chown and chmod 700, or choose another)");
  };
  std::error_code ec;
  if (dir.has_parent_path()) std::filesystem::create_directories(dir.parent_path(), ec);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return make_error(Errc::kInternal, "mkdir_failed",
                      "cannot create " + dir.string() + ": " + std::strerror(errno));
  int fd;
  do {
    fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    if (errno == ELOOP || errno == ENOTDIR) return refuse("is a symlink or not a directory");
    return make_error(Errc::kInternal, "open_failed",
                      "cannot open " + dir.string() + ": " + std::strerror(errno));
  }
  struct stat st {};
  const int rc = ::fstat(fd, &st);
  ::close(fd);
  if (rc != 0)
    return make_error(Errc::kInternal, "stat_failed", "stat " + dir.string() + ": " +
                                                          std::strerror(errno));
  if (st.st_uid != geteuid()) return refuse("is owned by uid " + std::to_string(st.st_uid));
  if ((st.st_mode & 07777) != 0700) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return refuse(std::string("has mode ") + mode);
  }
  return {};
}

Result<UniqueFd> lock_dir(const std::filesystem::path& dir, std::string_view flag) {
  const auto path = dir / "cabind.lock";
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd.valid())
    return make_error(Errc::kInternal, "open_failed",
                      "cannot open " + path.string() + ": " + std::strerror(errno));
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK)
      return make_error(Errc::kInternal, "lock_failed",
                        "cannot lock " + path.string() + ": " + std::strerror(errno));
    char buf[32] = {};
    const ssize_t n = ::pread(fd.get(), buf, sizeof buf - 1, 0);
    std::string pid = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
    pid.erase(std::remove_if(pid.begin(), pid.end(), [](char c) { return !std::isdigit(c); }),
              pid.end());
    return make_error(Errc::kConflict, "dir_in_use",
                      std::string(flag) + " " + dir.string() + " is in use by another cabind" +
                          (pid.empty() ? "" : " (pid " + pid + ")") +
                          ": each server needs its own --run-dir and --state-dir (stop that one, "
                          "or start this one with other directories)");
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd.get(), 0) != 0 ||
      ::pwrite(fd.get(), pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size()))
    return make_error(Errc::kInternal, "write_failed",
                      "cannot write " + path.string() + ": " + std::strerror(errno));
  return fd;
}

int host_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  const int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  return std::max(cpus, 1);
}

double default_sandbox_cpus() {
  const int cpus = host_cpus();
  return cpus > 1 ? cpus - 1 : 1;
}

uint64_t host_memory_mb() {
  std::FILE* f = std::fopen("/proc/meminfo", "re");
  if (!f) return 0;
  unsigned long long kib = 0;
  char line[256];
  while (std::fgets(line, sizeof line, f)) {
    if (std::sscanf(line, "MemTotal: %llu kB", &kib) == 1) break;
  }
  std::fclose(f);
  return kib / 1024;
}

ParsedConfig parse_config(int argc, char** argv) {
  ParsedConfig out;
  ServerConfig& c = out.config;
  c.state_dir = default_state_dir();
  c.bin_dir = self_dir();
  c.sandbox_cpus = default_sandbox_cpus();

  CLI::App app{"cabind: browser and computer-use sandboxes behind one authenticated server"};
  app.footer("Subcommands:\n  cabind vnc-forward SESSION [--port P] [--server URL]\n"
             "      a local port for a native VNC client (cabind vnc-forward --help)");
  app.set_config("--config", "", "read options from a TOML or INI file");
  std::string listen = "127.0.0.1:8080";
  std::string state_dir = c.state_dir.string(), run_dir;
  std::string bin_dir = c.bin_dir.string();
  app.add_option("--listen", listen, "HOST:PORT to listen on (port 0 picks one)")
      ->envname("CABIN_LISTEN")->capture_default_str();
  std::string metrics_listen;
  app.add_option("--metrics-listen", metrics_listen,
                 "HOST:PORT of a plain-HTTP listener that serves only GET /metrics, without the "
                 "API key (for a Prometheus on the operator's network); default: none")
      ->envname("CABIN_METRICS_LISTEN");
  app.add_option("--state-dir", state_dir, "database, keys and per-session files")
      ->envname("CABIN_STATE_DIR")->capture_default_str();
  app.add_option("--run-dir", run_dir,
                 "directory for per-session sockets, owned by cabind's uid with mode 0700 "
                 "(default: /run/cabin as root, else $XDG_RUNTIME_DIR/cabin or <state-dir>/run)")
      ->envname("CABIN_RUN_DIR");
  std::string profile_key_file;
  app.add_option("--profile-key-file", profile_key_file,
                 "the key saved profiles are sealed with (made on first start); keep it off the "
                 "state dir (a separate mount, a KMS-provided file) so that a copy or backup of "
                 "the state dir does not carry it (default: <state-dir>/profile.key)")
      ->envname("CABIN_PROFILE_KEY_FILE");
  std::string cgroup_root;
  app.add_option("--cgroup-root", cgroup_root,
                 "the cgroup file system sandboxes and QEMUs get their cgroups in, out of "
                 "cabind's own; in a container, the host's /sys/fs/cgroup mounted somewhere, so "
                 "that sessions outlive the container (default: /sys/fs/cgroup)")
      ->envname("CABIN_CGROUP_ROOT");
  app.add_option("--public-url", c.public_url, "base URL clients reach cabind by")
      ->envname("CABIN_PUBLIC_URL");
  app.add_option("--node-id", c.node_id,
                 "this cabind's id among the nodes behind cabin-gateway ([a-z0-9], at most 16): "
                 "every session id it makes carries it; default: none (a single server)")
      ->envname("CABIN_NODE_ID");
  app.add_flag("--sim-driver", c.sim_driver,
               "add the driver \"sim\": sessions without any sandbox or browser (nothing runs; "
               "exec echoes its argv), for benchmarks of the server itself")
      ->envname("CABIN_SIM_DRIVER");
  std::string tenant_keys_file;
  app.add_option("--tenant-keys-file", tenant_keys_file,
                 "JSON file of tenant keys besides those minted here ({\"keys\": [{\"id\", \"name\", "
                 "\"secret_sha256\", \"max_sessions\", \"max_creates_per_minute\"}]}), shared by the "
                 "nodes behind a gateway; re-read when it changes")
      ->envname("CABIN_TENANT_KEYS_FILE");
  std::string token_key_dir;
  app.add_option("--token-key-dir", token_key_dir,
                 "directory of token signing keys (token-<id>.key), shared by the nodes behind "
                 "a gateway; re-read when its files change (default: <state-dir>/keys)")
      ->envname("CABIN_TOKEN_KEY_DIR");
  app.add_option("--default-driver", c.default_driver, "driver when a session names none")
      ->envname("CABIN_DEFAULT_DRIVER")->capture_default_str();
  app.add_option("--max-sessions", c.max_sessions, "live sessions at most")
      ->envname("CABIN_MAX_SESSIONS")->check(CLI::Range(1, 10000))->capture_default_str();
  app.add_option("--create-queue", c.create_queue,
                 "creates that find no room wait for it, oldest first: this many at most (0: none "
                 "wait; they are refused at once with 503 capacity)")
      ->envname("CABIN_CREATE_QUEUE")->check(CLI::Range(0, 10000))->capture_default_str();
  app.add_option("--create-queue-timeout-s", c.create_queue_timeout_s,
                 "how long a create waits for room before it is refused with 503 capacity")
      ->envname("CABIN_CREATE_QUEUE_TIMEOUT_S")
      ->check(CLI::Range(int64_t{1}, int64_t{3600}))
      ->capture_default_str();
  app.add_option("--pool", c.pools,
                 "DRIVER:WIDTHxHEIGHT:COUNT (repeatable): keep COUNT sandboxes of that driver and "
                 "screen size started, their browser ready, for creates that ask for no more "
                 "(default resources); e.g. namespace:1280x800:2")
      ->envname("CABIN_POOL");
  app.add_option("--start-timeout-ms", c.start_timeout_ms, "how long a sandbox may take to be ready")
      ->check(CLI::Range(1000, 600000))->capture_default_str();
  app.add_option("--microvm-start-timeout-ms", c.microvm_start_timeout_ms,
                 "how long a microVM may take to be ready")
      ->check(CLI::Range(1000, 600000))->capture_default_str();
  app.add_option("--microvm-max-sessions", c.microvm_max_sessions, "live microVM sessions at most")
      ->check(CLI::Range(0, 1000))->capture_default_str();
  std::string image_dir;
  app.add_option("--microvm-image-dir", image_dir,
                 "guest image from vm-images/build-image (default <bin-dir>/../vm-image)")
      ->envname("CABIN_MICROVM_IMAGE_DIR");
  app.add_option("--microvm-accel", c.microvm_accel,
                 "auto: KVM if a vCPU really runs, else TCG; kvm: KVM or unavailable; tcg")
      ->check(CLI::IsMember({"auto", "kvm", "tcg"}))->capture_default_str();
  app.add_option("--microvm-vcpus", c.microvm_vcpus, "default vCPUs per microVM")
      ->check(CLI::Range(1, 16))->capture_default_str();
  app.add_option("--microvm-templates", c.microvm_templates,
                 "on: the first microVM of each shape (screen, vCPUs, memory) boots a template VM "
                 "to a ready browser and snapshots it; every microVM of that shape is then a "
                 "copy-on-write copy of it, made its own machine; off: every microVM boots")
      ->check(CLI::IsMember({"on", "off"}))->capture_default_str();
  app.add_option("--default-timeout-s", c.default_timeout_s, "session lifetime when none is asked")
      ->check(CLI::Range(int64_t{1}, int64_t{31} * 86400))->capture_default_str();
  app.add_option("--max-timeout-s", c.max_timeout_s, "longest session lifetime allowed")
      ->check(CLI::Range(int64_t{1}, int64_t{31} * 86400))->capture_default_str();
  app.add_option("--default-idle-timeout-s", c.default_idle_timeout_s,
                 "a session with no client, viewer or request for this long ends (0: never)")
      ->check(CLI::Range(int64_t{0}, int64_t{31} * 86400))
      ->capture_default_str();
  app.add_option("--on-shutdown", c.on_shutdown,
                 "on SIGTERM, keep: running sessions outlive cabind and the next one adopts them; "
                 "delete: end every session")
      ->envname("CABIN_ON_SHUTDOWN")
      ->check(CLI::IsMember({"keep", "delete"}))
      ->capture_default_str();
  app.add_option("--shutdown-timeout-s", c.shutdown_timeout_s,
                 "on SIGTERM, exit within this many seconds")
      ->check(CLI::Range(int64_t{1}, int64_t{3600}))
      ->capture_default_str();
  app.add_option("--cdp-token-ttl-s", c.cdp_token_ttl_s, "lifetime of cdp_url tokens")
      ->check(CLI::Range(int64_t{10}, int64_t{86400}))->capture_default_str();
  app.add_option("--max-token-ttl-s", c.max_token_ttl_s,
                 "longest lifetime of a minted token or a preview")
      ->check(CLI::Range(int64_t{10}, int64_t{31} * 86400))->capture_default_str();
  app.add_flag("--rotate-token-key", c.rotate_token_key,
               "add a new token signing key to <state-dir>/keys before starting; older keys keep "
               "verifying until their files are removed");
  std::string tls_cert, tls_key;
  app.add_option("--tls-cert", tls_cert, "PEM certificate chain: serve HTTPS")
      ->envname("CABIN_TLS_CERT");
  app.add_option("--tls-key", tls_key, "PEM private key of --tls-cert")->envname("CABIN_TLS_KEY");
  app.add_flag("--tls-self-signed", c.tls_self_signed,
               "serve HTTPS with a self-signed pair kept in <state-dir>/tls (development)");
  app.add_flag("--allow-plain-http", c.allow_plain_http,
               "allow plain HTTP on a non-loopback listener (behind a TLS-terminating proxy)");
  app.add_option("--preview-domain", c.preview_domain,
                 "wildcard domain for host-based previews (p-<port>-<session>.<domain>)")
      ->envname("CABIN_PREVIEW_DOMAIN");
  app.add_option("--preview-answer-timeout-s", c.preview_answer_timeout_s,
                 "how long a preview's app may take to start answering a request (then 504), and a "
                 "client's request body may stall (then its connection closes)")
      ->check(CLI::Range(int64_t{1}, int64_t{86400}))
      ->capture_default_str();
  app.add_option("--max-connections", c.max_connections,
                 "client connections open at once (default: a quarter of the descriptor limit, "
                 "at most 16384)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-connections-per-peer", c.max_connections_per_peer,
                 "client connections open at once from one address")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--threads", c.threads,
                 "threads that carry the byte pumps of CDP, VNC and preview WebSockets over plain "
                 "TCP, beside the one that runs everything else (default: one per core)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--max-token-connections-per-session", c.max_token_connections_per_session,
                 "CDP, VNC, frame and preview connections a session's tokens may hold open")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--max-upload-mb", c.max_upload_mb,
                 "the largest file an upload into a sandbox may be (the sandbox's disk limits it "
                 "too)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 30))->capture_default_str();
  app.add_option("--recording-copy-timeout-s", c.recording_copy_timeout_s,
                 "a recording's stop and copy out of its sandbox end within this, a session's end "
                 "waits for its recordings no longer, and a copy that gets no bytes for 30 s (or "
                 "this, if less) stops; the recording is then kept as failed")
      ->envname("CABIN_RECORDING_COPY_TIMEOUT_S")
      ->check(CLI::Range(int64_t{1}, int64_t{3600}))
      ->capture_default_str();
  app.add_option("--sandbox-memory-mb", c.sandbox_memory_mb, "memory limit per sandbox")
      ->check(CLI::Range(uint64_t{256}, uint64_t{1} << 20))->capture_default_str();
  app.add_option("--retention-hours", c.retention_hours,
                 "what ended sessions left in the state dir (their logs, network logs and "
                 "recordings) is removed this many hours after its last write (0: kept)")
      ->envname("CABIN_RETENTION_HOURS")
      ->check(CLI::Range(int64_t{0}, int64_t{100} * 365 * 24))
      ->capture_default_str();
  app.add_option("--retention-max-mb", c.retention_max_mb,
                 "and the oldest of it is removed first while it all takes more than this (0: "
                 "any size)")
      ->envname("CABIN_RETENTION_MAX_MB")
      ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--state-min-free-mb", c.state_min_free_mb,
                 "creates are refused (503 state_disk_full) while the state dir's file system has "
                 "less than this free (0: never)")
      ->envname("CABIN_STATE_MIN_FREE_MB")
      ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--max-sandbox-memory-mb", c.max_sandbox_memory_mb,
                 "the most memory one session may ask for (resources.memory_mb; more is 400); "
                 "default: the host's memory")
      ->envname("CABIN_MAX_SANDBOX_MEMORY_MB")
      ->check(CLI::Range(uint64_t{512}, uint64_t{1} << 20));
  app.add_option("--max-sandbox-vcpus", c.max_sandbox_vcpus,
                 "the most vCPUs one session may ask for (resources.vcpus; more is 400); "
                 "default: the host's CPUs")
      ->envname("CABIN_MAX_SANDBOX_VCPUS")
      ->check(CLI::Range(1, 16));
  app.add_option("--sessions-memory-percent", c.sessions_memory_percent,
                 "the memory limits of all sessions (live, starting, pooled) together stay "
                 "within this share of the host's memory: a create past it is 503 "
                 "capacity_memory (above 100 overcommits)")
      ->envname("CABIN_SESSIONS_MEMORY_PERCENT")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--sandbox-pids-max", c.sandbox_pids_max, "process limit per sandbox")
      ->check(CLI::Range(64, 1 << 20))->capture_default_str();
  app.add_option("--sandbox-cpus", c.sandbox_cpus,
                 "CPUs per namespace sandbox unless its session asks for vcpus (0: no limit); "
                 "default: the host's CPUs less one")
      ->check(CLI::Range(0.0, 1024.0))->capture_default_str();
  app.add_option("--chromium-sandbox", c.chromium_sandbox, "Chromium's own sandbox: auto|on|off")
      ->check(CLI::IsMember({"auto", "on", "off"}))->capture_default_str();
  app.add_option("--bin-dir", bin_dir, "directory of cabin-agent and cabin-sandbox")
      ->capture_default_str();
  std::string web_ui_dir;
  app.add_option("--web-ui-dir", web_ui_dir,
                 "the console and live view built by web-ui/build.mjs (default <bin-dir>/../web-ui)")
      ->envname("CABIN_WEB_UI_DIR");
  app.add_option("--default-network", c.default_network,
                 "egress of sessions whose spec sets no network policy: none (no way out) or open "
                 "(any public address)")
      ->envname("CABIN_DEFAULT_NETWORK")
      ->check(CLI::IsMember({"none", "open"}))
      ->capture_default_str();
  app.add_option("--egress-dns", c.egress_dns,
                 "IP:PORT of the name server the egress proxy asks (default: /etc/resolv.conf's)");
  app.add_option("--egress-resolve", c.egress_resolve,
                 "NAME=IP: the egress proxy takes NAME to be IP without asking DNS (repeatable)");
  app.add_option("--egress-upstream-proxy", c.egress_upstream_proxy,
                 "http://[user:pass@]host:port or socks5://[user:pass@]host:port: allowed egress "
                 "goes on through it, unless a session's policy names its own");
  app.add_option("--extra-ca-file", c.extra_ca_file,
                 "PEM CA certificates that every sandbox trusts, and the egress proxy when it "
                 "verifies hosts itself (a corporate proxy, test upstreams)");
  app.add_option("--egress-allow-cidr", c.egress_allow_cidrs,
                 "a range sessions may reach although it is private or link-local (a lab, a "
                 "corporate network); never the host itself or the metadata service; repeatable");
  app.add_option("--egress-allow-host-cidr", c.egress_allow_host_cidrs,
                 "the addresses of this host (loopback, its interfaces') and the metadata "
                 "service's within a range sessions may reach (a server of your own on this "
                 "machine, tests): what listens there, cabind included, is reachable; repeatable");
  app.add_option("--log-level", c.log_level, "trace|debug|info|warn|error")
      ->envname("CABIN_LOG_LEVEL")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))->capture_default_str();
  app.add_option("--log-format", c.log_format,
                 "text, or json: each line one object with time, level, component, message and "
                 "session")
      ->envname("CABIN_LOG_FORMAT")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();

  if (!parse_args(app, argc, argv, out)) return out;
  if (!split_listen(listen, c.listen_host, c.listen_port)) {
    out.exit = true;
    out.exit_code = 2;
    out.message = "--listen: expected HOST:PORT, got \"" + listen + "\"";
    return out;
  }
  if (!metrics_listen.empty() && !split_listen(metrics_listen, c.metrics_host, c.metrics_port)) {
    out.exit = true;
    out.exit_code = 2;
    out.message = "--metrics-listen: expected HOST:PORT, got \"" + metrics_listen + "\"";
    return out;
  }
  if (c.default_timeout_s > c.max_timeout_s) c.default_timeout_s = c.max_timeout_s;
  if (c.max_sandbox_memory_mb == 0)
    c.max_sandbox_memory_mb = std::max(host_memory_mb(), c.sandbox_memory_mb);
  if (c.max_sandbox_vcpus == 0) c.max_sandbox_vcpus = std::min(host_cpus(), 16);
  auto usage = [&](std::string msg) {
    out.exit = true;
    out.exit_code = 2;
    out.message = std::move(msg);
    return out;
  };
  if (tls_cert.empty() != tls_key.empty()) return usage("--tls-cert and --tls-key go together");
  if (c.sandbox_memory_mb > c.max_sandbox_memory_mb) {
    return usage("--sandbox-memory-mb (" + std::to_string(c.sandbox_memory_mb) +
                 ") is more than --max-sandbox-memory-mb (" +
                 std::to_string(c.max_sandbox_memory_mb) + "): raise the cap or lower the default");
  }
  for (const auto& pin : c.egress_resolve) {
    const size_t eq = pin.find('=');
    auto name = egress::canonical_host(pin.substr(0, eq));
    boost::system::error_code ec;
    if (eq != std::string::npos) (void)boost::asio::ip::make_address(pin.substr(eq + 1), ec);
    if (eq == std::string::npos || !name || name->is_ip() || ec) {
      return usage("--egress-resolve: expected NAME=IP, got \"" + pin + "\"");
    }
  }
  if (!c.egress_upstream_proxy.empty()) {
    if (auto r = egress::parse_upstream_proxy(c.egress_upstream_proxy); !r)
      return usage("--egress-upstream-proxy: " + r.error().message);
  }
  for (const auto& cidr : c.egress_allow_cidrs) {
    if (auto r = egress::parse_cidr(cidr); !r)
      return usage("--egress-allow-cidr: " + r.error().message);
  }
  for (const auto& cidr : c.egress_allow_host_cidrs) {
    if (auto r = egress::parse_cidr(cidr); !r)
      return usage("--egress-allow-host-cidr: " + r.error().message);
  }
  if (!c.egress_dns.empty()) {
    auto a = egress::parse_authority(c.egress_dns);
    if (!a || !a->host.is_ip())
      return usage("--egress-dns: expected IP:PORT, got \"" + c.egress_dns + "\"");
  }
  if (!tls_cert.empty() && c.tls_self_signed) {
    return usage("--tls-self-signed and --tls-cert exclude each other");
  }
  if (!tls_cert.empty()) {
    c.tls_cert = std::filesystem::absolute(tls_cert);
    c.tls_key = std::filesystem::absolute(tls_key);
  }
  if (!c.public_url.empty() && c.public_url.rfind("https://", 0) != 0 &&
      c.public_url.rfind("http://", 0) != 0) {
    return usage("--public-url must start with http:// or https://");
  }
  if (!c.node_id.empty() && !api::valid_node_id(c.node_id))
    return usage("--node-id: 1 to 16 of [a-z0-9], got \"" + c.node_id + "\"");
  if (!token_key_dir.empty()) c.token_key_dir = std::filesystem::absolute(token_key_dir);
  if (!cgroup_root.empty()) {
    if (cgroup_root.front() != '/') return usage("--cgroup-root needs an absolute path");
    c.cgroup_root = cgroup_root;
  }
  if (!tenant_keys_file.empty()) c.tenant_keys_file = std::filesystem::absolute(tenant_keys_file);
  for (char& ch : c.preview_domain) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (!c.preview_domain.empty()) {
    bool ok = c.preview_domain.size() <= 200 && c.preview_domain.front() != '.' &&
              c.preview_domain.back() != '.' && c.preview_domain.find("..") == std::string::npos;
    for (char ch : c.preview_domain) {
      ok = ok && ((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '.');
    }
    if (!ok) return usage("--preview-domain: expected a DNS name such as preview.example.com");
  }
  c.state_dir = std::filesystem::absolute(state_dir);
  if (!profile_key_file.empty()) c.profile_key_file = std::filesystem::absolute(profile_key_file);
  c.run_dir = run_dir.empty() ? default_run_dir(geteuid(), getenv("XDG_RUNTIME_DIR"), c.state_dir)
                             : std::filesystem::absolute(run_dir);
  c.bin_dir = std::filesystem::absolute(bin_dir);
  c.microvm_image_dir = image_dir.empty() ? c.bin_dir.parent_path() / "vm-image"
                                          : std::filesystem::absolute(image_dir);
  c.web_ui_dir = web_ui_dir.empty() ? c.bin_dir.parent_path() / "web-ui"
                                    : std::filesystem::absolute(web_ui_dir);
  return out;
}

Parsed<VncForwardConfig> parse_vnc_forward_config(int argc, char** argv) {
  Parsed<VncForwardConfig> out;
  VncForwardConfig& c = out.config;
  CLI::App app{
      "cabind vnc-forward: listens on 127.0.0.1 and carries a native VNC client's connection to "
      "a session's screen over cabind's authenticated WebSocket (API key from CABIN_API_KEY); "
      "only connections of its own user are accepted"};
  app.name("cabind vnc-forward");
  app.add_option("SESSION", c.session, "session id (ses_...)")->required();
  app.add_option("--server", c.server, "cabind's URL: http:// or https:// (then wss)")
      ->envname("CABIN_SERVER");
  app.add_option("--ca-file", c.ca_file,
                 "PEM certificates to trust for an https server (default: the system's)")
      ->check(CLI::ExistingFile);
  app.add_option("--port", c.port, "local port on 127.0.0.1 (0: any free one)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--log-level", c.log_level, "trace|debug|info|warn|error");
  parse_args(app, argc, argv, out);
  return out;
}

}  // namespace cabin
