#include "common/computer_actions.h"

#include <array>
#include <cmath>
#include <utility>

#include "common/json_fields.h"

namespace cabin::computer {

using nlohmann::json;

namespace {

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

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

const json* find(const json& o, const char* key) {
  auto it = o.find(key);
  return it == o.end() ? nullptr : &*it;
}

// An integer JSON value as int64; unsigned values past INT64_MAX saturate, which every range
// check below then rejects.
int64_t int_of(const json& v) {
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    return INT64_MAX;
  }
  return v.get<int64_t>();
}

// A string value's text, "" for any other type; a view into v, so v must outlive it.
std::string_view string_or_empty(const json& v) {
  if (!v.is_string()) return {};
  return v.get_ref<const std::string&>();
}

size_t utf8_chars(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// What one action is parsed against: the limits, the coordinate mapping, and the prefix that
// names its fields in errors ("actions[3]." in a batch, "" for a lone action).
struct Ctx {
  const Limits& limits;
  const Scaler& scaler;
  std::string prefix;
  std::string f(std::string_view field) const { return prefix + std::string(field); }
  std::string self() const {
    return prefix.empty() ? std::string("action") : prefix.substr(0, prefix.size() - 1);
  }
};

Result<int64_t> int_field(const json& v, const std::string& field) {
  if (!v.is_number_integer()) return invalid_field(field, "must be an integer");
  return int_of(v);
}

Result<const json*> required(const json& o, const char* key, const Ctx& c) {
  const json* v = find(o, key);
  if (!v) return invalid_field(c.f(key), "is required");
  return v;
}

// --- points -----------------------------------------------------------------------------------

// [x, y] in the model's space (Anthropic's coordinate, the superset's drag points).
Result<Point> read_pair(const json& v, const std::string& field, const Ctx& c) {
  if (v.is_array() && v.size() == 2 && v[0].is_number_integer() && v[1].is_number_integer()) {
    Point p{int_of(v[0]), int_of(v[1])};
    if (c.scaler.contains(p)) return c.scaler.to_screen(p);
  }
  return invalid_field(field, "must be [x, y] inside " + size_text(c.scaler.model()));
}

Result<int64_t> read_axis(const json& v, const std::string& field, int64_t extent, const Ctx& c) {
  if (!v.is_number_integer() || int_of(v) < 0 || int_of(v) >= extent) {
    return invalid_field(field, "must be an integer from 0 to " + std::to_string(extent - 1) +
                                    " (display " + size_text(c.scaler.model()) + ")");
  }
  return int_of(v);
}

// {x, y} given together (OpenAI and superset); absent is an error only when required.
Result<std::optional<Point>> read_xy(const json& o, const Ctx& c, bool is_required,
                                     const char* xk = "x", const char* yk = "y") {
  const json* x = find(o, xk);
  const json* y = find(o, yk);
  if (!x && !y) {
    if (is_required) return invalid_field(c.f(xk), "is required");
    return std::optional<Point>{};
  }
  if (!x) return invalid_field(c.f(xk), "is required with " + std::string(yk));
  if (!y) return invalid_field(c.f(yk), "is required with " + std::string(xk));
  auto px = read_axis(*x, c.f(xk), c.scaler.model().width, c);
  if (!px) return px.error();
  auto py = read_axis(*y, c.f(yk), c.scaler.model().height, c);
  if (!py) return py.error();
  return std::optional<Point>(c.scaler.to_screen({*px, *py}));
}

Result<std::optional<Point>> optional_pair(const json& o, const char* key, const Ctx& c) {
  const json* v = find(o, key);
  if (!v) return std::optional<Point>{};
  auto p = read_pair(*v, c.f(key), c);
  if (!p) return p.error();
  return std::optional<Point>(*p);
}

// --- keys and modifiers -------------------------------------------------------------------------

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

// Anthropic's "text" on clicks and scrolls: "shift", "ctrl+shift".
Result<std::vector<Modifier>> modifiers_from_text(const json& o, const Ctx& c) {
  std::vector<Modifier> mods;
  const json* v = find(o, "text");
  if (!v) return mods;
  auto s = read_string(*v, c.f("text"), kMaxKeyTextBytes);
  if (!s) return s.error();
  auto chord = parse_chord(*s);
  if (!chord) return invalid_field(c.f("text"), chord.error().message);
  for (const auto& k : *chord) {
    if (auto r = add_modifier(mods, k, c.f("text")); !r) return r.error();
  }
  return mods;
}

// The superset's "modifiers" and OpenAI's "keys" held during a pointer action; OpenAI may send
// null for none.
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
    auto s = read_string((*v)[i], field, kMaxKeyNameBytes);
    if (!s) return s.error();
    if (auto r = add_modifier(mods, *s, field); !r) return r.error();
  }
  return mods;
}

// A list of key names pressed together (superset "chord"/"keys", OpenAI "keys").
Result<std::vector<std::string>> key_array(const json& v, const std::string& field) {
  if (!v.is_array() || v.empty() || v.size() > kMaxChordKeys) {
    return invalid_field(
        field, "must be an array of 1 to " + std::to_string(kMaxChordKeys) + " key names");
  }
  std::vector<std::string> keys;
  for (size_t i = 0; i < v.size(); ++i) {
    std::string f = field + "[" + std::to_string(i) + "]";
    auto s = read_string(v[i], f, kMaxKeyNameBytes);
    if (!s) return s.error();
    auto k = normalize_key(*s);
    if (!k) return invalid_field(f, k.error().message);
    keys.push_back(std::move(*k));
  }
  return keys;
}

// --- scalars ------------------------------------------------------------------------------------

std::optional<Button> button_of(std::string_view s) {
  if (s == "left") return Button::kLeft;
  if (s == "middle") return Button::kMiddle;
  if (s == "right") return Button::kRight;
  if (s == "back") return Button::kBack;
  if (s == "forward") return Button::kForward;
  return std::nullopt;
}

