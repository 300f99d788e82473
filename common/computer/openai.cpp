#include <algorithm>
#include <utility>

#include "common/computer/detail.h"
#include "common/json_fields.h"

namespace cabin::computer::detail {

using nlohmann::json;

Result<std::vector<Action>> parse_openai(const json& o, const Ctx& c) {
  const json& t = o["type"];
  if (!t.is_string()) return invalid_field(c.f("type"), "must be a string");
  const std::string& name = t.get_ref<const std::string&>();
  auto allow = [&](std::initializer_list<std::string_view> keys) {
    return reject_unknown(o, keys, c.prefix);
  };
  using Out = std::vector<Action>;

  if (name == "screenshot") {
    CABIN_TRY(allow({"type"}));
    return Out{Screenshot{}};
  }
  if (name == "wait") {
    CABIN_TRY(allow({"type"}));
    return Out{Wait{std::min(kOpenAiWaitMs, c.limits.max_wait_ms)}};
  }
  if (name == "click" || name == "double_click" || name == "move") {
    if (name == "click") {
      CABIN_TRY(allow({"type", "x", "y", "button", "keys"}));
    } else {
      CABIN_TRY(allow({"type", "x", "y", "keys"}));
    }
    CABIN_ASSIGN_OR_RETURN(std::optional<Point> at, read_xy(o, c, true));
    CABIN_ASSIGN_OR_RETURN(std::vector<Modifier> mods, modifiers_from_array(o, "keys", c, true));
    if (name == "move") return Out{Move{*at, std::move(mods)}};
    Button button = Button::kLeft;
    if (name == "click") {
      CABIN_ASSIGN_OR_RETURN(const json* bv, required(o, "button", c));
      std::string_view b = string_or_empty(*bv);
      if (b == "wheel") {
        button = Button::kMiddle;
      } else if (auto known = button_of(b); known && b != "middle") {
        button = *known;
      } else {
        return invalid_field(c.f("button"), "must be left, right, wheel, back or forward");
      }
    }
    return Out{Click{at, button, name == "double_click" ? 2 : 1, std::move(mods)}};
  }
  if (name == "scroll") {
    CABIN_TRY(allow({"type", "x", "y", "scroll_x", "scroll_y", "keys"}));
    CABIN_ASSIGN_OR_RETURN(std::optional<Point> at, read_xy(o, c, true));
    CABIN_ASSIGN_OR_RETURN(const json* xv, required(o, "scroll_x", c));
    CABIN_ASSIGN_OR_RETURN(int64_t dx,
                           read_scroll(*xv, c.f("scroll_x"), ScrollUnit::kPixel, true, c));
    CABIN_ASSIGN_OR_RETURN(const json* yv, required(o, "scroll_y", c));
    CABIN_ASSIGN_OR_RETURN(int64_t dy,
                           read_scroll(*yv, c.f("scroll_y"), ScrollUnit::kPixel, false, c));
    CABIN_ASSIGN_OR_RETURN(std::vector<Modifier> mods, modifiers_from_array(o, "keys", c, true));
    return Out{Scroll{at, dx, dy, ScrollUnit::kPixel, std::move(mods)}};
  }
  if (name == "type") {
    CABIN_TRY(allow({"type", "text"}));
    CABIN_ASSIGN_OR_RETURN(std::string text, read_text(o, c));
    return Out{TypeText{std::move(text), 0}};
  }
  if (name == "keypress") {
    CABIN_TRY(allow({"type", "keys"}));
    CABIN_ASSIGN_OR_RETURN(const json* v, required(o, "keys", c));
    CABIN_ASSIGN_OR_RETURN(std::vector<std::string> keys, key_array(*v, c.f("keys")));
    // OpenAI writes letters in capitals (["CTRL","L"]); with a modifier held the key is meant,
    // not its shifted glyph, and shift is listed when it is wanted.
    bool has_modifier = false;
    for (const auto& k : keys) has_modifier = has_modifier || modifier_of(k).has_value();
    if (has_modifier) {
      for (auto& k : keys) {
        if (k.size() == 1 && k[0] >= 'A' && k[0] <= 'Z') k[0] = static_cast<char>(k[0] - 'A' + 'a');
      }
    }
    return Out{Key{std::move(keys)}};
  }
  if (name == "drag") {
    CABIN_TRY(allow({"type", "path", "keys"}));
    CABIN_ASSIGN_OR_RETURN(const json* v, required(o, "path", c));
    const json& path = *v;
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
      CABIN_TRY(reject_unknown(path[i], {"x", "y"}, pc.prefix));
      CABIN_ASSIGN_OR_RETURN(std::optional<Point> p, read_xy(path[i], pc, true));
      d.path.push_back(*p);
    }
    CABIN_ASSIGN_OR_RETURN(d.modifiers, modifiers_from_array(o, "keys", c, true));
    return Out{std::move(d)};
  }
  return make_error(Errc::kInvalidArgument, "unknown_action",
                    c.f("type") + ": unknown OpenAI action " + in_quotes(name));
}

}  // namespace cabin::computer::detail
