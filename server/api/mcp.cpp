#include "server/api/mcp.h"

#include <arpa/inet.h>

#include <algorithm>
#include <boost/asio/ip/address.hpp>
#include <charconv>
#include <optional>

#include "common/bounded_json.h"

namespace cabin::api::mcp {
using nlohmann::json;

namespace {

constexpr size_t kMaxMethodBytes = 128;
constexpr size_t kMaxToolNameBytes = 64;
constexpr int kMaxRefDepth = 32;

RpcError invalid(std::string message, json id = nullptr) {
  return RpcError{kInvalidRequest, std::move(message), std::move(id)};
}

bool valid_id(const json& id) { return id.is_string() || id.is_number_integer(); }

// The OpenAPI document's JSON pointer for a path item: '/' in a path is "~1".
json operation(const json& doc, std::string_view path, std::string_view method) {
  auto paths = doc.find("paths");
  if (paths == doc.end()) return nullptr;
  auto item = paths->find(std::string(path));
  if (item == paths->end()) return nullptr;
  auto op = item->find(std::string(method));
  return op == item->end() ? json(nullptr) : *op;
}

json request_body(const json& doc, std::string_view path, std::string_view method) {
  const json op = operation(doc, path, method);
  if (!op.is_object()) return nullptr;
  const json* s = &op;
  for (const char* k : {"requestBody", "content", "application/json", "schema"}) {
    auto it = s->find(k);
    if (it == s->end()) return nullptr;
    s = &*it;
  }
  return inline_refs(*s, doc);
}

const json& session_id_schema() {
  static const json s = {{"type", "string"},
                         {"pattern", "^ses_([a-z0-9]{1,16}_)?[a-z0-9]{20}$"},
                         {"description", "The session's id, as session_create answered it."}};
  return s;
}

// `schema` (an object schema, or a oneOf/anyOf of them) with `session_id` required in it.
json with_session(json schema) {
  auto add = [](json& o) {
    if (!o.is_object()) return;
    o["type"] = "object";
    if (!o.contains("properties") || !o["properties"].is_object()) o["properties"] = json::object();
    o["properties"]["session_id"] = session_id_schema();
    json required = json::array({"session_id"});
    if (o.contains("required") && o["required"].is_array()) {
      for (const auto& r : o["required"]) required.push_back(r);
    }
    o["required"] = std::move(required);
  };
  if (!schema.is_object()) schema = json::object();
  bool branched = false;
  for (const char* k : {"oneOf", "anyOf"}) {
    auto it = schema.find(k);
    if (it == schema.end() || !it->is_array()) continue;
    for (auto& branch : *it) add(branch);
    branched = true;
  }
  if (branched) {
    schema["type"] = "object";
  } else {
    add(schema);
  }
  return schema;
}

json session_only() {
  return {{"type", "object"},
          {"properties", {{"session_id", session_id_schema()}}},
          {"required", {"session_id"}},
          {"additionalProperties", false}};
}

// The query parameters of an operation as an object schema's properties.
json query_properties(const json& doc, std::string_view path, std::string_view method) {
  json props = json::object();
  const json op = operation(doc, path, method);
  if (!op.is_object() || !op.contains("parameters")) return props;
  for (const auto& p0 : op["parameters"]) {
    const json p = inline_refs(p0, doc);
    if (!p.is_object() || p.value("in", "") != "query") continue;
    const std::string name = p.value("name", "");
    if (name.empty() || name == "token") continue;  // tools act with the caller's key
    json s = p.value("schema", json::object());
    if (p.contains("description")) s["description"] = p["description"];
    props[name] = std::move(s);
  }
  return props;
}

struct ToolDef {
  std::string_view name;
  std::string_view title;
  std::string_view description;
};

constexpr ToolDef kTools[] = {
    {"session_create", "Create a session",
     "Starts a sandbox: a computer of its own with Chromium on a virtual desktop. Answers the "
     "session, with its id (pass it to the other tools), cdp_url and live view. It ends at "
     "timeout_s, after idle_timeout_s with nothing attached, or with session_delete."},
    {"session_list", "List sessions", "The sessions this key can see, live and recently ended."},
    {"session_delete", "Delete a session",
     "Ends a session: its sandbox and everything in it are gone."},
    {"computer", "Use the computer",
     "Acts on the session's screen: one action, or {\"actions\": [...]} for a batch, in "
     "Anthropic's computer-use vocabulary, OpenAI's, or Cabin's own. Coordinates are in the "
     "session's display size. Answers what each action did; screenshots in it come back as "
     "images."},
    {"screenshot", "Take a screenshot",
     "The session's screen as an image, at the session's display size."},
    {"navigate", "Open a URL",
     "Takes the browser's first page to a URL and answers once it got as far as wait_until "
     "(default: load)."},
    {"exec", "Run a command",
     "Runs a command in the sandbox as its user (argv; no shell unless you name one) and "
     "answers its exit code and output."},
    {"preview_open", "Open a port",
     "Opens a port of the sandbox (a server on 127.0.0.1:<port> there) to the outside: answers "
     "a short-lived URL that carries its own access."},
    {"live_view_url", "Live view URL",
     "A URL where a person can watch the session's screen (scope view) or take control "
     "(control), for ttl_s seconds."},
    {"file_read", "Read a file",
     "A file of the sandbox (under its user's home or /tmp; the browser's downloads are in "
     "~/Downloads), at most 4 MiB: as text when it is UTF-8, else as base64."},
    {"file_write", "Write a file",
     "Writes a file into the sandbox (under its user's home or /tmp), from text or base64, "
     "replacing one that is there; a page's file chooser can then take it."},
    {"file_list", "List a directory", "The entries of a directory of the sandbox."},
};

json input_schema(std::string_view name, const json& doc) {
  const std::string base = "/v1/sessions/{session_id}";
  if (name == "session_create") {
    json s = request_body(doc, "/v1/sessions", "post");
    return s.is_object() ? s : json{{"type", "object"}};
  }
  if (name == "session_list") {
    return {{"type", "object"}, {"properties", json::object()}, {"additionalProperties", false}};
  }
  if (name == "session_delete") return session_only();
  if (name == "computer") return with_session(request_body(doc, base + "/computer", "post"));
  if (name == "exec") return with_session(request_body(doc, base + "/exec", "post"));
  if (name == "preview_open") return with_session(request_body(doc, base + "/previews", "post"));
  if (name == "screenshot") {
    json s = session_only();
    s["properties"].update(query_properties(doc, base + "/screenshot", "get"));
    return s;
  }
  if (name == "navigate") {
    json s = session_only();
    s["properties"]["url"] = {{"type", "string"},
                              {"maxLength", 4096},
                              {"description", "An http, https, about: or data: URL."}};
    json create = request_body(doc, "/v1/sessions", "post");
    json wait = {{"type", "string"}, {"enum", {"commit", "load", "networkidle"}}};
    if (create.is_object() && create.contains("properties") &&
        create["properties"].contains("wait_until")) {
      wait = create["properties"]["wait_until"];
    }
    s["properties"]["wait_until"] = std::move(wait);
    s["required"].push_back("url");
    return s;
  }
  if (name == "live_view_url") {
    json s = session_only();
    s["properties"]["scope"] = {
        {"type", "string"},
        {"enum", {"view", "control"}},
        {"default", "view"},
        {"description", "view: watch only; control: mouse and keyboard too."}};
    json tokens = request_body(doc, base + "/tokens", "post");
    json ttl = {{"type", "integer"}, {"minimum", 1}};
    if (tokens.is_object() && tokens.contains("properties") &&
        tokens["properties"].contains("ttl_s")) {
      ttl = tokens["properties"]["ttl_s"];
    }
    s["properties"]["ttl_s"] = std::move(ttl);
    return s;
  }
  if (name == "file_read" || name == "file_write" || name == "file_list") {
    json s = session_only();
    const std::string field = name == "file_list" ? "dir" : "path";
    s["properties"][field] = {
        {"type", "string"},
        {"maxLength", 4096},
        {"description", name == "file_list" ? "An absolute directory path, e.g. /home/cabin."
                                             : "An absolute path, e.g. /home/cabin/report.pdf."}};
    s["required"].push_back(field);
    if (name == "file_read") {
      s["properties"]["encoding"] = {
          {"type", "string"},
          {"enum", {"auto", "text", "base64"}},
          {"default", "auto"},
          {"description", "auto: text when the file is UTF-8, else base64."}};
    }
    if (name == "file_write") {
      // One of the two; not said with oneOf, which some clients refuse at a schema's top.
      s["properties"]["text"] = {{"type", "string"},
                                 {"description", "The file's text (UTF-8); or give base64."}};
      s["properties"]["base64"] = {{"type", "string"},
                                   {"description", "The file's bytes, base64-encoded; or text."}};
    }
    return s;
  }
  return {{"type", "object"}};
}

json inline_at(const json& schema, const json& doc, int depth) {
  // `depth` counts $refs followed: a cycle is left open rather than followed forever.
  if (depth > kMaxRefDepth) return json::object();
  if (schema.is_array()) {
    json out = json::array();
    for (const auto& v : schema) out.push_back(inline_at(v, doc, depth));
    return out;
  }
  if (!schema.is_object()) return schema;
  json out = json::object();
  if (auto ref = schema.find("$ref"); ref != schema.end() && ref->is_string()) {
    const std::string r = ref->get<std::string>();
    if (r.rfind("#/", 0) == 0) {
      json::json_pointer ptr(r.substr(1));
      if (doc.contains(ptr)) out = inline_at(doc.at(ptr), doc, depth + 1);
    }
  }
  for (const auto& [k, v] : schema.items()) {
    if (k == "$ref") continue;
    out[k] = inline_at(v, doc, depth);
  }
  return out;
}

}  // namespace

bool origin_allowed(std::string_view origin, std::string_view public_url, bool tls,
                    std::string_view listen_host, int port) {
  if (!public_url.empty()) {
    const size_t scheme = public_url.find("://");
    if (scheme == std::string_view::npos) return false;
    const size_t path = public_url.find('/', scheme + 3);
    return origin == public_url.substr(0, path);
  }
  const std::string_view want = tls ? "https://" : "http://";
  if (origin.substr(0, want.size()) != want) return false;
  std::string_view hostport = origin.substr(want.size());
  std::string_view host = hostport;
  int origin_port = tls ? 443 : 80;
  const size_t colon = hostport.rfind(':');
  if (colon != std::string_view::npos && hostport.find(']', colon) == std::string_view::npos) {
    host = hostport.substr(0, colon);
    std::string_view digits = hostport.substr(colon + 1);
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), origin_port);
    if (ec != std::errc() || end != digits.data() + digits.size() || digits.empty()) return false;
  }
  if (origin_port != port || host.empty() || host.size() > 64) return false;
  if (host == "localhost") return true;
  // An IP literal: loopback, or the very address the server listens on. Any other is a page
  // served from another machine on the same port.
  auto address = [](std::string_view text) -> std::optional<boost::asio::ip::address> {
    if (text.size() > 2 && text.front() == '[' && text.back() == ']') {
      text = text.substr(1, text.size() - 2);
    }
    boost::system::error_code ec;
    auto a = boost::asio::ip::make_address(std::string(text), ec);
    if (ec || text.find('%') != std::string_view::npos) return std::nullopt;
    return a;
  };
  const auto a = address(host);
  if (!a) return false;
  if (a->is_loopback()) return true;
  const auto listening = address(listen_host);
  return listening && !listening->is_unspecified() && *listening == *a;
}

