#include "vnc/capture.h"

#include <X11/Xlib.h>
#include <X11/Xutil.h>
#include <X11/extensions/XShm.h>
#include <X11/extensions/Xfixes.h>
#include <sys/ipc.h>
#include <sys/shm.h>

#include <algorithm>
#include <cstring>

#include "vnc/x11_detail.h"

namespace cabin::vnc {

void draw_cursor(Image& image, Point image_origin, const CursorImage& cursor) {
  const int x0 = std::max(cursor.origin.x, image_origin.x);
  const int y0 = std::max(cursor.origin.y, image_origin.y);
  const int x1 = std::min(cursor.origin.x + cursor.width, image_origin.x + image.width);
  const int y1 = std::min(cursor.origin.y + cursor.height, image_origin.y + image.height);
  for (int y = y0; y < y1; ++y) {
    const uint32_t* src =
        cursor.argb.data() + static_cast<size_t>(y - cursor.origin.y) * cursor.width;
    uint8_t* dst = image.pixel(0, y - image_origin.y);
    for (int x = x0; x < x1; ++x) {
      const uint32_t p = src[x - cursor.origin.x];
      const uint32_t a = p >> 24;
      if (a == 0) continue;
      uint8_t* d = dst + static_cast<size_t>(x - image_origin.x) * 4;
      const uint32_t inv = 255 - a;
      // Premultiplied "over": out = src + dst * (1 - alpha).
      d[0] = static_cast<uint8_t>(std::min<uint32_t>(255, (p & 0xff) + (d[0] * inv + 127) / 255));
      d[1] = static_cast<uint8_t>(
          std::min<uint32_t>(255, ((p >> 8) & 0xff) + (d[1] * inv + 127) / 255));
      d[2] = static_cast<uint8_t>(
          std::min<uint32_t>(255, ((p >> 16) & 0xff) + (d[2] * inv + 127) / 255));
    }
  }
}

struct Capturer::Impl {
  detail::DisplayImpl* d = nullptr;
  Visual* visual = nullptr;
  int depth = 0;
  bool have_xfixes = false;

  bool shm = false;
  XShmSegmentInfo shminfo{};
  // XImage headers over the segment; remade only when the grabbed size changes.
  XImage* shm_image = nullptr;

  ~Impl() {
    if (shm_image != nullptr) XDestroyImage(shm_image);  // frees the header, not the segment
    if (shm) {
      if (!d->lost) {
        XShmDetach(d->dpy, &shminfo);
        XSync(d->dpy, False);
      }
      shmdt(shminfo.shmaddr);
    }
  }

  // Sets up one segment big enough for the whole screen; false means "use XGetImage".
  bool init_shm() {
    if (!XShmQueryExtension(d->dpy)) return false;
    const size_t bytes = static_cast<size_t>(d->size.width) * d->size.height * 4;
    shminfo.shmid = shmget(IPC_PRIVATE, bytes, IPC_CREAT | 0600);
    if (shminfo.shmid < 0) return false;
    void* addr = shmat(shminfo.shmid, nullptr, 0);
    if (addr == reinterpret_cast<void*>(-1)) {
      shmctl(shminfo.shmid, IPC_RMID, nullptr);
      return false;
    }
    shminfo.shmaddr = static_cast<char*>(addr);
    shminfo.readOnly = False;
    d->sync("before shm attach").ok();  // attribute later errors to the attach alone
    XShmAttach(d->dpy, &shminfo);
    const bool attached = d->sync("XShmAttach").ok();
    // Marked for removal now: the kernel frees it once both sides detach, even after a crash.
    shmctl(shminfo.shmid, IPC_RMID, nullptr);
    if (!attached) {  // e.g. a server in another IPC namespace or on another host
      shmdt(shminfo.shmaddr);
      return false;
    }
    shm = true;
    return true;
  }

  Result<void> grab_shm(Image& out, const Rect& r) {
    if (shm_image == nullptr || shm_image->width != r.width || shm_image->height != r.height) {
      if (shm_image != nullptr) XDestroyImage(shm_image);
      shm_image = XShmCreateImage(d->dpy, visual, depth, ZPixmap, shminfo.shmaddr, &shminfo,
                                  r.width, r.height);
      if (shm_image == nullptr) {
        return make_error(Errc::kInternal, "capture_failed", "XShmCreateImage failed");
      }
    }
    if (!XShmGetImage(d->dpy, d->root, shm_image, r.x, r.y, AllPlanes)) {
      if (auto s = d->sync("XShmGetImage"); !s) return s;
      return make_error(Errc::kInternal, "capture_failed", "XShmGetImage failed");
    }
    return copy_out(out, shm_image);
  }

