// POST /mcp: MCP's Streamable HTTP transport, stateless and JSON-only. Each tool is the API
// endpoint it names, called on the caller's behalf through handle(), so keys, tenants, quotas,
// idle timers and the audit log treat it as the same request over HTTP.
// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <algorithm>
#include <chrono>
#include <string>

#include "common/agent_protocol.h"
#include "common/crypto.h"
#include "common/deadline.h"
#include "server/api/errors.h"
#include "server/api/ids.h"
#include "server/api/mcp.h"
#include "server/api/openapi_doc.h"
#include "server/api/session_spec.h"
#include "server/audit/audit_log.h"
#include "server/handlers/api.h"
#include "server/sessions/session_manager.h"

namespace cabin::http_api {
using nlohmann::json;
namespace mcp = api::mcp;

namespace {

constexpr auto kNavigateTimeout = std::chrono::seconds(60);
// file_read's bytes travel in its answer: larger files are for GET /files, which streams them.
constexpr uint64_t kMaxReadBytes = 4 << 20;

const json& openapi() {
  static const json doc = json::parse(api::openapi_document());
  return doc;
}

const json& tool_list() {
  static const json tools = mcp::tools(openapi());
  return tools;
}

// An answer of the API as a tool's result: an error the model reads, or the JSON answer.
json tool_result(const Response& res) {
  const json body = json::parse(res.body(), nullptr, false);
  if (res.result_int() >= 400) {
    if (body.is_object() && body.contains("error") && body["error"].is_object()) {
      const json& e = body["error"];
      return mcp::error_result(e.value("code", "error"), e.value("message", ""));
    }
    return mcp::error_result("http_" + std::to_string(res.result_int()), res.body().substr(0, 512));
  }
  return mcp::text_result(res.body(), body);
}

}  // namespace

net::awaitable<Response> Api::on_behalf(const Authn& authn, const Request& outer, http::verb verb,
                                        const std::string& target, std::string body) {
  auto route = api::route(http::to_string(verb), target);
  if (!route) co_return error_response(route.error());
  if (authn.key) {
    if (auto r = tenant_may(*route, *authn.key); !r) co_return error_response(r.error());
  }
  Request inner{verb, target, 11};
  // The URLs an answer holds are built from the outer request's address.
  if (auto host = outer.find(http::field::host); host != outer.end()) {
    inner.set(http::field::host, host->value());
  }
  if (!body.empty()) inner.set(http::field::content_type, "application/json");
  inner.body() = std::move(body);
  inner.prepare_payload();
  co_return co_await handle(*route, authn, inner, nullptr);
}

net::awaitable<json> Api::mcp_tool(const Authn& authn, const Request& outer,
                                   const std::string& name, const json& args) {
  if (name == "session_create") {
    co_return tool_result(
        co_await on_behalf(authn, outer, http::verb::post, "/v1/sessions", mcp::dump(args)));
  }
  if (name == "session_list") {
    co_return tool_result(co_await on_behalf(authn, outer, http::verb::get, "/v1/sessions", ""));
  }
  auto sid = args.find("session_id");
  if (sid == args.end() || !sid->is_string() ||
      !api::valid_session_id(sid->get_ref<const std::string&>())) {
    co_return mcp::error_result("invalid_request", "session_id: must be a session's id (ses_...)");
  }
  const std::string base = "/v1/sessions/" + sid->get<std::string>();
  json body = args;
  body.erase("session_id");
  if (name == "session_delete") {
    co_return tool_result(co_await on_behalf(authn, outer, http::verb::delete_, base, ""));
  }
  if (name == "computer") {
    auto res =
        co_await on_behalf(authn, outer, http::verb::post, base + "/computer", mcp::dump(body));
    if (res.result_int() >= 400) co_return tool_result(res);
    co_return mcp::computer_result(json::parse(res.body(), nullptr, false));
  }
  if (name == "exec") {
    co_return tool_result(
        co_await on_behalf(authn, outer, http::verb::post, base + "/exec", mcp::dump(body)));
  }
  if (name == "preview_open") {
    co_return tool_result(
        co_await on_behalf(authn, outer, http::verb::post, base + "/previews", mcp::dump(body)));
  }
  if (name == "live_view_url") {
    json mint = {{"scope", body.value("scope", json("view"))}};
    if (body.contains("ttl_s")) mint["ttl_s"] = body["ttl_s"];
    for (const auto& [k, v] : body.items()) {
      if (k != "scope" && k != "ttl_s") {
        co_return mcp::error_result("unknown_field", k + ": live_view_url takes scope and ttl_s");
      }
    }
    if (mint["scope"] != "view" && mint["scope"] != "control") {
      co_return mcp::error_result("invalid_request", "scope: must be view or control");
    }
    co_return tool_result(
        co_await on_behalf(authn, outer, http::verb::post, base + "/tokens", mcp::dump(mint)));
  }
  if (name == "screenshot") {
    std::string target = base + "/screenshot";
    char sep = '?';
    for (const auto& [k, v] : body.items()) {
      if (!v.is_string() && !v.is_number() && !v.is_boolean()) {
        co_return mcp::error_result("invalid_request", k + ": must be a string or a number");
      }
      target += sep + api::percent_encode(k) + "=" +
                api::percent_encode(v.is_string() ? v.get<std::string>() : v.dump());
      sep = '&';
    }
    auto res = co_await on_behalf(authn, outer, http::verb::get, target, "");
    if (res.result_int() >= 400) co_return tool_result(res);
    co_return mcp::image_result(base64_encode(res.body()),
                                std::string(res[http::field::content_type]));
  }
  if (name == "navigate") {
    // No endpoint of its own: the route of a session read stands for its checks.
    auto route = api::route("GET", base);
    if (!route) co_return mcp::error_result(route.error().code, route.error().message);
    if (authn.key) {
      if (auto r = tenant_may(*route, *authn.key); !r) {
        co_return mcp::error_result(r.error().code, r.error().message);
      }
    }
    for (const auto& [k, v] : body.items()) {
      if (k != "url" && k != "wait_until") {
        co_return mcp::error_result("unknown_field", k + ": navigate takes url and wait_until");
      }
    }
    const std::string url = body.value("url", json("")).is_string() ? body.value("url", "") : "";
    if (url.empty() || url.size() > api::kMaxStartUrl || !api::allowed_start_url(url)) {
      co_return mcp::error_result("invalid_request",
                                  "url: must be an http, https, about: or data: URL");
    }
    const json wait = body.value("wait_until", json("load"));
    if (wait != "commit" && wait != "load" && wait != "networkidle") {
      co_return mcp::error_result("invalid_request",
                                  "wait_until: must be \"commit\", \"load\" or \"networkidle\"");
    }
    auto s = sessions_.find(route->session_id);
    if (!s) co_return mcp::error_result("session_not_found", "no session with that id");
    if (s->paused()) {
      const Error e = api::errors::session_paused();
      co_return mcp::error_result(e.code, e.message);
    }
    const auto present = sessions::Session::Presence(s);
    auto r = co_await s->navigate(url, wait.get<std::string>(), kNavigateTimeout);
    if (audit_) {
      audit_->record({{"action", "navigate"},
                      {"key", authn.who()},
                      {"status", r ? 200 : http_status(r.error().errc)},
                      {"outcome", r ? "ok" : r.error().code},
                      {"session", s->id()}});
    }
    if (!r) co_return mcp::error_result(r.error().code, r.error().message);
    const json out = {{"session_id", s->id()}, {"url", url}, {"wait_until", wait}};
    co_return mcp::text_result(mcp::dump(out), out);
  }
  if (name == "file_read" || name == "file_write" || name == "file_list") {
    co_return co_await mcp_file_tool(authn, name, base, body);
  }
  co_return mcp::error_result("unknown_tool", name);
}

net::awaitable<json> Api::mcp_file_tool(const Authn& authn, const std::string& name,
                                        const std::string& base, const json& args) {
  const bool list = name == "file_list", write = name == "file_write";
  const std::string field = list ? "dir" : "path";
  for (const auto& [k, v] : args.items()) {
    if (k != field && !(write && (k == "text" || k == "base64")) &&
        !(name == "file_read" && k == "encoding")) {
      co_return mcp::error_result("unknown_field", k + ": not an argument of " + name);
    }
  }
  const auto at = args.find(field);
  if (at == args.end() || !at->is_string()) {
    co_return mcp::error_result("invalid_request", field + ": must be a string");
  }
  // The endpoint the tool stands for: its tenant check, pause check and audit entry.
  const http::verb verb = write ? http::verb::put : http::verb::get;
  const std::string target =
      base + "/files?" + field + "=" + api::percent_encode(at->get<std::string>());
  auto route = api::route(http::to_string(verb), target);
  if (!route) co_return mcp::error_result(route.error().code, route.error().message);
  if (authn.key) {
    if (auto r = tenant_may(*route, *authn.key); !r) {
      co_return mcp::error_result(r.error().code, r.error().message);
    }
  }
  const auto present = presence(*route);
  Response res = co_await file_tool_answer(*route, name, args);
  if (write && audit_) {
    Request req{verb, target, 11};
    if (auto entry = audit_entry(*route, authn, req, res)) audit_->record(std::move(*entry));
  }
  co_return tool_result(res);
}

net::awaitable<Response> Api::file_tool_answer(const api::Route& route, const std::string& name,
                                               const json& args) {
  if (auto r = not_paused(route); !r) co_return error_response(r.error());
  auto s = sessions_.find(route.session_id);
  if (!s) co_return error_response(api::errors::session_not_found());
  const bool list = name == "file_list";
  auto path = agent_protocol::check_file_path(args.at(list ? "dir" : "path").get<std::string>());
  if (!path) co_return error_response(path.error());
  if (list) {
    auto entries = co_await s->agent().list_files(*path);
    if (!entries) co_return error_response(entries.error());
    co_return json_response(http::status::ok, file_listing(*path, *entries));
  }
  boost::system::error_code ec;
  if (name == "file_write") {
    const auto text = args.find("text"), b64 = args.find("base64");
    if ((text == args.end()) == (b64 == args.end()) ||
        (text != args.end() && !text->is_string()) || (b64 != args.end() && !b64->is_string())) {
      co_return error_response(make_error(Errc::kInvalidArgument, "invalid_request",
                                          "give the file's bytes as text or as base64"));
    }
    std::string bytes;
    if (text != args.end()) {
      bytes = text->get<std::string>();
    } else {
      auto decoded = base64_decode(b64->get_ref<const std::string&>());
      if (!decoded) {
        co_return error_response(
            make_error(Errc::kInvalidArgument, "invalid_request", "base64: not base64"));
      }
      bytes = std::move(*decoded);
    }
    auto upload = co_await s->agent().start_upload(*path, bytes.size());
    if (!upload) co_return error_response(upload.error());
    {
      Deadline stall(upload->stream, kFileTransferStall);
      co_await net::async_write(upload->stream, net::buffer(bytes),
                                net::redirect_error(net::use_awaitable, ec));
    }
    if (ec) co_return error_response(make_error(Errc::kBadGateway, "transfer_failed", ec.message()));
    auto stored = co_await sessions::AgentClient::upload_answer(*upload);
    if (!stored) co_return error_response(stored.error());
    co_return json_response(http::status::ok,
                            {{"path", *path}, {"size", stored->size}, {"sha256", stored->sha256}});
  }
  // file_read
  std::string encoding = "auto";
  if (const auto e = args.find("encoding"); e != args.end()) {
    encoding = e->is_string() ? e->get<std::string>() : "";
  }
  if (encoding != "auto" && encoding != "text" && encoding != "base64") {
    co_return error_response(make_error(Errc::kInvalidArgument, "invalid_request",
                                        "encoding: must be auto, text or base64"));
  }
  auto file = co_await s->agent().read_file(*path);
  s.reset();
  if (!file) co_return error_response(file.error());
  const uint64_t size = file->length.value_or(0);
  if (size > kMaxReadBytes) {
    co_return error_response(make_error(
        Errc::kTooLarge, "file_too_large",
        "file_read answers files of at most 4 MiB; GET /v1/sessions/{id}/files streams any"));
  }
  std::string bytes(static_cast<size_t>(size), '\0');
  const size_t ahead = std::min<size_t>(file->buffer.size(), bytes.size());
  net::buffer_copy(net::buffer(bytes.data(), ahead), file->buffer.data(), ahead);
  if (ahead < bytes.size()) {
    Deadline stall(file->stream, kFileTransferStall);
    co_await net::async_read(file->stream, net::buffer(bytes.data() + ahead, bytes.size() - ahead),
                             net::redirect_error(net::use_awaitable, ec));
  }
  if (ec) co_return error_response(make_error(Errc::kBadGateway, "transfer_failed", ec.message()));
  const bool utf8 = encoding != "base64" && mcp::is_utf8(bytes);
  if (encoding == "text" && !utf8) {
    co_return error_response(make_error(Errc::kInvalidArgument, "invalid_request",
                                        "the file is not UTF-8 text: ask for base64"));
  }
  json out = {{"path", *path}, {"size", size}, {"sha256", sha256_hex(bytes)}};
  if (utf8) {
    out["text"] = std::move(bytes);
  } else {
    out["base64"] = base64_encode(bytes);
  }
  co_return json_response(http::status::ok, out);
}

net::awaitable<Response> Api::mcp(const Authn& authn, const Request& req) {
  // A page in a browser must not drive sessions with a key it found, nor one that reached this
  // server by DNS rebinding: only the server's own origin may call (clients that are not
  // browsers send no Origin).
  if (auto origin = req.find(http::field::origin); origin != req.end()) {
    if (!mcp::origin_allowed(origin->value(), config_.public_url, config_.tls(),
                             config_.listen_host, config_.listen_port)) {
      co_return error_response(api::errors::cross_origin());
    }
  }
  if (auto v = req.find("MCP-Protocol-Version"); v != req.end() && !mcp::speaks(v->value())) {
    co_return json_response(
        http::status::bad_request,
        mcp::rpc_error({mcp::kInvalidRequest,
                        "unsupported MCP-Protocol-Version: " + std::string(v->value()), nullptr}));
  }
  auto parsed = mcp::parse_message(req.body());
  if (auto* e = std::get_if<mcp::RpcError>(&parsed)) {
    co_return json_response(http::status::bad_request, mcp::rpc_error(*e));
  }
  const auto& m = std::get<mcp::Message>(parsed);
  // Notifications and responses need no answer but that they arrived.
  if (m.kind != mcp::Message::Kind::kRequest) {
    Response res{http::status::accepted, 11};
    res.prepare_payload();
    co_return res;
  }
  json answer;
  if (m.method == "initialize") {
    const json& p = m.params;
    const std::string asked =
        p.is_object() && p.contains("protocolVersion") && p["protocolVersion"].is_string()
            ? p["protocolVersion"].get<std::string>()
            : "";
    answer = mcp::rpc_result(
        m.id, {{"protocolVersion", mcp::negotiate(asked)},
               {"capabilities", {{"tools", {{"listChanged", false}}}}},
               {"serverInfo", {{"name", "cabin"}, {"title", "Cabin"}, {"version", CABIN_VERSION}}},
               {"instructions",
                "Cabin runs browser sandboxes. Create one with session_create and pass its id "
                "to the other tools; delete it with session_delete when done."}});
  } else if (m.method == "ping") {
    answer = mcp::rpc_result(m.id, json::object());
  } else if (m.method == "tools/list") {
    answer = mcp::rpc_result(m.id, tool_list());
  } else if (m.method == "tools/call") {
    auto call = mcp::parse_tool_call(m.id, m.params);
    if (auto* e = std::get_if<mcp::RpcError>(&call)) {
      answer = mcp::rpc_error(*e);
    } else {
      const auto& c = std::get<mcp::ToolCall>(call);
      answer = mcp::rpc_result(m.id, co_await mcp_tool(authn, req, c.name, c.arguments));
    }
  } else {
    answer = mcp::rpc_error({mcp::kMethodNotFound, "method not found: " + m.method, m.id});
  }
  co_return json_response(http::status::ok, answer);
}

}  // namespace cabin::http_api