bool speaks(std::string_view version) {
  return std::find(std::begin(kVersions), std::end(kVersions), version) != std::end(kVersions);
}

std::string_view negotiate(std::string_view requested) {
  return speaks(requested) ? requested : kVersions[0];
}

std::variant<Message, RpcError> parse_message(std::string_view body) {
  auto parsed = parse_bounded(body, JsonLimits{kMaxMessageBytes, kMaxMessageDepth, 1 << 16});
  if (!parsed) return RpcError{kParseError, "parse error: " + parsed.error().message, nullptr};
  json& j = *parsed;
  if (j.is_array()) return invalid("a batch (array) of messages is not taken: send one at a time");
  if (!j.is_object()) return invalid("a message is a JSON-RPC 2.0 object");
  json id = j.contains("id") ? j["id"] : json(nullptr);
  if (!valid_id(id)) id = nullptr;
  auto version = j.find("jsonrpc");
  if (version == j.end() || *version != "2.0") return invalid("jsonrpc must be \"2.0\"", id);
  Message m;
  auto method = j.find("method");
  if (method == j.end()) {
    if (j.contains("id") && (j.contains("result") || j.contains("error"))) {
      m.kind = Message::Kind::kResponse;
      m.id = std::move(id);
      return m;
    }
    return invalid("a message has a method, or is a response with a result or an error", id);
  }
  if (!method->is_string() || method->get_ref<const std::string&>().empty() ||
      method->get_ref<const std::string&>().size() > kMaxMethodBytes) {
    return invalid("method must be a string of 1 to 128 bytes", id);
  }
  m.method = method->get<std::string>();
  if (auto p = j.find("params"); p != j.end() && !p->is_null()) {
    if (!p->is_object()) return RpcError{kInvalidParams, "params must be an object", id};
    m.params = *p;
  }
  if (j.contains("id")) {
    if (!valid_id(j["id"])) return invalid("id must be a string or an integer");
    m.kind = Message::Kind::kRequest;
    m.id = j["id"];
  } else {
    m.kind = Message::Kind::kNotification;
  }
  return m;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json rpc_result(const json& id, json result) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}};
}

