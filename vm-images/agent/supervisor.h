// Supervisor: starts Xvfb and Chromium, reports readiness, and ends everything if either exits.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <sys/types.h>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "vm-images/agent/agent_state.h"
#include "common/notifier.h"
#include "vm-images/agent/process.h"

namespace cabin::agent {

enum class ChromiumSandbox { kAuto, kOn, kOff };

// How far the start page must have come before the agent reports ready: its navigation
// committed, its load event fired, or besides that no request of its in flight for 500 ms.
enum class WaitUntil { kCommit, kLoad, kNetworkIdle };
// Their names, as the command line and cabind's requests give them.
inline const std::map<std::string, WaitUntil> kWaitUntilNames = {
    {"commit", WaitUntil::kCommit},
    {"load", WaitUntil::kLoad},
    {"networkidle", WaitUntil::kNetworkIdle}};

struct SupervisorOptions {
  std::string xvfb = "/usr/bin/Xvfb";
  std::string chromium = "/usr/bin/chromium";
  // Non-empty: Xvfb starts through this binary's exec filter helper (exec_filter.h), as exec'd
  // commands do; only Chromium, whose own sandbox makes namespaces, starts without it.
  std::string filter_helper;
  int width = 1280;
  int height = 800;
  std::string start_url = "about:blank";
  WaitUntil wait_until = WaitUntil::kLoad;  // about:blank waits for nothing
  // cabind's egress proxy on the sandbox's loopback (0: none). Chromium goes through it, with
  // nothing that could go around it; Chromium starts once it accepts.
  uint16_t egress_proxy_port = 0;
  // 0 lets Chromium pick, and only then does it write DevToolsActivePort, the quickest ready signal.
  uint16_t devtools_port = 0;
  std::string home;               // Chromium's HOME; its profile is HOME/chromium
  ChromiumSandbox sandbox = ChromiumSandbox::kAuto;
  std::chrono::milliseconds startup_timeout{90000};
  std::chrono::milliseconds poll_interval{10};
  std::chrono::milliseconds stop_grace{3000};  // SIGTERM, then SIGKILL after this
  // After ready, watch for Chromium's window on the display and its page drawing frames before
  // marking the desktop ready; off, the desktop counts as ready with DevTools (no X server).
  bool wait_for_desktop = true;
  // Ready needs a CDP call over a WebSocket to the browser target to succeed (off for fakes
  // that serve no WebSocket).
  bool probe_cdp = true;
  // Called once Xvfb is up, before Chromium starts (the live view's RFB server); an error fails
  // the start like a child that would not start.
  std::function<Result<void>(const std::string& display)> on_display;
};

// auto: Chromium's sandbox stays on unless it cannot work (running as root) or the environment
// says so (CABIN_CHROMIUM_NO_SANDBOX, set by drivers whose sandbox forbids it).
bool chromium_no_sandbox(ChromiumSandbox mode, uid_t euid, bool env_says_no_sandbox);

// Chromium's full argv for the given decisions.
std::vector<std::string> chromium_argv(const SupervisorOptions& o, bool no_sandbox,
                                       bool disable_dev_shm);

// DevToolsActivePort (written by Chromium only when it picked the port itself): line 1 the port,
// line 2 "/devtools/browser/<uuid>".
std::optional<DevToolsEndpoint> parse_devtools_active_port(std::string_view content);

// What a navigation that Chromium could not complete is: a page that shows Chromium's error (a
// start URL, a restored page: the session goes on), or a failure that says Chromium's error.
enum class OnLoadError { kErrorPage, kFail };

// Navigates the browser's first page (DevTools on `port`) to `url` and waits until it got as far
// as `wait`, within `timeout`.
net::awaitable<Result<void>> navigate_first_page(net::any_io_executor ex, uint16_t port,
                                                 std::string url, WaitUntil wait,
                                                 std::chrono::milliseconds timeout,
                                                 OnLoadError on_error = OnLoadError::kErrorPage);

// What a browser carries that another can be given: its cookies (CDP's Storage.getCookies, as
// CookieParam objects) and its pages' URLs, first page first (at most
// agent_protocol::kMaxStatePages).
net::awaitable<Result<nlohmann::json>> capture_browser_state(net::any_io_executor ex,
                                                             const DevToolsEndpoint& devtools);
// Gives the browser that state: the cookies, then its first page to the first URL, then a new
// page for each other URL; answers once each has committed and has loaded, or has had a few
// seconds to (a page the source had still loading may never finish).
net::awaitable<Result<void>> restore_browser_state(net::any_io_executor ex,
                                                   const DevToolsEndpoint& devtools,
                                                   nlohmann::json state,
                                                   std::chrono::milliseconds timeout);

class Supervisor {
 public:
  Supervisor(net::any_io_executor ex, SupervisorOptions opts, AgentState& state);
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;
  ~Supervisor();

  // Starts Xvfb, then Chromium, marks the state ready, then watches both. Returns an error when
  // either fails or exits (the state says failed, the other child is gone), or ok after
  // request_stop() once the children are gone.
  net::awaitable<Result<void>> run();
  // Asks run() to stop the children (SIGTERM, then SIGKILL after stop_grace) and return.
  void request_stop();
  // Closes Chromium with CDP's Browser.close, which writes its profile out, and waits for it to
  // exit (killed if it has not within `grace`). Its exit is then no failure; Xvfb stays.
  net::awaitable<Result<void>> close_browser(std::chrono::milliseconds grace);

 private:
  net::awaitable<Result<void>> start_children();
  net::awaitable<void> watch(ChildProcess* child, std::string name);
  net::awaitable<void> read_display(std::shared_ptr<net::posix::stream_descriptor> pipe);
  net::awaitable<void> stop_children();
  void fail(std::string why);

  net::any_io_executor ex_;
  SupervisorOptions opts_;
  AgentState& state_;
  Notifier changed_;
  std::unique_ptr<ChildProcess> xvfb_;
  std::unique_ptr<ChildProcess> chromium_;
  std::optional<std::string> display_;
  bool display_eof_ = false;
  std::optional<std::string> failure_;
  bool stopping_ = false;
  bool browser_closing_ = false;
};

}  // namespace cabin::agent
