// Capturer: grabs the screen or a region of it into an Image, through MIT-SHM when it can.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "common/result.h"
#include "vnc/display.h"
#include "vnc/image.h"

namespace cabin::vnc {

// The pointer's image, as XFixes hands it over: premultiplied ARGB, one uint32 per pixel.
struct CursorImage {
  Point origin;  // screen position of the image's top-left pixel (pointer minus hotspot)
  int width = 0;
  int height = 0;
  Point hotspot;        // the pointer's pixel inside the image
  uint64_t serial = 0;  // changes whenever the pointer's shape changes
  std::vector<uint32_t> argb;
};

// Alpha-blends `cursor` onto `image`, whose top-left pixel sits at `image_origin` on the screen.
// Parts of the cursor outside the image are skipped.
void draw_cursor(Image& image, Point image_origin, const CursorImage& cursor);

struct CaptureOptions {
  bool use_shm = true;  // false forces the XGetImage path (tests, remote displays)
};

class Capturer {
 public:
  // Needs a 24/32-bit TrueColor screen with 8-bit channels (what Xvfb WxHx24 gives).
  static Result<Capturer> create(Display& display, CaptureOptions options = {});

  Capturer(Capturer&&) noexcept;
  Capturer& operator=(Capturer&&) noexcept;
  ~Capturer();

  // Grabs `region` (the whole screen when empty) into `out`, reusing its buffer. The result is
  // packed BGRX. `region` must lie inside the screen.
  Result<void> grab(Image& out, std::optional<Rect> region = std::nullopt,
                    bool with_cursor = false);
  Result<Image> grab(std::optional<Rect> region = std::nullopt, bool with_cursor = false);

  // The pointer image now, for callers that draw it themselves.
  Result<CursorImage> cursor();

  // True when grabs go through a shared-memory segment (false after a fallback to XGetImage).
  bool uses_shm() const;

 private:
  struct Impl;
  explicit Capturer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cabin::vnc
