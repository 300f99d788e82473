#include <utility>

#include "common/agent_protocol.h"
#include "common/computer/detail.h"
#include "common/computer_actions.h"
#include "common/json_fields.h"

namespace cabin::computer {

using nlohmann::json;

namespace detail {

namespace {

Result<Button> optional_button(const json& o, const Ctx& c) {
  const json* v = find(o, "button");
  if (!v) return Button::kLeft;
  std::optional<Button> b;
  if (v->is_string()) b = button_of(v->get_ref<const std::string&>());
  if (!b) return invalid_field(c.f("button"), "must be left, middle, right, back or forward");
  return *b;
}

Result<int64_t> read_millis(const json& o, const char* key, const Ctx& c) {
  CABIN_ASSIGN_OR_RETURN(const json* v, required(o, key, c));
  if (!v->is_number_integer() || int_of(*v) < 0) {
    return invalid_field(c.f(key), "must be a non-negative integer");
  }
  if (int_of(*v) > c.limits.max_wait_ms) {
    return limit_error(c.f(key), "must be at most " + std::to_string(c.limits.max_wait_ms));
  }
  return int_of(*v);
}

Result<TypeText> make_type(std::string text, int64_t delay_ms, const Ctx& c) {
  int64_t paced = static_cast<int64_t>(utf8_chars(text)) * delay_ms;
  if (paced > c.limits.max_wait_ms) {
    return limit_error(c.f("delay_ms"),
                       "typing would take more than " + ms_text(c.limits.max_wait_ms));
  }
  return TypeText{std::move(text), delay_ms};
}

}  // namespace

Result<Action> parse_op(const json& o, const Ctx& c) {
  const json& opv = o["op"];
  if (!opv.is_string()) return invalid_field(c.f("op"), "must be a string");
  const std::string& op = opv.get_ref<const std::string&>();
  auto allow = [&](std::initializer_list<std::string_view> keys) {
    return reject_unknown(o, keys, c.prefix);
  };

  if (op == "move") {
    CABIN_TRY(allow({"op", "x", "y", "modifiers"}));
    CABIN_ASSIGN_OR_RETURN(std::optional<Point> at, read_xy(o, c, true));
    CABIN_ASSIGN_OR_RETURN(std::vector<Modifier> mods,
                           modifiers_from_array(o, "modifiers", c, false));
    return Action{Move{*at, std::move(mods)}};
  }
  if (op == "click") {
    CABIN_TRY(allow({"op", "x", "y", "button", "count", "modifiers"}));
    CABIN_ASSIGN_OR_RETURN(std::optional<Point> at, read_xy(o, c, false));
    CABIN_ASSIGN_OR_RETURN(Button button, optional_button(o, c));
    int64_t count = 1;
    if (const json* v = find(o, "count")) {
      CABIN_ASSIGN_OR_RETURN(count, read_int(*v, c.f("count"), 1, 3));
    }
    CABIN_ASSIGN_OR_RETURN(std::vector<Modifier> mods,
                           modifiers_from_array(o, "modifiers", c, false));
    return Action{Click{at, button, static_cast<int>(count), std::move(mods)}};
  }
  if (op == "mouse_down" || op == "mouse_up") {
    CABIN_TRY(allow({"op", "button", "x", "y"}));
    CABIN_ASSIGN_OR_RETURN(Button button, optional_button(o, c));
    CABIN_ASSIGN_OR_RETURN(std::optional<Point> at, read_xy(o, c, false));
    if (op == "mouse_down") return Action{MouseDown{button, at}};
    return Action{MouseUp{button, at}};
  }
  if (op == "drag") {
    CABIN_TRY(allow({"op", "path", "button", "modifiers"}));
    CABIN_ASSIGN_OR_RETURN(const json* v, required(o, "path", c));
    const json& path = *v;
    if (!path.is_array() || path.size() < 2) {
      return invalid_field(c.f("path"), "must be an array of at least two [x, y] points");
    }
    if (path.size() > c.limits.max_drag_points) {
      return limit_error(c.f("path"), "has " + std::to_string(path.size()) + " points; at most " +
                                          std::to_string(c.limits.max_drag_points));
    }
    Drag d;
    for (size_t i = 0; i < path.size(); ++i) {
      CABIN_ASSIGN_OR_RETURN(Point p,
                             read_pair(path[i], c.f("path") + "[" + std::to_string(i) + "]", c));
      d.path.push_back(p);
    }
    CABIN_ASSIGN_OR_RETURN(d.button, optional_button(o, c));
    CABIN_ASSIGN_OR_RETURN(d.modifiers, modifiers_from_array(o, "modifiers", c, false));
    return Action{std::move(d)};
  }
  if (op == "scroll") {
    CABIN_TRY(allow({"op", "x", "y", "dx", "dy", "unit", "modifiers"}));
    CABIN_ASSIGN_OR_RETURN(std::optional<Point> at, read_xy(o, c, false));
    CABIN_ASSIGN_OR_RETURN(const json* uv, required(o, "unit", c));
    std::string_view u = string_or_empty(*uv);
    if (u != "pixel" && u != "notch") return invalid_field(c.f("unit"), "must be pixel or notch");
    Scroll s{at, 0, 0, u == "pixel" ? ScrollUnit::kPixel : ScrollUnit::kNotch, {}};
    if (const json* v = find(o, "dx")) {
      CABIN_ASSIGN_OR_RETURN(s.dx, read_scroll(*v, c.f("dx"), s.unit, true, c));
    }
    if (const json* v = find(o, "dy")) {
      CABIN_ASSIGN_OR_RETURN(s.dy, read_scroll(*v, c.f("dy"), s.unit, false, c));
    }
    CABIN_ASSIGN_OR_RETURN(s.modifiers, modifiers_from_array(o, "modifiers", c, false));
    return Action{std::move(s)};
  }
  if (op == "type") {
    CABIN_TRY(allow({"op", "text", "delay_ms"}));
    CABIN_ASSIGN_OR_RETURN(std::string text, read_text(o, c));
    int64_t delay = 0;
    if (const json* v = find(o, "delay_ms")) {
      CABIN_ASSIGN_OR_RETURN(delay, read_int(*v, c.f("delay_ms"), 0, kMaxTypeDelayMs));
    }
    CABIN_ASSIGN_OR_RETURN(TypeText t, make_type(std::move(text), delay, c));
    return Action{std::move(t)};
  }
  if (op == "key") {
    CABIN_TRY(allow({"op", "chord"}));
    CABIN_ASSIGN_OR_RETURN(const json* v, required(o, "chord", c));
    CABIN_ASSIGN_OR_RETURN(std::vector<std::string> keys, key_array(*v, c.f("chord")));
    return Action{Key{std::move(keys)}};
  }
  if (op == "hold") {
    CABIN_TRY(allow({"op", "keys", "duration_ms"}));
    CABIN_ASSIGN_OR_RETURN(const json* v, required(o, "keys", c));
    CABIN_ASSIGN_OR_RETURN(std::vector<std::string> keys, key_array(*v, c.f("keys")));
    CABIN_ASSIGN_OR_RETURN(int64_t ms, read_millis(o, "duration_ms", c));
    return Action{Hold{std::move(keys), ms}};
  }
  if (op == "wait") {
    CABIN_TRY(allow({"op", "duration_ms"}));
    CABIN_ASSIGN_OR_RETURN(int64_t ms, read_millis(o, "duration_ms", c));
    return Action{Wait{ms}};
  }
  if (op == "screenshot") {
    CABIN_TRY(allow({"op", "region", "size", "format"}));
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
    CABIN_ASSIGN_OR_RETURN(s.size, read_size(o, "size", c));
    if (const json* v = find(o, "format")) {
      std::string_view f = string_or_empty(*v);
      if (f != "png" && f != "jpeg") return invalid_field(c.f("format"), "must be png or jpeg");
      s.format = f == "png" ? ImageFormat::kPng : ImageFormat::kJpeg;
    }
    return Action{std::move(s)};
  }
  if (op == "cursor_position") {
    CABIN_TRY(allow({"op"}));
    return Action{CursorPosition{}};
  }
  if (op == "upload") {
    CABIN_TRY(allow({"op", "paths", "selector"}));
    CABIN_ASSIGN_OR_RETURN(const json* v, required(o, "paths", c));
    if (!v->is_array() || v->empty() || v->size() > kMaxUploadFiles) {
      return invalid_field(c.f("paths"),
                           "must be 1 to " + std::to_string(kMaxUploadFiles) + " sandbox paths");
    }
    Upload u;
    for (const auto& p : *v) {
      if (!p.is_string()) return invalid_field(c.f("paths"), "must hold strings");
      auto path = agent_protocol::check_file_path(p.get<std::string>());
      if (!path) return invalid_field(c.f("paths"), path.error().message);
      u.paths.push_back(std::move(*path));
    }
    if (const json* sel = find(o, "selector")) {
      CABIN_ASSIGN_OR_RETURN(u.selector, read_string(*sel, c.f("selector"), kMaxSelectorBytes));
      if (u.selector.empty()) return invalid_field(c.f("selector"), "must not be empty");
    }
    return Action{std::move(u)};
  }
  return make_error(Errc::kInvalidArgument, "unknown_action",
                    c.f("op") + ": unknown op " + in_quotes(op));
}

namespace {

// An item of the agent's batch: superset ops only.
Result<std::vector<Action>> parse_batch_op(const json& o, const Ctx& c) {
  if (!o.is_object() || !o.contains("op")) return invalid_field(c.self(), "must be an op object");
  CABIN_ASSIGN_OR_RETURN(Action a, parse_op(o, c));
  return std::vector<Action>{std::move(a)};
}

}  // namespace

}  // namespace detail

Result<Action> parse_superset(const json& op, ScreenSize screen, const Limits& limits,
                              const std::string& field) {
  CABIN_ASSIGN_OR_RETURN(Scaler scaler, detail::screen_scaler(screen));
  detail::Ctx c{limits, scaler, field};
  if (!op.is_object() || !op.contains("op")) return invalid_field(c.self(), "must be an op object");
  return detail::parse_op(op, c);
}

Result<Batch> parse_superset_batch(std::string_view body, ScreenSize screen, const Limits& limits) {
  CABIN_ASSIGN_OR_RETURN(Scaler scaler, detail::screen_scaler(screen));
  CABIN_ASSIGN_OR_RETURN(json j, parse_object(body));
  CABIN_TRY(reject_unknown(j, {"actions", "screenshot_after", "model_size"}));
  Batch batch;
  if (const json* v = detail::find(j, "screenshot_after")) {
    if (!v->is_boolean()) return invalid_field("screenshot_after", "must be true or false");
    batch.screenshot_after = v->get<bool>();
  }
  CABIN_ASSIGN_OR_RETURN(std::optional<Size> model,
                         detail::read_size(j, "model_size", detail::Ctx{limits, scaler, ""}));
  if (model && !Scaler::make(*model, screen).ok()) {
    return invalid_field("model_size", "must fit inside the screen, " + detail::size_text(screen));
  }
  batch.model_size = model;
  const json* list = detail::find(j, "actions");
  if (!list) return invalid_field("actions", "is required");
  CABIN_ASSIGN_OR_RETURN(
      batch.actions, detail::parse_actions(*list, false, limits, scaler, detail::parse_batch_op));
  return batch;
}

}  // namespace cabin::computer
