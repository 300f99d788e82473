#include <utility>

#include "common/computer/detail.h"
#include "common/json_fields.h"

namespace cabin::computer::detail {

using nlohmann::json;

Error limit_error(const std::string& field, const std::string& why) {
  return make_error(Errc::kInvalidArgument, "limit_exceeded", field + ": " + why);
}

std::string size_text(Size s) { return std::to_string(s.width) + "x" + std::to_string(s.height); }

std::string ms_text(int64_t ms) {
  return ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms";
}

std::string in_quotes(std::string_view s) {
  return "\"" + std::string(s.substr(0, 64)) + (s.size() > 64 ? "...\"" : "\"");
}

size_t utf8_chars(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

const json* find(const json& o, const char* key) {
  auto it = o.find(key);
  return it == o.end() ? nullptr : &*it;
}

int64_t int_of(const json& v) {
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    return INT64_MAX;
  }
  return v.get<int64_t>();
}

std::string_view string_or_empty(const json& v) {
  if (!v.is_string()) return {};
  return v.get_ref<const std::string&>();
}

Result<int64_t> int_field(const json& v, const std::string& field) {
  if (!v.is_number_integer()) return invalid_field(field, "must be an integer");
  return int_of(v);
}

Result<const json*> required(const json& o, const char* key, const Ctx& c) {
  const json* v = find(o, key);
  if (!v) return invalid_field(c.f(key), "is required");
  return v;
}

// --- points ---

Result<Point> read_pair(const json& v, const std::string& field, const Ctx& c) {
  if (v.is_array() && v.size() == 2 && v[0].is_number_integer() && v[1].is_number_integer()) {
    Point p{int_of(v[0]), int_of(v[1])};
    if (c.scaler.contains(p)) return c.scaler.to_screen(p);
  }
  return invalid_field(field, "must be [x, y] inside " + size_text(c.scaler.model()));
}

namespace {

Result<int64_t> read_axis(const json& v, const std::string& field, int64_t extent, const Ctx& c) {
  if (!v.is_number_integer() || int_of(v) < 0 || int_of(v) >= extent) {
    return invalid_field(field, "must be an integer from 0 to " + std::to_string(extent - 1) +
                                    " (display " + size_text(c.scaler.model()) + ")");
  }
  return int_of(v);
}

}  // namespace

Result<std::optional<Point>> read_xy(const json& o, const Ctx& c, bool is_required, const char* xk,
                                     const char* yk) {
  const json* x = find(o, xk);
  const json* y = find(o, yk);
  if (!x && !y) {
    if (is_required) return invalid_field(c.f(xk), "is required");
    return std::optional<Point>{};
  }
  if (!x) return invalid_field(c.f(xk), "is required with " + std::string(yk));
  if (!y) return invalid_field(c.f(yk), "is required with " + std::string(xk));
  CABIN_ASSIGN_OR_RETURN(int64_t px, read_axis(*x, c.f(xk), c.scaler.model().width, c));
  CABIN_ASSIGN_OR_RETURN(int64_t py, read_axis(*y, c.f(yk), c.scaler.model().height, c));
  return std::optional<Point>(c.scaler.to_screen({px, py}));
}

// --- keys, modifiers, buttons ---

std::optional<Modifier> modifier_of(std::string_view normalized) {
  if (normalized == "ctrl") return Modifier::kCtrl;
  if (normalized == "alt") return Modifier::kAlt;
  if (normalized == "shift") return Modifier::kShift;
  if (normalized == "super") return Modifier::kSuper;
  return std::nullopt;
}

Result<void> add_modifier(std::vector<Modifier>& mods, std::string_view name,
                          const std::string& field) {
  auto k = normalize_key(name);
  if (!k) return invalid_field(field, k.error().message);
  auto m = modifier_of(*k);
  if (!m)
    return invalid_field(field, in_quotes(*k) + " is not a modifier (ctrl, alt, shift, super)");
  for (auto have : mods) {
    if (have == *m) return {};
  }
  mods.push_back(*m);
  return {};
}

Result<std::vector<Modifier>> modifiers_from_array(const json& o, const char* key, const Ctx& c,
                                                   bool allow_null) {
  std::vector<Modifier> mods;
  const json* v = find(o, key);
  if (!v || (allow_null && v->is_null())) return mods;
  if (!v->is_array() || v->size() > kMaxChordKeys) {
    return invalid_field(c.f(key), "must be an array of at most " + std::to_string(kMaxChordKeys) +
                                       " modifier names");
  }
  for (size_t i = 0; i < v->size(); ++i) {
    std::string field = c.f(key) + "[" + std::to_string(i) + "]";
    CABIN_ASSIGN_OR_RETURN(std::string s, read_string((*v)[i], field, kMaxKeyNameBytes));
    CABIN_TRY(add_modifier(mods, s, field));
  }
  return mods;
}

Result<std::vector<std::string>> key_array(const json& v, const std::string& field) {
  if (!v.is_array() || v.empty() || v.size() > kMaxChordKeys) {
    return invalid_field(
        field, "must be an array of 1 to " + std::to_string(kMaxChordKeys) + " key names");
  }
  std::vector<std::string> keys;
  for (size_t i = 0; i < v.size(); ++i) {
    std::string f = field + "[" + std::to_string(i) + "]";
    CABIN_ASSIGN_OR_RETURN(std::string s, read_string(v[i], f, kMaxKeyNameBytes));
    auto k = normalize_key(s);
    if (!k) return invalid_field(f, k.error().message);
    keys.push_back(std::move(*k));
  }
  return keys;
}

std::optional<Button> button_of(std::string_view s) {
  if (s == "left") return Button::kLeft;
  if (s == "middle") return Button::kMiddle;
  if (s == "right") return Button::kRight;
  if (s == "back") return Button::kBack;
  if (s == "forward") return Button::kForward;
  return std::nullopt;
}

// --- amounts and text ---

Result<std::string> read_text(const json& o, const Ctx& c) {
  CABIN_ASSIGN_OR_RETURN(const json* v, required(o, "text", c));
  if (!v->is_string()) return invalid_field(c.f("text"), "must be a string");
  const auto& s = v->get_ref<const std::string&>();
  if (s.size() > c.limits.max_text_bytes) {
    return limit_error(c.f("text"), "is " + std::to_string(s.size()) + " bytes; at most " +
                                        std::to_string(c.limits.max_text_bytes) +
                                        " per type action");
  }
  for (unsigned char ch : s) {
    if ((ch < 0x20 && ch != '\t' && ch != '\n' && ch != '\r') || ch == 0x7f) {
      return invalid_field(c.f("text"), "contains a control character other than tab or newline");
    }
  }
  return s;
}

Result<int64_t> read_scroll(const json& v, const std::string& field, ScrollUnit unit, bool x_axis,
                            const Ctx& c) {
  CABIN_ASSIGN_OR_RETURN(int64_t n, int_field(v, field));
  if (unit == ScrollUnit::kNotch) {
    int64_t max = c.limits.max_scroll_notches;
    if (n < -max || n > max) {
      return limit_error(field, "must be within ±" + std::to_string(max) + " notches");
    }
    return n;
  }
  int64_t max = c.limits.max_scroll_pixels;
  if (n < -max || n > max) {
    return limit_error(field, "must be within ±" + std::to_string(max) + " pixels");
  }
  int64_t s = x_axis ? c.scaler.dx_to_screen(n) : c.scaler.dy_to_screen(n);
  if (s < -max || s > max) {
    return limit_error(field,
                       "is more than " + std::to_string(max) + " pixels once scaled to the screen");
  }
  return s;
}

Result<std::optional<Size>> read_size(const json& o, const char* key, const Ctx& c) {
  const json* v = find(o, key);
  if (!v) return std::optional<Size>{};
  std::string field = c.f(key);
  if (!v->is_object()) return invalid_field(field, "must be {width, height}");
  CABIN_TRY(reject_unknown(*v, {"width", "height"}, field + "."));
  CABIN_ASSIGN_OR_RETURN(const json* w,
                         required(*v, "width", Ctx{c.limits, c.scaler, field + "."}));
  CABIN_ASSIGN_OR_RETURN(const json* h,
                         required(*v, "height", Ctx{c.limits, c.scaler, field + "."}));
  CABIN_ASSIGN_OR_RETURN(int64_t wn, read_int(*w, field + ".width", 1, kMaxScreenDim));
  CABIN_ASSIGN_OR_RETURN(int64_t hn, read_int(*h, field + ".height", 1, kMaxScreenDim));
  return std::optional<Size>(Size{wn, hn});
}

}  // namespace cabin::computer::detail
