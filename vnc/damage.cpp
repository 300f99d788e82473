#include "vnc/damage.h"

#include <X11/Xlib.h>
#include <X11/extensions/Xdamage.h>
#include <X11/extensions/Xfixes.h>

#include <utility>

#include "vnc/x11_detail.h"

namespace cabin::vnc {

struct DamageTracker::Impl {
  detail::DisplayImpl* d = nullptr;
  Damage damage = 0;
  int event_base = 0;
  int xfixes_event_base = -1;  // >= 0 when cursor changes are watched
  bool cursor_changed = false;

  ~Impl() {
    if (damage != 0 && !d->lost) {
      XDamageDestroy(d->dpy, damage);
      XFlush(d->dpy);
    }
  }
};

Result<DamageTracker> DamageTracker::create(Display& display, DamageOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->d = &display.impl();
  detail::DisplayImpl& d = *impl->d;
  if (auto a = d.check_alive(); !a) return a.error();
  int error_base = 0;
  if (!XDamageQueryExtension(d.dpy, &impl->event_base, &error_base)) {
    return make_error(Errc::kUnavailable, "no_xdamage", "the X server lacks DAMAGE");
  }
  int major = 0, minor = 0;
  XDamageQueryVersion(d.dpy, &major, &minor);
  // NonEmpty: one event per clean->dirty transition, however much is drawn; take_damage()
  // re-arms it by emptying the damage region.
  impl->damage = XDamageCreate(d.dpy, d.root, XDamageReportNonEmpty);
  if (auto s = d.sync("XDamageCreate"); !s) {
    impl->damage = 0;
    return s.error();
  }
  if (options.watch_cursor) {
    int fx_event = 0, fx_error = 0;
    if (!XFixesQueryExtension(d.dpy, &fx_event, &fx_error)) {
      return make_error(Errc::kUnavailable, "no_xfixes", "the X server lacks XFixes");
    }
    int fmajor = 0, fminor = 0;
    XFixesQueryVersion(d.dpy, &fmajor, &fminor);
    XFixesSelectCursorInput(d.dpy, d.root, XFixesDisplayCursorNotifyMask);
    if (auto s = d.sync("XFixesSelectCursorInput"); !s) return s.error();
    impl->xfixes_event_base = fx_event;
  }
  return DamageTracker(std::move(impl));
}

DamageTracker::DamageTracker(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DamageTracker::DamageTracker(DamageTracker&&) noexcept = default;
DamageTracker& DamageTracker::operator=(DamageTracker&&) noexcept = default;
DamageTracker::~DamageTracker() = default;

int DamageTracker::fd() const { return ConnectionNumber(impl_->d->dpy); }

bool DamageTracker::take_damage() {
  detail::DisplayImpl& d = *impl_->d;
  if (d.lost) return false;
  bool damaged = false;
  // XPending reads what the socket has without blocking (and flushes our requests).
  while (XPending(d.dpy) > 0) {
    XEvent ev;
    XNextEvent(d.dpy, &ev);
    if (ev.type == impl_->event_base + XDamageNotify) {
      damaged = true;
    } else if (impl_->xfixes_event_base >= 0 &&
               ev.type == impl_->xfixes_event_base + XFixesCursorNotify) {
      impl_->cursor_changed = true;
    } else if (ev.type == MappingNotify) {
      XRefreshKeyboardMapping(&ev.xmapping);
    }
  }
  if (damaged) {
    // Empty the region so the next drawing raises a fresh notify. Whatever was drawn between the
    // notify and now is covered by this "true": the caller captures after we return.
    XDamageSubtract(d.dpy, impl_->damage, None, None);
    XFlush(d.dpy);
  }
  return damaged;
}

DamageTracker::Changes DamageTracker::take_changes() {
  Changes c;
  c.screen = take_damage();
  c.cursor = std::exchange(impl_->cursor_changed, false);
  return c;
}

}  // namespace cabin::vnc
