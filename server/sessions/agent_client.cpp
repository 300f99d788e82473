#include "server/sessions/agent_client.h"

#include <algorithm>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <cctype>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>

#include "common/bounded_json.h"
#include "common/deadline.h"
#include "common/percent.h"
#include "server/api/errors.h"

namespace cabin::sessions {
namespace {

Error bad_gateway(std::string message) {
  return make_error(Errc::kBadGateway, "agent_error", std::move(message));
}

Error read_failed(const char* from, const boost::system::error_code& ec, size_t limit) {
  if (ec == http::error::body_limit)
    return bad_gateway(std::string(from) + "'s answer exceeds " + std::to_string(limit) + " bytes");
  if (ec == http::error::header_limit)
    return bad_gateway(std::string(from) + "'s answer header exceeds " +
                       std::to_string(kMaxAgentHeader) + " bytes");
  return bad_gateway(std::string("reading from ") + from + ": " + ec.message());
}

// Reads a whole answer into `parser`. The head comes first on its own: Beast 1.74's async_read
// does not report a Content-Length over the body limit and waits for the body instead, where
// async_read_header fails at once.
template <typename Stream>
net::awaitable<void> read_answer(Stream& stream, boost::beast::flat_buffer& buf,
                                 http::response_parser<http::string_body>& parser,
                                 boost::system::error_code& ec) {
  co_await http::async_read_header(stream, buf, parser, net::redirect_error(net::use_awaitable, ec));
  if (!ec && !parser.is_done())
    co_await http::async_read(stream, buf, parser, net::redirect_error(net::use_awaitable, ec));
}

}  // namespace

std::optional<AgentErrorText> agent_error_message(std::string_view body) {
  auto parsed = parse_bounded(body, {kMaxAgentErrorBody, kGuestJsonDepth, 64});
  if (!parsed || !parsed->is_object()) return std::nullopt;
  auto e = parsed->find("error");
  if (e == parsed->end() || !e->is_object()) return std::nullopt;
  auto m = e->find("message");
  auto c = e->find("code");
  if (m == e->end() || !m->is_string() || c == e->end() || !c->is_string()) return std::nullopt;
  return AgentErrorText{c->get<std::string>().substr(0, 64),
                        m->get<std::string>().substr(0, 1024)};
}

namespace {

// The agent's refusals of a file request that the API passes on as they are; nullopt for any
// other status and code, which a caller reports as the agent's failure.
std::optional<Error> file_error(int status, const std::string& code, const std::string& message) {
  static constexpr std::pair<std::string_view, Errc> kPassed[] = {
      {"file_not_found", Errc::kNotFound},        {"path_not_allowed", Errc::kPermissionDenied},
      {"not_a_directory", Errc::kInvalidArgument}, {"not_a_file", Errc::kInvalidArgument},
      {"disk_full", Errc::kTooLarge},               {"upload_incomplete", Errc::kInvalidArgument}};
  for (const auto& [name, errc] : kPassed) {
    if (code == name && status == http_status(errc)) return make_error(errc, code, message);
  }
  return std::nullopt;
}

Error refused(const std::string& what, const http::response<http::string_body>& res) {
  auto text = agent_error_message(res.body());
  if (text) {
    if (auto e = file_error(res.result_int(), text->code, text->message)) return std::move(*e);
  }
  return api::errors::agent_error(what + ": " +
                                  (text ? text->message
                                        : "agent answered " + std::to_string(res.result_int())));
}

std::string files_target(const char* name, const std::string& value) {
  return std::string(agent_protocol::kFilesPath) + "?" + name + "=" + percent_encode(value);
}

// Why the agent refused: its own words, bounded, or its status.
std::string agent_refusal(const http::response<http::string_body>& res) {
  auto text = agent_error_message(res.body());
  return text ? text->message : "agent answered " + std::to_string(res.result_int());
}

}  // namespace

net::awaitable<Result<http::response<http::string_body>>> AgentClient::request(
    http::verb method, const std::string& target, std::string body,
    std::chrono::milliseconds timeout, size_t body_limit) {
  body_limit = std::min(body_limit, kMaxAgentBody);
  auto dialed = co_await sandbox_.dial_agent();
  if (!dialed) co_return dialed.error();
  drivers::AgentStream stream = std::move(*dialed);
  Deadline deadline(stream, timeout);

  http::request<http::string_body> req{method, target, 11};
  req.set(http::field::host, "agent");
  req.set(agent_protocol::kSecretHeader, secret_);
  if (!body.empty()) req.set(http::field::content_type, "application/json");
  req.body() = std::move(body);
  req.prepare_payload();
  req.keep_alive(false);
  boost::system::error_code ec;
  co_await http::async_write(stream, req, net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return bad_gateway("writing to agent: " + ec.message());

  boost::beast::flat_buffer buf;
  http::response_parser<http::string_body> parser;
  parser.header_limit(kMaxAgentHeader);
  parser.body_limit(body_limit);
  co_await read_answer(stream, buf, parser, ec);
  if (ec) co_return read_failed("agent", ec, body_limit);
  co_return parser.release();
}

net::awaitable<Result<AgentHealth>> AgentClient::health(int wait_ms) {
  const std::string target =
      std::string(agent_protocol::kHealthPath) + "?wait_ms=" + std::to_string(wait_ms);
  auto res = co_await request(http::verb::get, target, "",
                              std::chrono::milliseconds(wait_ms + 5000), kMaxHealthBody);
  if (!res) co_return res.error();
  if (res->result() != http::status::ok) {
    co_return bad_gateway("agent health answered " + std::to_string(res->result_int()));
  }
  auto parsed = parse_bounded(res->body(), {kMaxHealthBody, kGuestJsonDepth, 64});
  if (!parsed) co_return bad_gateway("agent health answer: " + parsed.error().message);
  auto& j = *parsed;
  if (!j.is_object() || !j.contains("state") || !j["state"].is_string()) {
    co_return bad_gateway("agent health answer is malformed");
  }
  AgentHealth h;
  h.state = j["state"].get<std::string>();
  if (h.state != "starting" && h.state != "ready" && h.state != "failed") {
    co_return bad_gateway("agent health state is unknown");
  }
  if (auto it = j.find("error"); it != j.end() && it->is_string()) {
    h.error = it->get<std::string>().substr(0, 1024);
  }
  if (h.state == "ready") {
    auto d = j.find("devtools");
    if (d == j.end() || !d->is_object() || !(*d)["port"].is_number_integer() ||
        !(*d)["browser_path"].is_string()) {
      co_return bad_gateway("agent health lacks devtools");
    }
    h.devtools_port = (*d)["port"].get<int>();
    h.browser_path = (*d)["browser_path"].get<std::string>();
    bool path_ok =
        h.browser_path.rfind("/devtools/browser/", 0) == 0 && h.browser_path.size() < 128;
    for (char c : h.browser_path) path_ok = path_ok && c > 0x20 && c < 0x7f && c != '?';
    if (h.devtools_port <= 0 || h.devtools_port > 65535 || !path_ok) {
      co_return bad_gateway("agent health devtools fields are invalid");
    }
  }
  co_return h;
}

net::awaitable<Result<Tunnel>> AgentClient::connect(int port) {
  if (auto direct = co_await sandbox_.dial_loopback(port)) {
    co_return Tunnel{std::move(*direct), {}};
  }
  auto dialed = co_await sandbox_.dial_agent();
  if (!dialed) co_return dialed.error();
  Tunnel t{std::move(*dialed), {}};
  Deadline deadline(t.stream, std::chrono::seconds(10));
  std::string authority = "127.0.0.1:" + std::to_string(port);
  http::request<http::empty_body> req{http::verb::connect, authority, 11};
  req.set(http::field::host, authority);
  req.set(agent_protocol::kSecretHeader, secret_);
  boost::system::error_code ec;
  co_await http::async_write(t.stream, req, net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return bad_gateway("writing to agent: " + ec.message());
  http::response_parser<http::empty_body> parser;
  parser.header_limit(kMaxAgentHeader);
  parser.skip(true);  // a CONNECT answer has no body; what follows is the tunnel
  co_await http::async_read_header(t.stream, t.buffer, parser,
                                   net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return bad_gateway("reading from agent: " + ec.message());
  if (parser.get().result() != http::status::ok) {
    co_return bad_gateway("agent refused tunnel to port " + std::to_string(port) + " (" +
                          std::to_string(parser.get().result_int()) + ")");
  }
  co_return t;
}

net::awaitable<Result<Tunnel>> AgentClient::open_stream(const std::string& target) {
  auto dialed = co_await sandbox_.dial_agent();
  if (!dialed) co_return dialed.error();
  Tunnel t{std::move(*dialed), {}};
  boost::system::error_code ec;
  http::response_parser<http::string_body> parser;
  {
    Deadline deadline(t.stream, std::chrono::seconds(10));
    http::request<http::empty_body> req{http::verb::get, target, 11};
    req.set(http::field::host, "agent");
    req.set(agent_protocol::kSecretHeader, secret_);
    req.keep_alive(false);
    co_await http::async_write(t.stream, req, net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return bad_gateway("writing to agent: " + ec.message());
    parser.header_limit(kMaxAgentHeader);
    // A stream's length is its own (a file's may be any); only an error's body is bounded.
    parser.body_limit((std::numeric_limits<std::uint64_t>::max)());
    co_await http::async_read_header(t.stream, t.buffer, parser,
                                     net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return read_failed("agent", ec, kMaxAgentErrorBody);
    if (parser.get().result() == http::status::ok) {
      if (auto n = parser.content_length()) t.length = *n;
      co_return t;
    }
    if (parser.content_length().value_or(0) > kMaxAgentErrorBody)
      co_return read_failed("agent", http::error::body_limit, kMaxAgentErrorBody);
    parser.body_limit(kMaxAgentErrorBody);
    co_await http::async_read(t.stream, t.buffer, parser,
                              net::redirect_error(net::use_awaitable, ec));
  }
  const int status = parser.get().result_int();
  std::string message = "agent answered " + std::to_string(status);
  std::string code = "agent_error";
  if (auto text = agent_error_message(parser.get().body()); !ec && text) {
    message = std::move(text->message);
    code = std::move(text->code);
  }
  if (auto e = file_error(status, code, message)) co_return std::move(*e);
  if (status == 400) co_return make_error(Errc::kInvalidArgument, code, message);
  if (status == 503) co_return make_error(Errc::kUnavailable, code, message);
  co_return bad_gateway(message);
}

net::awaitable<Result<std::string>> AgentClient::devtools_get(int port, const std::string& path,
                                                              size_t body_limit) {
  auto tunnel = co_await connect(port);
  if (!tunnel) co_return tunnel.error();
  Deadline deadline(tunnel->stream, std::chrono::seconds(10));
  http::request<http::empty_body> req{http::verb::get, path, 11};
  req.set(http::field::host, "127.0.0.1:" + std::to_string(port));
  req.keep_alive(false);
  boost::system::error_code ec;
  co_await http::async_write(tunnel->stream, req, net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return bad_gateway("writing to browser: " + ec.message());
  http::response_parser<http::string_body> parser;
  parser.header_limit(kMaxAgentHeader);
  parser.body_limit(body_limit);
  co_await read_answer(tunnel->stream, tunnel->buffer, parser, ec);
  if (ec) co_return read_failed("browser", ec, body_limit);
  co_return std::move(parser.get().body());
}

net::awaitable<Result<agent_protocol::ExecResult>> AgentClient::exec(
    const agent_protocol::ExecRequest& r) {
  const std::string target(agent_protocol::kExecPath);
  std::string body = agent_protocol::to_json(r).dump();
  auto res = co_await request(http::verb::post, target, std::move(body),
                              std::chrono::milliseconds(r.timeout_ms + 10000),
                              agent_protocol::exec_answer_limit(r.max_output_bytes));
  if (!res) co_return res.error();
  if (res->result() == http::status::bad_request) {
    // The agent explains why the command could not start; pass on its message, bounded.
    auto text = agent_error_message(res->body());
    co_return api::errors::spawn_failed(text ? text->message : "the command could not be started");
  }
  if (res->result() != http::status::ok)
    co_return api::errors::agent_error("agent answered " + std::to_string(res->result_int()));
  co_return agent_protocol::parse_exec_result(res->body(), r.max_output_bytes);
}

net::awaitable<Result<void>> AgentClient::navigate(const std::string& url,
                                                  const std::string& wait_until,
                                                  std::chrono::milliseconds timeout) {
  const std::string target(agent_protocol::kNavigatePath);
  std::string body = agent_protocol::to_json(agent_protocol::NavigateRequest{url, wait_until}).dump();
  auto res = co_await request(http::verb::post, target, std::move(body), timeout, 64 * 1024);
  if (!res) co_return res.error();
  if (res->result() == http::status::ok) co_return Result<void>{};
  // The agent says why (the page failed to load, it took too long); pass it on, bounded.
  co_return api::errors::navigation_failed(agent_refusal(*res));
}

net::awaitable<Result<void>> AgentClient::restored(const agent_protocol::RestoredRequest& r,
                                                  std::chrono::milliseconds timeout) {
  const std::string target(agent_protocol::kRestoredPath);
  std::string body = agent_protocol::to_json(r).dump();
  auto res = co_await request(http::verb::post, target, std::move(body), timeout, 64 * 1024);
  if (!res) co_return res.error();
  if (res->result() != http::status::ok) co_return api::errors::agent_error(agent_refusal(*res));
  secret_ = r.secret;
  co_return Result<void>{};
}

net::awaitable<Result<void>> AgentClient::close_browser(std::chrono::milliseconds timeout) {
  const std::string target(agent_protocol::kBrowserClosePath);
  std::string body = "{}";
  auto res = co_await request(http::verb::post, target, std::move(body), timeout, 64 * 1024);
  if (!res) co_return res.error();
  if (res->result() == http::status::ok) co_return Result<void>{};
  co_return api::errors::agent_error(agent_refusal(*res));
}

net::awaitable<Result<nlohmann::json>> AgentClient::browser_state() {
  const std::string target(agent_protocol::kBrowserStatePath);
  std::string none;
  auto res = co_await request(http::verb::get, target, std::move(none), std::chrono::seconds(30),
                              agent_protocol::kMaxStateBytes);
  if (!res) co_return res.error();
  if (res->result() != http::status::ok)
    co_return api::errors::agent_error("the browser's state: " + agent_refusal(*res));
  auto state = agent_protocol::parse_browser_state(res->body());
  if (!state) co_return api::errors::agent_error("the browser's state: " + state.error().message);
  co_return std::move(*state);
}

net::awaitable<Result<void>> AgentClient::set_browser_state(const nlohmann::json& state) {
  const std::string target(agent_protocol::kBrowserStatePath);
  std::string body = state.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  auto res = co_await request(http::verb::post, target, std::move(body), std::chrono::seconds(90),
                              64 * 1024);
  if (!res) co_return res.error();
  if (res->result() == http::status::ok) co_return Result<void>{};
  co_return api::errors::agent_error("giving the browser its state: " + agent_refusal(*res));
}

net::awaitable<Result<std::string>> AgentClient::clipboard() {
  const std::string target(agent_protocol::kClipboardPath);
  auto res = co_await request(http::verb::get, target, {}, std::chrono::seconds(10),
                              agent_protocol::kMaxClipboardBytes * 6 + 64);
  if (!res) co_return res.error();
  if (res->result() != http::status::ok)
    co_return api::errors::agent_error("the clipboard: " + agent_refusal(*res));
  auto text = agent_protocol::parse_clipboard(res->body());
  if (!text) co_return api::errors::agent_error("the clipboard: " + text.error().message);
  co_return std::move(*text);
}

net::awaitable<Result<void>> AgentClient::set_clipboard(const std::string& text) {
  const std::string target(agent_protocol::kClipboardPath);
  std::string body = nlohmann::json{{"text", text}}.dump();
  auto res =
      co_await request(http::verb::put, target, std::move(body), std::chrono::seconds(10), 64 * 1024);
  if (!res) co_return res.error();
  if (res->result() == http::status::ok) co_return Result<void>{};
  co_return api::errors::agent_error("setting the clipboard: " + agent_refusal(*res));
}

net::awaitable<Result<ComputerAnswer>> AgentClient::computer(const computer::Batch& batch,
                                                             computer::ScreenSize screen) {
  const std::string target(agent_protocol::kComputerPath);
  std::string body = computer::to_json(batch).dump();
  auto res = co_await request(http::verb::post, target, std::move(body),
                              std::chrono::milliseconds(api::computer_budget_ms(batch)),
                              api::computer_answer_limit(batch, screen));
  if (!res) co_return res.error();
  const auto status = res->result();
  if (status != http::status::ok && status != http::status::unprocessable_entity)
    co_return api::errors::agent_error("agent answered " + std::to_string(res->result_int()));
  CABIN_CO_ASSIGN_OR_RETURN(
      auto checked,
      api::check_computer_answer(res->body(), batch.actions.size(), screen, batch.model_size));
  co_return ComputerAnswer{status, std::move(checked)};
}

net::awaitable<Result<AgentImage>> AgentClient::screenshot(const api::ShotQuery& shot) {
  const std::string target = std::string(agent_protocol::kScreenshotPath) + "?" + shot.query;
  auto res = co_await request(http::verb::get, target, "", std::chrono::seconds(30),
                              api::image_bytes_limit(shot.width, shot.height));
  if (!res) co_return res.error();
  auto type = res->find(http::field::content_type);
  const bool image =
      type != res->end() && (type->value() == "image/png" || type->value() == "image/jpeg");
  // A size or region the agent refuses (past its pixel limit, outside the screen) is the
  // query's fault: say so as the agent put it.
  if (res->result() == http::status::bad_request) {
    co_return make_error(Errc::kInvalidArgument, "bad_query", agent_refusal(*res));
  }
  if (res->result() != http::status::ok || !image) {
    co_return api::errors::agent_error("agent answered " + std::to_string(res->result_int()) +
                                       " without an image");
  }
  AgentImage out{std::string(type->value()), "", std::move(res->body())};
  // The agent's grab and encode times, passed on when they look like what it sends.
  if (auto t = res->find("Server-Timing");
      t != res->end() && t->value().size() <= 128 &&
      std::all_of(t->value().begin(), t->value().end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == ';' || c == '=' || c == '.' ||
               c == ',' || c == ' ';
      })) {
    out.server_timing = std::string(t->value());
  }
  co_return out;
}

net::awaitable<Result<drivers::AgentStream>> AgentClient::egress_wait() {
  auto dialed = co_await sandbox_.dial_agent();
  if (!dialed) co_return dialed.error();
  const std::string req = "GET " + std::string(agent_protocol::kEgressWaitPath) +
                          " HTTP/1.1\r\nHost: agent\r\n" +
                          std::string(agent_protocol::kSecretHeader) + ": " + secret_ + "\r\n\r\n";
  boost::system::error_code ec;
  {
    Deadline deadline(*dialed, std::chrono::seconds(10));
    co_await net::async_write(*dialed, net::buffer(req),
                              net::redirect_error(net::use_awaitable, ec));
  }
  if (ec) co_return bad_gateway("writing to agent: " + ec.message());
  co_return std::move(*dialed);
}

net::awaitable<Result<Tunnel>> AgentClient::browser_events(uint64_t since) {
  co_return co_await open_stream(std::string(agent_protocol::kEventsPath) +
                                 "?since=" + std::to_string(since));
}

net::awaitable<Result<Tunnel>> AgentClient::read_file(const std::string& path) {
  auto t = co_await open_stream(files_target("path", path));
  if (t && !t->length) co_return bad_gateway("the agent sent a file without its length");
  co_return t;
}

net::awaitable<Result<std::vector<agent_protocol::FileEntry>>> AgentClient::list_files(
    const std::string& dir) {
  auto res = co_await request(http::verb::get, files_target("dir", dir), {},
                              std::chrono::seconds(30), agent_protocol::kMaxDirEntries * 1200);
  if (!res) co_return res.error();
  if (res->result() != http::status::ok) co_return refused("listing " + dir, *res);
  auto list = agent_protocol::parse_dir_listing(res->body());
  if (!list) co_return api::errors::agent_error("the listing: " + list.error().message);
  co_return std::move(*list);
}

net::awaitable<Result<void>> AgentClient::remove_file(const std::string& path) {
  auto res = co_await request(http::verb::delete_, files_target("path", path), {},
                              std::chrono::seconds(30), kMaxAgentErrorBody);
  if (!res) co_return res.error();
  if (res->result() != http::status::ok) co_return refused("removing " + path, *res);
  co_return Result<void>{};
}

net::awaitable<Result<Tunnel>> AgentClient::start_upload(const std::string& path, uint64_t size) {
  auto dialed = co_await sandbox_.dial_agent();
  if (!dialed) co_return dialed.error();
  Tunnel t{std::move(*dialed), {}, size};
  boost::system::error_code ec;
  Deadline deadline(t.stream, std::chrono::seconds(10));
  http::request<http::empty_body> req{http::verb::put, files_target("path", path), 11};
  req.set(http::field::host, "agent");
  req.set(agent_protocol::kSecretHeader, secret_);
  req.set(http::field::content_length, std::to_string(size));
  req.set(http::field::expect, "100-continue");
  req.keep_alive(false);
  http::request_serializer<http::empty_body> sr(req);
  co_await http::async_write_header(t.stream, sr, net::redirect_error(net::use_awaitable, ec));
  if (ec) co_return bad_gateway("writing to agent: " + ec.message());
  // 100 Continue once the file is open for writing; else the refusal, before any byte is sent.
  http::response_parser<http::string_body> parser;
  parser.header_limit(kMaxAgentHeader);
  parser.body_limit(kMaxAgentErrorBody);
  co_await read_answer(t.stream, t.buffer, parser, ec);
  if (ec) co_return read_failed("agent", ec, kMaxAgentErrorBody);
  if (parser.get().result() == http::status::continue_) co_return t;
  co_return refused("uploading " + path, parser.get());
}

net::awaitable<Result<StoredFile>> AgentClient::upload_answer(Tunnel& upload) {
  boost::system::error_code ec;
  Deadline deadline(upload.stream, std::chrono::seconds(60));
  http::response_parser<http::string_body> parser;
  parser.header_limit(kMaxAgentHeader);
  parser.body_limit(kMaxAgentErrorBody);
  co_await read_answer(upload.stream, upload.buffer, parser, ec);
  if (ec) co_return read_failed("agent", ec, kMaxAgentErrorBody);
  if (parser.get().result() != http::status::ok) co_return refused("the upload", parser.get());
  auto j = parse_bounded(parser.get().body(), {kMaxAgentErrorBody, kGuestJsonDepth, 16});
  if (!j || !j->is_object()) co_return bad_gateway("the agent's upload answer is not an object");
  StoredFile out;
  auto size = j->find("size");
  auto hash = j->find("sha256");
  if (size == j->end() || !size->is_number_unsigned() || hash == j->end() || !hash->is_string() ||
      hash->get_ref<const std::string&>().size() != 64)
    co_return bad_gateway("the agent's upload answer is malformed");
  out.size = size->get<uint64_t>();
  out.sha256 = hash->get<std::string>();
  co_return out;
}

namespace {

Result<agent_protocol::RecordingStatus> recording_answer(
    const Result<http::response<http::string_body>>& res) {
  if (!res) return res.error();
  if (res->result() != http::status::ok) {
    auto text = agent_error_message(res->body());
    const std::string code = text ? text->code : "";
    const std::string message = text ? text->message : "agent answered " + std::to_string(res->result_int());
    if (res->result() == http::status::conflict && code == "too_many_recordings")
      return make_error(Errc::kConflict, code, message);
    if (res->result() == http::status::service_unavailable)
      return make_error(Errc::kUnavailable, "sandbox_unavailable", message);
    return api::errors::agent_error("the recording: " + message);
  }
  auto st = agent_protocol::parse_recording_status(res->body());
  if (!st) return api::errors::agent_error("the recording's status: " + st.error().message);
  return st;
}

}  // namespace

net::awaitable<Result<agent_protocol::RecordingStatus>> AgentClient::start_recording(
    const agent_protocol::RecordingRequest& r) {
  co_return recording_answer(co_await request(http::verb::post,
                                              std::string(agent_protocol::kRecordingsPath),
                                              agent_protocol::to_json(r).dump(),
                                              std::chrono::seconds(30), 4096));
}

net::awaitable<Result<agent_protocol::RecordingStatus>> AgentClient::recording_status(
    const std::string& id) {
  co_return recording_answer(co_await request(
      http::verb::get, std::string(agent_protocol::kRecordingsPath) + "?id=" + id, {},
      std::chrono::seconds(10), 4096));
}

net::awaitable<Result<agent_protocol::RecordingStatus>> AgentClient::stop_recording(
    const std::string& id, std::chrono::milliseconds timeout) {
  co_return recording_answer(co_await request(
      http::verb::post, std::string(agent_protocol::kRecordingsStopPath) + "?id=" + id, {}, timeout,
      4096));
}

net::awaitable<Result<Tunnel>> AgentClient::frames(const std::string& agent_query) {
  const std::string target = std::string(agent_protocol::kFramesPath) + "?" + agent_query;
  co_return co_await open_stream(target);
}

}  // namespace cabin::sessions
