#include "vm-images/agent/supervisor.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "common/agent_protocol.h"
#include "common/log.h"
#include "common/spawn.h"
#include "vm-images/agent/cdp.h"
#include "vm-images/agent/exec_filter.h"
#include "vm-images/agent/process.h"
#include "vnc/display.h"
#include "vnc/input.h"

namespace cabin::agent {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;

using Clock = Notifier::Clock;

// How long the agent waits at most for Chromium's window and for input to reach its page.
constexpr auto kDesktopWait = std::chrono::seconds(10);

int64_t since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

std::string read_small_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::string s(4096, '\0');
  in.read(s.data(), static_cast<std::streamsize>(s.size()));
  s.resize(static_cast<size_t>(in.gcount()));
  return s;
}

bool is_uuid(std::string_view s) {
  if (s.size() != 36) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? c != '-' : !std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// Asks DevTools itself (GET /json/version) for the browser target. Chromium writes
// DevToolsActivePort only when it picked the port (--remote-debugging-port=0), so with a fixed
// port this is how readiness and the target path are learnt.
net::awaitable<std::optional<DevToolsEndpoint>> query_devtools(net::any_io_executor ex,
                                                               uint16_t port) {
  // ws://127.0.0.1:PORT/devtools/browser/<uuid>: keep the path, checked like the file's.
  const std::string path = debugger_path(
      co_await devtools_get(ex, port, "/json/version", 64 * 1024), "/devtools/browser/");
  if (path.empty()) co_return std::nullopt;
  co_return parse_devtools_active_port(std::to_string(port) + "\n" + path);
}

// The first page target of /json/list, or a discarded value.
net::awaitable<nlohmann::json> first_page(net::any_io_executor ex, uint16_t port) {
  auto j = co_await devtools_get(ex, port, "/json/list", 1024 * 1024);
  if (j.is_array()) {
    for (const auto& t : j) {
      if (t.is_object() && t.value("type", "") == "page") co_return t;
    }
  }
  co_return nlohmann::json::value_t::discarded;
}

// True once the first page target has left about:blank, i.e. the start URL's navigation has
// committed. A client that attaches while that first navigation is still in flight can wait
// forever for the page's main world (seen with Playwright on slow guests), so "ready" waits.
bool start_page_committed(const nlohmann::json& page) {
  return page.is_object() && page.value("url", "about:blank") != "about:blank";
}

// The value a page's `expression` evaluates to, awaited if it is a promise; discarded on any
// failure.
nlohmann::json evaluate_result(const nlohmann::json& answer) {
  if (!answer.is_object() || answer.contains("exceptionDetails"))
    return nlohmann::json::value_t::discarded;
  auto r = answer.find("result");
  if (r == answer.end() || !r->is_object() || !r->contains("value")) {
    return nlohmann::json::value_t::discarded;
  }
  return (*r)["value"];
}

// True once the page at DevTools path `path` has got as far as `wait`. kCommit: it has a
// document of its own, not the first about:blank. kLoad: its document's readyState is
// "complete", which it becomes in the task that fires the load event, so that the page's load
// handlers have run. kNetworkIdle: besides, no request of the page's has been in flight for
// kNetworkQuiet, watched from Network.enable on (what Playwright calls networkidle). A page that
// never goes quiet (long polling) is taken as it is after kNetworkIdleWait.
constexpr auto kNetworkQuiet = std::chrono::milliseconds(500);
constexpr auto kNetworkIdleWait = std::chrono::seconds(15);
// How long a fork's pages may take to load, once committed, before the answer goes anyway.
constexpr auto kRestoreLoadGrace = std::chrono::seconds(5);

// `blank_goal`: about:blank is where the page was sent, so it counts as committed.
net::awaitable<bool> page_reached(net::any_io_executor ex, uint16_t port, const std::string& path,
                                  WaitUntil wait, bool blank_goal = false) {
  CdpSocket ws(ex);
  if (!co_await cdp_open(ws, port, path, std::chrono::seconds(5))) co_return false;
  // The target's URL is the navigation's as soon as it starts; the document's own says whether
  // it has committed. Until then the page is the first about:blank, "complete" from the start.
  // (Named, not temporaries: GCC 12 mishandles initializer lists in a co_await's arguments.)
  nlohmann::json ask_state = {{"expression", "[document.readyState, location.href]"},
                              {"returnByValue", true}};
  const auto answer = co_await cdp_call(ws, 1, "Runtime.evaluate", std::move(ask_state));
  const auto found = evaluate_result(answer);
  const bool committed = found.is_array() && found.size() == 2 && found[1].is_string() &&
                         (blank_goal || found[1].get<std::string>() != "about:blank");
  const auto state = committed ? found[0] : nlohmann::json();
  if (!committed || wait == WaitUntil::kCommit) {
    co_await cdp_close(ws);
    co_return committed;
  }
  if (state != "complete" || wait == WaitUntil::kLoad) {
    co_await cdp_close(ws);
    co_return state == "complete";
  }
  // Network idle. The page itself keeps time: each tick is a call that answers after 100 ms, and
  // the events read meanwhile say which requests are in flight.
  beast::get_lowest_layer(ws).expires_after(kNetworkIdleWait + std::chrono::seconds(2));
  nlohmann::json no_params = nlohmann::json::object();
  const auto enabled = co_await cdp_call(ws, 2, "Network.enable", std::move(no_params));
  if (!enabled.is_object()) co_return false;
  std::set<std::string> in_flight;
  auto last_change = Clock::now();
  const CdpEvents watch = [&](const nlohmann::json& m) {
    const std::string method = m.value("method", "");
    const auto params = m.value("params", nlohmann::json::object());
    const std::string id = params.is_object() ? params.value("requestId", "") : "";
    if (method == "Network.requestWillBeSent") {
      in_flight.insert(id);
      last_change = Clock::now();
    } else if (method == "Network.loadingFinished" || method == "Network.loadingFailed") {
      in_flight.erase(id);
      last_change = Clock::now();
    }
  };
  const auto give_up = Clock::now() + kNetworkIdleWait;
  while (Clock::now() < give_up) {
    nlohmann::json tick = {{"expression", "new Promise((r) => setTimeout(() => r(1), 100))"},
                           {"awaitPromise", true},
                           {"returnByValue", true}};
    const auto ticked = co_await cdp_call(ws, 3, "Runtime.evaluate", std::move(tick), &watch);
    // An error answer (the page navigated meanwhile) is one more tick; a broken connection ends it.
    if (ticked.is_discarded() && !ws.is_open()) co_return false;
    if (in_flight.empty() && Clock::now() - last_change >= kNetworkQuiet) {
      co_await cdp_close(ws);
      co_return true;
    }
  }
  cabin::logger("agent")->warn("the start page's network did not go quiet within {} s",
                               kNetworkIdleWait.count());
  co_await cdp_close(ws);
  co_return true;
}

// The same for the start page, the browser's first.
net::awaitable<bool> start_page_reached(net::any_io_executor ex, uint16_t port, WaitUntil wait,
                                        bool blank_goal = false) {
  const auto page = co_await first_page(ex, port);
  if (!blank_goal && !start_page_committed(page)) co_return false;
  const std::string path = debugger_path(page, "/devtools/page/");
  if (path.empty()) co_return false;
  co_return co_await page_reached(ex, port, path, wait, blank_goal);
}

// A page by its DevTools path, or the start page when `path` is empty.
net::awaitable<bool> page_or_start_reached(net::any_io_executor ex, uint16_t port,
                                           const std::string& path, WaitUntil wait,
                                           bool blank_goal) {
  if (path.empty()) co_return co_await start_page_reached(ex, port, wait, blank_goal);
  co_return co_await page_reached(ex, port, path, wait, blank_goal);
}

// True when the browser target takes a CDP WebSocket and answers on it, as a client's will:
// DevTools can take a TCP connection before it serves the browser target.
net::awaitable<bool> browser_answers(net::any_io_executor ex, uint16_t port,
                                     const std::string& browser_path) {
  nlohmann::json none = nlohmann::json::object();
  auto version = co_await cdp_call_once(ex, port, browser_path, "Browser.getVersion",
                                        std::move(none), std::chrono::seconds(5));
  co_return version.is_object() && version.contains("product");
}

// True once a pointer move made through X reaches the first page's DOM. Chromium maps its
// window, draws and only then delivers input to the page; events sent before that are dropped
// without a trace, and no single signal says when they no longer are. So the agent moves the
// pointer by a pixel at `p` until a listener in an isolated world (out of the page's sight)
// has seen a mousemove.
net::awaitable<bool> input_reaches_page(net::any_io_executor ex, uint16_t port, vnc::Input& input,
                                        vnc::Point p) {
  const std::string path = debugger_path(co_await first_page(ex, port), "/devtools/page/");
  if (path.empty()) co_return false;
  CdpSocket ws(ex);
  if (!(co_await cdp_open(ws, port, path, std::chrono::seconds(5)))) co_return false;
  auto tree = co_await cdp_call(ws, 1, "Page.getFrameTree", nlohmann::json::object());
  if (!tree.is_object() || !tree.contains("frameTree")) co_return false;
  const nlohmann::json frame = tree["frameTree"].value("frame", nlohmann::json::object());
  if (!frame.contains("id") || !frame["id"].is_string()) co_return false;
  // (Parameters are built before each co_await: GCC 12 miscompiles braced lists inside one.)
  nlohmann::json params = nlohmann::json::object();
  params["frameId"] = frame["id"];
  params["worldName"] = "cabin-input-probe";
  auto world = co_await cdp_call(ws, 2, "Page.createIsolatedWorld", std::move(params));
  if (!world.is_object() || !world.contains("executionContextId")) co_return false;
  const nlohmann::json context = world["executionContextId"];
  params = nlohmann::json::object();
  params["contextId"] = context;
  params["expression"] = "addEventListener('mousemove', () => { window.moved = true; }, true)";
  auto armed = co_await cdp_call(ws, 3, "Runtime.evaluate", std::move(params));
  if (!armed.is_object()) co_return false;
  for (int attempt = 0; attempt < 20; ++attempt) {
    if (!input.move({p.x + attempt % 2, p.y})) co_return false;
    params = nlohmann::json::object();
    params["contextId"] = context;
    params["expression"] =
        "new Promise(r => window.moved ? r(true) : setTimeout(() => r(!!window.moved), 50))";
    params["awaitPromise"] = true;
    params["returnByValue"] = true;
    auto seen = co_await cdp_call(ws, 4 + attempt, "Runtime.evaluate", std::move(params));
    if (!seen.is_object() || !seen.contains("result")) co_return false;
    const auto& value = seen["result"].value("value", nlohmann::json());
    if (value.is_boolean() && value.template get<bool>()) {
      co_await cdp_close(ws);
      co_return true;
    }
  }
  co_return false;
}

}  // namespace

