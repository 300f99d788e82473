// XTest input against a real Xvfb: typed text, chords and buttons as a client receives them.
#include "vnc/input.h"

// clang-format off
#include <catch2/catch.hpp>  // before Xlib, whose macros (None, Always) break it
// clang-format on

#include <X11/Xlib.h>
#include <X11/keysym.h>

#include <X11/Xatom.h>
#include <poll.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/unit/vnc/xvfb_fixture.h"
#include "vnc/display.h"
#include "vnc/keys.h"

using namespace cabin::vnc;
using cabin::vnc::testing::Client;
using cabin::vnc::testing::Xvfb;

namespace {

struct Keyed {
  char32_t ch = 0;
  KeySym keysym = NoSymbol;
  KeySym base = NoSymbol;  // the key's unshifted symbol
  unsigned state = 0;
  int keycode = 0;
};

// The server's keysym for `keycode` at `level` (falling back to the unshifted one).
KeySym server_keysym(::Display* dpy, int keycode, int level) {
  int per = 0;
  KeySym* syms = XGetKeyboardMapping(dpy, static_cast<KeyCode>(keycode), 1, &per);
  REQUIRE(syms != nullptr);
  KeySym ks = level < per ? syms[level] : NoSymbol;
  if (ks == NoSymbol) ks = syms[0];
  XFree(syms);
  return ks;
}

// The next KeyPress that is not a modifier key, decoded through the server's keyboard mapping
// when it is read: the level chosen by Shift in the event's state. That is the mapping at event
// time, because the tests never let a borrowed keycode be remapped before its event is read.
// (Xlib's own XKB cache is not used: it is refreshed lazily and can lag behind remaps.)
std::optional<Keyed> next_key(Client& c) {
  XEvent ev;
  for (;;) {
    if (!c.next_event(ev, [](const XEvent& e) { return e.type == KeyPress; })) {
      return std::nullopt;
    }
    const int kc = static_cast<int>(ev.xkey.keycode);
    const int level = (ev.xkey.state & ShiftMask) != 0 ? 1 : 0;
    const KeySym ks = server_keysym(c.dpy(), kc, level);
    if (is_modifier_keysym(static_cast<Keysym>(ks))) continue;
    return Keyed{char_for_keysym(static_cast<Keysym>(ks)), ks, server_keysym(c.dpy(), kc, 0),
                 ev.xkey.state, kc};
  }
}

std::u32string read_typed(Client& c, size_t n) {
  std::u32string out;
  while (out.size() < n) {
    auto k = next_key(c);
    if (!k) break;
    out.push_back(k->ch);
  }
  return out;
}

struct Fixture {
  Xvfb xvfb{640, 480};
  Client client{xvfb.name()};
  ::Window win = client.make_input_window();
  cabin::vnc::Display display = std::move(cabin::vnc::Display::open(xvfb.name()).value());
};

}  // namespace

TEST_CASE("typed Unicode text arrives exactly", "[input]") {
  Fixture f;
  auto in = Input::create(f.display);
  REQUIRE(in.ok());
  const std::string text =
      "Hello, World! ~`|{}<>?\"' Grüße ß äöü ÄÖÜ €ñ łę 日本語 🙂 Ωλ\tend\n"
      "second line\r\nthird";
  REQUIRE(in->type_text(text).ok());
  std::u32string want =
      U"Hello, World! ~`|{}<>?\"' Grüße ß äöü ÄÖÜ €ñ łę 日本語 🙂 Ωλ\tend\n"
      U"second line\nthird";
  CHECK(read_typed(f.client, want.size()) == want);
  CHECK(f.client.no_key_down());
  CHECK((f.client.pointer_mask() & (ShiftMask | ControlMask | Mod1Mask | LockMask)) == 0);
}

