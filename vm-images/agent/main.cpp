// cabin-agent: wires the CLI, the HTTP server and the supervisor (docs/agent-protocol.md).
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <CLI/CLI.hpp>
#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "common/agent_protocol.h"
#include "common/capabilities.h"
#include "common/log.h"
#include "common/spawn.h"
#include "vm-images/agent/agent_state.h"
#include "vm-images/agent/exec_filter.h"
#include "vm-images/agent/http_server.h"
#include "vm-images/agent/profile_disk.h"
#include "vm-images/agent/requests.h"
#include "vm-images/agent/restore.h"
#include "vm-images/agent/supervisor.h"
#include "vm-images/agent/trust.h"
#include "vnc/display.h"
#include "vnc/rfb_server.h"

namespace net = boost::asio;
using namespace cabin::agent;

namespace {

// The agent's capabilities: with an exec uid, CAP_SETUID permitted (lent to the exec helper
// alone, exec.cpp), CAP_KILL (a timed-out command is another uid's) and CAP_FOWNER (the files API
// replaces and removes commands' files in the sticky /tmp) effective, nothing else.
// Either way the ambient and inheritable sets, through which PID 1 handed them over, are emptied:
// no child inherits a capability by them.
cabin::Result<void> keep_exec_caps(bool exec_user) {
  namespace caps = cabin::caps;
  auto now = caps::get();
  if (!now) return now.error();
  caps::Sets keep = *now;
  keep.inheritable = 0;
  if (exec_user) {
    const uint64_t effective = caps::bit(CAP_KILL) | caps::bit(CAP_FOWNER);
    const uint64_t need = caps::bit(CAP_SETUID) | effective;
    if ((now->permitted & need) != need) {
      return cabin::make_error(cabin::Errc::kInternal, "capabilities",
                               "--exec-uid needs CAP_SETUID, CAP_KILL and CAP_FOWNER permitted");
    }
    keep = {effective, need, 0};
  }
  if (auto r = caps::set(keep); !r) return r;
  return caps::clear_ambient();
}

// Closes the browser; in a VM with a profile disk, then leaves the profile it wrote there.
net::awaitable<cabin::Result<void>> close_and_keep(Supervisor* sup, std::string disk,
                                                   std::filesystem::path dir) {
  auto closed = co_await sup->close_browser(std::chrono::seconds(10));
  if (!closed || disk.empty()) co_return closed;
  auto saved = save_profile_disk(disk, dir);
  if (!saved) co_return saved.error();
  cabin::logger("agent")->info("the profile is on its disk: {} bytes", *saved);
  co_return cabin::Result<void>{};
}

}  // namespace