Result<Button> optional_button(const json& o, const Ctx& c) {
  const json* v = find(o, "button");
  if (!v) return Button::kLeft;
  std::optional<Button> b;
  if (v->is_string()) b = button_of(v->get_ref<const std::string&>());
  if (!b) return invalid_field(c.f("button"), "must be left, middle, right, back or forward");
  return *b;
}

// Anthropic durations: seconds, fractions allowed, rounded to the millisecond.
Result<int64_t> read_seconds(const json& o, const char* key, const Ctx& c) {
  auto v = required(o, key, c);
  if (!v) return v.error();
  if (!(*v)->is_number()) return invalid_field(c.f(key), "must be a number of seconds");
  double s = (*v)->get<double>();
  if (!(s >= 0)) return invalid_field(c.f(key), "must not be negative");
  if (s * 1000 > static_cast<double>(c.limits.max_wait_ms)) {
    return limit_error(c.f(key), "must be at most " + ms_text(c.limits.max_wait_ms));
  }
  return static_cast<int64_t>(std::llround(s * 1000));
}

Result<int64_t> read_millis(const json& o, const char* key, const Ctx& c) {
  auto v = required(o, key, c);
  if (!v) return v.error();
  if (!(*v)->is_number_integer() || int_of(**v) < 0) {
    return invalid_field(c.f(key), "must be a non-negative integer");
  }
  if (int_of(**v) > c.limits.max_wait_ms) {
    return limit_error(c.f(key), "must be at most " + std::to_string(c.limits.max_wait_ms));
  }
  return int_of(**v);
}

