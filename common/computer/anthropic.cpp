#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "common/computer/detail.h"
#include "common/json_fields.h"

namespace cabin::computer::detail {

using nlohmann::json;

namespace {

Result<std::optional<Point>> optional_pair(const json& o, const char* key, const Ctx& c) {
  const json* v = find(o, key);
  if (!v) return std::optional<Point>{};
  CABIN_ASSIGN_OR_RETURN(Point p, read_pair(*v, c.f(key), c));
  return std::optional<Point>(p);
}

// Anthropic's "text" on clicks and scrolls: "shift", "ctrl+shift".
Result<std::vector<Modifier>> modifiers_from_text(const json& o, const Ctx& c) {
  std::vector<Modifier> mods;
  const json* v = find(o, "text");
  if (!v) return mods;
  CABIN_ASSIGN_OR_RETURN(std::string s, read_string(*v, c.f("text"), kMaxKeyTextBytes));
  auto chord = parse_chord(s);
  if (!chord) return invalid_field(c.f("text"), chord.error().message);
  for (const auto& k : *chord) {
    CABIN_TRY(add_modifier(mods, k, c.f("text")));
  }
  return mods;
}

// Anthropic durations: seconds, fractions allowed, rounded to the millisecond.
Result<int64_t> read_seconds(const json& o, const char* key, const Ctx& c) {
  CABIN_ASSIGN_OR_RETURN(const json* v, required(o, key, c));
  if (!v->is_number()) return invalid_field(c.f(key), "must be a number of seconds");
  double s = v->get<double>();
  if (!(s >= 0)) return invalid_field(c.f(key), "must not be negative");
  if (s * 1000 > static_cast<double>(c.limits.max_wait_ms)) {
    return limit_error(c.f(key), "must be at most " + ms_text(c.limits.max_wait_ms));
  }
  return static_cast<int64_t>(std::llround(s * 1000));
}

}  // namespace

Result<std::vector<Action>> parse_anthropic(const json& o, const Ctx& c) {
  const json& a = o["action"];
  if (!a.is_string()) return invalid_field(c.f("action"), "must be a string");
  const std::string& name = a.get_ref<const std::string&>();
  auto allow = [&](std::initializer_list<std::string_view> keys) {
    return reject_unknown(o, keys, c.prefix);
  };
  using Out = std::vector<Action>;

  if (name == "screenshot" || name == "cursor_position") {
    CABIN_TRY(allow({"action"}));
    if (name == "screenshot") return Out{Screenshot{}};
    return Out{CursorPosition{}};
  }
  if (name == "mouse_move") {
    CABIN_TRY(allow({"action", "coordinate"}));
    CABIN_ASSIGN_OR_RETURN(const json* v, required(o, "coordinate", c));
    CABIN_ASSIGN_OR_RETURN(Point p, read_pair(*v, c.f("coordinate"), c));
    return Out{Move{p, {}}};
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
    CABIN_TRY(allow({"action", "coordinate", "text"}));
    CABIN_ASSIGN_OR_RETURN(std::optional<Point> at, optional_pair(o, "coordinate", c));
    CABIN_ASSIGN_OR_RETURN(std::vector<Modifier> mods, modifiers_from_text(o, c));
    return Out{Click{at, k.button, k.count, std::move(mods)}};
  }
  if (name == "left_click_drag") {
    CABIN_TRY(allow({"action", "start_coordinate", "coordinate"}));
    CABIN_ASSIGN_OR_RETURN(const json* sv, required(o, "start_coordinate", c));
    CABIN_ASSIGN_OR_RETURN(Point from, read_pair(*sv, c.f("start_coordinate"), c));
    CABIN_ASSIGN_OR_RETURN(const json* ev, required(o, "coordinate", c));
    CABIN_ASSIGN_OR_RETURN(Point to, read_pair(*ev, c.f("coordinate"), c));
    return Out{Drag{{from, to}, Button::kLeft, {}}};
  }
  if (name == "left_mouse_down" || name == "left_mouse_up") {
    CABIN_TRY(allow({"action", "coordinate"}));
    CABIN_ASSIGN_OR_RETURN(std::optional<Point> at, optional_pair(o, "coordinate", c));
    if (name == "left_mouse_down") return Out{MouseDown{Button::kLeft, at}};
    return Out{MouseUp{Button::kLeft, at}};
  }
  if (name == "type") {
    CABIN_TRY(allow({"action", "text"}));
    CABIN_ASSIGN_OR_RETURN(std::string text, read_text(o, c));
    return Out{TypeText{std::move(text), 0}};
  }
  if (name == "key") {
    CABIN_TRY(allow({"action", "text"}));
    CABIN_ASSIGN_OR_RETURN(const json* v, required(o, "text", c));
    CABIN_ASSIGN_OR_RETURN(std::string s, read_string(*v, c.f("text"), kMaxKeyTextBytes));
    // xdotool takes several chords separated by spaces and presses them in turn.
    Out out;
    size_t i = 0;
    while (i < s.size()) {
      if (s[i] == ' ') {
        ++i;
        continue;
      }
      size_t end = std::min(s.find(' ', i), s.size());
      auto chord = parse_chord(std::string_view(s).substr(i, end - i));
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
    CABIN_TRY(allow({"action", "text", "duration"}));
    CABIN_ASSIGN_OR_RETURN(const json* v, required(o, "text", c));
    CABIN_ASSIGN_OR_RETURN(std::string s, read_string(*v, c.f("text"), kMaxKeyTextBytes));
    auto keys = parse_chord(s);
    if (!keys) return invalid_field(c.f("text"), keys.error().message);
    CABIN_ASSIGN_OR_RETURN(int64_t ms, read_seconds(o, "duration", c));
    return Out{Hold{std::move(*keys), ms}};
  }
  if (name == "scroll") {
    CABIN_TRY(allow({"action", "coordinate", "scroll_direction", "scroll_amount", "text"}));
    CABIN_ASSIGN_OR_RETURN(std::optional<Point> at, optional_pair(o, "coordinate", c));
    CABIN_ASSIGN_OR_RETURN(const json* dv, required(o, "scroll_direction", c));
    std::string_view dir = string_or_empty(*dv);
    if (dir != "up" && dir != "down" && dir != "left" && dir != "right") {
      return invalid_field(c.f("scroll_direction"), "must be up, down, left or right");
    }
    CABIN_ASSIGN_OR_RETURN(const json* av, required(o, "scroll_amount", c));
    if (!av->is_number_integer() || int_of(*av) < 0) {
      return invalid_field(c.f("scroll_amount"), "must be a non-negative integer");
    }
    int64_t n = int_of(*av);
    if (n > c.limits.max_scroll_notches) {
      return limit_error(c.f("scroll_amount"),
                         "must be at most " + std::to_string(c.limits.max_scroll_notches));
    }
    CABIN_ASSIGN_OR_RETURN(std::vector<Modifier> mods, modifiers_from_text(o, c));
    Scroll s{at, 0, 0, ScrollUnit::kNotch, std::move(mods)};
    if (dir == "up") s.dy = -n;
    if (dir == "down") s.dy = n;
    if (dir == "left") s.dx = -n;
    if (dir == "right") s.dx = n;
    return Out{std::move(s)};
  }
  if (name == "wait") {
    CABIN_TRY(allow({"action", "duration"}));
    CABIN_ASSIGN_OR_RETURN(int64_t ms, read_seconds(o, "duration", c));
    return Out{Wait{ms}};
  }
  if (name == "zoom") {
    CABIN_TRY(allow({"action", "region"}));
    CABIN_ASSIGN_OR_RETURN(const json* v, required(o, "region", c));
    Size m = c.scaler.model();
    const json& r = *v;
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

}  // namespace cabin::computer::detail