  Result<void> grab_plain(Image& out, const Rect& r) {
    XImage* img = XGetImage(d->dpy, d->root, r.x, r.y, r.width, r.height, AllPlanes, ZPixmap);
    if (img == nullptr) {
      if (auto s = d->sync("XGetImage"); !s) return s;
      return make_error(Errc::kInternal, "capture_failed", "XGetImage failed");
    }
    auto result = copy_out(out, img);
    XDestroyImage(img);
    return result;
  }

  static Result<void> copy_out(Image& out, const XImage* img) {
    if (img->bits_per_pixel != 32 || img->byte_order != LSBFirst) {
      return make_error(Errc::kUnavailable, "unsupported_visual",
                        "capture needs 32 bits per pixel, LSB first");
    }
    out.reset(img->width, img->height, PixelFormat::kBgrx);
    const size_t row_bytes = static_cast<size_t>(img->width) * 4;
    for (int y = 0; y < img->height; ++y) {
      std::memcpy(out.row(y), img->data + static_cast<size_t>(y) * img->bytes_per_line, row_bytes);
    }
    return {};
  }

  Result<CursorImage> cursor() {
    if (auto a = d->check_alive(); !a) return a.error();
    if (!have_xfixes) {
      return make_error(Errc::kUnavailable, "no_xfixes", "the X server lacks XFixes");
    }
    XFixesCursorImage* ci = XFixesGetCursorImage(d->dpy);
    if (ci == nullptr) {
      return make_error(Errc::kInternal, "cursor_failed", "XFixesGetCursorImage failed");
    }
    CursorImage c;
    c.origin = {ci->x - ci->xhot, ci->y - ci->yhot};
    c.width = ci->width;
    c.height = ci->height;
    c.hotspot = {ci->xhot, ci->yhot};
    c.serial = ci->cursor_serial;
    c.argb.resize(static_cast<size_t>(c.width) * c.height);
    // XFixes stores each pixel in an unsigned long (64 bits here); the ARGB is the low 32.
    for (size_t i = 0; i < c.argb.size(); ++i) c.argb[i] = static_cast<uint32_t>(ci->pixels[i]);
    XFree(ci);
    return c;
  }
};

Result<Capturer> Capturer::create(Display& display, CaptureOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->d = &display.impl();
  detail::DisplayImpl& d = *impl->d;
  if (auto a = d.check_alive(); !a) return a.error();
  impl->visual = DefaultVisual(d.dpy, d.screen);
  impl->depth = DefaultDepth(d.dpy, d.screen);
  if (impl->visual->c_class != TrueColor || (impl->depth != 24 && impl->depth != 32) ||
      impl->visual->red_mask != 0xff0000 || impl->visual->green_mask != 0xff00 ||
      impl->visual->blue_mask != 0xff || ImageByteOrder(d.dpy) != LSBFirst) {
    return make_error(Errc::kUnavailable, "unsupported_visual",
                      "capture needs a 24-bit TrueColor screen with 8-bit channels");
  }
  int event_base = 0, error_base = 0;
  impl->have_xfixes = XFixesQueryExtension(d.dpy, &event_base, &error_base);
  if (options.use_shm) impl->init_shm();
  return Capturer(std::move(impl));
}

Capturer::Capturer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Capturer::Capturer(Capturer&&) noexcept = default;
Capturer& Capturer::operator=(Capturer&&) noexcept = default;
Capturer::~Capturer() = default;

bool Capturer::uses_shm() const { return impl_->shm; }

Result<CursorImage> Capturer::cursor() { return impl_->cursor(); }

Result<void> Capturer::grab(Image& out, std::optional<Rect> region, bool with_cursor) {
  detail::DisplayImpl& d = *impl_->d;
  if (auto a = d.check_alive(); !a) return a;
  const Rect r = region.value_or(Rect{0, 0, d.size.width, d.size.height});
  if (r.width <= 0 || r.height <= 0 || r.x < 0 || r.y < 0 || r.x > d.size.width - r.width ||
      r.y > d.size.height - r.height) {
    return make_error(Errc::kInvalidArgument, "bad_region", "region must lie inside the screen");
  }
  auto grabbed = impl_->shm ? impl_->grab_shm(out, r) : impl_->grab_plain(out, r);
  if (!grabbed) return grabbed;
  if (with_cursor) {
    auto c = impl_->cursor();
    if (!c) return c.error();
    draw_cursor(out, {r.x, r.y}, *c);
  }
  return {};
}

Result<Image> Capturer::grab(std::optional<Rect> region, bool with_cursor) {
  Image img;
  if (auto r = grab(img, region, with_cursor); !r) return r.error();
  return img;
}

}  // namespace cabin::vnc
