#include <utility>

#include "common/computer_actions.h"

namespace cabin::computer {

using nlohmann::json;

namespace {

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

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

// --- names ---

std::string_view op_name(const Action& a) {
  return std::visit(
      Overloaded{[](const Move&) { return "move"; }, [](const Click&) { return "click"; },
                 [](const MouseDown&) { return "mouse_down"; },
                 [](const MouseUp&) { return "mouse_up"; }, [](const Drag&) { return "drag"; },
                 [](const Scroll&) { return "scroll"; }, [](const TypeText&) { return "type"; },
                 [](const Key&) { return "key"; }, [](const Hold&) { return "hold"; },
                 [](const Wait&) { return "wait"; }, [](const Screenshot&) { return "screenshot"; },
                 [](const CursorPosition&) { return "cursor_position"; },
                 [](const Upload&) { return "upload"; }},
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

// --- the wire form ---

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
                 [&](const Upload& u) {
                   j["paths"] = u.paths;
                   if (!u.selector.empty()) j["selector"] = u.selector;
                 },
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

}  // namespace cabin::computer
