// cabind: wires configuration, storage, drivers, sessions and the HTTP server together.
// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <sys/resource.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "common/log.h"
#include "common/spawn.h"
#include "common/ws_frames.h"
#include "server/api/ids.h"
#include "server/auth/api_key.h"
#include "server/auth/tokens.h"
#include "server/config.h"
#include "server/drivers/microvm/microvm_driver.h"
#include "server/drivers/namespace/cgroups.h"
#include "server/drivers/namespace/namespace_driver.h"
#include "server/drivers/sim/sim_driver.h"
#include "server/egress/dns.h"
#include "server/egress/policy.h"
#include "server/egress/proxy_request.h"
#include "server/egress/session_ca.h"
#include "server/handlers/api.h"
#include "server/http/metrics_server.h"
#include "server/http/server.h"
#include "server/http/static_files.h"
#include "server/http/tls.h"
#include "server/metrics/metrics.h"
#include "server/preview/preview_proxy.h"
#include "server/preview/previews.h"
#include "server/sessions/session_manager.h"
#include "server/store/key_store.h"
#include "server/store/session_store.h"
#include "server/vnc_forward.h"

namespace net = boost::asio;
using namespace cabin;

namespace {

// At shutdown, after the sessions have ended: how long connections get to finish closing.
constexpr std::chrono::seconds kConnectionsDrainTimeout{5};

int fail(const std::string& what) {
  logger("cabind")->critical("{}", what);
  return 1;
}

// Raises the soft descriptor limit to the hard one (systemd's soft default is 1024, which a few
// hundred connections and sandboxes exhaust); returns the limit now in force.
rlim_t raise_fd_limit() {
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return 1024;
  if (rl.rlim_cur < rl.rlim_max) {
    struct rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  return rl.rlim_cur;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "vnc-forward") {
    return run_vnc_forward(argc - 1, argv + 1);
  }
  auto parsed = parse_config(argc, argv);
  if (parsed.exit) {
    (parsed.exit_code == 0 ? std::cout : std::cerr) << parsed.message << "\n";
    return parsed.exit_code;
  }
  const ServerConfig& cfg = parsed.config;
  set_log_level(cfg.log_level);
  if (cfg.log_format == "json") set_log_json();
  auto log = logger("cabind");
  std::signal(SIGPIPE, SIG_IGN);
  const rlim_t fd_limit = raise_fd_limit();
  http_api::ConnectionLimits conn_limits;
  // A connection may hold two descriptors (a CDP bridge, a preview); sessions need the rest.
  conn_limits.max_total =
      cfg.max_connections > 0
          ? static_cast<size_t>(cfg.max_connections)
          : static_cast<size_t>(std::clamp<rlim_t>(fd_limit / 4, 16, 16384));
  conn_limits.max_per_peer = static_cast<size_t>(cfg.max_connections_per_peer);
  log->info("descriptor limit {}; at most {} connections, {} from one address", fd_limit,
            conn_limits.max_total, conn_limits.max_per_peer);

  std::error_code ec;
  std::filesystem::create_directories(cfg.state_dir, ec);
  if (ec) return fail("cannot create state dir " + cfg.state_dir.string() + ": " + ec.message());
  std::filesystem::permissions(cfg.state_dir, std::filesystem::perms::owner_all, ec);

  // The drivers keep session dirs and sockets here; the microvm driver's dir sits beside it.
  for (const auto& dir : {cfg.run_dir, std::filesystem::path(cfg.run_dir.string() + "-vm")}) {
    if (auto r = ensure_private_dir(dir); !r) return fail(r.error().message);
  }
  // Before the drivers start: each kills the sandboxes in its run dir that its store does not
  // know, which would be another server's.
  auto run_lock = lock_dir(cfg.run_dir, "--run-dir");
  if (!run_lock) return fail(run_lock.error().message);
  auto state_lock = lock_dir(cfg.state_dir, "--state-dir");
  if (!state_lock) return fail(state_lock.error().message);

  auto api_key = auth::load_or_create_api_key(cfg.state_dir, std::getenv("CABIN_API_KEY"));
  if (!api_key) return fail(api_key.error().message);
  if (!cfg.node_id.empty()) {
    api::set_node_id(cfg.node_id);
    log->info("node {}: its session ids are ses_{}_...", cfg.node_id, cfg.node_id);
  }
  const auto keys_dir = cfg.token_key_dir.empty() ? cfg.state_dir / "keys" : cfg.token_key_dir;
  if (cfg.rotate_token_key) {
    auto kid = auth::TokenService::add_key(keys_dir);
    if (!kid) return fail(kid.error().message);
    log->info("token signing key {} added; it signs from now on", *kid);
  }
  auto keys = auth::TokenService::load_or_create_keys(keys_dir);
  if (!keys) return fail(keys.error().message);
  SystemClock clock;
  const size_t key_count = keys->size();
  auth::TokenService tokens(std::move(*keys), clock);
  log->info("token signing key {}; {} keys verify", tokens.signing_key_id(), key_count);

  auto store = store::SessionStore::open((cfg.state_dir / "cabin.db").string());
  if (!store) return fail(store.error().message);
  // Seals what a session leaves on disk while cabind runs on (its handoff record, a hibernated
  // VM's RAM): in the run dir, apart from the state dir that holds what it seals.
  auto handoff_key = auth::load_or_create_key_file(cfg.run_dir / "handoff.key");
  if (!handoff_key) return fail(handoff_key.error().message);
  net::io_context ioc(1);
  std::map<std::string, std::unique_ptr<drivers::SandboxDriver>> drivers;
  {
    // In a container that shares the host's pids, the host's cgroup namespace, where the
    // sandboxes' cgroups are (docs/scale-out.md).
    const std::string host_cgroup_ns = cabin::nsbox::foreign_cgroup_ns();
    if (!host_cgroup_ns.empty())
      log->info("sandboxes join their cgroups from the cgroup namespace of {}", host_cgroup_ns);
    drivers::NamespaceDriverConfig nc;
    nc.run_dir = cfg.run_dir;
    nc.agent_path = cfg.bin_dir / "cabin-agent";
    nc.launcher_path = cfg.bin_dir / "cabin-sandbox";
    if (std::filesystem::exists(cfg.bin_dir / "chromium-policy.json", ec)) {
      nc.chromium_policy = cfg.bin_dir / "chromium-policy.json";
    }
    nc.chromium_sandbox = cfg.chromium_sandbox;
    nc.cpus = cfg.sandbox_cpus;
    nc.cgroup_root = cfg.cgroup_root;
    nc.cgroup_ns = host_cgroup_ns;
    drivers["namespace"] = std::make_unique<drivers::NamespaceDriver>(nc, ioc.get_executor());

    drivers::MicrovmDriverConfig mv;
    // Beside, never inside, the namespace driver's run dir: each driver empties its own.
    mv.run_dir = cfg.run_dir.string() + "-vm";
    mv.image_dir = cfg.microvm_image_dir;
    mv.wrap_path = cfg.bin_dir / "cabin-vmm-wrap";
    mv.accel = cfg.microvm_accel;
    mv.vcpus = cfg.microvm_vcpus;
    mv.hibernate_dir = cfg.state_dir / "hibernated";
    mv.hibernate_key = *handoff_key;
    mv.cgroup_root = cfg.cgroup_root;
    mv.cgroup_ns = host_cgroup_ns;
    drivers["microvm"] = std::make_unique<drivers::MicrovmDriver>(mv, ioc.get_executor());
    if (cfg.sim_driver) {
      drivers["sim"] = std::make_unique<drivers::SimDriver>(ioc.get_executor());
      log->warn("driver sim: sessions without a sandbox or a browser, for benchmarks only");
    }
  }
  for (auto& [name, d] : drivers) {
    auto info = d->info();
    if (info.available) {
      log->info("driver {}: available ({})", name, info.detail);
    } else {
      log->warn("driver {}: unavailable: {}", name, info.unavailable_reason);
    }
  }
  if (!drivers.count(cfg.default_driver)) {
    return fail("--default-driver: no driver named " + cfg.default_driver);
  }

  // Saved profiles and recordings outlive reboots, so their key does too: beside the sealed
  // archives unless the operator keeps it elsewhere.
  const auto profile_key_file =
      cfg.profile_key_file.empty() ? cfg.state_dir / "profile.key" : cfg.profile_key_file;
  if (cfg.profile_key_file.empty()) {
    log->info(
        "profiles and recordings are sealed with {}, in the state dir: a copy of the state "
        "dir carries the key too (--profile-key-file keeps it elsewhere)",
        profile_key_file.string());
  }
  auto profile_key = auth::load_or_create_key_file(profile_key_file);
  if (!profile_key) return fail(profile_key.error().message);
  sessions::ManagerConfig mc;
  mc.default_driver = cfg.default_driver;
  mc.max_sessions = cfg.max_sessions;
  mc.create_queue = cfg.create_queue;
  mc.create_queue_timeout = std::chrono::seconds(cfg.create_queue_timeout_s);
  mc.driver_limits["namespace"] = {std::chrono::milliseconds(cfg.start_timeout_ms),
                                   cfg.max_sessions};
  mc.driver_limits["microvm"] = {std::chrono::milliseconds(cfg.microvm_start_timeout_ms),
                                 cfg.microvm_max_sessions};
  mc.driver_limits["sim"] = {std::chrono::milliseconds(cfg.start_timeout_ms), cfg.max_sessions};
  mc.memory_bytes = cfg.sandbox_memory_mb << 20;
  mc.node_memory_bytes = (host_memory_mb() << 20) / 100 * cfg.sessions_memory_percent;
  mc.driver_limits["namespace"].default_vcpus =
      cfg.sandbox_cpus > 0 ? static_cast<int>(std::ceil(cfg.sandbox_cpus)) : host_cpus();
  mc.driver_limits["microvm"].default_vcpus = cfg.microvm_vcpus;
  mc.driver_limits["sim"].holds_host = false;
  mc.templates = cfg.microvm_templates == "on";
  for (const auto& text : cfg.pools) {
    auto pool = sessions::parse_pool(text);
    if (!pool) return fail("--pool " + pool.error().message);
    mc.pools.push_back(*pool);
  }
  mc.logs_dir = cfg.state_dir / "logs";
  std::filesystem::create_directories(mc.logs_dir, ec);
  mc.recordings_dir = cfg.state_dir / "recordings";
  mc.recordings_key = *profile_key;
  mc.state_dir = cfg.state_dir;
  mc.state_min_free_bytes = cfg.state_min_free_mb << 20;
  mc.retention.max_age = std::chrono::hours(cfg.retention_hours);
  mc.retention.max_bytes = cfg.retention_max_mb << 20;
  mc.recording_copy_timeout = std::chrono::seconds(cfg.recording_copy_timeout_s);
  mc.recording_stall =
      std::min<std::chrono::milliseconds>(mc.recording_stall, mc.recording_copy_timeout);
  std::filesystem::create_directories(mc.recordings_dir, ec);
  mc.pids_max = cfg.sandbox_pids_max;
  mc.handoff_key = *handoff_key;
  {
    auto& e = mc.egress;
    e.enabled = true;
    e.default_policy.mode = *egress::parse_mode(cfg.default_network);
    for (const auto& c : cfg.egress_allow_cidrs)
      e.boundary.open_cidrs.push_back(*egress::parse_cidr(c));
    for (const auto& c : cfg.egress_allow_host_cidrs)
      e.boundary.open_host_cidrs.push_back(*egress::parse_cidr(c));
    e.boundary.host_addresses = egress::local_addresses();
    egress::ResolverConfig rc;
    if (cfg.egress_dns.empty()) {
      rc.servers = egress::system_name_servers();
    } else {
      auto a = *egress::parse_authority(cfg.egress_dns);
      rc.servers = {{*a.host.ip, a.port}};
    }
    for (const auto& pin : cfg.egress_resolve) {
      const size_t eq = pin.find('=');
      rc.pinned[egress::canonical_host(pin.substr(0, eq))->name].push_back(
          net::ip::make_address(pin.substr(eq + 1)));
    }
    if (rc.servers.empty() && rc.pinned.empty()) {
      log->warn(
          "egress: no name server in /etc/resolv.conf and none given (--egress-dns): "
          "sessions reach names only through --egress-resolve");
    }
    e.resolver = std::make_shared<const egress::Resolver>(std::move(rc));
    if (!cfg.extra_ca_file.empty()) {
      auto pem = egress::read_ca_pem(cfg.extra_ca_file);
      if (!pem) {
        log->error("--extra-ca-file: {}", pem.error().message);
        return 2;
      }
      e.extra_ca_pem = std::move(*pem);
    }
    if (!cfg.egress_upstream_proxy.empty()) {
      e.upstream_proxy = *egress::parse_upstream_proxy(cfg.egress_upstream_proxy);
      log->info("egress: allowed traffic goes on through {}", e.upstream_proxy->to_string());
    }
    auto upstream = egress::upstream_tls_context(cfg.extra_ca_file);
    if (!upstream) {
      log->error("{}", upstream.error().message);
      return 2;
    }
    e.upstream_tls = std::move(*upstream);
    log->info("egress: sessions without a network policy get mode {}", cfg.default_network);
  }
  // Before the manager: sessions that end at shutdown are recorded.
  audit::AuditLog audit(cfg.state_dir / "audit.log");
  sessions::SessionManager manager(ioc.get_executor(), mc, std::move(drivers), **store, clock);
  manager.use_audit(&audit);
  auto profile_store = profiles::ProfileStore::open((cfg.state_dir / "cabin.db").string(),
                                                    cfg.state_dir / "profiles", *profile_key);
  if (!profile_store) return fail(profile_store.error().message);
  manager.use_profiles(profile_store->get(), cfg.state_dir / "profiles" / "live");
  {
    // Sessions an earlier cabind left running are taken over before the first request, then
    // every sandbox nobody knows is killed.
    std::optional<std::set<std::string>> adopted;
    cabin::spawn(
        ioc, [&]() -> net::awaitable<void> { adopted = co_await manager.adopt_all(); },
        "adopt sessions");
    while (!adopted && ioc.run_one() > 0) {
    }
    ioc.restart();
    manager.reap_leftovers(adopted.value_or(std::set<std::string>{}));
  }
  // After the cleanup, which would kill their sandboxes.
  manager.start_pools();
  // Read off the manager where scrapes are answered, on this thread.
  metrics::registry().on_scrape([&manager](metrics::Registry& r) {
    std::vector<std::pair<metrics::LabelValues, double>> live;
    for (const auto& [key, n] : manager.counts())
      live.push_back({{key.first, key.second}, static_cast<double>(n)});
    r.replace("cabin_sessions", std::move(live));
    std::vector<std::pair<metrics::LabelValues, double>> pooled;
    for (const auto& p : manager.pools()) {
      pooled.push_back({{p.config.name(), "ready"}, static_cast<double>(p.ready)});
      pooled.push_back({{p.config.name(), "starting"}, static_cast<double>(p.starting)});
    }
    r.replace("cabin_pool_sandboxes", std::move(pooled));
  });

  // TLS, or plain HTTP only where nothing beyond this host can reach it.
  std::shared_ptr<net::ssl::context> tls;
  if (cfg.tls()) {
    http_api::TlsPair pair{cfg.tls_cert, cfg.tls_key, false};
    if (cfg.tls_self_signed) {
      std::vector<std::string> names = {cfg.listen_host};
      if (!cfg.preview_domain.empty()) {
        names.push_back(cfg.preview_domain);
        names.push_back("*." + cfg.preview_domain);
      }
      auto made = http_api::ensure_self_signed(cfg.state_dir / "tls", names);
      if (!made) return fail(made.error().message);
      pair = *made;
      log->info("TLS: self-signed certificate {}{}", pair.cert.string(),
                made->generated ? " (new)" : "");
    }
    auto ctx = http_api::make_server_tls_context(pair.cert, pair.key);
    if (!ctx) return fail(ctx.error().message);
    tls = *ctx;
  } else {
    boost::system::error_code aec;
    auto addr = net::ip::make_address(cfg.listen_host, aec);
    bool loopback = !aec && addr.is_loopback();
    if (!loopback && !cfg.allow_plain_http) {
      return fail("refusing plain HTTP on " + cfg.listen_host +
                  ", which is not a loopback address: give --tls-cert and --tls-key (or "
                  "--tls-self-signed), or --allow-plain-http behind a TLS-terminating proxy");
    }
    if (!loopback) log->warn("plain HTTP beyond loopback on {} (--allow-plain-http)", cfg.listen_host);
  }

  // The web UI is optional: without a build the API runs and / says what is missing.
  http_api::StaticFiles ui;
  if (auto loaded = http_api::StaticFiles::load(cfg.web_ui_dir); loaded) {
    ui = std::move(*loaded);
    log->info("web UI: {} files from {}", ui.size(), cfg.web_ui_dir.string());
  } else {
    log->warn("web UI: {}", loaded.error().message);
  }

  auth::TokenConnections token_connections(ioc.get_executor());
  preview::Previews previews(clock);
  {
    auto& db = **store;
    std::vector<preview::Grant> kept;
    for (auto& row : db.previews())
      kept.push_back({row.id, row.session_id, row.port, row.created_at, row.expires_at});
    previews.use_keeper(
        {.saved =
             [&db](const preview::Grant& g) {
               (void)db.save_preview({g.id, g.session_id, g.port, g.created_at, g.expires_at});
             },
         .removed = [&db](const std::string& id) { (void)db.remove_preview(id); }});
    previews.restore(kept, [&manager](const std::string& id) { return manager.find(id) != nullptr; });
  }
  http_api::Api api(cfg, manager, tokens, token_connections, previews, api_key->key, ui);
  api.use_audit(&audit);
  auto api_keys = store::KeyStore::open((cfg.state_dir / "cabin.db").string());
  if (!api_keys) return fail(api_keys.error().message);
  // --tenant-keys-file: read now (a bad file stops the start), then again when it changes.
  std::string tenant_keys_text;
  auto read_tenant_keys = [&]() -> Result<std::string> {
    std::ifstream in(cfg.tenant_keys_file);
    if (!in) {
      return make_error(Errc::kInvalidArgument, "bad_key_file",
                        "--tenant-keys-file: cannot read " + cfg.tenant_keys_file.string());
    }
    std::string text(store::kMaxTenantKeysFileBytes + 1, '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<size_t>(in.gcount()));
    return text;
  };
  if (!cfg.tenant_keys_file.empty()) {
    auto text = read_tenant_keys();
    if (!text) return fail(text.error().message);
    auto n = (*api_keys)->set_file_keys(*text, clock.unix_seconds());
    if (!n) return fail(n.error().message);
    tenant_keys_text = std::move(*text);
    log->info("{} tenant keys from {}", *n, cfg.tenant_keys_file.string());
  }
  api.use_keys(api_keys->get());
  (*profile_store)->use_budgets([keys = api_keys->get()](const std::string& owner) {
    profiles::ProfileBudget b;
    if (auto k = keys->get(owner)) {
      b.max_profiles = k->max_profiles;
      b.max_bytes = static_cast<uint64_t>(k->max_profiles_mb) << 20;
    }
    return b;
  });
  preview::PreviewProxy preview_proxy(cfg, manager, tokens, token_connections, previews);
  http_api::HttpServer server(ioc.get_executor(), api, preview_proxy, tls, conn_limits);
  const size_t threads = cfg.threads > 0 ? static_cast<size_t>(cfg.threads)
                                         : std::max<size_t>(1, std::thread::hardware_concurrency());
  http_api::IoPool pumps(threads);
  api.use_pumps(&pumps);
  preview_proxy.use_pumps(&pumps);
  if (auto r = server.listen(cfg.listen_host, cfg.listen_port); !r) return fail(r.error().message);
  // With port 0 the system chose one: the URLs cabind hands out and the origins it takes name it.
  parsed.config.listen_port = server.port();
  // On the control thread, where /metrics is answered on the API listener too.
  http_api::MetricsServer metrics_server(ioc.get_executor());
  if (!cfg.metrics_host.empty()) {
    if (auto r = metrics_server.listen(cfg.metrics_host, cfg.metrics_port); !r)
      return fail("--metrics-listen: " + r.error().message);
    const std::string mhost = cfg.metrics_host.find(':') != std::string::npos
                                  ? "[" + cfg.metrics_host + "]"
                                  : cfg.metrics_host;
    log->info("metrics: GET /metrics without the API key on http://{}:{}", mhost,
              metrics_server.port());
  }

  std::string host = cfg.listen_host.find(':') != std::string::npos ? "[" + cfg.listen_host + "]"
                                                                    : cfg.listen_host;
  std::cout << "cabind " << CABIN_VERSION << " listening on " << (tls ? "https" : "http")
            << "://" << host << ":" << server.port() << "\n";
  if (api_key->path.empty()) {
    std::cout << "API key: from CABIN_API_KEY\n";
  } else if (api_key->generated) {
    // Only now, once: stdout often ends in a journal that others can read.
    std::cout << "API key (new): " << api_key->key << "  (stored in " << api_key->path.string()
              << ")\n";
  } else {
    std::cout << "API key: in " << api_key->path.string() << "\n";
  }
  std::cout << std::flush;

  // SIGHUP re-reads the signing keys: rotation and removal without a restart. So does a change
  // of the directory's files (a Kubernetes Secret's update), seen within kKeyWatch.
  auto reload_keys = [&](std::string_view why) {
    auto reloaded = auth::TokenService::load_or_create_keys(keys_dir);
    if (!reloaded) {
      log->error("{}: keeping the current keys: {}", why, reloaded.error().message);
      return;
    }
    if (*reloaded == tokens.keys()) return;
    size_t n = reloaded->size();
    tokens.set_keys(std::move(*reloaded));
    log->info("{}: token keys reloaded; {} signs, {} verify", why, tokens.signing_key_id(), n);
  };
  net::signal_set hup(ioc, SIGHUP);
  std::function<void(boost::system::error_code, int)> on_hup =
      [&](boost::system::error_code ec, int) {
        if (ec) return;
        reload_keys("SIGHUP");
        hup.async_wait(on_hup);
      };
  hup.async_wait(on_hup);
  constexpr auto kKeyWatch = std::chrono::seconds(10);
  net::steady_timer key_watch(ioc);
  std::function<void(boost::system::error_code)> on_key_watch = [&](boost::system::error_code ec) {
    if (ec) return;
    reload_keys("token key dir changed");
    if (!cfg.tenant_keys_file.empty()) {
      auto text = read_tenant_keys();
      if (!text) {
        log->error("{}; keeping the tenant keys as they were", text.error().message);
      } else if (*text != tenant_keys_text) {
        auto n = (*api_keys)->set_file_keys(*text, clock.unix_seconds());
        if (!n) {
          log->error("{}; keeping the tenant keys as they were", n.error().message);
        } else {
          log->info("{} tenant keys from {} (it changed)", *n, cfg.tenant_keys_file.string());
        }
        tenant_keys_text = std::move(*text);
      }
    }
    key_watch.expires_after(kKeyWatch);
    key_watch.async_wait(on_key_watch);
  };
  key_watch.expires_after(kKeyWatch);
  key_watch.async_wait(on_key_watch);
  // Ended sessions' logs and recordings, pruned at start and every kPruneEvery.
  constexpr auto kPruneEvery = std::chrono::minutes(10);
  net::steady_timer prune(ioc);
  std::function<void(boost::system::error_code)> on_prune = [&](boost::system::error_code ec) {
    if (ec) return;
    manager.prune_state_now();
    prune.expires_after(kPruneEvery);
    prune.async_wait(on_prune);
  };
  on_prune({});
  net::signal_set signals(ioc, SIGINT, SIGTERM);
  signals.async_wait([&](boost::system::error_code, int sig) {
    log->info("signal {}: shutting down", sig);
    manager.set_draining();
    server.stop();
    metrics_server.stop();
    hup.cancel();
    key_watch.cancel();
    prune.cancel();
    cabin::spawn(
        ioc,
        [&]() -> net::awaitable<void> {
          // Staged: the connections were asked to go away; WebSocket clients get a moment to
          // answer the close frame (1001) before their sessions end (which ends the pumps to
          // them); what is left gets a deadline, then the threads stop.
          const bool keep = cfg.on_shutdown == "keep";
          const auto limit = std::chrono::duration_cast<std::chrono::milliseconds>(
              std::chrono::seconds(cfg.shutdown_timeout_s));
          const auto began = std::chrono::steady_clock::now();
          const auto tail = std::min<std::chrono::milliseconds>(limit / 5, kConnectionsDrainTimeout);
          co_await server.connections().wait_empty(
              began + std::min<std::chrono::milliseconds>(tail, ws::kGoingAwayGrace));
          // Sessions get most of the time; the connections the rest.
          const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(
              std::chrono::steady_clock::now() - began);
          co_await manager.shutdown(std::max(limit - tail - spent, std::chrono::milliseconds(0)),
                                    keep);
          const auto deadline =
              std::min(began + limit, std::chrono::steady_clock::now() + kConnectionsDrainTimeout);
          if (!co_await server.connections().wait_empty(deadline)) {
            log->warn("{} connections still open at shutdown: closing them",
                      server.connections().size());
          }
          pumps.stop();
          ioc.stop();
        },
        "shutdown on a signal");
  });
  cabin::spawn(ioc, server.run(), "HTTP server");
  if (!cfg.metrics_host.empty()) cabin::spawn(ioc, metrics_server.run(), "metrics listener");
  ioc.run();
  pumps.stop();
  log->info("stopped");
  return 0;
}
