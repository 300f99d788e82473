// SessionSpec: the validated, immutable request to create a session, parsed once from JSON.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "common/result.h"
#include "server/egress/policy.h"

namespace cabin::api {

struct Resolution {
  int width = 1280;
  int height = 800;
};

struct Resources {
  int vcpus = 0;          // 0: the driver's default
  uint64_t memory_mb = 0;  // 0: the server's default
};

// When POST /v1/sessions answers: the start page's navigation committed, its load event fired
// (the default), or besides that its network has been quiet for 500 ms.
enum class WaitUntil { kCommit, kLoad, kNetworkIdle };
std::string_view wait_until_name(WaitUntil w);

// What an idle session's timer does.
enum class OnIdle { kDelete, kPause };
std::string_view on_idle_name(OnIdle o);

struct ProfileUse {
  std::string id;  // api::valid_profile_id
  bool persist = false;
};

// A screen recording (POST /v1/sessions/{id}/recordings, or "record" in a create).
struct RecordingSpec {
  int fps = 15;
  int quality = 70;  // 1..100
  int64_t max_duration_s = 3600;
  int64_t max_mb = 512;
};
inline constexpr int64_t kMaxRecordingMb = 4096;
// The most bytes of a recording cabind copies out of the sandbox: its max_mb and a margin for
// what the encoder writes between the recorder's size checks and the file's end. A sandbox that
// claims more is refused, whatever its file holds.
inline constexpr int64_t kRecordingMarginMb = 8;
inline constexpr uint64_t recording_cap_bytes(int64_t max_mb) {
  return static_cast<uint64_t>(max_mb + kRecordingMarginMb) << 20;
}
// `j` must be an object; `prefix` names its fields in errors ("record.").
Result<RecordingSpec> parse_recording_spec(const nlohmann::json& j, std::string_view prefix = {});

struct SessionSpec {
  std::string driver;  // empty: the server's default driver
  Resolution resolution;
  // The screen size the model sees; computer-use coordinates and screenshots are scaled between
  // it and the resolution unless a request declares its own.
  std::optional<Resolution> display;
  Resources resources;
  int64_t timeout_s = 3600;  // the lifetime, from creation
  // Seconds with no one attached and no request in flight before on_idle; 0: never idle.
  int64_t idle_timeout_s = 300;
  OnIdle on_idle = OnIdle::kDelete;
  WaitUntil wait_until = WaitUntil::kLoad;
  std::string start_url;  // empty: about:blank
  // What the sandbox may reach; unset: the server's default (--default-network).
  std::optional<egress::Policy> network;
  // A saved profile Chromium starts with (POST /v1/profiles); with `persist`, what the session
  // leaves in it is saved back when it ends.
  std::optional<ProfileUse> profile;
  // A recording that starts with the session; the create fails if it cannot.
  std::optional<RecordingSpec> record;
};

struct SpecLimits {
  int64_t max_timeout_s = 86400;
  int64_t default_timeout_s = 3600;
  int64_t default_idle_timeout_s = 300;  // capped by the session's timeout_s
  // The server's caps on one sandbox (--max-sandbox-vcpus, --max-sandbox-memory-mb).
  int max_vcpus = 16;
  int64_t max_memory_mb = 65536;
};

inline constexpr int kMinDimension = 200;
inline constexpr int kMaxDimension = 7680;
inline constexpr size_t kMaxStartUrl = 4096;
// An http, https, about: or data: URL with no control bytes (and no spaces but in data:).
bool allowed_start_url(std::string_view url);
inline constexpr int kMaxVcpus = 16;
inline constexpr int64_t kMinMemoryMb = 512;
inline constexpr int64_t kMaxMemoryMb = 65536;

// An empty body means every default. Unknown fields, wrong types and out-of-range values are
// kInvalidArgument with a message that names the field.
Result<SessionSpec> parse_session_spec(std::string_view body, const SpecLimits& limits);

}  // namespace cabin::api