json rpc_error(const RpcError& e) {
  return {{"jsonrpc", "2.0"}, {"id", e.id}, {"error", {{"code", e.code}, {"message", e.message}}}};
}

std::variant<ToolCall, RpcError> parse_tool_call(const json& id, const json& params) {
  if (!params.is_object()) return RpcError{kInvalidParams, "tools/call needs params", id};
  auto name = params.find("name");
  if (name == params.end() || !name->is_string() ||
      name->get_ref<const std::string&>().size() > kMaxToolNameBytes) {
    return RpcError{kInvalidParams, "params.name must be a tool's name", id};
  }
  ToolCall call{name->get<std::string>(), json::object()};
  if (!known_tool(call.name)) return RpcError{kInvalidParams, "unknown tool: " + call.name, id};
  if (auto a = params.find("arguments"); a != params.end() && !a->is_null()) {
    if (!a->is_object()) return RpcError{kInvalidParams, "params.arguments must be an object", id};
    call.arguments = *a;
  }
  return call;
}

bool is_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    }
    if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;  // the sequence is cut short
    for (size_t k = 1; k <= n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8.
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return false;
    i += n + 1;
  }
  return true;
}

bool known_tool(std::string_view name) {
  return std::any_of(std::begin(kTools), std::end(kTools),
                     [&](const ToolDef& t) { return t.name == name; });
}