// Typed text: bounded, and free of control characters other than tab and newlines.
Result<std::string> read_text(const json& o, const Ctx& c) {
  auto v = required(o, "text", c);
  if (!v) return v.error();
  if (!(*v)->is_string()) return invalid_field(c.f("text"), "must be a string");
  const auto& s = (*v)->get_ref<const std::string&>();
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

// A scroll amount on one axis; pixel amounts are also checked once scaled to the screen, so
// the agent's own check of what cabind sends always passes.
Result<int64_t> read_scroll(const json& v, const std::string& field, ScrollUnit unit, bool x_axis,
                            const Ctx& c) {
  auto n = int_field(v, field);
  if (!n) return n.error();
  if (unit == ScrollUnit::kNotch) {
    int64_t max = c.limits.max_scroll_notches;
    if (*n < -max || *n > max) {
      return limit_error(field, "must be within ±" + std::to_string(max) + " notches");
    }
    return *n;
  }
  int64_t max = c.limits.max_scroll_pixels;
  if (*n < -max || *n > max) {
    return limit_error(field, "must be within ±" + std::to_string(max) + " pixels");
  }
  int64_t s = x_axis ? c.scaler.dx_to_screen(*n) : c.scaler.dy_to_screen(*n);
  if (s < -max || s > max) {
    return limit_error(field,
                       "is more than " + std::to_string(max) + " pixels once scaled to the screen");
  }
  return s;
}

Result<TypeText> make_type(std::string text, int64_t delay_ms, const Ctx& c) {
  int64_t paced = static_cast<int64_t>(utf8_chars(text)) * delay_ms;
  if (paced > c.limits.max_wait_ms) {
    return limit_error(c.f("delay_ms"),
                       "typing would take more than " + ms_text(c.limits.max_wait_ms));
  }
  return TypeText{std::move(text), delay_ms};
}

// --- Anthropic ----------------------------------------------------------------------------------

Result<std::vector<Action>> parse_anthropic(const json& o, const Ctx& c) {
  const json& a = o["action"];
  if (!a.is_string()) return invalid_field(c.f("action"), "must be a string");
  const std::string& name = a.get_ref<const std::string&>();
  auto allow = [&](std::initializer_list<std::string_view> keys) {
    return reject_unknown(o, keys, c.prefix);
  };
  using Out = std::vector<Action>;

  if (name == "screenshot" || name == "cursor_position") {
    if (auto r = allow({"action"}); !r) return r.error();
    if (name == "screenshot") return Out{Screenshot{}};
    return Out{CursorPosition{}};
  }
  if (name == "mouse_move") {
    if (auto r = allow({"action", "coordinate"}); !r) return r.error();
    auto v = required(o, "coordinate", c);
    if (!v) return v.error();
    auto p = read_pair(**v, c.f("coordinate"), c);
    if (!p) return p.error();
    return Out{Move{*p, {}}};
  }
  struct ClickKind {
    std::string_view name;
    Button button;
    int count;
  };
  static constexpr std::array<ClickKind, 5> kClicks = {{{"left_click", Button::kLeft, 1},
                                                        {"right_click", Button::kRight, 1},
                                                        {"middle_click", Button::kMiddle, 1},
                                                        {"double_click", Button::kLeft, 2},
                                                        {"triple_click", Button::kLeft, 3}}};
  for (const auto& k : kClicks) {
    if (name != k.name) continue;
    if (auto r = allow({"action", "coordinate", "text"}); !r) return r.error();
    auto at = optional_pair(o, "coordinate", c);
    if (!at) return at.error();
    auto mods = modifiers_from_text(o, c);
    if (!mods) return mods.error();
    return Out{Click{*at, k.button, k.count, std::move(*mods)}};
  }
  if (name == "left_click_drag") {
    if (auto r = allow({"action", "start_coordinate", "coordinate"}); !r) return r.error();
    auto sv = required(o, "start_coordinate", c);
    if (!sv) return sv.error();
    auto from = read_pair(**sv, c.f("start_coordinate"), c);
    if (!from) return from.error();
    auto ev = required(o, "coordinate", c);
    if (!ev) return ev.error();
    auto to = read_pair(**ev, c.f("coordinate"), c);
    if (!to) return to.error();
    return Out{Drag{{*from, *to}, Button::kLeft, {}}};
  }
  if (name == "left_mouse_down" || name == "left_mouse_up") {
    if (auto r = allow({"action", "coordinate"}); !r) return r.error();
    auto at = optional_pair(o, "coordinate", c);
    if (!at) return at.error();
    if (name == "left_mouse_down") return Out{MouseDown{Button::kLeft, *at}};
    return Out{MouseUp{Button::kLeft, *at}};
  }
  if (name == "type") {
    if (auto r = allow({"action", "text"}); !r) return r.error();
    auto text = read_text(o, c);
    if (!text) return text.error();
    return Out{TypeText{std::move(*text), 0}};
  }
  if (name == "key") {
    if (auto r = allow({"action", "text"}); !r) return r.error();
    auto v = required(o, "text", c);
    if (!v) return v.error();
    auto s = read_string(**v, c.f("text"), kMaxKeyTextBytes);
    if (!s) return s.error();
    // xdotool takes several chords separated by spaces and presses them in turn.
    Out out;
    size_t i = 0;
    while (i < s->size()) {
      if ((*s)[i] == ' ') {
        ++i;
        continue;
      }
      size_t end = std::min(s->find(' ', i), s->size());
      auto chord = parse_chord(std::string_view(*s).substr(i, end - i));
      if (!chord) return invalid_field(c.f("text"), chord.error().message);
      if (out.size() == kMaxKeySequence) {
        return limit_error(c.f("text"),
                           "has more than " + std::to_string(kMaxKeySequence) + " chords");
      }
      out.push_back(Key{std::move(*chord)});
      i = end;
    }
    if (out.empty()) return invalid_field(c.f("text"), "must name a key, e.g. \"Return\"");
    return out;
  }
  if (name == "hold_key") {
    if (auto r = allow({"action", "text", "duration"}); !r) return r.error();
    auto v = required(o, "text", c);
    if (!v) return v.error();
    auto s = read_string(**v, c.f("text"), kMaxKeyTextBytes);
    if (!s) return s.error();
    auto keys = parse_chord(*s);
    if (!keys) return invalid_field(c.f("text"), keys.error().message);
    auto ms = read_seconds(o, "duration", c);
    if (!ms) return ms.error();
    return Out{Hold{std::move(*keys), *ms}};
  }
  if (name == "scroll") {
    if (auto r = allow({"action", "coordinate", "scroll_direction", "scroll_amount", "text"}); !r) {
      return r.error();
    }
    auto at = optional_pair(o, "coordinate", c);
    if (!at) return at.error();
    auto dv = required(o, "scroll_direction", c);
    if (!dv) return dv.error();
    std::string_view dir = string_or_empty(**dv);
    if (dir != "up" && dir != "down" && dir != "left" && dir != "right") {
      return invalid_field(c.f("scroll_direction"), "must be up, down, left or right");
    }
    auto av = required(o, "scroll_amount", c);
    if (!av) return av.error();
    if (!(*av)->is_number_integer() || int_of(**av) < 0) {
      return invalid_field(c.f("scroll_amount"), "must be a non-negative integer");
    }
    int64_t n = int_of(**av);
    if (n > c.limits.max_scroll_notches) {
      return limit_error(c.f("scroll_amount"),
                         "must be at most " + std::to_string(c.limits.max_scroll_notches));
    }
    auto mods = modifiers_from_text(o, c);
    if (!mods) return mods.error();
    Scroll s{*at, 0, 0, ScrollUnit::kNotch, std::move(*mods)};
    if (dir == "up") s.dy = -n;
    if (dir == "down") s.dy = n;
    if (dir == "left") s.dx = -n;
    if (dir == "right") s.dx = n;
    return Out{std::move(s)};
  }
  if (name == "wait") {
    if (auto r = allow({"action", "duration"}); !r) return r.error();
    auto ms = read_seconds(o, "duration", c);
    if (!ms) return ms.error();
    return Out{Wait{*ms}};
  }
  if (name == "zoom") {
    if (auto r = allow({"action", "region"}); !r) return r.error();
    auto v = required(o, "region", c);
    if (!v) return v.error();
    Size m = c.scaler.model();
    const json& r = **v;
    bool ok = r.is_array() && r.size() == 4;
    for (size_t i = 0; ok && i < 4; ++i) ok = r[i].is_number_integer();
    if (ok) {
      int64_t x0 = int_of(r[0]), y0 = int_of(r[1]), x1 = int_of(r[2]), y1 = int_of(r[3]);
      ok = 0 <= x0 && x0 < x1 && x1 <= m.width && 0 <= y0 && y0 < y1 && y1 <= m.height;
      // The region comes back at the screen's own resolution: that is the point of zooming.
      if (ok) return Out{Screenshot{c.scaler.rect_to_screen({x0, y0, x1 - x0, y1 - y0}), {}, {}}};
    }
    return invalid_field(
        c.f("region"), "must be [x0, y0, x1, y1] with 0 <= x0 < x1 <= " + std::to_string(m.width) +
                           " and 0 <= y0 < y1 <= " + std::to_string(m.height));
  }
  return make_error(Errc::kInvalidArgument, "unknown_action",
                    c.f("action") + ": unknown Anthropic action " + in_quotes(name));
}

// --- OpenAI -------------------------------------------------------------------------------------

Result<std::vector<Action>> parse_openai(const json& o, const Ctx& c) {
  const json& t = o["type"];
  if (!t.is_string()) return invalid_field(c.f("type"), "must be a string");
  const std::string& name = t.get_ref<const std::string&>();
  auto allow = [&](std::initializer_list<std::string_view> keys) {
    return reject_unknown(o, keys, c.prefix);
  };
  using Out = std::vector<Action>;

  if (name == "screenshot") {
    if (auto r = allow({"type"}); !r) return r.error();
    return Out{Screenshot{}};
  }
  if (name == "wait") {
    if (auto r = allow({"type"}); !r) return r.error();
    return Out{Wait{std::min(kOpenAiWaitMs, c.limits.max_wait_ms)}};
  }
  if (name == "click" || name == "double_click" || name == "move") {
    if (name == "click") {
      if (auto r = allow({"type", "x", "y", "button", "keys"}); !r) return r.error();
    } else if (auto r = allow({"type", "x", "y", "keys"}); !r) {
      return r.error();
    }
    auto at = read_xy(o, c, true);
    if (!at) return at.error();
    auto mods = modifiers_from_array(o, "keys", c, true);
    if (!mods) return mods.error();
    if (name == "move") return Out{Move{**at, std::move(*mods)}};
    Button button = Button::kLeft;
    if (name == "click") {
      auto bv = required(o, "button", c);
      if (!bv) return bv.error();
      std::string_view b = string_or_empty(**bv);
      if (b == "wheel") {
        button = Button::kMiddle;
      } else if (auto known = button_of(b); known && b != "middle") {
        button = *known;
      } else {
        return invalid_field(c.f("button"), "must be left, right, wheel, back or forward");
      }
    }
    return Out{Click{*at, button, name == "double_click" ? 2 : 1, std::move(*mods)}};
  }
  if (name == "scroll") {
    if (auto r = allow({"type", "x", "y", "scroll_x", "scroll_y", "keys"}); !r) return r.error();
    auto at = read_xy(o, c, true);
    if (!at) return at.error();
    auto xv = required(o, "scroll_x", c);
    if (!xv) return xv.error();
    auto dx = read_scroll(**xv, c.f("scroll_x"), ScrollUnit::kPixel, true, c);
    if (!dx) return dx.error();
    auto yv = required(o, "scroll_y", c);
    if (!yv) return yv.error();
    auto dy = read_scroll(**yv, c.f("scroll_y"), ScrollUnit::kPixel, false, c);
    if (!dy) return dy.error();
    auto mods = modifiers_from_array(o, "keys", c, true);
    if (!mods) return mods.error();
    return Out{Scroll{*at, *dx, *dy, ScrollUnit::kPixel, std::move(*mods)}};
  }
  if (name == "type") {
    if (auto r = allow({"type", "text"}); !r) return r.error();
    auto text = read_text(o, c);
    if (!text) return text.error();
    return Out{TypeText{std::move(*text), 0}};
  }
  if (name == "keypress") {
    if (auto r = allow({"type", "keys"}); !r) return r.error();
    auto v = required(o, "keys", c);
    if (!v) return v.error();
    auto keys = key_array(**v, c.f("keys"));
    if (!keys) return keys.error();
    // OpenAI writes letters in capitals (["CTRL","L"]); with a modifier held the key is meant,
    // not its shifted glyph, and shift is listed when it is wanted.
    bool has_modifier = false;
    for (const auto& k : *keys) has_modifier = has_modifier || modifier_of(k).has_value();
    if (has_modifier) {
      for (auto& k : *keys) {
        if (k.size() == 1 && k[0] >= 'A' && k[0] <= 'Z') k[0] = static_cast<char>(k[0] - 'A' + 'a');
      }
    }
    return Out{Key{std::move(*keys)}};
  }
  if (name == "drag") {
    if (auto r = allow({"type", "path", "keys"}); !r) return r.error();
    auto v = required(o, "path", c);
    if (!v) return v.error();
    const json& path = **v;
    if (!path.is_array() || path.size() < 2) {
      return invalid_field(c.f("path"), "must be an array of at least two {x, y} points");
    }
    if (path.size() > c.limits.max_drag_points) {
      return limit_error(c.f("path"), "has " + std::to_string(path.size()) + " points; at most " +
                                          std::to_string(c.limits.max_drag_points));
    }
    Drag d;
    for (size_t i = 0; i < path.size(); ++i) {
      Ctx pc{c.limits, c.scaler, c.f("path") + "[" + std::to_string(i) + "]."};
      if (!path[i].is_object()) return invalid_field(pc.self(), "must be an {x, y} object");
      if (auto r = reject_unknown(path[i], {"x", "y"}, pc.prefix); !r) return r.error();
      auto p = read_xy(path[i], pc, true);
      if (!p) return p.error();
      d.path.push_back(**p);
    }
    auto mods = modifiers_from_array(o, "keys", c, true);
    if (!mods) return mods.error();
    d.modifiers = std::move(*mods);
    return Out{std::move(d)};
  }
  return make_error(Errc::kInvalidArgument, "unknown_action",
                    c.f("type") + ": unknown OpenAI action " + in_quotes(name));
}

// --- the superset -------------------------------------------------------------------------------

Result<std::optional<Size>> read_size(const json& o, const char* key, const Ctx& c) {
  const json* v = find(o, key);
  if (!v) return std::optional<Size>{};
  std::string field = c.f(key);
  if (!v->is_object()) return invalid_field(field, "must be {width, height}");
  if (auto r = reject_unknown(*v, {"width", "height"}, field + "."); !r) return r.error();
  auto w = required(*v, "width", Ctx{c.limits, c.scaler, field + "."});
  if (!w) return w.error();
  auto h = required(*v, "height", Ctx{c.limits, c.scaler, field + "."});
  if (!h) return h.error();
  auto wn = read_int(**w, field + ".width", 1, kMaxScreenDim);
  if (!wn) return wn.error();
  auto hn = read_int(**h, field + ".height", 1, kMaxScreenDim);
  if (!hn) return hn.error();
  return std::optional<Size>(Size{*wn, *hn});
}

Result<Action> parse_op(const json& o, const Ctx& c) {
  const json& opv = o["op"];
  if (!opv.is_string()) return invalid_field(c.f("op"), "must be a string");
  const std::string& op = opv.get_ref<const std::string&>();
  auto allow = [&](std::initializer_list<std::string_view> keys) {
    return reject_unknown(o, keys, c.prefix);
  };

  if (op == "move") {
    if (auto r = allow({"op", "x", "y", "modifiers"}); !r) return r.error();
    auto at = read_xy(o, c, true);
    if (!at) return at.error();
    auto mods = modifiers_from_array(o, "modifiers", c, false);
    if (!mods) return mods.error();
    return Action{Move{**at, std::move(*mods)}};
  }
  if (op == "click") {
    if (auto r = allow({"op", "x", "y", "button", "count", "modifiers"}); !r) return r.error();
    auto at = read_xy(o, c, false);
    if (!at) return at.error();
    auto button = optional_button(o, c);
    if (!button) return button.error();
    int64_t count = 1;
    if (const json* v = find(o, "count")) {
      auto n = read_int(*v, c.f("count"), 1, 3);
      if (!n) return n.error();
      count = *n;
    }
    auto mods = modifiers_from_array(o, "modifiers", c, false);
    if (!mods) return mods.error();
    return Action{Click{*at, *button, static_cast<int>(count), std::move(*mods)}};
  }
  if (op == "mouse_down" || op == "mouse_up") {
    if (auto r = allow({"op", "button", "x", "y"}); !r) return r.error();
    auto button = optional_button(o, c);
    if (!button) return button.error();
    auto at = read_xy(o, c, false);
    if (!at) return at.error();
    if (op == "mouse_down") return Action{MouseDown{*button, *at}};
    return Action{MouseUp{*button, *at}};
  }
  if (op == "drag") {
    if (auto r = allow({"op", "path", "button", "modifiers"}); !r) return r.error();
    auto v = required(o, "path", c);
    if (!v) return v.error();
    const json& path = **v;
    if (!path.is_array() || path.size() < 2) {
      return invalid_field(c.f("path"), "must be an array of at least two [x, y] points");
    }
    if (path.size() > c.limits.max_drag_points) {
      return limit_error(c.f("path"), "has " + std::to_string(path.size()) + " points; at most " +
                                          std::to_string(c.limits.max_drag_points));
    }
    Drag d;
    for (size_t i = 0; i < path.size(); ++i) {
      auto p = read_pair(path[i], c.f("path") + "[" + std::to_string(i) + "]", c);
      if (!p) return p.error();
      d.path.push_back(*p);
    }
    auto button = optional_button(o, c);
    if (!button) return button.error();
    d.button = *button;
    auto mods = modifiers_from_array(o, "modifiers", c, false);
    if (!mods) return mods.error();
    d.modifiers = std::move(*mods);
    return Action{std::move(d)};
  }
  if (op == "scroll") {
    if (auto r = allow({"op", "x", "y", "dx", "dy", "unit", "modifiers"}); !r) return r.error();
    auto at = read_xy(o, c, false);
    if (!at) return at.error();
    auto uv = required(o, "unit", c);
    if (!uv) return uv.error();
    std::string_view u = string_or_empty(**uv);
    if (u != "pixel" && u != "notch") return invalid_field(c.f("unit"), "must be pixel or notch");
    Scroll s{*at, 0, 0, u == "pixel" ? ScrollUnit::kPixel : ScrollUnit::kNotch, {}};
    if (const json* v = find(o, "dx")) {
      auto n = read_scroll(*v, c.f("dx"), s.unit, true, c);
      if (!n) return n.error();
      s.dx = *n;
    }
    if (const json* v = find(o, "dy")) {
      auto n = read_scroll(*v, c.f("dy"), s.unit, false, c);
      if (!n) return n.error();
      s.dy = *n;
    }
    auto mods = modifiers_from_array(o, "modifiers", c, false);
    if (!mods) return mods.error();
    s.modifiers = std::move(*mods);
    return Action{std::move(s)};
  }
  if (op == "type") {
    if (auto r = allow({"op", "text", "delay_ms"}); !r) return r.error();
    auto text = read_text(o, c);
    if (!text) return text.error();
    int64_t delay = 0;
    if (const json* v = find(o, "delay_ms")) {
      auto n = read_int(*v, c.f("delay_ms"), 0, kMaxTypeDelayMs);
      if (!n) return n.error();
      delay = *n;
    }
    auto t = make_type(std::move(*text), delay, c);
    if (!t) return t.error();
    return Action{std::move(*t)};
  }
  if (op == "key") {
    if (auto r = allow({"op", "chord"}); !r) return r.error();
    auto v = required(o, "chord", c);
    if (!v) return v.error();
    auto keys = key_array(**v, c.f("chord"));
    if (!keys) return keys.error();
    return Action{Key{std::move(*keys)}};
  }
  if (op == "hold") {
    if (auto r = allow({"op", "keys", "duration_ms"}); !r) return r.error();
    auto v = required(o, "keys", c);
    if (!v) return v.error();
    auto keys = key_array(**v, c.f("keys"));
    if (!keys) return keys.error();
    auto ms = read_millis(o, "duration_ms", c);
    if (!ms) return ms.error();
    return Action{Hold{std::move(*keys), *ms}};
  }
  if (op == "wait") {
    if (auto r = allow({"op", "duration_ms"}); !r) return r.error();
    auto ms = read_millis(o, "duration_ms", c);
    if (!ms) return ms.error();
    return Action{Wait{*ms}};
  }
  if (op == "screenshot") {
    if (auto r = allow({"op", "region", "size", "format"}); !r) return r.error();
    Screenshot s;
    if (const json* v = find(o, "region")) {
      std::string field = c.f("region");
      Size m = c.scaler.model();
      bool ok = v->is_object() && reject_unknown(*v, {"x", "y", "width", "height"}).ok();
      Rect r;
      using Slot = std::pair<const char*, int64_t*>;
      for (auto [key, out] :
           {Slot{"x", &r.x}, Slot{"y", &r.y}, Slot{"width", &r.width}, Slot{"height", &r.height}}) {
        const json* n = ok ? find(*v, key) : nullptr;
        ok = n && n->is_number_integer();
        if (ok) *out = int_of(*n);
      }
      ok = ok && r.x >= 0 && r.y >= 0 && r.width >= 1 && r.height >= 1 &&
           r.width <= m.width - r.x && r.height <= m.height - r.y;
      if (!ok) {
        return invalid_field(field, "must be {x, y, width, height} inside " + size_text(m));
      }
      s.region = c.scaler.rect_to_screen(r);
    }
    auto size = read_size(o, "size", c);
    if (!size) return size.error();
    s.size = *size;
    if (const json* v = find(o, "format")) {
      std::string_view f = string_or_empty(*v);
      if (f != "png" && f != "jpeg") return invalid_field(c.f("format"), "must be png or jpeg");
      s.format = f == "png" ? ImageFormat::kPng : ImageFormat::kJpeg;
    }
    return Action{std::move(s)};
  }
  if (op == "cursor_position") {
    if (auto r = allow({"op"}); !r) return r.error();
    return Action{CursorPosition{}};
  }
  return make_error(Errc::kInvalidArgument, "unknown_action",
                    c.f("op") + ": unknown op " + in_quotes(op));
}

// One action in any vocabulary; the discriminating field decides which ("op" first, so a Cabin
// op is never mistaken for the others).
Result<std::vector<Action>> parse_any(const json& o, const Ctx& c) {
  if (!o.is_object()) return invalid_field(c.self(), "must be an object");
  if (o.contains("op")) {
    auto a = parse_op(o, c);
    if (!a) return a.error();
    return std::vector<Action>{std::move(*a)};
  }
  if (o.contains("action")) return parse_anthropic(o, c);
  if (o.contains("type")) return parse_openai(o, c);
  return invalid_field(c.self(),
                       "must have \"action\" (Anthropic), \"type\" (OpenAI) or \"op\" (Cabin)");
}

// Time an action keeps the batch busy on purpose (waits, holds, paced typing).
int64_t paced_ms(const Action& a) {
  if (auto* w = std::get_if<Wait>(&a)) return w->duration_ms;
  if (auto* h = std::get_if<Hold>(&a)) return h->duration_ms;
  if (auto* t = std::get_if<TypeText>(&a)) {
    return static_cast<int64_t>(utf8_chars(t->text)) * t->delay_ms;
  }
  return 0;
}

// Parses a batch's actions (or one lone action) and enforces the batch-wide limits.
template <typename ParseOne>
Result<std::vector<Action>> parse_actions(const json& list, bool lone, const Limits& limits,
                                          const Scaler& scaler, ParseOne parse_one) {
  if (!list.is_array() || list.empty()) {
    return invalid_field("actions", "must be a non-empty array of actions");
  }
  if (list.size() > limits.max_actions) {
    return limit_error("actions", "has " + std::to_string(list.size()) + " actions; at most " +
                                      std::to_string(limits.max_actions) + " per batch");
  }
  std::vector<Action> out;
  int64_t waited = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    Ctx c{limits, scaler, lone ? "" : "actions[" + std::to_string(i) + "]."};
    Result<std::vector<Action>> parsed = parse_one(list[i], c);
    if (!parsed) return parsed.error();
    for (auto& a : *parsed) {
      waited += paced_ms(a);
      if (waited > limits.max_batch_wait_ms) {
        return limit_error(
            c.self(), "the batch's waits add up to more than " + ms_text(limits.max_batch_wait_ms));
      }
      if (out.size() == limits.max_actions) {
        return limit_error(c.self(), "the batch expands to more than " +
                                         std::to_string(limits.max_actions) +
                                         " actions (each chord of a key sequence counts)");
      }
      out.push_back(std::move(a));
    }
  }
  return out;
}

