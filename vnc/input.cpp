#include "vnc/input.h"

#include <X11/Xlib.h>
#include <X11/Xutil.h>
#include <X11/extensions/XTest.h>
#include <X11/keysym.h>
#include <poll.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <optional>
#include <thread>
#include <vector>

#include "vnc/x11_detail.h"

namespace cabin::vnc {
namespace {

struct KeyRef {
  int keycode = 0;
  bool shift = false;  // the keysym sits on the shifted level of its key
};

}  // namespace

struct Input::Impl {
  detail::DisplayImpl* d = nullptr;
  InputOptions options;

  // A copy of the server's core keyboard mapping, refreshed at the start of every key call so a
  // layout change by anyone else (setxkbmap) is seen.
  int min_kc = 0;
  int max_kc = 0;
  int per = 0;  // keysyms per keycode
  std::vector<KeySym> map;
  std::array<bool, 256> is_modifier{};
  std::array<bool, 256> is_shift{};  // keycodes bound to the Shift modifier
  unsigned numlock_mask = 0;         // the modifier bit Num_Lock sets, 0 if none

  // Borrowed keycodes; sym == NoSymbol while a slot is free. `in_flight`: pressed since the
  // last settle(), so a client may not have decoded that press yet.
  struct Spare {
    int keycode = 0;
    KeySym sym = NoSymbol;
    uint64_t last_used = 0;
    bool in_flight = false;
  };
  std::vector<Spare> spares;
  uint64_t tick = 0;
  // A borrowed keycode was remapped since the last settle().
  bool remapped = false;

  // settle()'s second connection, which hears the answers to its pings on the root window.
  std::optional<Display> pong;
  bool pong_failed = false;
  uint64_t ping_serial = 0;
  ::Window unanswered = 0;  // the last window that let a ping time out

  // What key_down/button_down left down for the caller.
  std::vector<std::pair<Keysym, int>> held_keys;
  std::vector<unsigned> held_buttons;

  // Presses made inside one call; restore() lets go of them in reverse and puts back what the
  // call lifted, whichever way the call ends.
  class Guard {
   public:
    explicit Guard(Impl& in) : in_(in) {}
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;
    ~Guard() { restore(); }

    void press(int kc) {
      XTestFakeKeyEvent(in_.d->dpy, kc, True, CurrentTime);
      down_.push_back(kc);
    }
    void release(int kc) {
      XTestFakeKeyEvent(in_.d->dpy, kc, False, CurrentTime);
      if (auto it = std::find(down_.rbegin(), down_.rend(), kc); it != down_.rend()) {
        down_.erase(std::next(it).base());
      }
    }
    const std::vector<int>& down() const { return down_; }

    // Lifts every modifier key that is down and turns Caps Lock off, so text types exactly.
    void lift_modifiers() {
      char keys[32] = {};
      XQueryKeymap(in_.d->dpy, keys);
      for (int kc = 8; kc < 256; ++kc) {
        if ((keys[kc / 8] & (1 << (kc % 8))) != 0 && in_.is_modifier[kc]) {
          XTestFakeKeyEvent(in_.d->dpy, kc, False, CurrentTime);
          lifted_.push_back(kc);
        }
      }
      ::Window root = 0, child = 0;
      int rx = 0, ry = 0, wx = 0, wy = 0;
      unsigned mask = 0;
      XQueryPointer(in_.d->dpy, in_.d->root, &root, &child, &rx, &ry, &wx, &wy, &mask);
      if ((mask & LockMask) != 0) {
        if (auto caps = in_.find(XK_Caps_Lock, false)) {
          tap(caps->keycode);
          caps_ = caps->keycode;
        }
      }
    }

    void restore() {
      if (in_.d->lost) return;
      for (auto it = down_.rbegin(); it != down_.rend(); ++it) {
        XTestFakeKeyEvent(in_.d->dpy, *it, False, CurrentTime);
      }
      down_.clear();
      if (caps_ != 0) tap(caps_);
      caps_ = 0;
      for (int kc : lifted_) XTestFakeKeyEvent(in_.d->dpy, kc, True, CurrentTime);
      lifted_.clear();
    }

