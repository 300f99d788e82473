// Computer-use actions: three vocabularies parsed into one typed superset, scaled to the screen.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/result.h"

namespace cabin::computer {

// Bounds that keep one request from holding a session for hours or the agent's memory hostage.
// The HTTP server bounds the body itself (1 MiB).
inline constexpr size_t kMaxTextBytes = 64 * 1024;    // per type action
inline constexpr size_t kMaxActions = 1000;           // per batch, after key sequences expand
inline constexpr int64_t kMaxWaitMs = 60'000;         // per wait, hold or paced type
inline constexpr int64_t kMaxBatchWaitMs = 300'000;   // all of a batch's waits together
inline constexpr int64_t kMaxScrollNotches = 100;     // per axis
inline constexpr int64_t kMaxScrollPixels = 100'000;  // per axis, in screen pixels
inline constexpr size_t kMaxDragPoints = 10'000;
inline constexpr size_t kMaxChordKeys = 16;       // keys pressed together
inline constexpr size_t kMaxKeySequence = 16;     // chords in one Anthropic "key" text
inline constexpr size_t kMaxKeyTextBytes = 1024;  // an Anthropic "key"/"text" chord string
inline constexpr size_t kMaxKeyNameBytes = 64;
inline constexpr int64_t kMaxTypeDelayMs = 1000;  // between two typed characters
inline constexpr int64_t kMaxScreenDim = 16384;   // either side of a screen or image
inline constexpr int64_t kOpenAiWaitMs = 1000;    // OpenAI's "wait" carries no duration

struct Limits {
  size_t max_text_bytes = kMaxTextBytes;
  size_t max_actions = kMaxActions;
  int64_t max_wait_ms = kMaxWaitMs;
  int64_t max_batch_wait_ms = kMaxBatchWaitMs;
  int64_t max_scroll_notches = kMaxScrollNotches;
  int64_t max_scroll_pixels = kMaxScrollPixels;
  size_t max_drag_points = kMaxDragPoints;
};

struct Point {
  int64_t x = 0;
  int64_t y = 0;
  bool operator==(const Point&) const = default;
};

struct Size {
  int64_t width = 0;
  int64_t height = 0;
  bool operator==(const Size&) const = default;
};
using ScreenSize = Size;

struct Rect {
  int64_t x = 0;
  int64_t y = 0;
  int64_t width = 0;
  int64_t height = 0;
  bool operator==(const Rect&) const = default;
};

enum class Button { kLeft, kMiddle, kRight, kBack, kForward };
enum class Modifier { kCtrl, kAlt, kShift, kSuper };
enum class ScrollUnit { kPixel, kNotch };
enum class ImageFormat { kPng, kJpeg };

// The superset. Every coordinate is in screen pixels once parsed; an unset position means
// "where the pointer is".
struct Move {
  Point to;
  std::vector<Modifier> modifiers;
  bool operator==(const Move&) const = default;
};
struct Click {
  std::optional<Point> at;
  Button button = Button::kLeft;
  int count = 1;  // 1..3
  std::vector<Modifier> modifiers;
  bool operator==(const Click&) const = default;
};
struct MouseDown {
  Button button = Button::kLeft;
  std::optional<Point> at;
  bool operator==(const MouseDown&) const = default;
};
struct MouseUp {
  Button button = Button::kLeft;
  std::optional<Point> at;
  bool operator==(const MouseUp&) const = default;
};
struct Drag {
  std::vector<Point> path;  // at least two points
  Button button = Button::kLeft;
  std::vector<Modifier> modifiers;
  bool operator==(const Drag&) const = default;
};
struct Scroll {
  std::optional<Point> at;
  int64_t dx = 0;  // positive: right
  int64_t dy = 0;  // positive: down (content moves up), as a DOM wheel event
  ScrollUnit unit = ScrollUnit::kNotch;
  std::vector<Modifier> modifiers;
  bool operator==(const Scroll&) const = default;
};
struct TypeText {
  std::string text;
  int64_t delay_ms = 0;  // between characters; 0: as fast as the agent types
  bool operator==(const TypeText&) const = default;
};
struct Key {
  std::vector<std::string> chord;  // normalized names (normalize_key), pressed in order
  bool operator==(const Key&) const = default;
};
struct Hold {
  std::vector<std::string> keys;
  int64_t duration_ms = 0;
  bool operator==(const Hold&) const = default;
};
struct Wait {
  int64_t duration_ms = 0;
  bool operator==(const Wait&) const = default;
};
struct Screenshot {
  std::optional<Rect> region;  // unset: the whole screen
  std::optional<Size> size;    // image size to return; unset: the region's own pixels
  ImageFormat format = ImageFormat::kPng;
  bool operator==(const Screenshot&) const = default;
};
struct CursorPosition {
  bool operator==(const CursorPosition&) const = default;
};
// Gives files in the sandbox to a page's file input: the one `selector` names in the focused
// page, else the one whose chooser the page opened last, else the focused element.
inline constexpr size_t kMaxUploadFiles = 64;
inline constexpr size_t kMaxSelectorBytes = 1024;
struct Upload {
  std::vector<std::string> paths;  // absolute sandbox paths (agent_protocol::check_file_path)
  std::string selector;            // a CSS selector; empty: the chooser, or the focused input
  bool operator==(const Upload&) const = default;
};

using Action = std::variant<Move, Click, MouseDown, MouseUp, Drag, Scroll, TypeText, Key, Hold,
                            Wait, Screenshot, CursorPosition, Upload>;

struct Batch {
  std::vector<Action> actions;
  bool screenshot_after = false;
  std::optional<Size> model_size;  // the space the client's coordinates were in, if declared
  bool operator==(const Batch&) const = default;
};

// Maps the model's coordinate space (the screen size the model was told) to the real screen.
// Each axis: screen = floor((m + 0.5) * S / M), the screen pixel under the model pixel's centre,
// and back model = floor((s + 0.5) * M / S). The model is never larger than the screen, so
// to_model(to_screen(p)) == p for every model pixel p, and both always land inside.
class Scaler {
 public:
  // Fails when a size is outside 1..kMaxScreenDim or the model exceeds the screen on an axis.
  static Result<Scaler> make(Size model, Size screen);