int main(int argc, char** argv) {
  // The exec filter helper: a fresh process of this binary, between posix_spawn and the command.
  if (argc > 1 && std::strcmp(argv[1], kExecFilteredFlag) == 0)
    return run_filtered_exec(argc - 2, argv + 2);
  // The guest's root helper for restored VMs (restore.h): restore lines on fd 3, answers on 4.
  if (argc == 2 && std::strcmp(argv[1], "--restore-helper") == 0) return run_restore_helper(3, 4);
  CLI::App app{"cabin-agent: runs Xvfb and Chromium inside a sandbox and serves the host"};
  std::string listen_text;
  SupervisorOptions sup;
  std::string log_level = "info";
  int startup_timeout_ms = 90000;
  int rfb_port = cabin::agent_protocol::kRfbPort;
  const char* home_env = ::getenv("HOME");
  sup.home = home_env && *home_env ? home_env : "/tmp";
  app.add_option("--listen", listen_text, "unix:PATH or tcp:HOST:PORT")->required();
  app.add_option("--width", sup.width, "screen width")->check(CLI::Range(64, 8192));
  app.add_option("--height", sup.height, "screen height")->check(CLI::Range(64, 8192));
  app.add_option("--start-url", sup.start_url, "first page Chromium opens");
  app.add_option("--wait-until", sup.wait_until,
                 "commit|load|networkidle: when the start page is ready")
      ->transform(CLI::CheckedTransformer(kWaitUntilNames));
  app.add_option("--chromium", sup.chromium, "Chromium binary");
  app.add_option("--xvfb", sup.xvfb, "Xvfb binary");
  app.add_option("--devtools-port", sup.devtools_port, "DevTools port on 127.0.0.1 (0: any)");
  const std::map<std::string, ChromiumSandbox> sandbox_modes = {{"auto", ChromiumSandbox::kAuto},
                                                                {"on", ChromiumSandbox::kOn},
                                                                {"off", ChromiumSandbox::kOff}};
  app.add_option("--chromium-sandbox", sup.sandbox, "auto|on|off")
      ->transform(CLI::CheckedTransformer(sandbox_modes, CLI::ignore_case));
  app.add_option("--home", sup.home, "HOME for Chromium (profile in HOME/chromium)");
  app.add_option("--startup-timeout-ms", startup_timeout_ms, "limit for reaching ready")
      ->check(CLI::Range(1000, 600000));
  app.add_option("--rfb-port", rfb_port, "RFB (VNC) server port on 127.0.0.1 (0: none)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error");
  app.add_option(
      "--egress-proxy", sup.egress_proxy_port,
      "cabind's egress proxy on 127.0.0.1 (0: none): Chromium and exec'd commands use it");
  bool egress_door = false;
  app.add_flag("--egress-door", egress_door,
               "listen on the egress port itself and pass each connection to cabind over this "
               "agent's own connections (the microVM's way out)");
  std::string exec_filter = "off";
  app.add_option("--exec-filter", exec_filter,
                 "on: exec'd commands get no new namespaces (the namespace driver's sandboxes)")
      ->check(CLI::IsMember({"on", "off"}));
  uid_t exec_uid = 0;
  app.add_option("--exec-uid", exec_uid,
                 "exec'd commands run as this uid (with --exec-filter on; needs CAP_SETUID, "
                 "CAP_KILL and CAP_FOWNER permitted, which the namespace sandbox gives as root); "
                 "0: the agent's")
      ->check(CLI::Range(0u, 65534u));
  std::string profile_disk;
  app.add_option("--profile-disk", profile_disk,
                 "a microVM's profile disk: Chromium's profile comes from it, and goes back to it "
                 "when the browser is closed");
  std::string restore_fds;
  app.add_option("--restore-fds", restore_fds,
                 "TO,FROM: the pipes to the restore helper (a microVM's agent)");
  CLI11_PARSE(app, argc, argv);
  // Before anything is spawned: no command may hold the pipes to the root helper.
  int restore_to = -1, restore_from = -1;
  if (!restore_fds.empty()) {
    if (std::sscanf(restore_fds.c_str(), "%d,%d", &restore_to, &restore_from) != 2 ||
        restore_to < 3 || restore_from < 3 || restore_to == restore_from ||
        ::fcntl(restore_to, F_SETFD, FD_CLOEXEC) != 0 ||
        ::fcntl(restore_from, F_SETFD, FD_CLOEXEC) != 0) {
      std::fprintf(stderr, "cabin-agent: --restore-fds must be TO,FROM open descriptors\n");
      return 2;
    }
  }
  sup.startup_timeout = std::chrono::milliseconds(startup_timeout_ms);
  if (exec_uid != 0 && exec_filter != "on") {
    std::fprintf(stderr, "cabin-agent: --exec-uid needs --exec-filter on\n");
    return 2;
  }
  // Before anything is spawned: no child inherits a capability.
  if (auto r = keep_exec_caps(exec_uid != 0); !r) {
    std::fprintf(stderr, "cabin-agent: %s\n", r.error().message.c_str());
    return 2;
  }

  // The RFB server uses Xlib on its own thread, beside the Desktop's connection on this one.
  cabin::vnc::init_threads();
  cabin::set_log_level(log_level);
  auto log = cabin::logger("agent");

  auto listen = parse_listen_address(listen_text);
  if (!listen) {
    log->error("--listen: {}", listen.error().message);
    return 2;
  }
  if (sup.start_url.empty() || sup.start_url[0] == '-') {
    log->error("--start-url must be a URL");
    return 2;
  }
  // The secret never reaches a child: removed before anything is spawned.
  const char* secret_env = ::getenv("CABIN_AGENT_SECRET");
  if (!secret_env || !*secret_env) {
    log->error("CABIN_AGENT_SECRET must be set");
    return 2;
  }
  std::string secret = secret_env;
  // Commands run as our uid, so they could read /proc/<agent>/environ (the start-up environment,
  // which unsetenv does not touch) or attach to us: wipe the bytes and turn off dumpability,
  // which also makes /proc/<agent>/* unreadable for them.
  std::fill(const_cast<char*>(secret_env), const_cast<char*>(secret_env) + secret.size(), 'x');
  ::unsetenv("CABIN_AGENT_SECRET");
  if (::prctl(PR_SET_DUMPABLE, 0) != 0) {
    log->error("PR_SET_DUMPABLE: {}", std::strerror(errno));
    return 2;
  }

  // Certificates to trust besides the system's (the session's CA): read and removed from the
  // environment before anything starts.
  if (const char* ca = ::getenv("CABIN_TRUSTED_CA"); ca && *ca) {
    const std::string pem = ca;
    ::unsetenv("CABIN_TRUSTED_CA");
    std::string warning;
    auto vars = cabin::agent::install_trusted_certificates(sup.home, pem, {}, &warning);
    if (!vars) {
      log->error("trusted certificates: {}", vars.error().message);
      return 2;
    }
    if (!warning.empty()) log->warn("trusted certificates: {}", warning);
    for (const auto& [name, value] : *vars) ::setenv(name.c_str(), value.c_str(), 1);
  }

  // Before anything starts Chromium, which must find its profile there.
  if (!profile_disk.empty()) {
    if (auto r = cabin::agent::load_profile_disk(profile_disk, sup.home + "/chromium"); !r) {
      log->error("the profile disk: {}", r.error().message);
      return 1;
    }
  }

  if (sup.egress_proxy_port != 0) {
    // Inherited by every command the exec API runs; nothing else has a way out anyway.
    const std::string proxy = "http://127.0.0.1:" + std::to_string(sup.egress_proxy_port);
    for (const char* name :
         {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"}) {
      ::setenv(name, proxy.c_str(), 1);
    }
    for (const char* name : {"NO_PROXY", "no_proxy"}) ::setenv(name, "localhost,127.0.0.1,::1", 1);
  }

  // Peers that vanish mid-write are errors on the socket, not a reason to die.
  ::signal(SIGPIPE, SIG_IGN);

  net::io_context io(1);
  AgentState state(io.get_executor(), sup.width, sup.height);
  HttpServerOptions http;
  http.listen = *listen;
  http.secret = std::move(secret);
  // The kernel resolves /proc/self/exe in the spawned child, which is still this binary.
  // Every helper but Chromium runs under the exec filter too: a command that took one over would
  // otherwise have what the filter denies it.
  RecorderOptions recorder_opts;
  if (exec_filter == "on") {
    http.exec.filter_helper = "/proc/self/exe";
    if (exec_uid != 0) http.exec.exec_uid = exec_uid;
    sup.filter_helper = "/proc/self/exe";
    recorder_opts.filter_helper = "/proc/self/exe";
  }
  // Before Chromium starts, which waits for its proxy to accept.
  std::optional<EgressDoor> door;
  if (egress_door && sup.egress_proxy_port != 0) {
    door.emplace(io.get_executor(), sup.egress_proxy_port);
    if (auto r = door->start(); !r) {
      log->error("{}", r.error().message);
      return 1;
    }
    http.egress_door = &*door;
  }
  // Set once the supervisor exists, below; the server answers no request before io.run().
  Supervisor* supervising = nullptr;
  http.close_browser = [&supervising, &profile_disk, home = sup.home] {
    // Chromium writes its profile out on the way; a big one takes a few seconds.
    return close_and_keep(supervising, profile_disk, home + "/chromium");
  };
  std::optional<RestoreChannel> restore;
  if (restore_to >= 0) {
    restore.emplace(io.get_executor(), restore_to, restore_from);
    http.restored = [&restore](const cabin::agent_protocol::RestoredRequest& r) {
      return restore->apply(r, std::chrono::seconds(5));
    };
  }
  // The live view's RFB server runs on a thread of its own (see vnc/rfb_server.h for why it is
  // not on this io_context); it starts as soon as the display exists. It owns the clipboard.
  std::unique_ptr<cabin::vnc::RfbServer> rfb;
  http.clipboard_get = [&rfb]() -> std::optional<std::string> {
    if (!rfb) return std::nullopt;
    return rfb->clipboard_text();
  };
  http.clipboard_set = [&rfb](std::string text) {
    if (!rfb) return false;
    rfb->set_clipboard_text(std::move(text));
    return true;
  };
  recorder_opts.dir = sup.home + "/.cabin-agent/recordings";
  Recorder recorder(io.get_executor(), recorder_opts);
  http.recorder = &recorder;
  BrowserEvents browser_events(io.get_executor(), state, sup.home + "/Downloads");
  http.events = &browser_events;
  const FileRoots files({sup.home, "/tmp"},
                        [&recorder](const std::string& p, const struct stat& st) {
                          return recorder.check_read(p, st);
                        });
  http.files = &files;
  // Only files the files API reaches may go to a page.
  http.upload = [&files, &browser_events](
                    const cabin::computer::Upload& u) -> net::awaitable<cabin::Result<void>> {
    for (const auto& p : u.paths) {
      if (auto f = files.open_file(p); !f) co_return f.error();
    }
    co_return co_await browser_events.fill_file_input(u.paths, u.selector);
  };
  HttpServer server(io.get_executor(), http, state);
  if (auto r = server.start(); !r) {
    log->error("{}", r.error().message);
    return 1;
  }
  if (listen->kind == ListenAddress::Kind::kTcp) {
    log->info("listening on tcp:{}:{}", listen->host, server.tcp_port());
  } else {
    log->info("listening on {}", listen_text);
  }

  if (rfb_port != 0) {
    sup.on_display = [&rfb, rfb_port](const std::string& display) -> cabin::Result<void> {
      auto s = cabin::vnc::RfbServer::start(
          {.display = display, .port = static_cast<uint16_t>(rfb_port)});
      if (!s)
        return cabin::make_error(s.error().errc, s.error().code,
                                 "RFB server: " + s.error().message);
      rfb = std::move(*s);
      return {};
    };
  }
  Supervisor supervisor(io.get_executor(), sup, state);
  supervising = &supervisor;
  net::signal_set signals(io, SIGTERM, SIGINT);
  signals.async_wait([&](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    log->info("signal {}: stopping", sig);
    supervisor.request_stop();
  });

  cabin::spawn(io, browser_events.run(), "the browser's events");
  int exit_code = 0;
  std::string failure;
  cabin::spawn(
      io,
      [&]() -> net::awaitable<void> {
        auto r = co_await supervisor.run();
        if (!r) {
          log->error("exiting: {}", r.error().message);
          failure = r.error().message;
          exit_code = 1;
          // Give long polls that just learnt "failed" a moment to be written.
          net::steady_timer linger(io, std::chrono::milliseconds(200));
          co_await linger.async_wait(net::use_awaitable);
        }
        browser_events.stop();
        recorder.stop_all();
        server.stop();
        signals.cancel();
        io.stop();
      },
      "shutdown on a signal");
  io.run();
  rfb.reset();
  log->info("exit {}", exit_code);
  if (!failure.empty()) {
    // The last line the host reads from the sandbox says what died and how; the driver reports
    // it as the session's end (drivers/namespace: namespace_exit_reason).
    spdlog::apply_all([](const std::shared_ptr<spdlog::logger>& l) { l->flush(); });
    std::fprintf(stderr, "%s%s\n", cabin::agent_protocol::kAgentFailureLinePrefix, failure.c_str());
  }
  return exit_code;
}