   private:
    void tap(int kc) {
      XTestFakeKeyEvent(in_.d->dpy, kc, True, CurrentTime);
      XTestFakeKeyEvent(in_.d->dpy, kc, False, CurrentTime);
    }

    Impl& in_;
    std::vector<int> down_;
    std::vector<int> lifted_;
    int caps_ = 0;
  };

  ~Impl() {
    if (d->lost) return;
    for (auto it = held_keys.rbegin(); it != held_keys.rend(); ++it) {
      XTestFakeKeyEvent(d->dpy, it->second, False, CurrentTime);
    }
    for (unsigned b : held_buttons) XTestFakeButtonEvent(d->dpy, b, False, CurrentTime);
    // Give borrowed keycodes back, so the layout is as we found it.
    for (const Spare& s : spares) {
      if (s.sym == NoSymbol) continue;
      KeySym none[2] = {NoSymbol, NoSymbol};
      XChangeKeyboardMapping(d->dpy, s.keycode, 2, none, 1);
    }
    d->sync("input teardown").ok();
    drain_mapping_notify();
  }

  // Clients decode a key event with the keyboard mapping they hold when they read it, and
  // fetch a new mapping when they read the MappingNotify (Chromium's X11 connection does so
  // synchronously, in event order). A keycode remapped before the client read an earlier press
  // of it types the new character there; a key pressed before the client took in its new
  // mapping types the old one. settle() waits until the client with the keyboard focus has read
  // every event sent so far: it sends that window a _NET_WM_PING and waits for the answer, which
  // the client sends once it has handled everything queued before the ping. A client that does
  // not speak _NET_WM_PING gets a short pause instead.
  void settle() {
    remapped = false;
    for (Spare& s : spares) s.in_flight = false;
    if (d->lost) return;
    const PingTarget t = ping_target();
    const ::Window target = t.window;
    if (target == 0) return;  // nobody reads keys
    if (!t.pingable || target == unanswered || !open_pong()) {
      XSync(d->dpy, False);
      std::this_thread::sleep_for(kUnansweredPause);
      return;
    }
    detail::DisplayImpl& p = pong->impl();
    XSelectInput(p.dpy, p.root, SubstructureNotifyMask);
    XSync(p.dpy, False);  // listening before the ping goes out
    const Atom protocols = XInternAtom(d->dpy, "WM_PROTOCOLS", False);
    const Atom ping = XInternAtom(d->dpy, "_NET_WM_PING", False);
    XEvent ev{};
    ev.xclient.type = ClientMessage;
    ev.xclient.window = target;
    ev.xclient.message_type = protocols;
    ev.xclient.format = 32;
    ev.xclient.data.l[0] = static_cast<long>(ping);
    ev.xclient.data.l[1] = static_cast<long>(++ping_serial & 0xffffffff);  // the "timestamp"
    ev.xclient.data.l[2] = static_cast<long>(target);
    XSendEvent(d->dpy, target, False, NoEventMask, &ev);
    XSync(d->dpy, False);
    const bool answered = wait_pong(p, protocols, ping, ev.xclient.data.l[1]);
    XSelectInput(p.dpy, p.root, NoEventMask);
    XSync(p.dpy, False);
    while (XPending(p.dpy) > 0) XNextEvent(p.dpy, &ev);
    if (!answered) unanswered = target;
  }

  static constexpr std::chrono::milliseconds kUnansweredPause{20};
  // A browser under load answers in milliseconds; a hung one is not waited for again.
  static constexpr std::chrono::milliseconds kPongTimeout{1000};

  bool open_pong() {
    if (pong) return !pong->lost();
    if (pong_failed) return false;
    auto p = Display::open(d->name);
    if (!p) {
      pong_failed = true;
      return false;
    }
    pong.emplace(std::move(*p));
    return true;
  }