net::awaitable<Result<nlohmann::json>> capture_browser_state(net::any_io_executor ex,
                                                             const DevToolsEndpoint& devtools) {
  nlohmann::json urls = nlohmann::json::array();
  const auto list = co_await devtools_get(ex, devtools.port, "/json/list", 4 * 1024 * 1024);
  if (!list.is_array())
    co_return make_error(Errc::kUnavailable, "cdp_failed", "DevTools listed no targets");
  // DevTools lists the most recently active first; the first page is the one the session began
  // with, so the list is turned around.
  for (auto it = list.rbegin(); it != list.rend() && urls.size() < agent_protocol::kMaxStatePages;
       ++it) {
    if (it->is_object() && it->value("type", "") == "page") urls.push_back(it->value("url", ""));
  }
  nlohmann::json none = nlohmann::json::object();
  auto got = co_await cdp_call_once(ex, devtools.port, devtools.browser_path, "Storage.getCookies",
                                    std::move(none), std::chrono::seconds(10));
  if (!got.is_object() || !got.contains("cookies") || !got["cookies"].is_array()) {
    co_return make_error(Errc::kUnavailable, "cdp_failed",
                         "the browser's DevTools gave no cookies (Storage.getCookies)");
  }
  // As Storage.setCookies takes them: its fields only, and no expiry for a session cookie.
  nlohmann::json cookies = nlohmann::json::array();
  for (const auto& c : got["cookies"]) {
    if (!c.is_object()) continue;
    nlohmann::json p = nlohmann::json::object();
    for (const char* f : {"name", "value", "domain", "path", "secure", "httpOnly", "sameSite",
                          "priority", "sourceScheme", "sourcePort", "partitionKey"}) {
      if (c.contains(f)) p[f] = c[f];
    }
    if (!c.value("session", false) && c.contains("expires")) p["expires"] = c["expires"];
    cookies.push_back(std::move(p));
  }
  co_return nlohmann::json{{"cookies", std::move(cookies)}, {"urls", std::move(urls)}};
}