TEST_CASE("borrowed keycodes are recycled least-recently-used and given back", "[input]") {
  Fixture f;
  std::vector<int> used;
  {
    auto in = Input::create(f.display, {.max_spare_keycodes = 2});
    REQUIRE(in.ok());
    // One character at a time, read back before the next, so a recycled keycode is checked
    // against the mapping it was typed with.
    for (char32_t ch : std::u32string(U"日本語日本é")) {
      REQUIRE(in->type_char(ch).ok());
      auto k = next_key(f.client);
      REQUIRE(k.has_value());
      INFO("want " << static_cast<uint32_t>(ch) << " got " << static_cast<uint32_t>(k->ch)
                   << " keycode " << k->keycode);
      CHECK(k->ch == ch);
      used.push_back(k->keycode);
    }
    // Only two distinct keycodes were borrowed ('é' is on no US key either).
    std::vector<int> distinct = used;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    CHECK(distinct.size() == 2);
  }
  // Destroying the Input restores the borrowed keycodes to NoSymbol.
  int per = 0;
  for (int kc : used) {
    KeySym* syms = XGetKeyboardMapping(f.client.dpy(), kc, 1, &per);
    REQUIRE(syms != nullptr);
    for (int i = 0; i < per; ++i) CHECK(syms[i] == NoSymbol);
    XFree(syms);
  }
}

// A client that behaves as Chromium does: it reads its events late, decodes each key with the
// server's mapping as it is when it reads the key, and answers _NET_WM_PING once it has read
// everything queued before the ping. Runs on its own thread with its own connection.
class LaggingClient {
 public:
  LaggingClient(const std::string& display, std::chrono::milliseconds lag, bool answer_pings)
      : thread_([this, display, lag, answer_pings] { run(display, lag, answer_pings); }) {
    std::unique_lock lock(mu_);
    REQUIRE(cv_.wait_for(lock, std::chrono::seconds(10), [this] { return ready_; }));
  }
  ~LaggingClient() {
    stop_ = true;
    thread_.join();
  }