  bool wait_pong(detail::DisplayImpl& p, Atom protocols, Atom ping, long serial) {
    const auto deadline = std::chrono::steady_clock::now() + kPongTimeout;
    XEvent ev;
    for (;;) {
      while (XPending(p.dpy) > 0) {
        XNextEvent(p.dpy, &ev);
        if (ev.type == ClientMessage && ev.xclient.message_type == protocols &&
            ev.xclient.format == 32 && static_cast<Atom>(ev.xclient.data.l[0]) == ping &&
            ev.xclient.data.l[1] == serial) {
          return true;
        }
      }
      if (p.lost) return false;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd pfd{ConnectionNumber(p.dpy), POLLIN, 0};
      ::poll(&pfd, 1, static_cast<int>(left.count()));
    }
  }

  // The top-level window of the client that receives key events now, and whether it lists
  // _NET_WM_PING in WM_PROTOCOLS (itself or, under a reparenting window manager, a child);
  // window 0 when nobody has the focus.
  struct PingTarget {
    ::Window window = 0;
    bool pingable = false;
  };
  PingTarget ping_target() {
    ::Window focus = 0;
    int revert = 0;
    XGetInputFocus(d->dpy, &focus, &revert);
    if (focus == PointerRoot) {
      ::Window r = 0, child = 0;
      int rx = 0, ry = 0, wx = 0, wy = 0;
      unsigned mask = 0;
      XQueryPointer(d->dpy, d->root, &r, &child, &rx, &ry, &wx, &wy, &mask);
      focus = child;
    }
    if (focus == 0 || focus == d->root) return {};
    ::Window top = focus;
    for (int depth = 0; depth < 64; ++depth) {
      ::Window r = 0, parent = 0, *kids = nullptr;
      unsigned n = 0;
      if (!XQueryTree(d->dpy, top, &r, &parent, &kids, &n)) return {};
      if (kids != nullptr) XFree(kids);
      if (parent == d->root || parent == 0) break;
      top = parent;
    }
    if (pingable(top)) return {top, true};
    ::Window r = 0, parent = 0, *kids = nullptr;
    unsigned n = 0;
    PingTarget found{top, false};
    if (XQueryTree(d->dpy, top, &r, &parent, &kids, &n) && kids != nullptr) {
      for (unsigned i = 0; i < n; ++i) {
        if (pingable(kids[i])) {
          found = {kids[i], true};
          break;
        }
      }
      XFree(kids);
    }
    return found;
  }

  bool pingable(::Window w) {
    Atom* protocols = nullptr;
    int n = 0;
    if (!XGetWMProtocols(d->dpy, w, &protocols, &n)) return false;
    const Atom ping = XInternAtom(d->dpy, "_NET_WM_PING", False);
    const bool yes = std::find(protocols, protocols + n, ping) != protocols + n;
    XFree(protocols);
    return yes;
  }

  // Before pressing `keycodes`: a keycode remapped since the last settle() must be known to the
  // client first, and a borrowed one pressed now must not be remapped before the next.
  void before_press(const std::vector<int>& keycodes) {
    if (remapped) settle();
    for (Spare& s : spares) {
      if (std::find(keycodes.begin(), keycodes.end(), s.keycode) != keycodes.end()) {
        s.in_flight = true;
      }
    }
  }

  KeySym sym_at(int kc, int level) const {
    return map[static_cast<size_t>(kc - min_kc) * per + level];
  }

  void drain_mapping_notify() {
    // Our own mapping changes notify us too; nothing else would consume these.
    XEvent ev;
    while (XCheckTypedEvent(d->dpy, MappingNotify, &ev)) XRefreshKeyboardMapping(&ev.xmapping);
  }