json tools(const json& openapi) {
  json list = json::array();
  for (const auto& t : kTools) {
    json tool = {{"name", t.name},
                 {"title", t.title},
                 {"description", t.description},
                 {"inputSchema", input_schema(t.name, openapi)}};
    const bool reads = t.name == "session_list" || t.name == "screenshot";
    tool["annotations"] = {{"readOnlyHint", reads},
                           {"destructiveHint", t.name == "session_delete"},
                           {"openWorldHint", true}};
    list.push_back(std::move(tool));
  }
  return {{"tools", std::move(list)}};
}

json inline_refs(const json& schema, const json& doc) { return inline_at(schema, doc, 0); }

json text_result(const std::string& text, const json& structured) {
  json r = {{"content", json::array({{{"type", "text"}, {"text", text}}})}, {"isError", false}};
  if (structured.is_object()) r["structuredContent"] = structured;
  return r;
}

json error_result(std::string_view code, std::string_view message) {
  std::string text = std::string(code) + ": " + std::string(message);
  return {{"content", json::array({{{"type", "text"}, {"text", std::move(text)}}})},
          {"isError", true}};
}

json computer_result(json answer) {
  json images = json::array();
  // Each image the batch took ({media_type, data}) becomes an image item; the text keeps its
  // place, size and number instead of the bytes.
  auto take = [&](json& o) {
    if (!o.is_object() || !o.contains("data") || !o["data"].is_string() ||
        !o.contains("media_type") || !o["media_type"].is_string()) {
      return;
    }
    images.push_back(
        {{"type", "image"}, {"data", std::move(o["data"])}, {"mimeType", o["media_type"]}});
    o["data"] = "(image " + std::to_string(images.size()) + ", below)";
  };
  if (answer.is_object()) {
    if (auto r = answer.find("results"); r != answer.end() && r->is_array()) {
      for (auto& item : *r) take(item);
    }
    if (auto shot = answer.find("screenshot"); shot != answer.end()) take(*shot);
  }
  json r = text_result(dump(answer), answer);
  for (auto& image : images) r["content"].push_back(std::move(image));
  return r;
}

json image_result(const std::string& base64, std::string_view mime_type) {
  return {
      {"content", json::array({{{"type", "image"}, {"data", base64}, {"mimeType", mime_type}}})},
      {"isError", false}};
}

}  // namespace cabin::api::mcp
