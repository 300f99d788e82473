#include "vnc/display.h"

#include <X11/Xatom.h>
#include <X11/Xlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "vnc/x11_detail.h"

namespace cabin::vnc {
namespace detail {
namespace {

// Xlib's error handlers are process-wide: route each error to the DisplayImpl it belongs to.
std::mutex g_registry_mu;
std::vector<DisplayImpl*> g_registry;

DisplayImpl* find_impl(::Display* dpy) {
  std::lock_guard lock(g_registry_mu);
  auto it = std::find_if(g_registry.begin(), g_registry.end(),
                         [dpy](DisplayImpl* d) { return d->dpy == dpy; });
  return it == g_registry.end() ? nullptr : *it;
}

int on_x_error(::Display* dpy, XErrorEvent* ev) {
  // The default handler prints and exits; an X error is an ordinary failure here.
  if (DisplayImpl* d = find_impl(dpy); d && d->error_code == 0) {
    d->error_code = ev->error_code;
    d->error_request = ev->request_code;
  }
  return 0;
}

int on_io_error(::Display*) { return 0; }  // reported through the exit handler below

void on_io_error_exit(::Display*, void* user) {
  // Returning (instead of exit(1)) leaves the connection unusable but the process alive.
  static_cast<DisplayImpl*>(user)->lost = true;
}

void install_handlers_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    XSetErrorHandler(on_x_error);
    XSetIOErrorHandler(on_io_error);
  });
}

}  // namespace

DisplayImpl::~DisplayImpl() {
  if (dpy == nullptr) return;
  // A connection whose server is gone is not handed to XCloseDisplay: with Xlib's thread locks
  // on (init_threads) it waits forever on a connection that already failed. Its socket is
  // closed and the small Xlib state left behind. EOF on a peek tells a server that went away
  // before Xlib noticed.
  const int fd = ConnectionNumber(dpy);
  char byte = 0;
  const bool gone = lost || ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
  if (gone) {
    ::close(fd);
  } else {
    XCloseDisplay(dpy);
  }
  std::lock_guard lock(g_registry_mu);
  std::erase(g_registry, this);
}

Result<void> DisplayImpl::check_alive() const {
  if (lost) return lost_error(name);
  return {};
}

Result<void> DisplayImpl::sync(std::string_view what) {
  if (lost) return lost_error(name);
  XSync(dpy, False);
  if (lost) return lost_error(name);
  if (error_code != 0) {
    char text[128] = {};
    XGetErrorText(dpy, error_code, text, sizeof(text));
    std::string msg = std::string(what) + ": X error " + text + " (request " +
                      std::to_string(error_request) + ")";
    clear_error();
    return make_error(Errc::kInternal, "x_error", std::move(msg));
  }
  return {};
}

Error lost_error(const std::string& display_name) {
  return make_error(Errc::kUnavailable, "display_lost",
                    "connection to X display " + display_name + " was lost");
}

}  // namespace detail

void init_threads() {
  static std::once_flag once;
  std::call_once(once, [] { XInitThreads(); });
}

Result<Display> Display::open(std::string_view name) {
  detail::install_handlers_once();
  std::string n(name);
  if (n.empty()) {
    const char* env = std::getenv("DISPLAY");
    if (env == nullptr || *env == '\0') {
      return make_error(Errc::kInvalidArgument, "no_display", "no display name and no $DISPLAY");
    }
    n = env;
  }
  ::Display* dpy = XOpenDisplay(n.c_str());
  if (dpy == nullptr) {
    return make_error(Errc::kUnavailable, "display_unreachable", "cannot open X display " + n);
  }
  auto impl = std::make_unique<detail::DisplayImpl>();
  impl->dpy = dpy;
  impl->name = n;
  impl->screen = DefaultScreen(dpy);
  impl->root = RootWindow(dpy, impl->screen);
  impl->size = {DisplayWidth(dpy, impl->screen), DisplayHeight(dpy, impl->screen)};
  XSetIOErrorExitHandler(dpy, detail::on_io_error_exit, impl.get());
  {
    std::lock_guard lock(detail::g_registry_mu);
    detail::g_registry.push_back(impl.get());
  }
  return Display(std::move(impl));
}

Display::Display(std::unique_ptr<detail::DisplayImpl> impl) : impl_(std::move(impl)) {}
Display::Display(Display&&) noexcept = default;
Display& Display::operator=(Display&&) noexcept = default;
Display::~Display() = default;

const std::string& Display::name() const { return impl_->name; }
Size Display::size() const { return impl_->size; }
int Display::fd() const { return ConnectionNumber(impl_->dpy); }
bool Display::lost() const { return impl_->lost; }
Result<void> Display::sync() { return impl_->sync("sync"); }

Result<bool> Display::has_viewable_window(int64_t pid) {
  detail::DisplayImpl& d = *impl_;
  if (auto a = d.check_alive(); !a) return a.error();
  const Atom wm_pid = XInternAtom(d.dpy, "_NET_WM_PID", False);
  ::Window r = 0, parent = 0, *kids = nullptr;
  unsigned n = 0;
  if (!XQueryTree(d.dpy, d.root, &r, &parent, &kids, &n)) {
    if (auto a = d.check_alive(); !a) return a.error();
    return make_error(Errc::kInternal, "x_error", "XQueryTree on the root window failed");
  }
  bool found = false;
  for (unsigned i = 0; i < n && !found; ++i) {
    XWindowAttributes attrs;
    // A window may go away between the two calls: its BadWindow is forgotten below.
    if (!XGetWindowAttributes(d.dpy, kids[i], &attrs) || attrs.map_state != IsViewable) continue;
    Atom type = 0;
    int format = 0;
    unsigned long count = 0, after = 0;
    unsigned char* data = nullptr;
    if (XGetWindowProperty(d.dpy, kids[i], wm_pid, 0, 1, False, XA_CARDINAL, &type, &format,
                           &count, &after, &data) == Success &&
        data != nullptr && format == 32 && count == 1) {
      found = static_cast<int64_t>(*reinterpret_cast<unsigned long*>(data)) == pid;
    }
    if (data != nullptr) XFree(data);
  }
  if (kids != nullptr) XFree(kids);
  XSync(d.dpy, False);
  d.clear_error();
  if (auto a = d.check_alive(); !a) return a.error();
  return found;
}

Result<Size> Display::query_size() {
  if (auto a = impl_->check_alive(); !a) return a.error();
  ::Window root = 0;
  int x = 0, y = 0;
  unsigned w = 0, h = 0, border = 0, depth = 0;
  if (!XGetGeometry(impl_->dpy, impl_->root, &root, &x, &y, &w, &h, &border, &depth)) {
    if (auto a = impl_->check_alive(); !a) return a.error();
    return make_error(Errc::kInternal, "x_error", "XGetGeometry on the root window failed");
  }
  return Size{static_cast<int>(w), static_cast<int>(h)};
}

}  // namespace cabin::vnc
