// Strict JSON field readers shared by the request parsers: unknown fields and wrong types are errors.
#pragma once

#include <nlohmann/json.hpp>

#include <initializer_list>
#include <string>
#include <string_view>

#include "common/result.h"

namespace cabin {

inline Error invalid_request(std::string message) {
  return make_error(Errc::kInvalidArgument, "invalid_request", std::move(message));
}

inline Error invalid_field(const std::string& field, const std::string& why) {
  return invalid_request(field + ": " + why);
}

// Parses text as one JSON object; a syntax error or another type is kInvalidArgument.
Result<nlohmann::json> parse_object(std::string_view body);

// Returns an error naming the first key of obj not in allowed (prefix: "spec.resolution.").
Result<void> reject_unknown(const nlohmann::json& obj, std::initializer_list<std::string_view> allowed,
                            const std::string& prefix = "");

Result<int64_t> read_int(const nlohmann::json& v, const std::string& field, int64_t min,
                         int64_t max);
Result<std::string> read_string(const nlohmann::json& v, const std::string& field,
                                size_t max_len);

}  // namespace cabin