net::awaitable<Result<void>> restore_browser_state(net::any_io_executor ex,
                                                   const DevToolsEndpoint& devtools,
                                                   nlohmann::json state,
                                                   std::chrono::milliseconds timeout) {
  nlohmann::json set = {{"cookies", std::move(state["cookies"])}};
  auto done = co_await cdp_call_once(ex, devtools.port, devtools.browser_path, "Storage.setCookies",
                                     std::move(set), std::chrono::seconds(10));
  if (!done.is_object()) {
    co_return make_error(Errc::kInvalidArgument, "bad_state",
                         "the browser's DevTools took no cookies (Storage.setCookies)");
  }
  const auto deadline = Clock::now() + timeout;
  const auto& urls = state["urls"];
  if (urls.empty()) co_return Result<void>{};
  std::string first = urls[0].get<std::string>();
  const bool first_blank = first == "about:blank";
  auto went = co_await navigate_first_page(ex, devtools.port, std::move(first), WaitUntil::kCommit,
                                           timeout);
  if (!went) co_return went.error();
  CdpSocket ws(ex);
  if (!co_await cdp_open(ws, devtools.port, devtools.browser_path, std::chrono::seconds(10)))
    co_return make_error(Errc::kUnavailable, "cdp_failed", "the browser's DevTools did not answer");
  std::vector<std::pair<std::string, bool>> opened;  // target, sent to about:blank
  for (size_t i = 1; i < urls.size(); ++i) {
    nlohmann::json open = {{"url", urls[i]}, {"background", true}};
    auto made =
        co_await cdp_call(ws, static_cast<int>(i) + 1, "Target.createTarget", std::move(open));
    if (!made.is_object() || !made.contains("targetId") || !made["targetId"].is_string()) {
      co_await cdp_close(ws);
      co_return make_error(Errc::kUnavailable, "cdp_failed", "Target.createTarget failed");
    }
    opened.emplace_back(made["targetId"].get<std::string>(), urls[i] == "about:blank");
  }
  co_await cdp_close(ws);
  // Every page must have committed; each gets a few seconds more to load, as a page the source
  // had still loading (or one that never ends) must not hold the fork for the whole timeout.
  const auto settle = std::min(deadline, Clock::now() + kRestoreLoadGrace);
  std::vector<std::pair<std::string, bool>> pages = {{"", first_blank}};
  for (const auto& [id, blank] : opened) pages.emplace_back("/devtools/page/" + id, blank);
  for (const auto& [path, blank] : pages) {
    while (!co_await page_or_start_reached(ex, devtools.port, path, WaitUntil::kCommit, blank)) {
      if (Clock::now() >= deadline) {
        co_return make_error(
            Errc::kTimeout, "start_timeout",
            "a page did not commit within " + std::to_string(timeout.count()) + " ms");
      }
      net::steady_timer t(ex, std::chrono::milliseconds(10));
      co_await t.async_wait(net::use_awaitable);
    }
    while (Clock::now() < settle &&
           !co_await page_or_start_reached(ex, devtools.port, path, WaitUntil::kLoad, blank)) {
      net::steady_timer t(ex, std::chrono::milliseconds(10));
      co_await t.async_wait(net::use_awaitable);
    }
  }
  co_return Result<void>{};
}