Result<Scaler> screen_scaler(Size screen) {
  auto s = Scaler::make(screen, screen);
  if (!s) {
    return make_error(Errc::kInternal, "internal", "screen size " + size_text(screen) + " invalid");
  }
  return s;
}

// --- serialisation helpers ----------------------------------------------------------------------

json modifiers_json(const std::vector<Modifier>& mods) {
  json a = json::array();
  for (auto m : mods) a.push_back(modifier_name(m));
  return a;
}

void put_at(json& j, const std::optional<Point>& at) {
  if (!at) return;
  j["x"] = at->x;
  j["y"] = at->y;
}

}  // namespace

// --- Scaler -------------------------------------------------------------------------------------

Result<Scaler> Scaler::make(Size model, Size screen) {
  auto in_range = [](Size s) {
    return s.width >= 1 && s.height >= 1 && s.width <= kMaxScreenDim && s.height <= kMaxScreenDim;
  };
  if (!in_range(model) || !in_range(screen)) {
    return invalid_field("display", "sizes must be 1 to " + std::to_string(kMaxScreenDim));
  }
  if (model.width > screen.width || model.height > screen.height) {
    return invalid_field("display", "must not be larger than the screen, " + size_text(screen));
  }
  return Scaler(model, screen);
}

bool Scaler::contains(Point p) const {
  return p.x >= 0 && p.y >= 0 && p.x < model_.width && p.y < model_.height;
}

