// SessionSpec: the validated, immutable request to create a session, parsed once from JSON.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace cabin::api {

struct Resolution {
  int width = 1280;
  int height = 800;
};

struct SessionSpec {
  std::string driver;  // empty: the server's default driver
  Resolution resolution;
  int64_t timeout_s = 3600;
  std::string start_url;  // empty: about:blank
};

struct SpecLimits {
  int64_t max_timeout_s = 86400;
  int64_t default_timeout_s = 3600;
};

inline constexpr int kMinDimension = 200;
inline constexpr int kMaxDimension = 7680;
inline constexpr size_t kMaxStartUrl = 4096;

// An empty body means every default. Unknown fields, wrong types and out-of-range values are
// kInvalidArgument with a message that names the field.
Result<SessionSpec> parse_session_spec(std::string_view body, const SpecLimits& limits);

}  // namespace cabin::api
