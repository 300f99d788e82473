#include "vm-images/agent/http_server.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <cstring>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "common/ascii.h"
#include "common/agent_protocol.h"
#include "common/crypto.h"
#include "common/log.h"
#include "common/percent.h"
#include "common/spawn.h"
#include "common/unique_fd.h"
#include "vm-images/agent/computer.h"
#include "vm-images/agent/desktop.h"
#include "vm-images/agent/frames.h"
#include "vm-images/agent/supervisor.h"
#include "vm-images/agent/tunnel.h"

namespace cabin::agent {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using generic_stream = net::generic::stream_protocol;
using Stream =
    beast::basic_stream<generic_stream, net::any_io_executor, beast::unlimited_rate_policy>;
using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;

using agent_protocol::kSecretHeader;
// cabind shares one stream among all viewers that ask for the same frames.
constexpr size_t kMaxFrameStreams = 8;

Response json_response(http::status status, std::string body) {
  Response res{status, 11};
  res.set(http::field::server, "cabin-agent");
  res.set(http::field::content_type, "application/json");
  res.set(http::field::cache_control, "no-store");
  res.body() = std::move(body);
  res.prepare_payload();
  return res;
}

// Every error response is built here.
Response error_response(http::status status, std::string_view code, std::string_view message) {
  nlohmann::json j = {{"error", {{"code", code}, {"message", message}}}};
  return json_response(status, j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

Response error_response(const Error& e) {
  return error_response(static_cast<http::status>(http_status(e.errc)), e.code, e.message);
}

}  // namespace

// What connection coroutines share with the server; held by shared_ptr so that frames torn down
// with the io_context never touch a destroyed server.
struct HttpServer::Conn {
  HttpServerOptions opts;
  AgentState* state;
  std::unique_ptr<Desktop> desktop;
  size_t connections = 0;
  size_t execs = 0;
  size_t frame_streams = 0;
  // Each host connection, with a duplicate of its socket, for as long as it is served: in a
  // copy of a running VM (restored) the other ends of all but the restoring one are gone.
  std::map<uint64_t, UniqueFd> host_sockets;
  uint64_t next_connection = 0;
};

namespace {

struct Counted {
  explicit Counted(size_t& n) : n(n) { ++n; }
  ~Counted() { --n; }
  size_t& n;
};

std::optional<Response> require_method(const Request& req, http::verb verb) {
  if (req.method() == verb) return std::nullopt;
  const std::string name(http::to_string(verb));
  auto res = error_response(http::status::method_not_allowed, "method_not_allowed", "use " + name);
  res.set(http::field::allow, name);
  return res;
}

// Input and screenshots right after the start wait for Chromium's window and first frames (the
// supervisor stops waiting for them well before this).
constexpr std::chrono::seconds kDesktopWaitCap{15};
// A start page that takes longer than this to load is reported as not loaded.
constexpr std::chrono::seconds kNavigateTimeout{60};

net::awaitable<Response> screenshot_route(std::shared_ptr<HttpServer::Conn> sh, Request req,
                                          std::string query) {
  if (auto wrong = require_method(req, http::verb::get)) co_return std::move(*wrong);
  auto spec = parse_screenshot_query(query);
  if (!spec) co_return error_response(spec.error());
  co_await sh->state->wait_desktop(kDesktopWaitCap);
  auto img = sh->desktop->screenshot(*spec);
  if (!img) co_return error_response(img.error());
  Response res{http::status::ok, 11};
  res.set(http::field::server, "cabin-agent");
  res.set(http::field::content_type, img->media_type);
  res.set(http::field::cache_control, "no-store");
  res.set("X-Image-Width", std::to_string(img->width));
  res.set("X-Image-Height", std::to_string(img->height));
  res.set("Server-Timing", fmt::format("grab;dur={:.3f}, encode;dur={:.3f}", img->grab_ms,
                                       img->encode_ms));
  res.body() = std::move(img->bytes);
  res.prepare_payload();
  co_return res;
}

net::awaitable<Response> computer_route(std::shared_ptr<HttpServer::Conn> sh, Request req) {
  if (auto wrong = require_method(req, http::verb::post)) co_return std::move(*wrong);
  Desktop& desk = *sh->desktop;
  if (auto r = desk.open(); !r) co_return error_response(r.error());
  const vnc::Size screen = desk.screen_size();
  auto batch = computer::parse_superset_batch(req.body(), {screen.width, screen.height});
  if (!batch) co_return error_response(batch.error());
  co_await sh->state->wait_desktop(kDesktopWaitCap);
  // One batch at a time: a second request waits here until the first has finished.
  Gate::Lock lock = co_await desk.gate().acquire();
  ComputerOutcome outcome = co_await run_computer(desk, *batch, &sh->opts.upload);
  lock.reset();
  co_return json_response(
      outcome.failure ? http::status::unprocessable_entity : http::status::ok,
      to_json(outcome).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

net::awaitable<Response> navigate_route(std::shared_ptr<HttpServer::Conn> sh, Request req) {
  if (auto wrong = require_method(req, http::verb::post)) co_return std::move(*wrong);
  auto nav = agent_protocol::parse_navigate_request(req.body());
  if (!nav) co_return error_response(nav.error());
  const auto devtools = sh->state->snapshot().devtools;
  if (!devtools) {
    co_return error_response(http::status::service_unavailable, "not_ready",
                             "the browser is not ready");
  }
  const WaitUntil wait = kWaitUntilNames.at(nav->wait_until);  // checked by the parser
  auto done =
      co_await navigate_first_page(co_await net::this_coro::executor, devtools->port,
                                   std::move(nav->url), wait, kNavigateTimeout, OnLoadError::kFail);
  if (!done) co_return error_response(done.error());
  co_return json_response(http::status::ok, "{}");
}

net::awaitable<Response> close_browser_route(std::shared_ptr<HttpServer::Conn> sh, Request req) {
  if (auto wrong = require_method(req, http::verb::post)) co_return std::move(*wrong);
  if (!sh->opts.close_browser) {
    co_return error_response(http::status::service_unavailable, "not_ready",
                             "the browser is not running");
  }
  auto closed = co_await sh->opts.close_browser();
  if (!closed) co_return error_response(closed.error());
  co_return json_response(http::status::ok, "{}");
}

net::awaitable<Response> restored_route(std::shared_ptr<HttpServer::Conn> sh, Request req,
                                        uint64_t connection) {
  if (auto wrong = require_method(req, http::verb::post)) co_return std::move(*wrong);
  if (!sh->opts.restored) {
    co_return error_response(http::status::service_unavailable, "not_supported",
                             "this agent was not started in a VM");
  }
  auto r = agent_protocol::parse_restored_request(req.body());
  if (!r) co_return error_response(r.error());
  auto done = co_await sh->opts.restored(*r);
  if (!done) co_return error_response(done.error());
  // From the next request on, only the new secret opens this agent; the snapshot's is dead.
  sh->opts.secret = std::move(r->secret);
  // The connections the saved machine had (egress waiters and what they carry, tunnels, frame
  // streams) lead nowhere now: ended, so that their programs see it at once and cabind makes
  // new ones.
  for (const auto& [id, fd] : sh->host_sockets) {
    if (id != connection) ::shutdown(fd.get(), SHUT_RDWR);
  }
  co_return json_response(http::status::ok, "{}");
}

net::awaitable<Response> browser_state_route(std::shared_ptr<HttpServer::Conn> sh, Request req) {
  const auto devtools = sh->state->snapshot().devtools;
  if (!devtools) {
    co_return error_response(http::status::service_unavailable, "not_ready",
                             "the browser is not ready");
  }
  auto ex = co_await net::this_coro::executor;
  if (req.method() == http::verb::get) {
    auto state = co_await capture_browser_state(ex, *devtools);
    if (!state) co_return error_response(state.error());
    co_return json_response(http::status::ok,
                            state->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  if (auto wrong = require_method(req, http::verb::post)) co_return std::move(*wrong);
  auto state = agent_protocol::parse_browser_state(req.body());
  if (!state) co_return error_response(state.error());
  auto done = co_await restore_browser_state(ex, *devtools, std::move(*state), kNavigateTimeout);
  if (!done) co_return error_response(done.error());
  co_return json_response(http::status::ok, "{}");
}

Response clipboard_route(HttpServer::Conn& sh, const Request& req) {
  auto unavailable = [] {
    return error_response(http::status::service_unavailable, "display_not_ready",
                          "the display has no clipboard yet");
  };
  if (req.method() == http::verb::get) {
    auto text = sh.opts.clipboard_get ? sh.opts.clipboard_get() : std::nullopt;
    if (!text) return unavailable();
    return json_response(http::status::ok,
                         nlohmann::json{{"text", std::move(*text)}}.dump(
                             -1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  if (auto wrong = require_method(req, http::verb::put)) return std::move(*wrong);
  auto text = agent_protocol::parse_clipboard(req.body());
  if (!text) return error_response(text.error());
  if (!sh.opts.clipboard_set || !sh.opts.clipboard_set(std::move(*text))) return unavailable();
  return json_response(http::status::ok, "{}");
}

// kFilesPath's query: exactly one of path=P or dir=D; the name and P or D, decoded.
Result<std::pair<std::string, std::string>> files_query(std::string_view query) {
  const auto eq = query.find('=');
  const auto name = query.substr(0, eq);
  if (eq == std::string_view::npos || (name != "path" && name != "dir") ||
      query.find('&') != std::string_view::npos)
    return make_error(Errc::kInvalidArgument, "invalid_request", "the query is path=P or dir=D");
  auto value = percent_decode(query.substr(eq + 1), false);
  if (!value) return value.error();
  return std::pair{std::string(name), std::move(*value)};
}

// GET ?dir= and DELETE ?path= (GET ?path= and PUT stream: serve_connection).
Response files_route(const FileRoots& files, const Request& req, std::string_view query) {
  auto q = files_query(query);
  if (!q) return error_response(q.error());
  if (req.method() == http::verb::get && q->first == "dir") {
    auto entries = files.list(q->second);
    if (!entries) return error_response(entries.error());
    nlohmann::json list = nlohmann::json::array();
    for (const auto& e : *entries)
      list.push_back({{"name", e.name}, {"type", e.type}, {"size", e.size}, {"mtime", e.mtime}});
    return json_response(http::status::ok,
                         nlohmann::json{{"entries", std::move(list)}}.dump(
                             -1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  if (req.method() == http::verb::delete_ && q->first == "path") {
    if (auto r = files.remove(q->second); !r) return error_response(r.error());
    return json_response(http::status::ok, "{}");
  }
  return error_response(http::status::method_not_allowed, "method_not_allowed",
                        "files take GET ?path= or ?dir=, PUT ?path= and DELETE ?path=");
}

constexpr size_t kFileChunk = 256 * 1024;
constexpr auto kFileIoTimeout = std::chrono::seconds(60);

// PUT ?path=P: the body (Content-Length bytes, already partly in `buffer`) into the file.
net::awaitable<Response> receive_file(const FileRoots& files, Stream& stream,
                                      beast::flat_buffer& buffer,
                                      const http::request_parser<http::string_body>& parser) {
  auto q = files_query(split_target(parser.get().target()).second);
  if (!q) co_return error_response(q.error());
  if (q->first != "path")
    co_return error_response(http::status::bad_request, "invalid_request", "PUT takes ?path=");
  if (parser.chunked() || !parser.content_length())
    co_return error_response(http::status::length_required, "length_required",
                             "an upload needs a Content-Length");
  auto up = files.create(q->second);
  if (!up) co_return error_response(up.error());
  boost::system::error_code ec;
  if (iequals(parser.get()[http::field::expect], "100-continue")) {
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    stream.expires_after(kFileIoTimeout);
    co_await net::async_write(stream, net::buffer(kContinue),
                              net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return error_response(http::status::bad_request, "upload_incomplete", "gone");
  }
  Sha256 hash;
  uint64_t left = *parser.content_length();
  const uint64_t size = left;
  auto take = [&](std::string_view bytes) -> Result<void> {
    hash.update(bytes);
    left -= bytes.size();
    return up->write(bytes);
  };
  const size_t early = static_cast<size_t>(std::min<uint64_t>(buffer.size(), left));
  if (early) {
    const auto* data = static_cast<const char*>(buffer.data().data());
    if (auto r = take({data, early}); !r) co_return error_response(r.error());
    buffer.consume(early);
  }
  std::string chunk(kFileChunk, '\0');
  while (left > 0) {
    stream.expires_after(kFileIoTimeout);
    const size_t want = static_cast<size_t>(std::min<uint64_t>(chunk.size(), left));
    const size_t n = co_await stream.async_read_some(net::buffer(chunk.data(), want),
                                                     net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      co_return error_response(http::status::bad_request, "upload_incomplete",
                               "the upload ended " + std::to_string(left) + " bytes early");
    }
    if (auto r = take({chunk.data(), n}); !r) co_return error_response(r.error());
  }
  if (auto r = up->commit(); !r) co_return error_response(r.error());
  co_return json_response(http::status::ok,
                          nlohmann::json{{"path", q->second}, {"size", size}, {"sha256", hash.hex()}}
                              .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

// GET ?path=P: the file's bytes after a header with their length; false when it answered an
// error instead (the connection may go on).
net::awaitable<bool> send_file(const FileRoots& files, Stream& stream, std::string_view query) {
  boost::system::error_code ec;
  auto q = files_query(query);
  Result<FileRoots::Readable> file = q ? files.open_file(q->second) : Result<FileRoots::Readable>(q.error());
  if (file) {
    std::string head = "HTTP/1.1 200 OK\r\nServer: cabin-agent\r\n"
                       "Content-Type: application/octet-stream\r\nContent-Length: " +
                       std::to_string(file->size) + "\r\nConnection: close\r\n\r\n";
    stream.expires_after(kFileIoTimeout);
    co_await net::async_write(stream, net::buffer(head), net::redirect_error(net::use_awaitable, ec));
    std::string chunk(kFileChunk, '\0');
    uint64_t left = file->size;  // what the header promised, even if the file grows meanwhile
    while (!ec && left > 0) {
      const ssize_t n = ::read(file->fd.get(), chunk.data(),
                               static_cast<size_t>(std::min<uint64_t>(chunk.size(), left)));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // shrunk: the short body tells the peer
      left -= static_cast<uint64_t>(n);
      stream.expires_after(kFileIoTimeout);
      co_await net::async_write(stream, net::buffer(chunk.data(), static_cast<size_t>(n)),
                                net::redirect_error(net::use_awaitable, ec));
    }
    co_return true;
  }
  Response res = error_response(q ? file.error() : q.error());
  stream.expires_after(kFileIoTimeout);
  co_await http::async_write(stream, res, net::redirect_error(net::use_awaitable, ec));
  co_return ec.failed();
}

// kRecordingsPath (POST starts, GET ?id= says how it goes) and kRecordingsStopPath (POST ?id=).
net::awaitable<Response> recordings_route(std::shared_ptr<HttpServer::Conn> sh, Request req,
                                          std::string_view path, std::string_view query) {
  auto status_response = [](Result<agent_protocol::RecordingStatus> s) {
    if (!s) return error_response(s.error());
    return json_response(http::status::ok, agent_protocol::to_json(*s).dump(
                                               -1, ' ', false, nlohmann::json::error_handler_t::replace));
  };
  Recorder& recorder = *sh->opts.recorder;
  std::string id;
  if (query.substr(0, 3) == "id=") id = std::string(query.substr(3));
  if (path == agent_protocol::kRecordingsStopPath) {
    if (auto wrong = require_method(req, http::verb::post)) co_return std::move(*wrong);
    co_return status_response(co_await recorder.stop(id));
  }
  if (req.method() == http::verb::get) co_return status_response(recorder.status(id));
  if (auto wrong = require_method(req, http::verb::post)) co_return std::move(*wrong);
  auto spec = agent_protocol::parse_recording_request(req.body());
  if (!spec) co_return error_response(spec.error());
  co_await sh->state->wait_desktop(kDesktopWaitCap);
  co_return status_response(recorder.start(sh->state->snapshot().display, *spec));
}

net::awaitable<Response> route(std::shared_ptr<HttpServer::Conn> sh, Request req,
                               uint64_t connection) {
  auto [path, query] = split_target(req.target());
  if (path == agent_protocol::kHealthPath) {
    if (req.method() != http::verb::get) {
      auto res = error_response(http::status::method_not_allowed, "method_not_allowed", "use GET");
      res.set(http::field::allow, "GET");
      co_return res;
    }
    auto q = parse_health_query(query);
    if (!q) co_return error_response(q.error());
    if (q->wait.count() > 0) co_await sh->state->wait_settled(q->wait);
    co_return json_response(http::status::ok, health_json(sh->state->snapshot()));
  }
  if (path == agent_protocol::kExecPath) {
    if (req.method() != http::verb::post) {
      auto res = error_response(http::status::method_not_allowed, "method_not_allowed", "use POST");
      res.set(http::field::allow, "POST");
      co_return res;
    }
    auto spec = agent_protocol::parse_exec_request(req.body());
    if (!spec) co_return error_response(spec.error());
    if (sh->execs >= sh->opts.max_concurrent_execs) {
      co_return error_response(http::status::service_unavailable, "busy",
                               "too many commands are running");
    }
    Counted running(sh->execs);
    auto result = co_await run_exec(std::move(*spec), sh->opts.exec);
    if (!result) co_return error_response(result.error());
    co_return json_response(http::status::ok,
                            agent_protocol::to_json(*result).dump(
                                -1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  if (path == agent_protocol::kScreenshotPath) {
    co_return co_await screenshot_route(sh, std::move(req), std::string(query));
  }
  if (path == agent_protocol::kComputerPath) co_return co_await computer_route(sh, std::move(req));
  if (path == agent_protocol::kNavigatePath) co_return co_await navigate_route(sh, std::move(req));
  if (path == agent_protocol::kBrowserClosePath)
    co_return co_await close_browser_route(sh, std::move(req));
  if (path == agent_protocol::kRestoredPath)
    co_return co_await restored_route(sh, std::move(req), connection);
  if (path == agent_protocol::kBrowserStatePath)
    co_return co_await browser_state_route(sh, std::move(req));
  if (path == agent_protocol::kClipboardPath) co_return clipboard_route(*sh, req);
  if (path == agent_protocol::kFilesPath && sh->opts.files)
    co_return files_route(*sh->opts.files, req, query);
  if ((path == agent_protocol::kRecordingsPath || path == agent_protocol::kRecordingsStopPath) &&
      sh->opts.recorder)
    co_return co_await recordings_route(sh, std::move(req), path, query);
  co_return error_response(http::status::not_found, "not_found", "no such endpoint");
}

// The checks before a frame stream takes over the connection. Without `capture`, `refusal` is
// the answer to send instead.
struct FramesStart {
  std::unique_ptr<FrameCapture> capture;
  FrameSpec spec;
  Response refusal;
};

FramesStart open_frames(HttpServer::Conn& sh, const Request& req, std::string_view query) {
  FramesStart out;
  if (auto wrong = require_method(req, http::verb::get)) {
    out.refusal = std::move(*wrong);
    return out;
  }
  auto spec = parse_frames_query(query);
  if (!spec) {
    out.refusal = error_response(spec.error());
    return out;
  }
  if (sh.frame_streams >= kMaxFrameStreams) {
    out.refusal = error_response(http::status::service_unavailable, "busy",
                                 "too many frame streams are open");
    return out;
  }
  auto capture = open_frame_capture(sh.state->snapshot().display, *spec);
  if (!capture) {
    out.refusal = error_response(capture.error());
    return out;
  }
  out.capture = std::move(*capture);
  out.spec = *spec;
  return out;
}

// kEventsPath's query: "" or "since=N".
Result<uint64_t> events_since(const Request& req, std::string_view query) {
  if (req.method() != http::verb::get)
    return make_error(Errc::kInvalidArgument, "method_not_allowed", "events take GET");
  if (query.empty()) return uint64_t{0};
  if (query.substr(0, 6) != "since=")
    return make_error(Errc::kInvalidArgument, "invalid_request", "the query is since=N");
  auto n = parse_decimal(query.substr(6), 0, 0xFFFFFFFFu);
  if (!n) return make_error(Errc::kInvalidArgument, "invalid_request", "since must be a number");
  return uint64_t{*n};
}

// Maps a read failure to the answer it deserves; nullopt means just close.
std::optional<Response> read_error_response(const boost::system::error_code& ec) {
  if (ec == http::error::header_limit) {
    return error_response(http::status::request_header_fields_too_large, "headers_too_large",
                          "request headers exceed 16 KiB");
  }
  if (ec == http::error::body_limit) {
    return error_response(http::status::payload_too_large, "body_too_large",
                          "request body exceeds 1 MiB");
  }
  if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == net::error::eof ||
      ec == net::error::connection_reset || ec == net::error::operation_aborted ||
      ec == http::error::partial_message) {
    return std::nullopt;
  }
  if (ec.category() == http::make_error_code(http::error::end_of_stream).category()) {
    return error_response(http::status::bad_request, "bad_request", "malformed HTTP request");
  }
  return std::nullopt;
}

net::awaitable<void> handle_connect(std::shared_ptr<HttpServer::Conn> sh, Stream& stream,
                                    beast::flat_buffer& buffer, const Request& req) {
  auto log = logger("agent.http");
  auto fail = [&](const Error& e) -> net::awaitable<void> {
    auto res = error_response(e);
    res.keep_alive(false);
    boost::system::error_code ec;
    stream.expires_after(sh->opts.read_timeout);
    co_await http::async_write(stream, res, net::redirect_error(net::use_awaitable, ec));
  };
  auto target = parse_connect_target(req.target());
  if (!target) {
    log->info("CONNECT {} refused: {}", std::string(req.target()), target.error().message);
    co_await fail(target.error());
    co_return;
  }
  auto upstream = co_await connect_loopback(*target);
  if (!upstream) {
    co_await fail(upstream.error());
    co_return;
  }
  static constexpr std::string_view kEstablished = "HTTP/1.1 200 Connection Established\r\n\r\n";
  boost::system::error_code ec;
  stream.expires_after(sh->opts.read_timeout);
  co_await net::async_write(stream, net::buffer(kEstablished),
                            net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return;
  // Bytes the client sent right behind the CONNECT request belong to the tunnel.
  std::string prefetched = beast::buffers_to_string(buffer.data());
  buffer.consume(buffer.size());
  stream.expires_never();
  co_await run_tunnel(stream.release_socket(), std::move(*upstream), std::move(prefetched));
}

// A connection cabind keeps waiting: it carries the next guest connection to the egress port.
net::awaitable<void> handle_egress_wait(std::shared_ptr<HttpServer::Conn> sh, Stream& stream,
                                        beast::flat_buffer& buffer) {
  EgressDoor* door = sh->opts.egress_door;
  auto guest = co_await door->next();
  if (!guest) co_return;
  boost::system::error_code ec;
  co_await net::async_write(stream, net::buffer(agent_protocol::kEgressPaired),
                            net::redirect_error(net::use_awaitable, ec));
  if (ec) {
    door->give_back(std::move(*guest));  // cabind left meanwhile: the next waiter takes it
    co_return;
  }
  std::string prefetched = beast::buffers_to_string(buffer.data());
  buffer.consume(buffer.size());
  co_await run_tunnel(stream.release_socket(), std::move(*guest), std::move(prefetched));
}

// One connection: requests in order (keep-alive), until close, error, timeout or a tunnel.
net::awaitable<void> serve_connection(std::shared_ptr<HttpServer::Conn> sh,
                                      generic_stream::socket socket) {
  Counted live(sh->connections);
  struct Registered {
    Registered(HttpServer::Conn& c, int fd) : conn(c), id(++c.next_connection) {
      c.host_sockets.emplace(id, UniqueFd(::fcntl(fd, F_DUPFD_CLOEXEC, 0)));
    }
    ~Registered() { conn.host_sockets.erase(id); }
    HttpServer::Conn& conn;
    const uint64_t id;
  } self(*sh, socket.native_handle());
  Stream stream(std::move(socket));
  beast::flat_buffer buffer;
  const auto& opts = sh->opts;
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(opts.header_limit));
    // Uploads stream bodies of any length; the others are held to body_limit below.
    parser.body_limit((std::numeric_limits<std::uint64_t>::max)());
    boost::system::error_code ec;

    stream.expires_after(opts.read_timeout);
    co_await http::async_read_header(stream, buffer, parser,
                                     net::redirect_error(net::use_awaitable, ec));
    std::optional<Response> early;
    if (ec) {
      early = read_error_response(ec);
      if (!early) break;
    } else if (!constant_time_equal(parser.get()[kSecretHeader], opts.secret)) {
      // Checked before the body is read, so strangers cannot make the agent buffer 1 MiB.
      early = error_response(http::status::unauthorized, "unauthenticated",
                             "missing or wrong X-Cabin-Agent-Secret");
    } else if (opts.files && parser.get().method() == http::verb::put &&
               split_target(parser.get().target()).first == agent_protocol::kFilesPath) {
      // Streamed into the file as it arrives, whatever its size; the connection ends after.
      early = co_await receive_file(*opts.files, stream, buffer, parser);
    } else if (parser.content_length().value_or(0) > opts.body_limit) {
      early = read_error_response(http::error::body_limit);
    } else if (!parser.is_done()) {
      parser.body_limit(opts.body_limit);
      co_await http::async_read(stream, buffer, parser,
                                net::redirect_error(net::use_awaitable, ec));
      if (ec) {
        early = read_error_response(ec);
        if (!early) break;
      }
    }
    if (early) {
      early->keep_alive(false);
      stream.expires_after(opts.read_timeout);
      co_await http::async_write(stream, *early, net::redirect_error(net::use_awaitable, ec));
      break;
    }

    stream.expires_never();  // long polls and commands set their own limits
    const bool keep_alive = parser.keep_alive();
    Request req = parser.release();
    if (req.method() == http::verb::connect) {
      co_await handle_connect(sh, stream, buffer, req);
      co_return;
    }
    if (opts.egress_door && req.method() == http::verb::get &&
        split_target(req.target()).first == agent_protocol::kEgressWaitPath) {
      co_await handle_egress_wait(sh, stream, buffer);
      co_return;
    }
    if (auto [path, query] = split_target(req.target()); path == agent_protocol::kFramesPath) {
      FramesStart start = open_frames(*sh, req, query);
      if (start.capture) {
        Counted streaming(sh->frame_streams);
        co_await serve_frames(stream.release_socket(), std::move(start.capture), start.spec);
        co_return;
      }
      start.refusal.keep_alive(keep_alive);
      stream.expires_after(opts.read_timeout);
      co_await http::async_write(stream, start.refusal,
                                 net::redirect_error(net::use_awaitable, ec));
      if (ec || !keep_alive) break;
      continue;
    }
    if (auto [path, query] = split_target(req.target());
        path == agent_protocol::kFilesPath && opts.files && req.method() == http::verb::get &&
        query.substr(0, 5) == "path=") {
      if (co_await send_file(*opts.files, stream, query) || !keep_alive) break;
      continue;
    }
    if (auto [path, query] = split_target(req.target());
        path == agent_protocol::kEventsPath && opts.events) {
      auto since = events_since(req, query);
      if (since) {
        co_await serve_events(stream.release_socket(), *opts.events, *since);
        co_return;
      }
      Response refusal = error_response(since.error());
      refusal.keep_alive(keep_alive);
      stream.expires_after(opts.read_timeout);
      co_await http::async_write(stream, refusal, net::redirect_error(net::use_awaitable, ec));
      if (ec || !keep_alive) break;
      continue;
    }
    Response res = co_await route(sh, std::move(req), self.id);
    res.keep_alive(keep_alive);
    stream.expires_after(opts.read_timeout);
    co_await http::async_write(stream, res, net::redirect_error(net::use_awaitable, ec));
    if (ec || !keep_alive) break;
  }
  boost::system::error_code ignored;
  stream.socket().shutdown(net::socket_base::shutdown_send, ignored);
  stream.close();
}

}  // namespace

HttpServer::HttpServer(net::any_io_executor ex, HttpServerOptions opts, AgentState& state)
    : ex_(ex),
      opts_(std::move(opts)),
      shared_(std::make_shared<Conn>(
          Conn{opts_, &state,
               std::make_unique<Desktop>(ex, [st = &state] { return st->snapshot().display; })})),
      acceptor_(ex) {}

HttpServer::~HttpServer() { stop(); }

Result<void> HttpServer::start() {
  auto fail = [](std::string what, const boost::system::error_code& ec) {
    return make_error(Errc::kUnavailable, "listen_failed", what + ": " + ec.message());
  };
  boost::system::error_code ec;
  if (opts_.listen.kind == ListenAddress::Kind::kFd) {
    // Bound and listening already: the host made it where the sandbox cannot reach the path.
    int type = 0;
    socklen_t len = sizeof type;
    if (::getsockopt(opts_.listen.fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 ||
        type != SOCK_STREAM) {
      return fail("fd " + std::to_string(opts_.listen.fd),
                  boost::system::error_code(ENOTSOCK, boost::system::system_category()));
    }
    ::fcntl(opts_.listen.fd, F_SETFD, FD_CLOEXEC);
    acceptor_.assign(generic_stream(AF_UNIX, 0), opts_.listen.fd, ec);
    if (ec) return fail("assign listening socket", ec);
    cabin::spawn(ex_, accept_loop(), "agent listener");
    return {};
  }
  generic_stream::endpoint ep;
  if (opts_.listen.kind == ListenAddress::Kind::kUnix) {
    struct stat sb;
    if (::lstat(opts_.listen.path.c_str(), &sb) == 0) {
      // Replace only a socket left by an earlier run, never some other file.
      if (!S_ISSOCK(sb.st_mode)) {
        return make_error(Errc::kConflict, "listen_failed",
                          opts_.listen.path + " exists and is not a socket");
      }
      ::unlink(opts_.listen.path.c_str());
    }
    ep = net::local::stream_protocol::endpoint(opts_.listen.path);
  } else {
    auto addr = net::ip::make_address(opts_.listen.host, ec);
    if (ec) return fail("address " + opts_.listen.host, ec);
    ep = net::ip::tcp::endpoint(addr, opts_.listen.port);
  }
  acceptor_.open(ep.protocol(), ec);
  if (ec) return fail("socket", ec);
  if (opts_.listen.kind == ListenAddress::Kind::kTcp) {
    acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  }
  acceptor_.bind(ep, ec);
  if (ec) return fail("bind", ec);
  acceptor_.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return fail("listen", ec);
  if (opts_.listen.kind == ListenAddress::Kind::kUnix) {
    // The host connects from another uid; the per-request secret is the access control.
    if (::chmod(opts_.listen.path.c_str(), 0666) != 0) {
      return fail("chmod", boost::system::error_code(errno, boost::system::system_category()));
    }
  } else {
    auto local = acceptor_.local_endpoint(ec);
    if (!ec) {
      tcp_port_ = ntohs(reinterpret_cast<const sockaddr_in*>(local.data())->sin_port);
    }
  }
  cabin::spawn(ex_, accept_loop(), "agent listener");
  return {};
}

void HttpServer::stop() {
  boost::system::error_code ignored;
  if (!acceptor_.is_open()) return;
  acceptor_.close(ignored);
  if (opts_.listen.kind == ListenAddress::Kind::kUnix) ::unlink(opts_.listen.path.c_str());
}

net::awaitable<void> HttpServer::accept_loop() {
  auto sh = shared_;
  auto log = logger("agent.http");
  const bool tcp = opts_.listen.kind == ListenAddress::Kind::kTcp;
  for (;;) {
    boost::system::error_code ec;
    generic_stream::socket socket(ex_);
    co_await acceptor_.async_accept(socket, net::redirect_error(net::use_awaitable, ec));
    if (ec == net::error::operation_aborted || !acceptor_.is_open()) co_return;
    if (ec) {
      // EMFILE and friends: keep serving the connections we have.
      log->warn("accept: {}", ec.message());
      continue;
    }
    if (sh->connections >= sh->opts.max_connections) {
      log->warn("connection limit {} reached; closing a new connection", sh->opts.max_connections);
      socket.close(ec);
      continue;
    }
    if (tcp) socket.set_option(net::ip::tcp::no_delay(true), ec);
    cabin::spawn(ex_, serve_connection(sh, std::move(socket)), "agent connection");
  }
}

}  // namespace cabin::agent