// Integer forms of the formulas in the header; sizes are at most 16384 and points are checked
// first, so nothing overflows.
Point Scaler::to_screen(Point p) const {
  return {(2 * p.x + 1) * screen_.width / (2 * model_.width),
          (2 * p.y + 1) * screen_.height / (2 * model_.height)};
}

Point Scaler::to_model(Point p) const {
  return {(2 * p.x + 1) * model_.width / (2 * screen_.width),
          (2 * p.y + 1) * model_.height / (2 * screen_.height)};
}

Rect Scaler::rect_to_screen(Rect r) const {
  auto edge = [](int64_t e, int64_t m, int64_t s) { return (2 * e * s + m) / (2 * m); };
  int64_t x0 = edge(r.x, model_.width, screen_.width);
  int64_t y0 = edge(r.y, model_.height, screen_.height);
  int64_t x1 = edge(r.x + r.width, model_.width, screen_.width);
  int64_t y1 = edge(r.y + r.height, model_.height, screen_.height);
  return {x0, y0, x1 - x0, y1 - y0};
}

namespace {
int64_t scale_delta(int64_t d, int64_t m, int64_t s) {
  int64_t mag = (2 * (d < 0 ? -d : d) * s + m) / (2 * m);
  return d < 0 ? -mag : mag;
}
}  // namespace

