#include "common/bounded_json.h"

namespace cabin {
namespace {

using json = nlohmann::json;

// Nlohmann's own DOM builder, behind checks that can stop the parse at the first value too many.
class BoundedSax {
 public:
  BoundedSax(json& root, const JsonLimits& limits) : dom_(root, false), limits_(limits) {}

  bool null() { return value() && dom_.null(); }
  bool boolean(bool v) { return value() && dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return value() && dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return value() && dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const json::string_t& s) {
    return value() && dom_.number_float(v, s);
  }
  bool string(json::string_t& v) { return value() && dom_.string(v); }
  bool binary(json::binary_t& v) { return value() && dom_.binary(v); }
  bool key(json::string_t& k) { return value() && dom_.key(k); }
  bool start_object(std::size_t n) { return open() && dom_.start_object(n); }
  bool end_object() {
    --depth_;
    return dom_.end_object();
  }
  bool start_array(std::size_t n) { return open() && dom_.start_array(n); }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& e) {
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 2: ..." → the reason.
    if (auto colon = what.find(": "); colon != std::string::npos) what = what.substr(colon + 2);
    error_ = "not valid JSON at byte " + std::to_string(pos) + ": " + what.substr(0, 200);
    return false;
  }

  const std::string& error() const { return error_; }

 private:
  bool value() {
    if (++values_ <= limits_.max_values) return true;
    error_ = "more than " + std::to_string(limits_.max_values) + " values";
    return false;
  }
  bool open() {
    if (!value()) return false;
    if (++depth_ <= limits_.max_depth) return true;
    error_ = "nested deeper than " + std::to_string(limits_.max_depth);
    return false;
  }

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  const JsonLimits& limits_;
  int depth_ = 0;
  size_t values_ = 0;
  std::string error_;
};

}  // namespace

Result<json> parse_bounded(std::string_view text, const JsonLimits& limits) {
  auto bad = [](std::string why) { return make_error(Errc::kInvalidArgument, "invalid_json", why); };
  if (text.size() > limits.max_bytes)
    return bad(std::to_string(text.size()) + " bytes, more than " +
               std::to_string(limits.max_bytes));
  json root;
  BoundedSax sax(root, limits);
  if (!json::sax_parse(text, &sax) || !sax.error().empty())
    return bad(sax.error().empty() ? std::string("not valid JSON") : sax.error());
  return root;
}

}  // namespace cabin
