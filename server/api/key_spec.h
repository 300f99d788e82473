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
inline constexpr int64_t kDefaultKeyMaxMemoryMb = 16384;
inline constexpr int kDefaultKeyMaxVcpus = 16;
inline constexpr int64_t kDefaultKeyMaxRecordingsMb = 8192;
inline constexpr int kDefaultKeyMaxProfiles = 20;
inline constexpr int64_t kDefaultKeyMaxProfilesMb = 2048;
inline constexpr int64_t kMaxKeyMb = int64_t{1} << 24;  // 16 TiB: any budget in MiB

struct KeySpec {
  std::string name;  // 1..64 of [A-Za-z0-9 ._-], not starting or ending with a space
  int max_sessions = kDefaultKeyMaxSessions;                 // live sessions, 1..10000
  int max_creates_per_minute = kDefaultKeyCreatesPerMinute;  // 1..10000
  // The memory limits and vCPUs of its live sessions together.
  int64_t max_memory_mb = kDefaultKeyMaxMemoryMb;  // 512..kMaxKeyMb
  int max_vcpus = kDefaultKeyMaxVcpus;             // 1..10000
  // What its recordings (kept, and those running at their max_mb) may take of the state dir.
  int64_t max_recordings_mb = kDefaultKeyMaxRecordingsMb;  // 1..kMaxKeyMb
  // Its saved profiles: how many, and their archives' bytes together.
  int max_profiles = kDefaultKeyMaxProfiles;           // 1..10000
  int64_t max_profiles_mb = kDefaultKeyMaxProfilesMb;  // 1..kMaxKeyMb
};

// {"name", "max_sessions"?, "max_creates_per_minute"?, "max_memory_mb"?, "max_vcpus"?,
// "max_recordings_mb"?, "max_profiles"?, "max_profiles_mb"?}; unknown fields are 400.
Result<KeySpec> parse_key_spec(std::string_view body);

}  // namespace cabin::api