  Result<void> refresh() {
    if (auto a = d->check_alive(); !a) return a;
    XDisplayKeycodes(d->dpy, &min_kc, &max_kc);
    const int count = max_kc - min_kc + 1;
    KeySym* syms = XGetKeyboardMapping(d->dpy, static_cast<KeyCode>(min_kc), count, &per);
    if (syms == nullptr || per < 1) {
      if (syms != nullptr) XFree(syms);
      return make_error(Errc::kInternal, "keymap_failed", "XGetKeyboardMapping failed");
    }
    map.assign(syms, syms + static_cast<size_t>(count) * per);
    XFree(syms);
    is_modifier.fill(false);
    is_shift.fill(false);
    numlock_mask = 0;
    if (XModifierKeymap* mm = XGetModifierMapping(d->dpy)) {
      for (int i = 0; i < 8 * mm->max_keypermod; ++i) {
        const int kc = mm->modifiermap[i];
        if (kc == 0) continue;
        is_modifier[kc] = true;
        const int mod = i / mm->max_keypermod;
        if (mod == ShiftMapIndex) is_shift[kc] = true;
        if (kc >= min_kc && kc <= max_kc && sym_at(kc, 0) == XK_Num_Lock) numlock_mask = 1u << mod;
      }
      XFreeModifiermap(mm);
    }
    // Forget slots someone else remapped, then top the pool up from unused keycodes, highest
    // first (real keyboards rarely use the top of the range).
    std::erase_if(spares, [this](const Spare& s) {
      if (s.sym != NoSymbol) return sym_at(s.keycode, 0) != s.sym;
      return !unused(s.keycode);
    });
    for (int kc = max_kc;
         kc >= min_kc && static_cast<int>(spares.size()) < options.max_spare_keycodes; --kc) {
      if (!unused(kc)) continue;
      if (std::any_of(spares.begin(), spares.end(),
                      [kc](const Spare& s) { return s.keycode == kc; })) {
        continue;
      }
      spares.push_back({kc, NoSymbol, 0});
    }
    return {};
  }

  bool unused(int kc) const {
    if (is_modifier[kc]) return false;
    for (int l = 0; l < per; ++l) {
      if (sym_at(kc, l) != NoSymbol) return false;
    }
    return true;
  }

  // The key carrying `sym` in the current layout: unshifted level first, then shifted (never
  // for modifiers, whose shifted entries are XKB artefacts).
  std::optional<KeyRef> find(KeySym sym, bool allow_shift = true) const {
    for (int level = 0; level < std::min(per, allow_shift ? 2 : 1); ++level) {
      for (int kc = min_kc; kc <= max_kc; ++kc) {
        if (sym_at(kc, level) == sym) return KeyRef{kc, level == 1};
      }
    }
    return std::nullopt;
  }

  // A key for `sym`, borrowing a spare keycode when the layout has none. `pinned` keycodes are
  // down right now and must not be remapped.
  Result<KeyRef> ensure(KeySym sym, const std::vector<int>& pinned) {
    if (auto ref = find(sym, !is_modifier_keysym(static_cast<Keysym>(sym)))) {
      for (Spare& s : spares) {
        if (s.keycode == ref->keycode) s.last_used = ++tick;
      }
      return *ref;
    }
    auto is_pinned = [&](int kc) {
      return std::find(pinned.begin(), pinned.end(), kc) != pinned.end() ||
             std::any_of(held_keys.begin(), held_keys.end(),
                         [kc](const auto& h) { return h.second == kc; });
    };
    Spare* slot = nullptr;
    for (Spare& s : spares) {
      if (is_pinned(s.keycode)) continue;
      if (slot == nullptr || (s.sym == NoSymbol && slot->sym != NoSymbol) ||
          ((s.sym == NoSymbol) == (slot->sym == NoSymbol) && s.last_used < slot->last_used)) {
        slot = &s;
      }
    }
    if (slot == nullptr) {
      return make_error(Errc::kUnavailable, "no_spare_keycode",
                        "the keyboard layout lacks this character and no keycode is free");
    }
    if (slot->in_flight) settle();  // its last press must be decoded with its old mapping
    // Both levels carry the symbol, so Shift state cannot change what it types.
    KeySym pair[2] = {sym, sym};
    XChangeKeyboardMapping(d->dpy, slot->keycode, 2, pair, 1);
    // Synced so the server has the new mapping before any key event that relies on it.
    if (auto s = d->sync("XChangeKeyboardMapping"); !s) return s.error();
    for (int l = 0; l < per; ++l) {
      map[static_cast<size_t>(slot->keycode - min_kc) * per + l] = l < 2 ? sym : NoSymbol;
    }
    slot->sym = sym;
    slot->last_used = ++tick;
    remapped = true;
    drain_mapping_notify();
    return KeyRef{slot->keycode, false};
  }

