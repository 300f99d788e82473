#include "vm-images/agent/browser_events.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/websocket.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "common/agent_protocol.h"
#include "common/crypto.h"
#include "common/log.h"
#include "common/spawn.h"
#include "common/unique_fd.h"

namespace cabin::agent {
namespace {

namespace beast = boost::beast;
using nlohmann::json;

auto log() { return cabin::logger("agent"); }

// Cuts `s` to at most `max` bytes without splitting a UTF-8 character.
std::string cut_utf8(std::string s, size_t max) {
  if (s.size() <= max) return s;
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  s.resize(n);
  return s;
}

std::string str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// A name in dir that no file has yet: "name", then "name (1).ext", "name (2).ext", ...
std::string unused_name(const std::string& dir, const std::string& name) {
  struct stat st;
  if (::lstat((dir + "/" + name).c_str(), &st) != 0) return name;
  const auto dot = name.rfind('.');
  const bool has_ext = dot != std::string::npos && dot > 0;
  const std::string stem = has_ext ? name.substr(0, dot) : name;
  const std::string ext = has_ext ? name.substr(dot) : std::string();
  for (int i = 1; i < 10000; ++i) {
    std::string candidate = stem + " (" + std::to_string(i) + ")" + ext;
    if (::lstat((dir + "/" + candidate).c_str(), &st) != 0) return candidate;
  }
  return random_hex(8) + ext;
}

constexpr auto kReconnectDelay = std::chrono::seconds(1);
constexpr auto kKeepalive = std::chrono::seconds(15);
constexpr auto kWriteTimeout = std::chrono::seconds(30);

}  // namespace

std::string safe_file_name(std::string_view suggested) {
  std::string out;
  for (char c : suggested) {
    const auto u = static_cast<unsigned char>(c);
    out.push_back(c == '/' || c == '\\' || u < 0x20 || u == 0x7F ? '_' : c);
  }
  while (!out.empty() && (out.front() == '.' || out.front() == ' ')) out.erase(out.begin());
  out = cut_utf8(std::move(out), 200);
  return out.empty() ? "download" : out;
}

BrowserEvents::BrowserEvents(net::any_io_executor ex, AgentState& state, std::string downloads_dir)
    : ex_(ex), state_(state), downloads_dir_(std::move(downloads_dir)), changed_(ex) {}

void BrowserEvents::stop() {
  stopped_ = true;
  if (live_) beast::get_lowest_layer(*live_).cancel();
  changed_.notify_all();
}

std::vector<std::pair<uint64_t, std::string>> BrowserEvents::after(uint64_t since) const {
  std::vector<std::pair<uint64_t, std::string>> out;
  for (const auto& line : lines_)
    if (line.first > since) out.push_back(line);
  return out;
}

std::optional<BrowserEvents::Chooser> BrowserEvents::last_chooser() const {
  if (chooser_ && pages_.count(chooser_->page)) return chooser_;
  return std::nullopt;
}

void BrowserEvents::emit(const std::string& type, json fields) {
  json line = json::object();
  line["seq"] = ++seq_;
  line["type"] = type;
  for (auto& [key, value] : fields.items()) {
    line[key] = value.is_string()
                    ? json(cut_utf8(value.get<std::string>(), agent_protocol::kMaxEventString - 8))
                    : std::move(value);
  }
  lines_.emplace_back(seq_, line.dump(-1, ' ', false, json::error_handler_t::replace));
  while (lines_.size() > agent_protocol::kMaxAgentEvents) lines_.pop_front();
  changed_.notify_all();
}

net::awaitable<void> BrowserEvents::run() {
  std::error_code ec;
  std::filesystem::create_directories(downloads_dir_, ec);
  if (ec) log()->warn("the downloads directory {}: {}", downloads_dir_, ec.message());
  net::steady_timer delay(ex_);
  while (!stopped_) {
    co_await state_.wait_settled(std::chrono::seconds(60));
    const auto& snap = state_.snapshot();
    if (snap.phase == Phase::kFailed) co_return;
    if (snap.phase == Phase::kReady && snap.devtools) co_await watch(*snap.devtools);
    if (stopped_) break;
    delay.expires_after(kReconnectDelay);
    boost::system::error_code ignored;
    co_await delay.async_wait(net::redirect_error(net::use_awaitable, ignored));
  }
}

net::awaitable<void> BrowserEvents::watch(DevToolsEndpoint devtools) {
  CdpSocket ws(ex_);
  if (!co_await cdp_open(ws, devtools.port, devtools.browser_path, std::chrono::seconds(10)))
    co_return;
  ws.read_message_max(1024 * 1024);
  live_ = &ws;
  struct Unlive {
    CdpSocket*& p;
    ~Unlive() { p = nullptr; }
  } unlive{live_};

  std::vector<json> out;
  const CdpEvents on_event = [&](const json& m) { on_message(m, out); };
  // Made here, not by Chromium (0700): exec'd commands, another uid in this group, read downloads.
  if (::mkdir(downloads_dir_.c_str(), 0770) != 0 && errno != EEXIST)
    log()->warn("browser events: {}: {}", downloads_dir_, std::strerror(errno));
  // Downloads land under their guid and are named once they are complete (finish_download).
  json behavior = {
      {"behavior", "allowAndName"}, {"downloadPath", downloads_dir_}, {"eventsEnabled", true}};
  const json set = co_await cdp_call(ws, next_call_++, "Browser.setDownloadBehavior",
                                     std::move(behavior), &on_event);
  if (set.is_discarded()) {
    log()->warn("browser events: Browser.setDownloadBehavior failed");
  }
  json discover = {{"discover", true}};
  const json discovering = co_await cdp_call(ws, next_call_++, "Target.setDiscoverTargets",
                                             std::move(discover), &on_event);
  if (discovering.is_discarded()) {
    co_return;
  }
  beast::get_lowest_layer(ws).expires_never();
  boost::system::error_code ec;
  for (;;) {
    for (auto& call : out) {
      const std::string text = call.dump();
      co_await ws.async_write(net::buffer(text), net::redirect_error(net::use_awaitable, ec));
      if (ec) co_return;
    }
    out.clear();
    if (stopped_) co_return;
    beast::flat_buffer buf;
    co_await ws.async_read(buf, net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return;
    auto m = json::parse(beast::buffers_to_string(buf.data()), nullptr, false);
    if (m.is_object() && m.contains("method")) on_message(m, out);
  }
}

void BrowserEvents::on_message(const json& m, std::vector<json>& out) {
  const std::string method = str(m, "method");
  const json params = m.value("params", json::object());
  if (!params.is_object()) return;
  const json info = params.value("targetInfo", json::object());
  if (method == "Target.targetCreated" && info.is_object() && str(info, "type") == "page") {
    const std::string id = str(info, "targetId");
    if (id.empty()) return;
    // Targets known from an earlier connection come again: announced once.
    if (pages_.emplace(id, str(info, "url")).second)
      emit("page_opened", {{"page", id}, {"url", str(info, "url")}});
    out.push_back({{"id", next_call_++},
                   {"method", "Target.attachToTarget"},
                   {"params", {{"targetId", id}, {"flatten", true}}}});
  } else if (method == "Target.targetInfoChanged" && info.is_object()) {
    auto page = pages_.find(str(info, "targetId"));
    if (page == pages_.end()) return;
    const std::string url = str(info, "url");
    if (url == page->second) return;
    page->second = url;
    emit("navigated", {{"page", page->first}, {"url", url}, {"title", str(info, "title")}});
  } else if (method == "Target.targetDestroyed") {
    const std::string id = str(params, "targetId");
    if (pages_.erase(id)) emit("page_closed", {{"page", id}});
    for (auto it = sessions_.begin(); it != sessions_.end();)
      it = it->second == id ? sessions_.erase(it) : std::next(it);
  } else if (method == "Target.attachedToTarget" && info.is_object()) {
    const std::string session = str(params, "sessionId");
    if (session.empty() || !pages_.count(str(info, "targetId"))) return;
    sessions_[session] = str(info, "targetId");
    out.push_back({{"id", next_call_++}, {"sessionId", session}, {"method", "Page.enable"}});
    // Choosers become events the API answers (an upload action), not windows on the desktop.
    out.push_back({{"id", next_call_++},
                   {"sessionId", session},
                   {"method", "Page.setInterceptFileChooserDialog"},
                   {"params", {{"enabled", true}}}});
  } else if (method == "Target.detachedFromTarget") {
    sessions_.erase(str(params, "sessionId"));
  } else if (method == "Page.javascriptDialogOpening") {
    auto page = sessions_.find(str(m, "sessionId"));
    if (page == sessions_.end()) return;
    emit("dialog_opened", {{"page", page->second},
                           {"url", str(params, "url")},
                           {"dialog", str(params, "type")},
                           {"message", str(params, "message")},
                           {"default_prompt", str(params, "defaultPrompt")}});
  } else if (method == "Page.fileChooserOpened") {
    auto page = sessions_.find(str(m, "sessionId"));
    if (page == sessions_.end()) return;
    const auto node = params.value("backendNodeId", json());
    chooser_ = Chooser{page->second, node.is_number_integer() ? node.get<int64_t>() : 0};
    emit("file_chooser_opened",
         {{"page", page->second},
          {"mode", params.value("mode", "") == "selectMultiple" ? "multiple" : "single"}});
  } else if (method == "Browser.downloadWillBegin") {
    const std::string guid = str(params, "guid");
    if (guid.empty() || guid.find('/') != std::string::npos || guid[0] == '.') return;
    Download d{str(params, "url"), safe_file_name(str(params, "suggestedFilename"))};
    emit("download_started", {{"id", guid}, {"url", d.url}, {"name", d.name}});
    downloads_[guid] = std::move(d);
  } else if (method == "Browser.downloadProgress") {
    const std::string guid = str(params, "guid");
    auto d = downloads_.find(guid);
    if (d == downloads_.end()) return;
    const std::string state = str(params, "state");
    if (state == "completed") {
      // Where the browser put it: here, or where a client that set its own download behavior
      // (Playwright does, for its contexts) asked for.
      std::string from = str(params, "filePath");
      if (from.empty() || from[0] != '/') from = downloads_dir_ + "/" + guid;
      cabin::spawn(ex_, finish_download(guid, std::move(from)), "a finished download");
    } else if (state == "canceled") {
      emit("download_failed", {{"id", guid}, {"name", d->second.name}, {"state", state}});
      downloads_.erase(d);
    }
  }
}

net::awaitable<void> BrowserEvents::finish_download(std::string guid, std::string from) {
  auto it = downloads_.find(guid);
  if (it == downloads_.end()) co_return;
  Download d = std::move(it->second);
  downloads_.erase(it);
  auto failed = [&](const std::string& why) {
    emit("download_failed", {{"id", guid}, {"name", d.name}, {"state", why}});
  };
  const std::string name = unused_name(downloads_dir_, d.name);
  const std::string path = downloads_dir_ + "/" + name;
  // In the downloads directory it is renamed; from elsewhere it is copied in, so that the file
  // stays when whoever asked for that place removes theirs.
  const bool here = from.compare(0, downloads_dir_.size() + 1, downloads_dir_ + "/") == 0 &&
                    from.find('/', downloads_dir_.size() + 1) == std::string::npos;
  if (here && ::rename(from.c_str(), path.c_str()) != 0) co_return failed(std::strerror(errno));
  UniqueFd in(::open(here ? path.c_str() : from.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!in.valid()) co_return failed(std::strerror(errno));
  // Chromium leaves it 0600; the group (exec'd commands' too) may read and change it.
  if (here) (void)::fchmod(in.get(), 0664);
  UniqueFd out;
  if (!here) {
    out =
        UniqueFd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0664));
    if (!out.valid()) co_return failed(std::strerror(errno));
  }
  // A megabyte at a time, yielding between, so a large file does not stall requests.
  Sha256 hash;
  uint64_t size = 0;
  std::string chunk(1 << 20, '\0');
  for (;;) {
    const ssize_t n = ::read(in.get(), chunk.data(), chunk.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) co_return failed(std::strerror(errno));
    if (n == 0) break;
    const std::string_view piece(chunk.data(), static_cast<size_t>(n));
    hash.update(piece);
    size += piece.size();
    for (std::string_view left = piece; out.valid() && !left.empty();) {
      const ssize_t w = ::write(out.get(), left.data(), left.size());
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        const std::string why = std::strerror(errno);
        ::unlink(path.c_str());
        co_return failed(why);
      }
      left.remove_prefix(static_cast<size_t>(w));
    }
    co_await net::post(ex_, net::use_awaitable);
  }
  emit("download_finished", {{"id", guid},
                             {"url", d.url},
                             {"name", name},
                             {"path", path},
                             {"size", size},
                             {"sha256", hash.hex()}});
}

