#include "vnc/clipboard.h"

#include <X11/Xatom.h>
#include <X11/Xlib.h>
#include <X11/extensions/Xfixes.h>

#include "vnc/x11_detail.h"

namespace cabin::vnc {
namespace {

// Cuts `s` to at most `max` bytes without splitting a UTF-8 sequence.
void truncate_utf8(std::string& s, size_t max) {
  if (s.size() <= max) return;
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xc0) == 0x80) --n;
  s.resize(n);
}

}  // namespace

std::string latin1_to_utf8(std::string_view latin1) {
  std::string out;
  out.reserve(latin1.size());
  for (char ch : latin1) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back(static_cast<char>(0xc0 | (c >> 6)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3f)));
    }
  }
  return out;
}

std::string utf8_to_latin1(std::string_view utf8) {
  std::string out;
  out.reserve(utf8.size());
  size_t i = 0;
  while (i < utf8.size()) {
    const auto c = static_cast<unsigned char>(utf8[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (len == 0 || i + len > utf8.size()) {
      out.push_back('?');
      ++i;
      continue;
    }
    uint32_t cp = len == 1 ? c : c & (0x7f >> len);
    bool ok = true;
    for (size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(utf8[i + k]);
      if ((cc & 0xc0) != 0x80) ok = false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if (!ok) {
      out.push_back('?');
      ++i;
      continue;
    }
    out.push_back(cp <= 0xff ? static_cast<char>(cp) : '?');
    i += len;
  }
  return out;
}

struct Clipboard::Impl {
  detail::DisplayImpl* d = nullptr;
  ::Window window = 0;
  int xfixes_event_base = 0;
  Atom clipboard = 0, primary = XA_PRIMARY, utf8 = 0, targets = 0, text_atom = 0, incoming = 0;
  std::string ours;  // what we serve while we own the selections
  bool owner = false;
  std::optional<std::string> fresh;  // text read from another owner, not yet handed out

  ~Impl() {
    if (window != 0 && !d->lost) {
      XDestroyWindow(d->dpy, window);
      XFlush(d->dpy);
    }
  }

  void answer(const XSelectionRequestEvent& req) {
    XSelectionEvent reply{};
    reply.type = SelectionNotify;
    reply.display = req.display;
    reply.requestor = req.requestor;
    reply.selection = req.selection;
    reply.target = req.target;
    reply.time = req.time;
    // Obsolete clients leave the property empty and mean the target's name.
    Atom property = req.property != None ? req.property : req.target;
    reply.property = None;
    if (owner) {
      if (req.target == targets) {
        Atom list[] = {targets, utf8, XA_STRING, text_atom};
        XChangeProperty(d->dpy, req.requestor, property, XA_ATOM, 32, PropModeReplace,
                        reinterpret_cast<unsigned char*>(list), 4);
        reply.property = property;
      } else if (req.target == utf8 || req.target == text_atom) {
        XChangeProperty(d->dpy, req.requestor, property, utf8, 8, PropModeReplace,
                        reinterpret_cast<const unsigned char*>(ours.data()),
                        static_cast<int>(ours.size()));
        reply.property = property;
      } else if (req.target == XA_STRING) {
        const std::string latin1 = utf8_to_latin1(ours);
        XChangeProperty(d->dpy, req.requestor, property, XA_STRING, 8, PropModeReplace,
                        reinterpret_cast<const unsigned char*>(latin1.data()),
                        static_cast<int>(latin1.size()));
        reply.property = property;
      }
    }
    XSendEvent(d->dpy, req.requestor, False, NoEventMask, reinterpret_cast<XEvent*>(&reply));
  }

  void read_incoming() {
    Atom type = None;
    int format = 0;
    unsigned long items = 0, after = 0;
    unsigned char* data = nullptr;
    // Length in 32-bit units; one more than the limit tells an oversized value apart.
    const long max_units = static_cast<long>(kMaxClipboardBytes / 4) + 1;
    if (XGetWindowProperty(d->dpy, window, incoming, 0, max_units, True, AnyPropertyType, &type,
                           &format, &items, &after, &data) != Success) {
      return;
    }
    if (data != nullptr && format == 8 && after == 0 && items <= kMaxClipboardBytes &&
        (type == utf8 || type == XA_STRING)) {
      std::string_view raw(reinterpret_cast<const char*>(data), items);
      fresh = type == utf8 ? std::string(raw) : latin1_to_utf8(raw);
    }
    // INCR (large transfers) and anything else are dropped.
    if (data != nullptr) XFree(data);
  }
};

Result<Clipboard> Clipboard::create(Display& display) {
  auto impl = std::make_unique<Impl>();
  impl->d = &display.impl();
  detail::DisplayImpl& d = *impl->d;
  if (auto a = d.check_alive(); !a) return a.error();
  int fx_error = 0;
  if (!XFixesQueryExtension(d.dpy, &impl->xfixes_event_base, &fx_error)) {
    return make_error(Errc::kUnavailable, "no_xfixes", "the X server lacks XFixes");
  }
  int major = 0, minor = 0;
  XFixesQueryVersion(d.dpy, &major, &minor);
  impl->clipboard = XInternAtom(d.dpy, "CLIPBOARD", False);
  impl->utf8 = XInternAtom(d.dpy, "UTF8_STRING", False);
  impl->targets = XInternAtom(d.dpy, "TARGETS", False);
  impl->text_atom = XInternAtom(d.dpy, "TEXT", False);
  impl->incoming = XInternAtom(d.dpy, "CABIN_CLIPBOARD", False);
  // An unmapped window: selection ownership and transfers need one, nothing is drawn.
  impl->window = XCreateSimpleWindow(d.dpy, d.root, 0, 0, 1, 1, 0, 0, 0);
  XFixesSelectSelectionInput(d.dpy, impl->window, impl->clipboard,
                             XFixesSetSelectionOwnerNotifyMask);
  if (auto s = d.sync("clipboard window"); !s) {
    impl->window = 0;
    return s.error();
  }
  return Clipboard(std::move(impl));
}

Clipboard::Clipboard(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Clipboard::Clipboard(Clipboard&&) noexcept = default;
Clipboard& Clipboard::operator=(Clipboard&&) noexcept = default;
Clipboard::~Clipboard() = default;

int Clipboard::fd() const { return ConnectionNumber(impl_->d->dpy); }

Result<void> Clipboard::set_text(std::string utf8) {
  Impl& in = *impl_;
  if (auto a = in.d->check_alive(); !a) return a;
  truncate_utf8(utf8, kMaxClipboardBytes);
  in.ours = std::move(utf8);
  XSetSelectionOwner(in.d->dpy, in.clipboard, in.window, CurrentTime);
  XSetSelectionOwner(in.d->dpy, in.primary, in.window, CurrentTime);
  in.owner = XGetSelectionOwner(in.d->dpy, in.clipboard) == in.window;
  if (!in.owner) {
    return make_error(Errc::kUnavailable, "selection_refused", "could not own CLIPBOARD");
  }
  return in.d->sync("XSetSelectionOwner");
}

std::optional<std::string> Clipboard::process() {
  Impl& in = *impl_;
  if (in.d->lost) return std::nullopt;
  while (XPending(in.d->dpy) > 0) {
    XEvent ev;
    XNextEvent(in.d->dpy, &ev);
    if (ev.type == in.xfixes_event_base + XFixesSelectionNotify) {
      const auto& n = reinterpret_cast<const XFixesSelectionNotifyEvent&>(ev);
      if (n.selection == in.clipboard && n.owner != None && n.owner != in.window) {
        // Someone else copied: ask for the text; it arrives as a SelectionNotify.
        XConvertSelection(in.d->dpy, in.clipboard, in.utf8, in.incoming, in.window,
                          n.selection_timestamp);
      }
    } else if (ev.type == SelectionRequest) {
      in.answer(ev.xselectionrequest);
    } else if (ev.type == SelectionClear) {
      if (ev.xselectionclear.selection == in.clipboard) in.owner = false;
    } else if (ev.type == SelectionNotify) {
      if (ev.xselection.property != None && ev.xselection.selection == in.clipboard) {
        in.read_incoming();
      }
    }
  }
  XFlush(in.d->dpy);
  return std::exchange(in.fresh, std::nullopt);
}

}  // namespace cabin::vnc