  // Maps the characters from t[from] on that the layout lacks onto borrowed keycodes, as many
  // as fit without remapping one that this stretch of text needs, so that one settle() covers
  // the stretch. Returns where the stretch ends (past `from`).
  Result<size_t> map_ahead(const std::u32string& t, size_t from, std::vector<int> pinned) {
    size_t i = from;
    for (; i < t.size(); ++i) {
      const KeySym ks = keysym_for_char(t[i]);
      if (auto ref = find(ks)) {
        if (std::any_of(spares.begin(), spares.end(),
                        [&](const Spare& s) { return s.keycode == ref->keycode; })) {
          pinned.push_back(ref->keycode);
        }
        continue;
      }
      auto ref = ensure(ks, pinned);
      if (!ref) {
        if (i > from) break;  // the rest waits for the next stretch
        return ref.error();
      }
      pinned.push_back(ref->keycode);
    }
    return std::max(i, from + 1);
  }

  // The key that reaches a keysym's shifted level.
  Result<int> shift_keycode() const {
    auto shift = find(XK_Shift_L, false);
    if (!shift) shift = find(XK_Shift_R, false);
    if (!shift) return make_error(Errc::kUnavailable, "no_shift_key", "layout has no Shift key");
    return shift->keycode;
  }

  // Shift keys to press (`add`) or let go of (`lift`) around pressing `ref` so that it types
  // `sym` in the server's current modifier state; see key_down_exact.
  struct ShiftFix {
    int add = 0;
    std::vector<int> lift;
  };
  Result<ShiftFix> shift_fix(KeySym sym, const KeyRef& ref) const {
    ShiftFix fix;
    const KeySym s0 = sym_at(ref.keycode, 0);
    const KeySym s1 = per > 1 ? sym_at(ref.keycode, 1) : NoSymbol;
    if (s1 == NoSymbol || s1 == s0) return fix;  // Shift changes nothing (borrowed keycodes too)
    ::Window root = 0, child = 0;
    int rx = 0, ry = 0, wx = 0, wy = 0;
    unsigned mask = 0;
    XQueryPointer(d->dpy, d->root, &root, &child, &rx, &ry, &wx, &wy, &mask);
    const bool shift_down = (mask & ShiftMask) != 0;
    // The level the key would type now: Caps Lock flips letters, Num Lock the keypad.
    bool shifted = shift_down;
    KeySym lower = NoSymbol, upper = NoSymbol;
    XConvertCase(s0, &lower, &upper);
    if ((mask & LockMask) != 0 && lower == s0 && upper == s1) shifted = !shifted;
    if ((mask & numlock_mask) != 0 && IsKeypadKey(s1)) shifted = !shifted;
    if (shifted == ref.shift) return fix;
    if (!shift_down) {
      auto kc = shift_keycode();
      if (!kc) return kc.error();
      fix.add = *kc;
      return fix;
    }
    // Shift is down but would change the key: lift it only for a printable character with no
    // other modifier down, which can only mean the character itself.
    const unsigned others =
        (ControlMask | Mod1Mask | Mod2Mask | Mod3Mask | Mod4Mask | Mod5Mask) & ~numlock_mask;
    const char32_t cp = char_for_keysym(static_cast<Keysym>(sym));
    if (cp < 0x20 || (mask & others) != 0) return fix;
    char keys[32] = {};
    XQueryKeymap(d->dpy, keys);
    for (int kc = 8; kc < 256; ++kc) {
      if ((keys[kc / 8] & (1 << (kc % 8))) != 0 && is_shift[kc]) fix.lift.push_back(kc);
    }
    return fix;
  }

