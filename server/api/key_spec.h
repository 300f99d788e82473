// KeySpec: the body of POST /v1/keys (a tenant API key's name and quotas), parsed strictly.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace cabin::api {

inline constexpr size_t kMaxKeyNameBytes = 64;
inline constexpr int kMaxKeyQuota = 10000;
// Unset quotas: enough for a client or two, never unbounded.
inline constexpr int kDefaultKeyMaxSessions = 5;
inline constexpr int kDefaultKeyCreatesPerMinute = 30;

struct KeySpec {
  std::string name;  // 1..64 of [A-Za-z0-9 ._-], not starting or ending with a space
  int max_sessions = kDefaultKeyMaxSessions;                 // live sessions, 1..10000
  int max_creates_per_minute = kDefaultKeyCreatesPerMinute;  // 1..10000
};

// {"name", "max_sessions"?, "max_creates_per_minute"?}; unknown fields are 400.
Result<KeySpec> parse_key_spec(std::string_view body);

}  // namespace cabin::api
