// Fuzz target: the bounded JSON parser every guest answer and client body goes through.
#include <algorithm>
#include <cstdint>
#include <string_view>

#include "common/bounded_json.h"

namespace {

// Depth of the deepest container in `j`.
int depth(const nlohmann::json& j) {
  int deepest = 0;
  if (j.is_array() || j.is_object()) {
    for (const auto& v : j) deepest = std::max(deepest, depth(v));
    return deepest + 1;
  }
  return 0;
}

size_t count(const nlohmann::json& j) {
  size_t n = 1;
  if (j.is_object()) n += j.size();  // keys
  if (j.is_array() || j.is_object())
    for (const auto& v : j) n += count(v);
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  const cabin::JsonLimits limits{4096, 4, 256};
  auto r = cabin::parse_bounded(text, limits);
  if (!r) {
    if (r.error().code != "invalid_json" || r.error().message.empty()) __builtin_trap();
    return 0;
  }
  // What passes is within every limit, and is what an unbounded parse of the text gives.
  if (size > limits.max_bytes || depth(*r) > limits.max_depth || count(*r) > limits.max_values)
    __builtin_trap();
  auto plain = nlohmann::json::parse(text, nullptr, false);
  if (plain.is_discarded() || plain != *r) __builtin_trap();
  return 0;
}