  Result<void> type_one(Guard& g, char32_t cp) {
    const Keysym ks = keysym_for_char(cp);
    auto ref = ensure(ks, g.down());
    if (!ref) return ref.error();
    before_press({ref->keycode});
    int shift_kc = 0;
    if (ref->shift) {
      auto shift = shift_keycode();
      if (!shift) return shift.error();
      shift_kc = *shift;
      g.press(shift_kc);
    }
    g.press(ref->keycode);
    g.release(ref->keycode);
    if (shift_kc != 0) g.release(shift_kc);
    return {};
  }

  // Runs `body` with a Guard, restores, syncs; the first error wins.
  template <typename F>
  Result<void> with_guard(const char* what, F&& body) {
    if (auto a = d->check_alive(); !a) return a;
    Result<void> r;
    {
      Guard g(*this);
      r = body(g);
      g.restore();
    }
    auto s = d->sync(what);
    if (!r) return r;
    return s;
  }
};

Result<Input> Input::create(Display& display, InputOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->d = &display.impl();
  impl->options = options;
  detail::DisplayImpl& d = *impl->d;
  if (auto a = d.check_alive(); !a) return a.error();
  int event_base = 0, error_base = 0, major = 0, minor = 0;
  if (!XTestQueryExtension(d.dpy, &event_base, &error_base, &major, &minor)) {
    return make_error(Errc::kUnavailable, "no_xtest", "the X server lacks XTEST");
  }
  // Our fake events must not be held back while another client holds a server grab.
  XTestGrabControl(d.dpy, True);
  if (auto r = impl->refresh(); !r) return r.error();
  return Input(std::move(impl));
}

Input::Input(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Input::Input(Input&&) noexcept = default;
Input& Input::operator=(Input&&) noexcept = default;
Input::~Input() = default;

Result<void> Input::move(Point p) {
  detail::DisplayImpl& d = *impl_->d;
  if (auto a = d.check_alive(); !a) return a;
  if (p.x < 0 || p.y < 0 || p.x >= d.size.width || p.y >= d.size.height) {
    return make_error(Errc::kInvalidArgument, "bad_point", "point lies outside the screen");
  }
  XTestFakeMotionEvent(d.dpy, d.screen, p.x, p.y, CurrentTime);
  return d.sync("pointer move");
}

Result<Point> Input::pointer() {
  detail::DisplayImpl& d = *impl_->d;
  if (auto a = d.check_alive(); !a) return a.error();
  ::Window root = 0, child = 0;
  int rx = 0, ry = 0, wx = 0, wy = 0;
  unsigned mask = 0;
  XQueryPointer(d.dpy, d.root, &root, &child, &rx, &ry, &wx, &wy, &mask);
  if (auto a = d.check_alive(); !a) return a.error();
  return Point{rx, ry};
}

Result<void> Input::button_down(Button b) {
  detail::DisplayImpl& d = *impl_->d;
  if (auto a = d.check_alive(); !a) return a;
  XTestFakeButtonEvent(d.dpy, static_cast<unsigned>(b), True, CurrentTime);
  impl_->held_buttons.push_back(static_cast<unsigned>(b));
  return d.sync("button down");
}

Result<void> Input::button_up(Button b) {
  detail::DisplayImpl& d = *impl_->d;
  if (auto a = d.check_alive(); !a) return a;
  XTestFakeButtonEvent(d.dpy, static_cast<unsigned>(b), False, CurrentTime);
  auto& held = impl_->held_buttons;
  if (auto it = std::find(held.begin(), held.end(), static_cast<unsigned>(b)); it != held.end()) {
    held.erase(it);
  }
  return d.sync("button up");
}

namespace {
// Well under every desktop's double-click interval (Chromium: 500 ms), and more than the 1 ms
// granularity of X timestamps.
constexpr unsigned long kRepeatGapMs = 8;
}  // namespace

Result<void> Input::click(Button b, int count) {
  detail::DisplayImpl& d = *impl_->d;
  if (auto a = d.check_alive(); !a) return a;
  if (count < 1 || count > 3) {
    return make_error(Errc::kInvalidArgument, "bad_click_count", "click count must be 1..3");
  }
  for (int i = 0; i < count; ++i) {
    // Clients count repeated clicks by the X timestamps of the presses, and Chromium takes two
    // presses in the same millisecond for one event seen twice: the server holds each repeat
    // back a little (XTest's delay) so that every press gets its own time.
    XTestFakeButtonEvent(d.dpy, static_cast<unsigned>(b), True,
                         i == 0 ? CurrentTime : kRepeatGapMs);
    XTestFakeButtonEvent(d.dpy, static_cast<unsigned>(b), False, CurrentTime);
  }
  return d.sync("click");
}

Result<void> Input::scroll(ScrollDirection direction, int notches) {
  detail::DisplayImpl& d = *impl_->d;
  if (auto a = d.check_alive(); !a) return a;
  if (notches < 0 || notches > 100) {
    return make_error(Errc::kInvalidArgument, "bad_scroll", "scroll notches must be 0..100");
  }
  const unsigned button = 4 + static_cast<unsigned>(direction);
  for (int i = 0; i < notches; ++i) {
    XTestFakeButtonEvent(d.dpy, button, True, CurrentTime);
    XTestFakeButtonEvent(d.dpy, button, False, CurrentTime);
  }
  return d.sync("scroll");
}

Result<void> Input::key_down(Keysym keysym) {
  if (auto r = impl_->refresh(); !r) return r;
  std::vector<int> none;
  auto ref = impl_->ensure(keysym, none);
  if (!ref) return ref.error();
  impl_->before_press({ref->keycode});
  XTestFakeKeyEvent(impl_->d->dpy, ref->keycode, True, CurrentTime);
  impl_->held_keys.emplace_back(keysym, ref->keycode);
  return impl_->d->sync("key down");
}

Result<void> Input::key_down_exact(Keysym keysym) {
  if (is_modifier_keysym(keysym)) return key_down(keysym);
  if (auto r = impl_->refresh(); !r) return r;
  std::vector<int> none;
  auto ref = impl_->ensure(keysym, none);
  if (!ref) return ref.error();
  impl_->before_press({ref->keycode});
  auto fix = impl_->shift_fix(keysym, *ref);
  if (!fix) return fix.error();
  ::Display* dpy = impl_->d->dpy;
  // The server drops a second press of a key that is down: a client's repeat (another press
  // before the release) goes in as a release and a new press.
  auto& held = impl_->held_keys;
  if (auto it = std::find_if(held.begin(), held.end(),
                             [&](const auto& h) { return h.second == ref->keycode; });
      it != held.end()) {
    XTestFakeKeyEvent(dpy, ref->keycode, False, CurrentTime);
    held.erase(it);
  }
  if (fix->add != 0) XTestFakeKeyEvent(dpy, fix->add, True, CurrentTime);
  for (int kc : fix->lift) XTestFakeKeyEvent(dpy, kc, False, CurrentTime);
  XTestFakeKeyEvent(dpy, ref->keycode, True, CurrentTime);
  held.emplace_back(keysym, ref->keycode);
  // Shift goes back as it was right after the press: the key itself stays down.
  if (fix->add != 0) XTestFakeKeyEvent(dpy, fix->add, False, CurrentTime);
  for (int kc : fix->lift) XTestFakeKeyEvent(dpy, kc, True, CurrentTime);
  return impl_->d->sync("key down");
}

Result<void> Input::key_up(Keysym keysym) {
  if (auto r = impl_->refresh(); !r) return r;
  auto& held = impl_->held_keys;
  int kc = 0;
  if (auto it = std::find_if(held.rbegin(), held.rend(),
                             [keysym](const auto& h) { return h.first == keysym; });
      it != held.rend()) {
    kc = it->second;
    held.erase(std::next(it).base());
  } else if (auto ref = impl_->find(keysym)) {
    kc = ref->keycode;  // down from elsewhere (another client, an earlier Input): let it go
  } else {
    return {};
  }
  XTestFakeKeyEvent(impl_->d->dpy, kc, False, CurrentTime);
  return impl_->d->sync("key up");
}

Result<void> Input::press(const KeyChord& chord) {
  if (chord.keys.empty()) return make_error(Errc::kInvalidArgument, "bad_key", "empty chord");
  if (auto r = impl_->refresh(); !r) return r;
  // Resolve every key before pressing any, so an unknown key presses nothing.
  std::vector<int> order;
  const bool has_shift = std::any_of(chord.keys.begin(), chord.keys.end(),
                                     [](Keysym k) { return k == XK_Shift_L || k == XK_Shift_R; });
  for (Keysym ks : chord.keys) {
    if (ks == 0) return make_error(Errc::kInvalidArgument, "bad_key", "empty keysym in chord");
    auto ref = impl_->ensure(ks, order);
    if (!ref) return ref.error();
    if (ref->shift && !has_shift && !is_modifier_keysym(ks)) {
      auto shift = impl_->shift_keycode();
      if (shift && std::find(order.begin(), order.end(), *shift) == order.end()) {
        order.push_back(*shift);
      }
    }
    order.push_back(ref->keycode);
  }
  return impl_->with_guard("key chord", [&](Impl::Guard& g) -> Result<void> {
    impl_->before_press(order);
    for (int kc : order) g.press(kc);
    for (auto it = order.rbegin(); it != order.rend(); ++it) g.release(*it);
    return {};
  });
}

Result<void> Input::type_char(char32_t cp) {
  if (keysym_for_char(cp) == 0) {
    return make_error(Errc::kInvalidArgument, "bad_text", "character cannot be typed");
  }
  if (auto r = impl_->refresh(); !r) return r;
  return impl_->with_guard("type", [&](Impl::Guard& g) -> Result<void> {
    g.lift_modifiers();
    return impl_->type_one(g, cp);
  });
}

Result<void> Input::type_text(std::string_view utf8, std::chrono::microseconds per_key_delay) {
  auto text = decode_utf8(utf8);
  if (!text) return text.error();
  for (char32_t cp : *text) {
    if (keysym_for_char(cp) == 0) {
      return make_error(Errc::kInvalidArgument, "bad_text",
                        "text holds a control character that cannot be typed");
    }
  }
  if (text->empty()) return {};
  if (auto r = impl_->refresh(); !r) return r;
  return impl_->with_guard("type", [&](Impl::Guard& g) -> Result<void> {
    g.lift_modifiers();
    const std::u32string& t = *text;
    size_t mapped_to = 0;
    for (size_t i = 0; i < t.size(); ++i) {
      if (i == mapped_to) {
        auto end = impl_->map_ahead(t, i, g.down());
        if (!end) return end.error();
        mapped_to = *end;
      }
      if (t[i] == U'\r' && i + 1 < t.size() && t[i + 1] == U'\n') continue;  // "\r\n": one Return
      if (auto r = impl_->type_one(g, t[i]); !r) return r;
      if (per_key_delay.count() > 0 && i + 1 < t.size()) {
        XFlush(impl_->d->dpy);
        std::this_thread::sleep_for(per_key_delay);
      }
    }
    return {};
  });
}

Result<void> Input::release_all() {
  detail::DisplayImpl& d = *impl_->d;
  if (auto a = d.check_alive(); !a) return a;
  for (auto it = impl_->held_keys.rbegin(); it != impl_->held_keys.rend(); ++it) {
    XTestFakeKeyEvent(d.dpy, it->second, False, CurrentTime);
  }
  impl_->held_keys.clear();
  for (unsigned b : impl_->held_buttons) XTestFakeButtonEvent(d.dpy, b, False, CurrentTime);
  impl_->held_buttons.clear();
  return d.sync("release all");
}

}  // namespace cabin::vnc
