// Parsing JSON that may be hostile (guest answers, client bodies): a size cap checked before
// anything is read, and a nesting depth and value count checked while the document is built, so
// `[[[[…` or a million tiny values cost nothing but the bytes already received.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <string_view>

#include "common/result.h"

namespace cabin {

struct JsonLimits {
  size_t max_bytes;
  int max_depth = 8;             // arrays and objects inside one another
  size_t max_values = 1 << 20;   // every value, key and container counts one
};

// Guest answers: nothing in the agent protocol nests past 5.
inline constexpr int kGuestJsonDepth = 8;
// Client request bodies: the deepest (a computer batch) nests 4.
inline constexpr int kClientJsonDepth = 16;

// The document, or kInvalidArgument "invalid_json" saying which limit or syntax error stopped it.
// Callers that read a guest's answer turn that into their own 502.
Result<nlohmann::json> parse_bounded(std::string_view text, const JsonLimits& limits);

}  // namespace cabin