net::awaitable<Result<void>> navigate_first_page(net::any_io_executor ex, uint16_t port,
                                                 std::string url, WaitUntil wait,
                                                 std::chrono::milliseconds timeout,
                                                 OnLoadError on_error) {
  const auto deadline = Clock::now() + timeout;
  const bool blank = url == "about:blank";
  // A browser restored from a snapshot taken as it became ready may not list its first page
  // yet, or answer DevTools slowly while its code is translated anew under TCG: wait for it.
  std::string path;
  for (;;) {
    path = debugger_path(co_await first_page(ex, port), "/devtools/page/");
    if (!path.empty()) break;
    if (Clock::now() >= deadline)
      co_return make_error(Errc::kUnavailable, "no_page", "the browser has no page");
    net::steady_timer t(ex, std::chrono::milliseconds(50));
    co_await t.async_wait(net::use_awaitable);
  }
  {
    CdpSocket ws(ex);
    if (!co_await cdp_open(ws, port, path, std::chrono::seconds(10))) {
      co_return make_error(Errc::kUnavailable, "cdp_failed", "the page's DevTools did not answer");
    }
    nlohmann::json go = {{"url", url}};
    // The answer may take longer than the connect did (a restored copy's browser runs its code
    // translated anew under TCG): it gets what is left of the timeout, 10 s at least.
    beast::get_lowest_layer(ws).expires_at(
        std::max(deadline, Clock::now() + std::chrono::seconds(10)));
    std::string why;
    const auto answer = co_await cdp_call(ws, 1, "Page.navigate", std::move(go), nullptr, &why);
    // Keys typed next go to the page, not to the omnibox a blank first page left focused.
    nlohmann::json none = nlohmann::json::object();
    if (answer.is_object()) (void)co_await cdp_call(ws, 2, "Page.bringToFront", std::move(none));
    co_await cdp_close(ws);
    if (!answer.is_object()) {
      co_return make_error(Errc::kUnavailable, "navigation_failed", "Page.navigate failed: " + why);
    }
    // A page that fails to load gets Chromium's error page, as a start URL does: that loads.
    if (const std::string why = answer.value("errorText", ""); !why.empty()) {
      cabin::logger("agent")->info("navigation to {} failed: {}", url.substr(0, 200), why);
      if (on_error == OnLoadError::kFail) {
        co_return make_error(Errc::kUnavailable, "navigation_failed",
                             "the page did not load: " + why.substr(0, 200));
      }
    }
  }
  // Then as a start page: committed, loaded, or quiet, as asked.
  while (Clock::now() < deadline) {
    if (co_await start_page_reached(ex, port, wait, blank)) co_return Result<void>{};
    net::steady_timer t(ex, std::chrono::milliseconds(10));
    co_await t.async_wait(net::use_awaitable);
  }
  co_return make_error(
      Errc::kTimeout, "start_timeout",
      "the page did not get as far as asked within " + std::to_string(timeout.count()) + " ms");
}

