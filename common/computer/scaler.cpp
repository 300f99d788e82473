#include "common/computer/detail.h"
#include "common/computer_actions.h"
#include "common/json_fields.h"

namespace cabin::computer {

Result<Scaler> Scaler::make(Size model, Size screen) {
  auto in_range = [](Size s) {
    return s.width >= 1 && s.height >= 1 && s.width <= kMaxScreenDim && s.height <= kMaxScreenDim;
  };
  if (!in_range(model) || !in_range(screen)) {
    return invalid_field("display", "sizes must be 1 to " + std::to_string(kMaxScreenDim));
  }
  if (model.width > screen.width || model.height > screen.height) {
    return invalid_field("display",
                         "must not be larger than the screen, " + detail::size_text(screen));
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

namespace detail {

Result<Scaler> screen_scaler(Size screen) {
  auto s = Scaler::make(screen, screen);
  if (!s) {
    return make_error(Errc::kInternal, "internal", "screen size " + size_text(screen) + " invalid");
  }
  return s;
}

}  // namespace detail

}  // namespace cabin::computer
