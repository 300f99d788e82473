// The agent's few CDP helpers: DevTools' HTTP endpoints and one WebSocket call at a time, on the
// browser that the agent itself started (127.0.0.1 inside the sandbox).
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/websocket/stream.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace cabin::agent {

namespace net = boost::asio;
using CdpSocket = boost::beast::websocket::stream<boost::beast::tcp_stream>;

// GET `target` from DevTools; a discarded value when anything fails.
net::awaitable<nlohmann::json> devtools_get(net::any_io_executor ex, uint16_t port,
                                            const char* target, size_t body_limit);

// The path of a target's webSocketDebuggerUrl (ws://127.0.0.1:PORT<prefix>...), from `prefix`
// on; empty when there is none.
std::string debugger_path(const nlohmann::json& target, std::string_view prefix);

// One CDP call on `ws`: its result, or a discarded value on an error or a failed connection
// (then `why`, if given, says which). Events that arrive before the answer go to `on_event`,
// if given.
using CdpEvents = std::function<void(const nlohmann::json& event)>;
net::awaitable<nlohmann::json> cdp_call(CdpSocket& ws, int id, const char* method,
                                        nlohmann::json params, const CdpEvents* on_event = nullptr,
                                        std::string* why = nullptr);

// A CDP WebSocket to `path` on DevTools, or false; `ws` expires after `within`.
net::awaitable<bool> cdp_open(CdpSocket& ws, uint16_t port, const std::string& path,
                              std::chrono::seconds within);

net::awaitable<void> cdp_close(CdpSocket& ws);

// One CDP call on a connection of its own to `path`: its result, or a discarded value when the
// connection or the call failed.
net::awaitable<nlohmann::json> cdp_call_once(net::any_io_executor ex, uint16_t port,
                                             const std::string& path, const char* method,
                                             nlohmann::json params, std::chrono::seconds within);

}  // namespace cabin::agent
