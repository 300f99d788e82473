// Fuzz target: what POST /mcp parses from a client: one JSON-RPC message, then a tool call's
// params, and a computer answer as the tool hands it on; file_write's base64, and file_read's
// test of a sandbox's bytes for UTF-8.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/crypto.h"
#include "server/api/mcp.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace mcp = cabin::api::mcp;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  // Bytes called UTF-8 must be text a JSON answer can carry as it is.
  if (mcp::is_utf8(in)) (void)nlohmann::json(std::string(in)).dump();
  // Decoded base64 encodes back to what came in, but for its padding.
  if (auto bytes = cabin::base64_decode(in)) {
    std::string again = cabin::base64_encode(*bytes);
    std::string_view unpadded(again);
    while (!unpadded.empty() && unpadded.back() == '=') unpadded.remove_suffix(1);
    std::string_view given(in);
    while (!given.empty() && given.back() == '=') given.remove_suffix(1);
    if (unpadded != given) __builtin_trap();
  }
  auto m = mcp::parse_message(in);
  if (auto* e = std::get_if<mcp::RpcError>(&m)) {
    // A refusal names a request only by a valid id.
    if (!e->id.is_null() && !e->id.is_string() && !e->id.is_number_integer()) __builtin_trap();
    (void)mcp::dump(mcp::rpc_error(*e));
    return 0;
  }
  const auto& msg = std::get<mcp::Message>(m);
  if (msg.kind == mcp::Message::Kind::kRequest) {
    if (msg.method.empty() || (!msg.id.is_string() && !msg.id.is_number_integer()))
      __builtin_trap();
  }
  if (!msg.params.is_null() && !msg.params.is_object()) __builtin_trap();
  // What the server answers carries the client's strings: writing it must never throw.
  (void)mcp::dump(mcp::rpc_error({mcp::kMethodNotFound, "method not found: " + msg.method, msg.id}));
  (void)mcp::dump(msg.params);
  auto call = mcp::parse_tool_call(msg.id, msg.params);
  if (auto* c = std::get_if<mcp::ToolCall>(&call)) {
    if (!mcp::known_tool(c->name) || !c->arguments.is_object()) __builtin_trap();
    (void)mcp::dump(mcp::computer_result(c->arguments));
  }
  return 0;
}
