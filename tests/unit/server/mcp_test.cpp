#include "server/api/mcp.h"

#include <catch2/catch.hpp>
#include <set>
#include <string>

#include "server/api/openapi_doc.h"

using namespace cabin::api;
using nlohmann::json;

namespace {

mcp::Message message(std::string_view body) {
  auto m = mcp::parse_message(body);
  INFO(body);
  REQUIRE(std::holds_alternative<mcp::Message>(m));
  return std::get<mcp::Message>(m);
}

mcp::RpcError refusal(std::string_view body) {
  auto m = mcp::parse_message(body);
  INFO(body);
  REQUIRE(std::holds_alternative<mcp::RpcError>(m));
  return std::get<mcp::RpcError>(m);
}

bool has_ref(const json& j) {
  if (j.is_object()) {
    if (j.contains("$ref")) return true;
    for (const auto& [k, v] : j.items()) {
      if (has_ref(v)) return true;
    }
  } else if (j.is_array()) {
    for (const auto& v : j) {
      if (has_ref(v)) return true;
    }
  }
  return false;
}

}  // namespace

TEST_CASE("MCP messages: requests, notifications and responses") {
  auto r = message(R"({"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"cursor":null}})");
  CHECK(r.kind == mcp::Message::Kind::kRequest);
  CHECK(r.id == 7);
  CHECK(r.method == "tools/list");
  CHECK(r.params.is_object());
  auto s = message(R"({"jsonrpc":"2.0","id":"a-1","method":"ping"})");
  CHECK(s.id == "a-1");
  CHECK(s.params.is_null());
  CHECK(message(R"({"jsonrpc":"2.0","method":"notifications/initialized"})").kind ==
        mcp::Message::Kind::kNotification);
  CHECK(message(R"({"jsonrpc":"2.0","id":3,"result":{}})").kind == mcp::Message::Kind::kResponse);
}

TEST_CASE("MCP messages: what is refused, and with which code") {
  CHECK(refusal("{").code == mcp::kParseError);
  CHECK(refusal(std::string(100, '[') + std::string(100, ']')).code == mcp::kParseError);
  CHECK(refusal(std::string(mcp::kMaxMessageBytes + 1, ' ')).code == mcp::kParseError);
  CHECK(refusal(R"([{"jsonrpc":"2.0","id":1,"method":"ping"}])").code == mcp::kInvalidRequest);
  CHECK(refusal(R"("ping")").code == mcp::kInvalidRequest);
  auto v1 = refusal(R"({"jsonrpc":"1.0","id":4,"method":"ping"})");
  CHECK(v1.code == mcp::kInvalidRequest);
  CHECK(v1.id == 4);  // the answer names the request when it can
  CHECK(refusal(R"({"jsonrpc":"2.0","id":true,"method":"ping"})").code == mcp::kInvalidRequest);
  CHECK(refusal(R"({"jsonrpc":"2.0","id":1.5,"method":"ping"})").code == mcp::kInvalidRequest);
  CHECK(refusal(R"({"jsonrpc":"2.0","id":1,"method":""})").code == mcp::kInvalidRequest);
  CHECK(refusal(R"({"jsonrpc":"2.0","id":1,"method":7})").code == mcp::kInvalidRequest);
  CHECK(refusal(R"({"jsonrpc":"2.0","id":1,"method":"ping","params":[1]})").code ==
        mcp::kInvalidParams);
  CHECK(refusal(R"({"jsonrpc":"2.0","id":1})").code == mcp::kInvalidRequest);
}

TEST_CASE("MCP protocol revisions: the client's when spoken, else the newest") {
  CHECK(mcp::negotiate("2025-06-18") == "2025-06-18");
  CHECK(mcp::negotiate("2025-03-26") == "2025-03-26");
  CHECK(mcp::negotiate("2024-11-05") == mcp::kVersions[0]);
  CHECK(mcp::negotiate("") == mcp::kVersions[0]);
  CHECK_FALSE(mcp::speaks("2099-01-01"));
}

