// MCP (the Model Context Protocol) over its Streamable HTTP transport, stateless: each POST to
// /mcp carries one JSON-RPC message and gets one JSON answer; no MCP session is kept, and each
// tool call names the Cabin session it acts on. This file holds the parts that need no server:
// the message parser, the answers' shapes and the tools' list.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <variant>

#include "common/result.h"

namespace cabin::api::mcp {

// Protocol revisions spoken, newest first.
inline constexpr std::string_view kVersions[] = {"2025-11-25", "2025-06-18", "2025-03-26"};
bool speaks(std::string_view version);
// initialize's answer: the client's revision when it is spoken here, else the newest.
std::string_view negotiate(std::string_view requested);

// JSON-RPC 2.0 error codes.
inline constexpr int kParseError = -32700;
inline constexpr int kInvalidRequest = -32600;
inline constexpr int kMethodNotFound = -32601;
inline constexpr int kInvalidParams = -32602;

inline constexpr size_t kMaxMessageBytes = 1 << 20;
inline constexpr int kMaxMessageDepth = 32;

struct Message {
  enum class Kind { kRequest, kNotification, kResponse };
  Kind kind = Kind::kRequest;
  nlohmann::json id;      // a request's: a string or an integer
  std::string method;     // a request's or a notification's
  nlohmann::json params;  // an object, or null when absent
};

struct RpcError {
  int code = kInvalidRequest;
  std::string message;
  nlohmann::json id;  // null when the message's id is unknown
};

// One JSON-RPC message as the transport takes it: at most kMaxMessageBytes, nested at most
// kMaxMessageDepth. A batch (an array) is refused: the protocol dropped them.
std::variant<Message, RpcError> parse_message(std::string_view body);

nlohmann::json rpc_result(const nlohmann::json& id, nlohmann::json result);
// JSON text of anything built here. A client's strings may hold bytes that are not UTF-8 (the
// parser passes them through); they are replaced, so that writing never throws.
std::string dump(const nlohmann::json& j);
nlohmann::json rpc_error(const RpcError& e);

// Whether a page of `origin` (a request's Origin header) may call /mcp: the origin of
// `public_url` when one is set; else, on the listening port and scheme, `localhost`, a loopback
// address or the address the server listens on (`listen_host`) by IP, never a name that DNS
// could rebind to this server nor another machine's address.
bool origin_allowed(std::string_view origin, std::string_view public_url, bool tls,
                    std::string_view listen_host, int port);

struct ToolCall {
  std::string name;
  nlohmann::json arguments;  // an object
};
// tools/call's params: {"name", "arguments"?}; kInvalidParams when they are not that.
std::variant<ToolCall, RpcError> parse_tool_call(const nlohmann::json& id,
                                                 const nlohmann::json& params);

// tools/list's answer. The input schemas are taken from `openapi` (the API's OpenAPI document):
// a tool that stands for an endpoint takes that endpoint's body, plus `session_id`.
nlohmann::json tools(const nlohmann::json& openapi);
bool known_tool(std::string_view name);
// Whether `s` is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
bool is_utf8(std::string_view s);

// A schema from the OpenAPI document with every local $ref replaced by what it names (at most
// 32 deep), so that it stands alone.
nlohmann::json inline_refs(const nlohmann::json& schema, const nlohmann::json& doc);

// A tool result: text (the JSON answer as text, and as structuredContent when it is an object),
// or an error the model reads (isError).
nlohmann::json text_result(const std::string& text, const nlohmann::json& structured);
nlohmann::json error_result(std::string_view code, std::string_view message);
nlohmann::json image_result(const std::string& base64, std::string_view mime_type);
// A /computer answer: its JSON as text, and each screenshot or zoom in it as an image item.
nlohmann::json computer_result(nlohmann::json answer);

}  // namespace cabin::api::mcp
