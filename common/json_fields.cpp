#include "common/json_fields.h"

#include "common/bounded_json.h"

namespace cabin {

Result<nlohmann::json> parse_object(std::string_view body) {
  // The HTTP layers bound the size; the depth and count are bounded here.
  auto parsed = parse_bounded(body, {64u << 20, kClientJsonDepth, 1u << 20});
  if (!parsed) {
    return make_error(Errc::kInvalidArgument, "invalid_json",
                      "request body is not valid JSON: " + parsed.error().message);
  }
  if (!parsed->is_object()) {
    return make_error(Errc::kInvalidArgument, "invalid_json", "request body must be a JSON object");
  }
  return std::move(*parsed);
}

Result<void> reject_unknown(const nlohmann::json& obj, std::initializer_list<std::string_view> allowed,
                            const std::string& prefix) {
  for (const auto& [key, _] : obj.items()) {
    bool known = false;
    for (auto a : allowed) known = known || key == a;
    if (!known) {
      std::string shown = key.size() > 64 ? key.substr(0, 64) + "..." : key;
      return make_error(Errc::kInvalidArgument, "unknown_field",
                        "unknown field \"" + prefix + shown + "\"");
    }
  }
  return {};
}

Result<int64_t> read_int(const nlohmann::json& v, const std::string& field, int64_t min,
                         int64_t max) {
  if (!v.is_number_integer()) return invalid_field(field, "must be an integer");
  int64_t n = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                  ? INT64_MAX
                  : v.get<int64_t>();
  if (n < min || n > max) {
    return invalid_field(field, "must be between " + std::to_string(min) + " and " +
                                    std::to_string(max));
  }
  return n;
}

Result<std::string> read_string(const nlohmann::json& v, const std::string& field,
                                size_t max_len) {
  if (!v.is_string()) return invalid_field(field, "must be a string");
  const auto& s = v.get_ref<const std::string&>();
  if (s.size() > max_len) {
    return invalid_field(field, "longer than " + std::to_string(max_len) + " bytes");
  }
  return s;
}

}  // namespace cabin