TEST_CASE("MCP tool calls: a known tool and an object of arguments") {
  auto ok = mcp::parse_tool_call(1, {{"name", "exec"}, {"arguments", {{"argv", {"true"}}}}});
  REQUIRE(std::holds_alternative<mcp::ToolCall>(ok));
  CHECK(std::get<mcp::ToolCall>(ok).arguments.contains("argv"));
  auto none = mcp::parse_tool_call(1, {{"name", "session_list"}});
  REQUIRE(std::holds_alternative<mcp::ToolCall>(none));
  CHECK(std::get<mcp::ToolCall>(none).arguments == json::object());
  for (const json& bad : {json{{"name", "rm_rf"}}, json{{"name", 3}}, json::object(),
                          json{{"name", "exec"}, {"arguments", json::array()}}}) {
    INFO(bad.dump());
    auto r = mcp::parse_tool_call(9, bad);
    REQUIRE(std::holds_alternative<mcp::RpcError>(r));
    CHECK(std::get<mcp::RpcError>(r).code == mcp::kInvalidParams);
    CHECK(std::get<mcp::RpcError>(r).id == 9);
  }
}

TEST_CASE("MCP tools take their input schemas from the OpenAPI document") {
  const json doc = json::parse(openapi_document());
  const json list = mcp::tools(doc).at("tools");
  std::set<std::string> names;
  for (const auto& t : list) {
    const std::string name = t.at("name");
    INFO(name);
    names.insert(name);
    CHECK(mcp::known_tool(name));
    CHECK_FALSE(t.at("description").get<std::string>().empty());
    const json& in = t.at("inputSchema");
    CHECK(in.at("type") == "object");
    CHECK_FALSE(has_ref(in));  // stands alone: clients do not resolve the API's document
    const bool per_session = name != "session_create" && name != "session_list";
    if (per_session) {
      // session_id is required at the top, or in every branch of a oneOf/anyOf.
      const json* branches = in.contains("oneOf")   ? &in["oneOf"]
                             : in.contains("anyOf") ? &in["anyOf"]
                                                    : nullptr;
      if (branches) {
        for (const auto& b : *branches) {
          CHECK(b.at("properties").contains("session_id"));
          CHECK(std::find(b.at("required").begin(), b.at("required").end(), "session_id") !=
                b.at("required").end());
        }
      } else {
        CHECK(in.at("properties").contains("session_id"));
        CHECK(std::find(in.at("required").begin(), in.at("required").end(), "session_id") !=
              in.at("required").end());
      }
    }
  }
  CHECK(names == std::set<std::string>{"session_create", "session_list", "session_delete",
                                       "computer", "screenshot", "navigate", "exec", "preview_open",
                                       "live_view_url", "file_read", "file_write", "file_list"});
  // The bodies came from the document, not a stand-in.
  auto find = [&](std::string_view n) {
    for (const auto& t : list) {
      if (t["name"] == n) return t["inputSchema"];
    }
    return json();
  };
  CHECK(find("session_create").at("properties").contains("resolution"));
  CHECK(find("exec").at("properties").contains("argv"));
  CHECK(find("preview_open").at("properties").contains("port"));
  CHECK(find("computer").dump().find("\"click\"") != std::string::npos);
}

TEST_CASE("UTF-8 as file_read tells text from bytes") {
  CHECK(mcp::is_utf8(""));
  CHECK(mcp::is_utf8("plain ascii\n"));
  CHECK(mcp::is_utf8("Gr\xc3\xbc\xc3\x9f" "e \xe4\xb8\xad \xf0\x9f\x99\x82"));  // Grüße 中 🙂
  CHECK_FALSE(mcp::is_utf8("\xff"));
  CHECK_FALSE(mcp::is_utf8("\xc3"));              // cut short
  CHECK_FALSE(mcp::is_utf8("\xe4\xb8"));          // cut short
  CHECK_FALSE(mcp::is_utf8("\xc0\xaf"));          // overlong '/'
  CHECK_FALSE(mcp::is_utf8("\xed\xa0\x80"));      // a surrogate
  CHECK_FALSE(mcp::is_utf8("\xf4\x90\x80\x80"));  // past U+10FFFF
  CHECK_FALSE(mcp::is_utf8("a\x80" "b"));        // a lone continuation byte
}

