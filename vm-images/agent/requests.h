// Typed agent requests: strict parsers that turn untrusted bytes into specs before any logic runs.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"

namespace cabin::agent {

// Exec requests are the shared protocol type (common/agent_protocol.h).
inline constexpr uint32_t kMaxHealthWaitMs = 60000;

// GET /agent/v1/health query: "" or "wait_ms=N".
struct HealthQuery {
  std::chrono::milliseconds wait{0};
};

Result<HealthQuery> parse_health_query(std::string_view query);

// CONNECT authority-form target, restricted to the sandbox's loopback.
struct ConnectTarget {
  enum class Host { kIpv4Loopback, kIpv6Loopback, kLocalhost };
  Host host = Host::kIpv4Loopback;
  uint16_t port = 0;
};

Result<ConnectTarget> parse_connect_target(std::string_view target);

// --listen value: "unix:PATH" or "tcp:HOST:PORT" (HOST an IPv4 literal or [IPv6]).
struct ListenAddress {
  enum class Kind { kUnix, kTcp, kFd };
  Kind kind = Kind::kUnix;
  std::string path;   // kUnix
  int fd = -1;        // kFd: a listening UNIX socket made by whoever started the agent
  std::string host;   // kTcp, without brackets
  uint16_t port = 0;  // kTcp; 0 picks a free port
};

Result<ListenAddress> parse_listen_address(std::string_view text);

// Decimal digits only, no sign, no leading zero; nullopt when out of [min, max]. Every number
// in the agent's query strings and CONNECT targets is read with it.
std::optional<uint32_t> parse_decimal(std::string_view s, uint32_t min, uint32_t max);

// Splits "/path?query" into its two parts.
std::pair<std::string_view, std::string_view> split_target(std::string_view target);

}  // namespace cabin::agent
