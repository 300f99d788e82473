// Fuzz target: the create-session body parser.
#include <cstdint>
#include <string_view>

#include "server/api/session_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto r = cabin::api::parse_session_spec(in, cabin::api::SpecLimits{});
  if (r && (r->resolution.width < cabin::api::kMinDimension ||
            r->resolution.width > cabin::api::kMaxDimension || r->timeout_s < 1)) {
    __builtin_trap();  // an accepted spec is always in range
  }
  return 0;
}