bool chromium_no_sandbox(ChromiumSandbox mode, uid_t euid, bool env_says_no_sandbox) {
  switch (mode) {
    case ChromiumSandbox::kOn:
      return false;
    case ChromiumSandbox::kOff:
      return true;
    case ChromiumSandbox::kAuto:
      return euid == 0 || env_says_no_sandbox;
  }
  return false;
}

std::vector<std::string> chromium_argv(const SupervisorOptions& o, bool no_sandbox,
                                       bool disable_dev_shm) {
  std::vector<std::string> a = {
      o.chromium,
      // DevTools must stay on the sandbox's loopback; the agent's CONNECT is the only way in.
      "--remote-debugging-address=127.0.0.1",
      "--remote-debugging-port=" + std::to_string(o.devtools_port),
      "--user-data-dir=" + o.home + "/chromium",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--no-default-browser-check",
      "--window-position=0,0",
      "--window-size=" + std::to_string(o.width) + "," + std::to_string(o.height),
      "--password-store=basic",
      // A child process (the network service, the GPU, a renderer) that the browser has not
      // connected to within Chromium's 15 s ends itself: a guest busy under TCG takes longer,
      // and the network service's restart then cuts the first page's load. Outwait the start.
      "--ipc-connection-timeout=" +
          std::to_string(std::max<int64_t>(
              60, std::chrono::duration_cast<std::chrono::seconds>(o.startup_timeout).count())),
  };
  if (no_sandbox) a.push_back("--no-sandbox");
  if (disable_dev_shm) a.push_back("--disable-dev-shm-usage");
  if (o.egress_proxy_port != 0) {
    const std::string proxy = "http://127.0.0.1:" + std::to_string(o.egress_proxy_port);
    a.insert(
        a.end(),
        {
            "--proxy-server=" + proxy,
            // QUIC and WebRTC's UDP would not pass an HTTP proxy: off, so nothing tries around it.
            "--disable-quic", "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
            // No --host-resolver-rules: Chromium shows a warning bar for it in every screen. A
            // name it resolves itself finds no resolver and no route, as a command's does; the
            // managed policy turns prediction (DNS prefetch, preconnect) off.
        });
  }
  // "--" ends the switches, so a start URL can never be read as one.
  a.push_back("--");
  a.push_back(o.start_url);
  return a;
}

std::optional<DevToolsEndpoint> parse_devtools_active_port(std::string_view content) {
  auto nl = content.find('\n');
  if (nl == std::string_view::npos) return std::nullopt;
  auto port_text = content.substr(0, nl);
  auto path = content.substr(nl + 1);
  while (!path.empty() && (path.back() == '\n' || path.back() == '\r')) path.remove_suffix(1);
  if (port_text.empty() || port_text.size() > 5) return std::nullopt;
  uint32_t port = 0;
  for (char c : port_text) {
    if (c < '0' || c > '9') return std::nullopt;
    port = port * 10 + static_cast<uint32_t>(c - '0');
  }
  if (port == 0 || port > 65535) return std::nullopt;
  constexpr std::string_view kPrefix = "/devtools/browser/";
  if (path.substr(0, kPrefix.size()) != kPrefix || !is_uuid(path.substr(kPrefix.size()))) {
    return std::nullopt;  // also a file caught half-written
  }
  return DevToolsEndpoint{static_cast<uint16_t>(port), std::string(path)};
}