TEST_CASE("inline_refs replaces local $refs and stops at a cycle") {
  const json doc = json::parse(R"({"components": {"schemas": {
    "A": {"type": "object", "properties": {"b": {"$ref": "#/components/schemas/B"}}},
    "B": {"type": "integer"},
    "Loop": {"properties": {"again": {"$ref": "#/components/schemas/Loop"}}}}}})");
  const json a = mcp::inline_refs({{"$ref", "#/components/schemas/A"}}, doc);
  CHECK(a.at("properties").at("b").at("type") == "integer");
  const json loop = mcp::inline_refs({{"$ref", "#/components/schemas/Loop"}}, doc);
  CHECK_FALSE(has_ref(loop));
}

TEST_CASE("a computer answer's images become image items") {
  const json answer = json::parse(R"({"results": [{"op": "click"},
    {"op": "screenshot", "media_type": "image/png", "data": "iVBORw0KGgo=", "width": 10,
     "height": 10}]})");
  const json r = mcp::computer_result(answer);
  REQUIRE(r.at("content").size() == 2);
  CHECK(r["content"][0]["type"] == "text");
  CHECK(r["content"][0]["text"].get<std::string>().find("iVBORw0KGgo=") == std::string::npos);
  CHECK(r["content"][1] ==
        json::parse(R"({"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"})"));
  CHECK(r["isError"] == false);
}

TEST_CASE("tool errors are results the model reads, not protocol errors") {
  const json e = mcp::error_result("session_not_found", "no session with that id");
  CHECK(e["isError"] == true);
  CHECK(e["content"][0]["text"] == "session_not_found: no session with that id");
}

TEST_CASE("MCP callers' origins: the public URL's, or this server's by IP or localhost") {
  CHECK(mcp::origin_allowed("http://127.0.0.1:8080", "", false, "127.0.0.1", 8080));
  CHECK(mcp::origin_allowed("http://localhost:8080", "", false, "127.0.0.1", 8080));
  CHECK(mcp::origin_allowed("http://[::1]:8080", "", false, "127.0.0.1", 8080));
  CHECK(mcp::origin_allowed("http://127.0.0.2:8080", "", false, "127.0.0.1", 8080));
  // Another machine's address on the same port is not this server.
  CHECK_FALSE(mcp::origin_allowed("http://10.9.9.9:8080", "", false, "127.0.0.1", 8080));
  CHECK_FALSE(mcp::origin_allowed("http://10.9.9.9:8080", "", false, "0.0.0.0", 8080));
  CHECK_FALSE(mcp::origin_allowed("http://[2001:db8::1]:8080", "", false, "::", 8080));
  // The address it listens on is.
  CHECK(mcp::origin_allowed("https://10.1.2.3:8080", "", true, "10.1.2.3", 8080));
  CHECK(mcp::origin_allowed("https://[2001:db8::1]:8080", "", true, "2001:db8::1", 8080));
  CHECK_FALSE(mcp::origin_allowed("https://10.1.2.4:8080", "", true, "10.1.2.3", 8080));
  CHECK(mcp::origin_allowed("https://127.0.0.1", "", true, "127.0.0.1", 443));
  CHECK_FALSE(mcp::origin_allowed("http://evil.example.com:8080", "", false, "127.0.0.1",
                                  8080));  // rebinding
  CHECK_FALSE(mcp::origin_allowed("http://127.0.0.1:3000", "", false, "127.0.0.1", 8080));
  CHECK_FALSE(mcp::origin_allowed("https://127.0.0.1:8080", "", false, "127.0.0.1", 8080));
  CHECK_FALSE(mcp::origin_allowed("http://127.0.0.1:8080", "", true, "127.0.0.1", 8080));
  CHECK_FALSE(mcp::origin_allowed("null", "", false, "127.0.0.1", 8080));
  CHECK_FALSE(mcp::origin_allowed("http://127.0.0.1:8080x", "", false, "127.0.0.1", 8080));
  CHECK_FALSE(mcp::origin_allowed("http://127.0.0.1:", "", false, "127.0.0.1", 8080));
  CHECK(mcp::origin_allowed("https://cabin.example.com", "https://cabin.example.com/", true,
                            "127.0.0.1", 8443));
  CHECK(mcp::origin_allowed("https://cabin.example.com", "https://cabin.example.com/base", true,
                            "127.0.0.1", 1));
  CHECK_FALSE(mcp::origin_allowed("http://127.0.0.1:8443", "https://cabin.example.com", true,
                                  "127.0.0.1", 8443));
}