  // What it has decoded once it holds `n` characters (or after 10 s).
  std::u32string typed(size_t n) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(10), [&] { return text_.size() >= n; });
    return text_;
  }
  int pings() const { return pings_; }

 private:
  void run(const std::string& name, std::chrono::milliseconds lag, bool answer_pings) {
    ::Display* dpy = XOpenDisplay(name.c_str());
    const ::Window root = DefaultRootWindow(dpy);
    const ::Window win = XCreateSimpleWindow(dpy, root, 0, 0, 200, 200, 0, 0, 0xffffff);
    Atom ping = XInternAtom(dpy, "_NET_WM_PING", False);
    if (answer_pings) XSetWMProtocols(dpy, win, &ping, 1);
    XSelectInput(dpy, win, KeyPressMask | StructureNotifyMask);
    XMapWindow(dpy, win);
    XEvent ev;
    do {
      XNextEvent(dpy, &ev);
    } while (ev.type != MapNotify);
    XSetInputFocus(dpy, win, RevertToPointerRoot, CurrentTime);
    XSync(dpy, False);
    {
      std::lock_guard lock(mu_);
      ready_ = true;
    }
    cv_.notify_all();
    while (!stop_) {
      pollfd p{ConnectionNumber(dpy), POLLIN, 0};
      if (XPending(dpy) == 0 && ::poll(&p, 1, 20) <= 0) continue;
      std::this_thread::sleep_for(lag);
      while (XPending(dpy) > 0) {
        XNextEvent(dpy, &ev);
        if (ev.type == KeyPress) {
          const int kc = static_cast<int>(ev.xkey.keycode);
          const KeySym ks = server_keysym(dpy, kc, (ev.xkey.state & ShiftMask) != 0 ? 1 : 0);
          if (is_modifier_keysym(static_cast<Keysym>(ks))) continue;
          std::lock_guard lock(mu_);
          text_.push_back(char_for_keysym(static_cast<Keysym>(ks)));
          cv_.notify_all();
        } else if (ev.type == ClientMessage && static_cast<Atom>(ev.xclient.data.l[0]) == ping) {
          ++pings_;
          XEvent pong = ev;
          pong.xclient.window = root;
          XSendEvent(dpy, root, False, SubstructureNotifyMask | SubstructureRedirectMask, &pong);
          XFlush(dpy);
        }
      }
    }
    XCloseDisplay(dpy);
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool ready_ = false;
  std::u32string text_;
  std::atomic<int> pings_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST_CASE("a client that reads its keys late decodes each with the mapping it was typed with",
          "[input]") {
  Xvfb xvfb{640, 480};
  auto display = cabin::vnc::Display::open(xvfb.name());
  REQUIRE(display.ok());
  // Two borrowed keycodes for eight characters the layout lacks: each is remapped while the
  // client has not read the press typed with it yet.
  const std::u32string want = U"日本語é中文ß🙂";
  const std::string utf8 = "日本語é中文ß🙂";
  SECTION("a client that answers pings gets every character right") {
    LaggingClient client(xvfb.name(), std::chrono::milliseconds(30), true);
    auto in = Input::create(*display, {.max_spare_keycodes = 2});
    REQUIRE(in.ok());
    REQUIRE(in->type_text(utf8).ok());
    const std::u32string got = client.typed(want.size());
    std::string codes;
    for (char32_t c : got) codes += std::to_string(static_cast<uint32_t>(c)) + " ";
    INFO("typed " << codes);
    CHECK(got == want);
    CHECK(client.pings() > 0);
  }
  SECTION("typing for a client that does not answer goes on") {
    LaggingClient client(xvfb.name(), std::chrono::milliseconds(0), false);
    auto in = Input::create(*display, {.max_spare_keycodes = 2});
    REQUIRE(in.ok());
    REQUIRE(in->type_text(utf8).ok());
    CHECK(client.typed(want.size()).size() == want.size());
    CHECK(client.pings() == 0);
  }
}

TEST_CASE("a process's window counts as shown once it is mapped", "[input]") {
  Xvfb xvfb{320, 240};
  auto display = cabin::vnc::Display::open(xvfb.name());
  REQUIRE(display.ok());
  Client c(xvfb.name());
  const ::Window win = XCreateSimpleWindow(c.dpy(), c.root(), 0, 0, 100, 100, 0, 0, 0);
  const unsigned long pid = 4242;
  XChangeProperty(c.dpy(), win, XInternAtom(c.dpy(), "_NET_WM_PID", False), XA_CARDINAL, 32,
                  PropModeReplace, reinterpret_cast<const unsigned char*>(&pid), 1);
  XSelectInput(c.dpy(), win, StructureNotifyMask);
  c.sync();
  CHECK(display->has_viewable_window(4242).value() == false);  // created, not mapped
  XMapWindow(c.dpy(), win);
  XEvent ev;
  REQUIRE(c.next_event(ev, [](const XEvent& e) { return e.type == MapNotify; }));
  CHECK(display->has_viewable_window(4242).value() == true);
  CHECK(display->has_viewable_window(4243).value() == false);  // another process's
  XDestroyWindow(c.dpy(), win);
  c.sync();
  CHECK(display->has_viewable_window(4242).value() == false);
}

TEST_CASE("chords set modifier state on the key event", "[input]") {
  Fixture f;
  auto in = Input::create(f.display);
  REQUIRE(in.ok());

  REQUIRE(in->press(*parse_chord("ctrl+shift+t")).ok());
  auto k = next_key(f.client);
  REQUIRE(k);
  CHECK(k->base == XK_t);
  CHECK((k->state & (ControlMask | ShiftMask)) == (ControlMask | ShiftMask));

  const std::vector<std::string> ctrl_l = {"CTRL", "L"};
  REQUIRE(in->press(*parse_key_names(ctrl_l)).ok());
  k = next_key(f.client);
  REQUIRE(k);
  CHECK(k->keysym == XK_l);
  CHECK((k->state & ControlMask) != 0);
  CHECK((k->state & ShiftMask) == 0);

  REQUIRE(in->press(*parse_chord("alt+F4")).ok());
  k = next_key(f.client);
  REQUIRE(k);
  CHECK(k->keysym == XK_F4);
  CHECK((k->state & Mod1Mask) != 0);

  REQUIRE(in->press(*parse_chord("super+l")).ok());
  k = next_key(f.client);
  REQUIRE(k);
  CHECK(k->keysym == XK_l);
  CHECK((k->state & Mod4Mask) != 0);

  // '+' sits on Shift+'=' on a US layout: Shift is added for it.
  REQUIRE(in->press(*parse_chord("ctrl+plus")).ok());
  k = next_key(f.client);
  REQUIRE(k);
  CHECK(k->keysym == XK_plus);
  CHECK((k->state & (ControlMask | ShiftMask)) == (ControlMask | ShiftMask));

  // A key the layout lacks is borrowed for the chord too.
  REQUIRE(in->press(*parse_chord("ctrl+ä")).ok());
  k = next_key(f.client);
  REQUIRE(k);
  CHECK(k->ch == U'ä');
  CHECK((k->state & ControlMask) != 0);

  REQUIRE(in->press(*parse_chord("Return")).ok());
  k = next_key(f.client);
  REQUIRE(k);
  CHECK(k->keysym == XK_Return);
  CHECK((k->state & (ControlMask | ShiftMask | Mod1Mask | Mod4Mask)) == 0);

  CHECK(f.client.no_key_down());
}

TEST_CASE("typing lifts held modifiers and Caps Lock, then puts them back", "[input]") {
  Fixture f;
  auto in = Input::create(f.display);
  REQUIRE(in.ok());

  REQUIRE(in->key_down(XK_Shift_L).ok());
  CHECK((f.client.pointer_mask() & ShiftMask) != 0);
  REQUIRE(in->type_text("aB1!").ok());
  CHECK(read_typed(f.client, 4) == U"aB1!");
  CHECK((f.client.pointer_mask() & ShiftMask) != 0);  // still held, as the caller asked
  REQUIRE(in->key_up(XK_Shift_L).ok());
  CHECK(f.client.no_key_down());

  REQUIRE(in->press(*parse_chord("Caps_Lock")).ok());
  CHECK((f.client.pointer_mask() & LockMask) != 0);
  REQUIRE(in->type_text("xY").ok());
  CHECK(read_typed(f.client, 2) == U"xY");
  CHECK((f.client.pointer_mask() & LockMask) != 0);  // restored
  REQUIRE(in->press(*parse_chord("Caps_Lock")).ok());
  CHECK((f.client.pointer_mask() & LockMask) == 0);

  // Held keys are let go by release_all.
  REQUIRE(in->key_down(XK_Control_L).ok());
  REQUIRE(in->key_down(XK_a).ok());
  CHECK_FALSE(f.client.no_key_down());
  REQUIRE(in->release_all().ok());
  CHECK(f.client.no_key_down());
}

TEST_CASE("key_down_exact types what the keysym says, whatever Shift and the locks do", "[input]") {
  Fixture f;
  auto in = Input::create(f.display);
  REQUIRE(in.ok());
  auto tap = [&](Keysym ks) {
    REQUIRE(in->key_down_exact(ks).ok());
    REQUIRE(in->key_up(ks).ok());
  };

  // Shifted symbols without Shift from the caller get Shift for their press only.
  for (Keysym ks : {Keysym{'H'}, Keysym{'i'}, Keysym{'!'}, Keysym{' '}, Keysym{'A'}}) tap(ks);
  CHECK(read_typed(f.client, 5) == U"Hi! A");
  CHECK(f.client.no_key_down());
  CHECK((f.client.pointer_mask() & ShiftMask) == 0);

  // The caller's Shift: shifted symbols type once; a letter on the unshifted level has Shift
  // lifted around it; Shift is down again afterwards.
  REQUIRE(in->key_down(XK_Shift_L).ok());
  for (Keysym ks : {Keysym{'B'}, Keysym{'@'}, Keysym{'c'}}) tap(ks);
  CHECK(read_typed(f.client, 3) == U"B@c");
  CHECK((f.client.pointer_mask() & ShiftMask) != 0);
  // Shift stays for keys that are not characters (Shift+Tab) and for shortcuts.
  tap(XK_Tab);
  auto k = next_key(f.client);
  REQUIRE(k);
  CHECK(k->base == XK_Tab);
  CHECK((k->state & ShiftMask) != 0);
  REQUIRE(in->key_down(XK_Control_L).ok());
  tap(XK_t);
  k = next_key(f.client);
  REQUIRE(k);
  CHECK(k->base == XK_t);
  CHECK((k->state & (ControlMask | ShiftMask)) == (ControlMask | ShiftMask));
  REQUIRE(in->key_up(XK_Control_L).ok());
  REQUIRE(in->key_up(XK_Shift_L).ok());
  CHECK(f.client.no_key_down());

  // Overlapping keys and a repeated press each get their own Shift state.
  REQUIRE(in->key_down_exact('D').ok());
  REQUIRE(in->key_down_exact('e').ok());
  REQUIRE(in->key_up('D').ok());
  REQUIRE(in->key_up('e').ok());
  REQUIRE(in->key_down_exact('F').ok());
  REQUIRE(in->key_down_exact('F').ok());
  CHECK_FALSE(f.client.no_key_down());  // the key itself stays down until key_up
  CHECK((f.client.pointer_mask() & ShiftMask) == 0);
  REQUIRE(in->key_up('F').ok());
  CHECK(read_typed(f.client, 4) == U"DeFF");
  CHECK(f.client.no_key_down());

  // Caps Lock on: a lower-case letter gets Shift (which undoes the lock), upper case does not.
  REQUIRE(in->press(*parse_chord("Caps_Lock")).ok());
  tap(XK_a);
  k = next_key(f.client);
  REQUIRE(k);
  CHECK(k->base == XK_a);
  CHECK((k->state & (ShiftMask | LockMask)) == (ShiftMask | LockMask));
  tap(XK_A);
  k = next_key(f.client);
  REQUIRE(k);
  CHECK(k->base == XK_a);
  CHECK((k->state & (ShiftMask | LockMask)) == LockMask);
  tap('1');  // the lock leaves digits alone
  CHECK(read_typed(f.client, 1) == U"1");
  REQUIRE(in->press(*parse_chord("Caps_Lock")).ok());

  // The keypad: KP_1 shares its key with KP_End; Num Lock decides whether Shift is needed.
  tap(XK_KP_1);
  k = next_key(f.client);
  REQUIRE(k);
  CHECK(k->keysym == XK_KP_1);
  REQUIRE(in->press(*parse_chord("Num_Lock")).ok());
  tap(XK_KP_1);
  k = next_key(f.client);
  REQUIRE(k);
  CHECK(k->base == XK_KP_End);
  CHECK((k->state & ShiftMask) == 0);
  REQUIRE(in->press(*parse_chord("Num_Lock")).ok());

  // A character the layout lacks still gets a borrowed keycode.
  tap(0x1000416);
  CHECK(read_typed(f.client, 1) == U"\u0416");
  CHECK(f.client.no_key_down());
  CHECK((f.client.pointer_mask() & (ShiftMask | LockMask)) == 0);
}

TEST_CASE("failed calls leave nothing down", "[input]") {
  Fixture f;
  SECTION("bad text types nothing") {
    auto in = Input::create(f.display);
    REQUIRE(in.ok());
    CHECK(in->type_text("ab\x01"
                        "c")
              .error()
              .code == "bad_text");
    CHECK(in->type_text("ab\xC3").error().code == "bad_utf8");
    CHECK_FALSE(in->type_char(0x7F).ok());
    REQUIRE(in->type_text("z").ok());
    CHECK(read_typed(f.client, 1) == U"z");  // the first key to arrive is the marker
  }
  SECTION("running out of keycodes midway releases everything") {
    auto in = Input::create(f.display, {.max_spare_keycodes = 0});
    REQUIRE(in.ok());
    REQUIRE(in->key_down(XK_Control_L).ok());
    auto r = in->type_text("aA日");
    CHECK(r.error().code == "no_spare_keycode");
    CHECK(read_typed(f.client, 2) == U"aA");
    REQUIRE(in->key_up(XK_Control_L).ok());
    CHECK(f.client.no_key_down());
    CHECK_FALSE(in->press(KeyChord{{XK_Control_L, 0x010065E5}}).ok());
    CHECK(f.client.no_key_down());
    CHECK((f.client.pointer_mask() & (ShiftMask | ControlMask)) == 0);
  }
}

TEST_CASE("pointer moves and buttons land at exact coordinates", "[input]") {
  Fixture f;
  auto in = Input::create(f.display);
  REQUIRE(in.ok());
  XEvent ev;
  auto next_button = [&](int type) {
    REQUIRE(f.client.next_event(ev, [type](const XEvent& e) { return e.type == type; }));
    return ev.xbutton;
  };

  REQUIRE(in->move({123, 45}).ok());
  int x = 0, y = 0;
  f.client.pointer_mask(&x, &y);
  CHECK(x == 123);
  CHECK(y == 45);
  REQUIRE(in->click(Button::kLeft).ok());
  auto b = next_button(ButtonPress);
  CHECK(b.button == 1);
  CHECK(b.x_root == 123);
  CHECK(b.y_root == 45);
  CHECK(next_button(ButtonRelease).button == 1);

  REQUIRE(in->move({639, 479}).ok());
  for (Button btn : {Button::kRight, Button::kMiddle, Button::kBack, Button::kForward}) {
    REQUIRE(in->click(btn).ok());
    b = next_button(ButtonPress);
    CHECK(b.button == static_cast<unsigned>(btn));
    CHECK(b.x_root == 639);
    CHECK(b.y_root == 479);
  }

  REQUIRE(in->move({10, 20}).ok());
  REQUIRE(in->click(Button::kLeft, 2).ok());
  CHECK(next_button(ButtonPress).x_root == 10);
  CHECK(next_button(ButtonPress).y_root == 20);

  // Drag: down, move, up.
  REQUIRE(in->button_down(Button::kLeft).ok());
  CHECK((f.client.pointer_mask() & Button1Mask) != 0);
  REQUIRE(in->move({300, 200}).ok());
  REQUIRE(in->button_up(Button::kLeft).ok());
  b = next_button(ButtonRelease);
  while (b.x_root != 300) b = next_button(ButtonRelease);  // skip the double click's releases
  CHECK(b.y_root == 200);

  const std::pair<ScrollDirection, unsigned> wheel[] = {{ScrollDirection::kUp, 4},
                                                        {ScrollDirection::kDown, 5},
                                                        {ScrollDirection::kLeft, 6},
                                                        {ScrollDirection::kRight, 7}};
  for (auto [dir, button] : wheel) {
    REQUIRE(in->scroll(dir, 3).ok());
    for (int i = 0; i < 3; ++i) CHECK(next_button(ButtonPress).button == button);
  }
  CHECK(in->scroll(ScrollDirection::kDown, 101).error().code == "bad_scroll");
  CHECK(in->move({640, 0}).error().code == "bad_point");
  CHECK_FALSE(in->move({-1, 0}).ok());
  CHECK_FALSE(in->click(Button::kLeft, 0).ok());

  CHECK((f.client.pointer_mask() & (Button1Mask | Button2Mask | Button3Mask)) == 0);
  CHECK(f.client.no_key_down());
}