Supervisor::Supervisor(net::any_io_executor ex, SupervisorOptions opts, AgentState& state)
    : ex_(ex), opts_(std::move(opts)), state_(state), changed_(ex) {}

Supervisor::~Supervisor() = default;  // ChildProcess kills and reaps what is still running

void Supervisor::request_stop() {
  stopping_ = true;
  changed_.notify_all();
}

void Supervisor::fail(std::string why) {
  if (failure_ || stopping_) return;
  logger("agent.supervisor")->error("{}", why);
  failure_ = why;
  state_.set_failed(std::move(why));
  changed_.notify_all();
}

net::awaitable<void> Supervisor::watch(ChildProcess* child, std::string name) {
  int status = co_await child->wait();
  const bool closed = browser_closing_ && child == chromium_.get();
  if (!stopping_ && !closed) fail(name + " " + describe_wait_status(status));
  changed_.notify_all();
}

net::awaitable<void> Supervisor::read_display(std::shared_ptr<net::posix::stream_descriptor> pipe) {
  std::string line;
  boost::system::error_code ec;
  co_await net::async_read_until(*pipe, net::dynamic_buffer(line, 64), '\n',
                                 net::redirect_error(net::use_awaitable, ec));
  auto nl = line.find('\n');
  if (!ec && nl != std::string::npos && nl > 0 && nl <= 5 &&
      line.find_first_not_of("0123456789") == nl) {
    display_ = ":" + line.substr(0, nl);
  }
  display_eof_ = true;
  changed_.notify_all();
}

