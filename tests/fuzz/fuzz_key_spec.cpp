// Fuzz target: the body parser of POST /v1/keys.
#include <cstdint>
#include <string_view>

#include "server/api/key_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto r = cabin::api::parse_key_spec(in);
  if (r) {
    const auto& s = *r;
    // An accepted spec is always in range, with a plain name.
    if (s.name.empty() || s.name.size() > cabin::api::kMaxKeyNameBytes || s.max_sessions < 1 ||
        s.max_sessions > cabin::api::kMaxKeyQuota || s.max_creates_per_minute < 1 ||
        s.max_creates_per_minute > cabin::api::kMaxKeyQuota) {
      __builtin_trap();
    }
    for (char c : s.name) {
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e)
        __builtin_trap();
    }
  }
  return 0;
}
