// Resampling to an exact size, and integer coordinate mapping between model space and screen.
#pragma once

#include "common/result.h"
#include "vnc/image.h"

namespace cabin::vnc {

// Resamples `src` to exactly `target`, each axis on its own: an axis that shrinks is
// area-averaged (every source pixel contributes by its covered area, so thin text strokes fade
// instead of vanishing); one that grows is bilinear. The result is packed, in src's format.
Result<Image> scale(const ImageView& src, Size target);

// The largest size with `src`'s aspect ratio that fits in `box` (never larger than src, never
// smaller than 1x1).
Size fit_within(Size src, Size box);

// "Model space" is the scaled screenshot an agent sees and clicks in.
//
// Maps one coordinate from an axis of `from` pixels to one of `to` pixels: the pixel whose
// centre lies under the centre of pixel `v`, floor((2v + 1) * to / (2 * from)).
//   - The result is always in [0, to - 1] for v in [0, from - 1] (inputs outside are clamped
//     first), so a point from model space always lands on the screen.
//   - model -> screen -> model is exact whenever the screen is at least as large as the model.
//   - screen -> model -> screen lands within ceil(from/to / 2) pixels; within one pixel when the
//     model is at least half the screen's size on that axis.
int map_coord(int v, int from, int to);

// Both directions of map_coord for one (screen, model) pair. Sizes must be positive.
class CoordMap {
 public:
  CoordMap(Size screen, Size model) : screen_(screen), model_(model) {}
  Point to_screen(Point model_point) const {
    return {map_coord(model_point.x, model_.width, screen_.width),
            map_coord(model_point.y, model_.height, screen_.height)};
  }
  Point to_model(Point screen_point) const {
    return {map_coord(screen_point.x, screen_.width, model_.width),
            map_coord(screen_point.y, screen_.height, model_.height)};
  }
  Size screen() const { return screen_; }
  Size model() const { return model_; }

 private:
  Size screen_;
  Size model_;
};

}  // namespace cabin::vnc