  Size model() const { return model_; }
  Size screen() const { return screen_; }
  bool is_identity() const { return model_ == screen_; }
  bool contains(Point model) const;

  Point to_screen(Point model) const;
  Point to_model(Point screen) const;
  // Region edges (0..M inclusive) scale to the nearest screen edge, so M maps to S exactly.
  Rect rect_to_screen(Rect model) const;
  // Pixel distances (scroll deltas) scale to the nearest screen pixel on the X or Y axis.
  int64_t dx_to_screen(int64_t d) const;
  int64_t dy_to_screen(int64_t d) const;

 private:
  Scaler(Size model, Size screen) : model_(model), screen_(screen) {}
  Size model_;
  Size screen_;
};

// Normalizes one key name: modifiers to ctrl/alt/shift/super, common aliases (OpenAI's ENTER,
// ARROWLEFT, PAGEUP...) to X keysym names, any single character kept as it is. Other names pass
// through for the agent to resolve; only clearly invalid ones (empty, too long, control or
// non-name characters) fail. The error message says why, without a field name.
Result<std::string> normalize_key(std::string_view name);

// Parses an xdotool-style chord ("ctrl+shift+t", "Return", "ctrl++") into normalized names.
Result<std::vector<std::string>> parse_chord(std::string_view text);

std::string_view op_name(const Action& a);
std::string_view button_name(Button b);
std::string_view modifier_name(Modifier m);

// Parses a client's body: one action (an object with "action", "type" or "op") or a batch
// {"actions":[...],"screenshot_after":bool,"display":{"width","height"}}. Coordinates are in
// the model space ("display", else default_model, else the screen) and come back in screen
// pixels. Errors name the action's index and field: "actions[3].coordinate: ...".
Result<Batch> parse_request(std::string_view body, const Limits& limits, ScreenSize screen,
                            std::optional<Size> default_model = std::nullopt);

// The wire form cabind sends cabin-agent: superset ops in screen pixels,
// {"actions":[{"op":...},...],"screenshot_after":bool,"model_size"?:{...}}.
nlohmann::json to_json(const Action& a);
nlohmann::json to_json(const Batch& b);

// Parses one superset op already in screen pixels (field: prefix for errors, "actions[2].").
Result<Action> parse_superset(const nlohmann::json& op, ScreenSize screen,
                              const Limits& limits = {}, const std::string& field = "");
// The agent's side of to_json(Batch): every limit checked again, no scaling.
Result<Batch> parse_superset_batch(std::string_view body, ScreenSize screen,
                                   const Limits& limits = {});

}  // namespace cabin::computer