net::awaitable<Result<void>> Supervisor::start_children() {
  auto log = logger("agent.supervisor");
  const auto start = Clock::now();
  const auto deadline = start + opts_.startup_timeout;
  auto stop_or_fail = [&]() -> Result<void> {
    if (failure_) return make_error(Errc::kUnavailable, "start_failed", *failure_);
    return {};
  };

  // 1. Xvfb picks a free display and writes its number to the pipe behind -displayfd.
  auto pipe = make_pipe();
  if (!pipe) co_return pipe.error();
  SpawnOptions xo;
  xo.search_path = true;
  xo.argv = {opts_.xvfb,  "-displayfd",
             "3",         "-screen",
             "0",         std::to_string(opts_.width) + "x" + std::to_string(opts_.height) + "x24",
             "-nolisten", "tcp",
             "-noreset"};
  if (!opts_.filter_helper.empty()) {
    auto path = find_program(opts_.xvfb);
    if (!path) {
      fail("cannot start Xvfb: " + path.error().message);
      co_return stop_or_fail();
    }
    xo.argv = filtered_exec_argv(opts_.filter_helper, std::nullopt, *path, xo.argv);
  }
  xo.env = child_environment({});
  xo.stderr_fd = STDERR_FILENO;
  xo.extra_fds = {pipe->write.get()};
  auto xvfb = ChildProcess::spawn(ex_, xo);
  if (!xvfb) {
    fail("cannot start Xvfb: " + xvfb.error().message);
    co_return stop_or_fail();
  }
  xvfb_ = std::move(*xvfb);
  pipe->write.reset();  // EOF on the pipe then means Xvfb is gone
  cabin::spawn(ex_, watch(xvfb_.get(), "Xvfb"), "Xvfb exit");
  auto display_pipe = std::make_shared<net::posix::stream_descriptor>(ex_, pipe->read.release());
  cabin::spawn(ex_, read_display(display_pipe), "Xvfb display number");

  while (!display_eof_ && !failure_ && !stopping_ && Clock::now() < deadline) {
    co_await changed_.wait_until(deadline);
  }
  boost::system::error_code ignored;
  display_pipe->close(ignored);
  if (failure_ || stopping_) co_return stop_or_fail();
  if (!display_) {
    fail(display_eof_ ? "Xvfb did not report a display" : "Xvfb did not start in time");
    co_return stop_or_fail();
  }
  state_.set_display(*display_);
  if (opts_.on_display) {
    if (auto r = opts_.on_display(*display_); !r) {
      fail(r.error().message);
      co_return stop_or_fail();
    }
  }
  log->info("Xvfb on display {} after {} ms", *display_,
            std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count());

  // 2. The egress proxy accepts before Chromium starts, so that its first page can load.
  if (opts_.egress_proxy_port != 0) {
    const net::ip::tcp::endpoint proxy(net::ip::address_v4::loopback(), opts_.egress_proxy_port);
    for (;;) {
      net::ip::tcp::socket probe(ex_);
      boost::system::error_code ec;
      co_await probe.async_connect(proxy, net::redirect_error(net::use_awaitable, ec));
      if (!ec) break;
      if (failure_ || stopping_) co_return stop_or_fail();
      if (Clock::now() >= deadline) {
        fail("the egress proxy on 127.0.0.1:" + std::to_string(opts_.egress_proxy_port) +
             " did not accept within " + std::to_string(opts_.startup_timeout.count()) + " ms");
        co_return stop_or_fail();
      }
      co_await changed_.wait_until(std::min(deadline, Clock::now() + opts_.poll_interval));
    }
  }

  // 3. Chromium on that display. A DevToolsActivePort left by an earlier run must not count.
  const std::string profile = opts_.home + "/chromium";
  const std::string port_file = profile + "/DevToolsActivePort";
  std::error_code fec;
  std::filesystem::create_directories(profile, fec);
  std::filesystem::remove(port_file, fec);
  const char* env_no_sandbox = ::getenv("CABIN_CHROMIUM_NO_SANDBOX");
  const bool no_sandbox = chromium_no_sandbox(opts_.sandbox, ::geteuid(),
                                              env_no_sandbox != nullptr && *env_no_sandbox != '\0');
  struct stat sb;
  const bool no_dev_shm = ::stat("/dev/shm", &sb) != 0 || !S_ISDIR(sb.st_mode);
  SpawnOptions co;
  co.search_path = true;
  co.argv = chromium_argv(opts_, no_sandbox, no_dev_shm);
  co.env = child_environment({{"DISPLAY", *display_}, {"HOME", opts_.home}});
  co.stderr_fd = STDERR_FILENO;
  auto chromium = ChildProcess::spawn(ex_, co);
  if (!chromium) {
    fail("cannot start Chromium: " + chromium.error().message);
    co_return stop_or_fail();
  }
  chromium_ = std::move(*chromium);
  cabin::spawn(ex_, watch(chromium_.get(), "Chromium"), "Chromium exit");
  log->info("Chromium started (pid {}, sandbox {})", chromium_->pid(), no_sandbox ? "off" : "on");

  // 4. Ready once DevTools answers. With port 0, DevToolsActivePort names the port and target and
  // a TCP connect must succeed; with a fixed port Chromium writes no such file, so
  // GET /json/version on that port must answer with the browser target. Then the browser target
  // must answer a CDP call over a WebSocket, so that ready means what a client will do works.
  const bool needs_start_page = !opts_.start_url.empty() && opts_.start_url != "about:blank";
  std::optional<DevToolsEndpoint> ready;
  while (!failure_ && !stopping_) {
    if (Clock::now() >= deadline) {
      fail("Chromium's DevTools did not come up within " +
           std::to_string(opts_.startup_timeout.count()) + " ms");
      break;
    }
    std::optional<DevToolsEndpoint> ep;
    if (opts_.devtools_port == 0) {
      ep = parse_devtools_active_port(read_small_file(port_file));
      if (ep) {
        net::ip::tcp::socket probe(ex_);
        boost::system::error_code ec;
        co_await probe.async_connect({net::ip::address_v4::loopback(), ep->port},
                                     net::redirect_error(net::use_awaitable, ec));
        if (ec) ep.reset();
      }
    } else {
      ep = co_await query_devtools(ex_, opts_.devtools_port);
    }
    if (ep && needs_start_page && !(co_await start_page_reached(ex_, ep->port, opts_.wait_until)))
      ep.reset();
    if (ep && opts_.probe_cdp && !(co_await browser_answers(ex_, ep->port, ep->browser_path))) {
      ep.reset();
    }
    if (ep && !failure_ && !stopping_) {
      log->info("ready after {} ms: DevTools on 127.0.0.1:{}{}", since(start), ep->port,
                ep->browser_path);
      ready = ep;
      state_.set_ready(std::move(*ep));
      break;
    }
    co_await changed_.wait_until(std::min(deadline, Clock::now() + opts_.poll_interval));
  }
  if (!ready || !opts_.wait_for_desktop) {
    if (ready) state_.set_desktop_ready();
    co_return stop_or_fail();
  }

  // 4. The desktop is ready once Chromium's window is mapped and input reaches its page. DevTools
  // answers well before either; a click sent before the window is mapped lands on the root
  // window, and one sent soon after is dropped by Chromium. CDP clients need neither, so they
  // are not held up: only input and screenshots wait for this. A page that takes no input (a
  // script that blocks it) does not hold them forever.
  std::optional<vnc::Display> x;
  std::optional<vnc::Input> input;  // after x: it uses x's connection
  bool shown = false;
  const auto give_up = std::min(deadline, Clock::now() + kDesktopWait);
  while (!failure_ && !stopping_) {
    if (Clock::now() >= give_up) {
      log->warn("Chromium's {} within {} ms; input and screenshots go ahead without it",
                shown ? "page took no pointer move" : "window was not mapped",
                std::chrono::duration_cast<std::chrono::milliseconds>(kDesktopWait).count());
      break;
    }
    if (!x) {
      if (auto d = vnc::Display::open(*display_)) x.emplace(std::move(*d));
    }
    if (x && !input) {
      if (auto in = vnc::Input::create(*x)) input.emplace(std::move(*in));
    }
    if (!shown && x) {
      auto viewable = x->has_viewable_window(chromium_->pid());
      shown = viewable.ok() && *viewable;
    }
    const vnc::Point centre{opts_.width / 2, opts_.height / 2};
    if (shown && input && co_await input_reaches_page(ex_, ready->port, *input, centre)) {
      log->info("desktop ready after {} ms", since(start));
      break;
    }
    co_await changed_.wait_until(std::min(give_up, Clock::now() + opts_.poll_interval));
  }
  if (!failure_ && !stopping_) state_.set_desktop_ready();
  co_return stop_or_fail();
}