net::awaitable<Result<void>> BrowserEvents::fill_file_input(std::vector<std::string> paths,
                                                            std::string selector) {
  const auto& snap = state_.snapshot();
  if (snap.phase != Phase::kReady || !snap.devtools)
    co_return make_error(Errc::kUnavailable, "browser_not_ready", "the browser is not ready");
  const uint16_t port = snap.devtools->port;
  // The page: the chooser's, or the one in front (DevTools lists the latest active first).
  std::optional<Chooser> chooser = selector.empty() ? last_chooser() : std::nullopt;
  std::string page_path;
  const json list = co_await devtools_get(ex_, port, "/json/list", 1024 * 1024);
  if (list.is_array()) {
    for (const auto& t : list) {
      if (!t.is_object() || t.value("type", "") != "page") continue;
      if (chooser && t.value("id", "") != chooser->page) continue;
      page_path = debugger_path(t, "/devtools/page/");
      if (!page_path.empty()) break;
    }
  }
  if (page_path.empty())
    co_return make_error(Errc::kNotFound, "no_page", "the browser has no page");
  CdpSocket ws(ex_);
  if (!co_await cdp_open(ws, port, page_path, std::chrono::seconds(10)))
    co_return make_error(Errc::kUnavailable, "cdp_failed", "the page's DevTools did not answer");
  json set = {{"files", paths}};
  if (chooser && chooser->backend_node > 0) {
    set["backendNodeId"] = chooser->backend_node;
  } else {
    // The element, if it is a file input: the selector's, else the focused one, through open
    // shadow roots.
    const std::string find = selector.empty()
                                 ? "(() => { let e = document.activeElement;"
                                   " while (e && e.shadowRoot && e.shadowRoot.activeElement) e = "
                                   "e.shadowRoot.activeElement;"
                                   " return e; })()"
                                 : "document.querySelector(" + json(selector).dump() + ")";
    json ask = {{"expression", "(() => { const e = " + find +
                                   "; return e instanceof HTMLInputElement && e.type === 'file'"
                                   " ? e : null; })()"}};
    const json found = co_await cdp_call(ws, 1, "Runtime.evaluate", std::move(ask));
    const json object = found.is_object() ? found.value("result", json::object()) : json();
    if (!object.is_object() || !object.contains("objectId")) {
      co_await cdp_close(ws);
      co_return make_error(Errc::kNotFound, "no_file_input",
                           selector.empty() ? "no file chooser is open and no file input has focus"
                                            : "the selector names no file input");
    }
    set["objectId"] = object["objectId"];
  }
  const json done = co_await cdp_call(ws, 2, "DOM.setFileInputFiles", std::move(set));
  co_await cdp_close(ws);
  if (done.is_discarded())
    co_return make_error(Errc::kUnprocessable, "upload_failed", "the page refused the files");
  if (chooser) chooser_.reset();
  co_return Result<void>{};
}

net::awaitable<void> serve_events(net::generic::stream_protocol::socket socket,
                                  BrowserEvents& events, uint64_t since) {
  using Stream = beast::basic_stream<net::generic::stream_protocol, net::any_io_executor,
                                     beast::unlimited_rate_policy>;
  Stream stream(std::move(socket));
  boost::system::error_code ec;
  std::string out =
      "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nCache-Control: no-store\r\n"
      "Connection: close\r\n\r\n";
  for (;;) {
    for (auto& [seq, line] : events.after(since)) {
      out += line;
      out += '\n';
      since = seq;
    }
    if (!out.empty()) {
      stream.expires_after(kWriteTimeout);
      co_await net::async_write(stream, net::buffer(out),
                                net::redirect_error(net::use_awaitable, ec));
      if (ec) co_return;
      out.clear();
    }
    if (events.stopped()) break;
    // An empty line now and then: a peer that went away is noticed.
    if (!co_await events.changed().wait_until(Notifier::Clock::now() + kKeepalive)) out = "\n";
  }
  stream.socket().shutdown(net::socket_base::shutdown_send, ec);
}

}  // namespace cabin::agent