int64_t Scaler::dx_to_screen(int64_t d) const {
  return scale_delta(d, model_.width, screen_.width);
}
int64_t Scaler::dy_to_screen(int64_t d) const {
  return scale_delta(d, model_.height, screen_.height);
}

// --- keys ---------------------------------------------------------------------------------------

Result<std::string> normalize_key(std::string_view name) {
  auto bad = [](std::string why) {
    return make_error(Errc::kInvalidArgument, "invalid_request", std::move(why));
  };
  if (name.empty()) return bad("a key name is empty");
  if (name.size() > kMaxKeyNameBytes) {
    return bad("key name " + in_quotes(name) + " is longer than " +
               std::to_string(kMaxKeyNameBytes) + " bytes");
  }
  for (unsigned char ch : name) {
    if (ch < 0x20 || ch == 0x7f) return bad("a key name contains a control character");
  }
  // One character, e.g. "a", "A", "é", "+": the agent presses whatever types it.
  unsigned char lead = static_cast<unsigned char>(name[0]);
  size_t len = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 0;
  if (len == name.size()) {
    bool cont = true;
    for (size_t i = 1; i < len; ++i) cont = cont && (name[i] & 0xC0) == 0x80;
    if (cont) return name == " " ? std::string("space") : std::string(name);
  }
  // Aliases compare without case, '_' or '-', so CTRL, Page_Up and ARROW-LEFT all match.
  std::string folded;
  for (char ch : name) {
    if (ch == '_' || ch == '-') continue;
    folded += static_cast<char>(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
  }
  struct Alias {
    std::string_view from;
    std::string_view to;
  };
  // clang-format off
  static constexpr Alias kAliases[] = {
      {"ctrl", "ctrl"}, {"control", "ctrl"}, {"ctl", "ctrl"},
      {"alt", "alt"}, {"option", "alt"}, {"opt", "alt"},
      {"shift", "shift"},
      {"super", "super"}, {"cmd", "super"}, {"command", "super"}, {"meta", "super"},
      {"win", "super"}, {"windows", "super"},
      {"enter", "Return"}, {"return", "Return"},
      {"esc", "Escape"}, {"escape", "Escape"},
      {"tab", "Tab"}, {"space", "space"}, {"backspace", "BackSpace"},
      {"delete", "Delete"}, {"del", "Delete"}, {"insert", "Insert"}, {"ins", "Insert"},
      {"home", "Home"}, {"end", "End"},
      {"pageup", "Prior"}, {"pgup", "Prior"}, {"prior", "Prior"},
      {"pagedown", "Next"}, {"pgdn", "Next"}, {"next", "Next"},
      {"arrowleft", "Left"}, {"left", "Left"}, {"arrowright", "Right"}, {"right", "Right"},
      {"arrowup", "Up"}, {"up", "Up"}, {"arrowdown", "Down"}, {"down", "Down"},
      {"capslock", "Caps_Lock"}, {"numlock", "Num_Lock"}, {"scrolllock", "Scroll_Lock"},
      {"printscreen", "Print"}, {"print", "Print"}, {"pause", "Pause"},
      {"menu", "Menu"}, {"contextmenu", "Menu"},
  };
  // clang-format on
  for (const auto& a : kAliases) {
    if (folded == a.from) return std::string(a.to);
  }
  // Function keys F1..F35, the range X has keysyms for.
  if (folded.size() >= 2 && folded.size() <= 3 && folded[0] == 'f' && folded[1] >= '1' &&
      folded[1] <= '9') {
    int n = folded[1] - '0';
    bool digits = true;
    if (folded.size() == 3) {
      digits = folded[2] >= '0' && folded[2] <= '9';
      n = n * 10 + (folded[2] - '0');
    }
    if (digits && n <= 35) return "F" + std::to_string(n);
  }
  // Anything else must look like a keysym name; the agent decides whether it is one.
  for (char ch : name) {
    bool word = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                ch == '_';
    if (!word) return bad(in_quotes(name) + " is not a key name");
  }
  return std::string(name);
}

Result<std::vector<std::string>> parse_chord(std::string_view text) {
  auto bad = [&](const std::string& why) {
    return make_error(Errc::kInvalidArgument, "invalid_request", in_quotes(text) + " " + why);
  };
  if (text.empty()) return bad("names no key");
  std::vector<std::string> keys;
  size_t i = 0;
  while (true) {
    if (i >= text.size()) return bad("ends with '+'");
    // A '+' where a key is expected is the plus key itself ("ctrl++").
    size_t end = text[i] == '+' ? i + 1 : std::min(text.find('+', i), text.size());
    if (end < text.size() && text[end] != '+') return bad("is not a chord like \"ctrl+shift+t\"");
    auto k = normalize_key(text.substr(i, end - i));
    if (!k) return k.error();
    if (keys.size() == kMaxChordKeys) {
      return bad("has more than " + std::to_string(kMaxChordKeys) + " keys");
    }
    keys.push_back(std::move(*k));
    if (end == text.size()) break;
    i = end + 1;
  }
  return keys;
}

// --- names --------------------------------------------------------------------------------------

std::string_view op_name(const Action& a) {
  return std::visit(
      Overloaded{[](const Move&) { return "move"; }, [](const Click&) { return "click"; },
                 [](const MouseDown&) { return "mouse_down"; },
                 [](const MouseUp&) { return "mouse_up"; }, [](const Drag&) { return "drag"; },
                 [](const Scroll&) { return "scroll"; }, [](const TypeText&) { return "type"; },
                 [](const Key&) { return "key"; }, [](const Hold&) { return "hold"; },
                 [](const Wait&) { return "wait"; }, [](const Screenshot&) { return "screenshot"; },
                 [](const CursorPosition&) { return "cursor_position"; }},
      a);
}

std::string_view button_name(Button b) {
  switch (b) {
    case Button::kLeft:
      return "left";
    case Button::kMiddle:
      return "middle";
    case Button::kRight:
      return "right";
    case Button::kBack:
      return "back";
    case Button::kForward:
      return "forward";
  }
  return "left";
}

std::string_view modifier_name(Modifier m) {
  switch (m) {
    case Modifier::kCtrl:
      return "ctrl";
    case Modifier::kAlt:
      return "alt";
    case Modifier::kShift:
      return "shift";
    case Modifier::kSuper:
      return "super";
  }
  return "ctrl";
}

// --- requests -----------------------------------------------------------------------------------

Result<Batch> parse_request(std::string_view body, const Limits& limits, ScreenSize screen,
                            std::optional<Size> default_model) {
  auto identity = screen_scaler(screen);
  if (!identity) return identity.error();
  auto j = parse_object(body);
  if (!j) return j.error();

  Batch batch;
  batch.model_size = default_model;
  const json* list = find(*j, "actions");
  if (list) {
    if (auto r = reject_unknown(*j, {"actions", "screenshot_after", "display"}); !r) {
      return r.error();
    }
    if (const json* v = find(*j, "screenshot_after")) {
      if (!v->is_boolean()) return invalid_field("screenshot_after", "must be true or false");
      batch.screenshot_after = v->get<bool>();
    }
    Ctx top{limits, *identity, ""};
    auto display = read_size(*j, "display", top);
    if (!display) return display.error();
    if (*display) batch.model_size = *display;
  }
  Scaler scaler = *identity;
  if (batch.model_size) {
    auto s = Scaler::make(*batch.model_size, screen);
    if (!s) return s.error();
    scaler = *s;
  }
  auto parse_one = [](const json& o, const Ctx& c) { return parse_any(o, c); };
  auto actions = list ? parse_actions(*list, false, limits, scaler, parse_one)
                      : parse_actions(json::array({*j}), true, limits, scaler, parse_one);
  if (!actions) return actions.error();
  batch.actions = std::move(*actions);
  // A whole-screen screenshot comes back in the model's space, the one its coordinates use.
  if (!scaler.is_identity()) {
    for (auto& a : batch.actions) {
      auto* s = std::get_if<Screenshot>(&a);
      if (s && !s->region && !s->size) s->size = scaler.model();
    }
  }
  return batch;
}

json to_json(const Action& a) {
  json j = {{"op", op_name(a)}};
  std::visit(Overloaded{
                 [&](const Move& m) {
                   put_at(j, m.to);
                   j["modifiers"] = modifiers_json(m.modifiers);
                 },
                 [&](const Click& c) {
                   put_at(j, c.at);
                   j["button"] = button_name(c.button);
                   j["count"] = c.count;
                   j["modifiers"] = modifiers_json(c.modifiers);
                 },
                 [&](const MouseDown& m) {
                   put_at(j, m.at);
                   j["button"] = button_name(m.button);
                 },
                 [&](const MouseUp& m) {
                   put_at(j, m.at);
                   j["button"] = button_name(m.button);
                 },
                 [&](const Drag& d) {
                   json path = json::array();
                   for (auto p : d.path) path.push_back({p.x, p.y});
                   j["path"] = std::move(path);
                   j["button"] = button_name(d.button);
                   j["modifiers"] = modifiers_json(d.modifiers);
                 },
                 [&](const Scroll& s) {
                   put_at(j, s.at);
                   j["dx"] = s.dx;
                   j["dy"] = s.dy;
                   j["unit"] = s.unit == ScrollUnit::kPixel ? "pixel" : "notch";
                   j["modifiers"] = modifiers_json(s.modifiers);
                 },
                 [&](const TypeText& t) {
                   j["text"] = t.text;
                   j["delay_ms"] = t.delay_ms;
                 },
                 [&](const Key& k) { j["chord"] = k.chord; },
                 [&](const Hold& h) {
                   j["keys"] = h.keys;
                   j["duration_ms"] = h.duration_ms;
                 },
                 [&](const Wait& w) { j["duration_ms"] = w.duration_ms; },
                 [&](const Screenshot& s) {
                   if (s.region) {
                     j["region"] = {{"x", s.region->x},
                                    {"y", s.region->y},
                                    {"width", s.region->width},
                                    {"height", s.region->height}};
                   }
                   if (s.size) j["size"] = {{"width", s.size->width}, {"height", s.size->height}};
                   j["format"] = s.format == ImageFormat::kPng ? "png" : "jpeg";
                 },
                 [&](const CursorPosition&) {},
             },
             a);
  return j;
}

json to_json(const Batch& b) {
  json actions = json::array();
  for (const auto& a : b.actions) actions.push_back(to_json(a));
  json j = {{"actions", std::move(actions)}, {"screenshot_after", b.screenshot_after}};
  if (b.model_size) {
    j["model_size"] = {{"width", b.model_size->width}, {"height", b.model_size->height}};
  }
  return j;
}

Result<Action> parse_superset(const json& op, ScreenSize screen, const Limits& limits,
                              const std::string& field) {
  auto scaler = screen_scaler(screen);
  if (!scaler) return scaler.error();
  Ctx c{limits, *scaler, field};
  if (!op.is_object() || !op.contains("op")) return invalid_field(c.self(), "must be an op object");
  return parse_op(op, c);
}

Result<Batch> parse_superset_batch(std::string_view body, ScreenSize screen, const Limits& limits) {
  auto scaler = screen_scaler(screen);
  if (!scaler) return scaler.error();
  auto j = parse_object(body);
  if (!j) return j.error();
  if (auto r = reject_unknown(*j, {"actions", "screenshot_after", "model_size"}); !r) {
    return r.error();
  }
  Batch batch;
  if (const json* v = find(*j, "screenshot_after")) {
    if (!v->is_boolean()) return invalid_field("screenshot_after", "must be true or false");
    batch.screenshot_after = v->get<bool>();
  }
  auto model = read_size(*j, "model_size", Ctx{limits, *scaler, ""});
  if (!model) return model.error();
  if (*model && !Scaler::make(**model, screen).ok()) {
    return invalid_field("model_size", "must fit inside the screen, " + size_text(screen));
  }
  batch.model_size = *model;
  const json* list = find(*j, "actions");
  if (!list) return invalid_field("actions", "is required");
  auto actions = parse_actions(*list, false, limits, *scaler, [](const json& o, const Ctx& c) {
    if (!o.is_object() || !o.contains("op")) {
      return Result<std::vector<Action>>(invalid_field(c.self(), "must be an op object"));
    }
    auto a = parse_op(o, c);
    if (!a) return Result<std::vector<Action>>(a.error());
    return Result<std::vector<Action>>(std::vector<Action>{std::move(*a)});
  });
  if (!actions) return actions.error();
  batch.actions = std::move(*actions);
  return batch;
}

}  // namespace cabin::computer