net::awaitable<void> Supervisor::stop_children() {
  // Staged: SIGTERM to each group, wait up to stop_grace, then SIGKILL. Groups are signalled
  // even when their leader is gone, for helpers left behind.
  ChildProcess* children[] = {chromium_.get(), xvfb_.get()};
  for (auto* c : children) {
    if (c) c->kill_group(SIGTERM);
  }
  auto all_exited = [&] {
    for (auto* c : children) {
      if (c && !c->exited()) return false;
    }
    return true;
  };
  const auto deadline = Clock::now() + opts_.stop_grace;
  while (!all_exited() && Clock::now() < deadline) co_await changed_.wait_until(deadline);
  for (auto* c : children) {
    if (c) c->kill_group(SIGKILL);
  }
  while (!all_exited()) co_await changed_.wait_until(Clock::time_point::max());
}

net::awaitable<Result<void>> Supervisor::close_browser(std::chrono::milliseconds grace) {
  if (!chromium_ || chromium_->exited()) co_return Result<void>{};
  browser_closing_ = true;
  const auto deadline = Clock::now() + grace;
  bool asked = false;
  if (const auto devtools = state_.snapshot().devtools) {
    websocket::stream<beast::tcp_stream> ws(ex_);
    if (co_await cdp_open(ws, devtools->port, devtools->browser_path, std::chrono::seconds(5))) {
      nlohmann::json none = nlohmann::json::object();
      // The browser may exit before it answers: the exit below is what counts.
      (void)co_await cdp_call(ws, 1, "Browser.close", std::move(none));
      asked = true;
    }
  }
  while (!chromium_->exited() && Clock::now() < deadline) co_await changed_.wait_until(deadline);
  if (chromium_->exited()) co_return Result<void>{};
  chromium_->kill_group(SIGKILL);
  while (!chromium_->exited()) co_await changed_.wait_until(Clock::time_point::max());
  co_return make_error(Errc::kTimeout, "browser_close_timeout",
                       asked ? "the browser did not exit within its grace after Browser.close"
                             : "the browser's DevTools did not answer; it was killed");
}

net::awaitable<Result<void>> Supervisor::run() {
  auto started = co_await start_children();
  if (started) {
    while (!failure_ && !stopping_) co_await changed_.wait_until(Clock::time_point::max());
  }
  // Stop what is left whether we failed or were asked to; nothing is restarted silently.
  stopping_ = true;
  co_await stop_children();
  if (failure_) co_return make_error(Errc::kUnavailable, "child_exited", *failure_);
  co_return Result<void>{};
}

}  // namespace cabin::agent
