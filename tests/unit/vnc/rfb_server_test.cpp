// RfbServer against a real Xvfb, through a minimal RFB client written here (Raw encoding only).
#include "vnc/rfb_server.h"

#include <X11/Xatom.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "tests/unit/vnc/xvfb_fixture.h"
#include "vnc/display.h"

using namespace cabin::vnc;
using cabin::vnc::testing::Client;
using cabin::vnc::testing::Xvfb;

namespace {

// A blocking RFB 3.8 client: security None, 32-bit BGRX pixels, Raw rectangles only.
class RfbClient {
 public:
  explicit RfbClient(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    timeval tv{10, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    CHECK(read(12) == "RFB 003.008\n");
    write("RFB 003.008\n");
    const std::string types = read(1);
    const std::string list = read(static_cast<uint8_t>(types[0]));
    REQUIRE(list.find('\x01') != std::string::npos);
    write(std::string("\x01", 1));
    CHECK(u32(read(4), 0) == 0);    // SecurityResult OK
    write(std::string("\x01", 1));  // ClientInit: shared
    const std::string init = read(24);
    width = u16(init, 0);
    height = u16(init, 2);
    read(u32(init, 20));  // desktop name
    // SetPixelFormat: 32 bpp, depth 24, little endian, true colour, r<<16 g<<8 b.
    std::string pf(4, '\0');
    pf += std::string("\x20\x18\x00\x01\x00\xff\x00\xff\x00\xff\x10\x08\x00\x00\x00\x00", 16);
    write(pf);
  }
  ~RfbClient() { ::close(fd_); }

  void set_encodings(const std::vector<int32_t>& encs) {
    std::string m = {'\x02', '\0'};
    put16(m, static_cast<uint16_t>(encs.size()));
    for (int32_t e : encs) put32(m, static_cast<uint32_t>(e));
    write(m);
  }

  void request(bool incremental) {
    std::string m = {'\x03', static_cast<char>(incremental ? 1 : 0)};
    put16(m, 0);
    put16(m, 0);
    put16(m, static_cast<uint16_t>(width));
    put16(m, static_cast<uint16_t>(height));
    write(m);
  }

  void pointer(int mask, int x, int y) {
    std::string m = {'\x05', static_cast<char>(mask)};
    put16(m, static_cast<uint16_t>(x));
    put16(m, static_cast<uint16_t>(y));
    write(m);
  }

  void key(bool down, uint32_t keysym) {
    std::string m = {'\x04', static_cast<char>(down ? 1 : 0), '\0', '\0'};
    put32(m, keysym);
    write(m);
  }

  void cut_text(const std::string& latin1) {
    std::string m = {'\x06', '\0', '\0', '\0'};
    put32(m, static_cast<uint32_t>(latin1.size()));
    write(m + latin1);
  }

  // Reads server messages until a framebuffer update has been applied; returns its rectangles.
  int read_update() {
    int rects = 0;
    for (;;) {
      const uint8_t type = static_cast<uint8_t>(read(1)[0]);
      if (type == 3) {  // ServerCutText
        const std::string h = read(7);
        cut_texts.push_back(read(u32(h, 3)));
        continue;
      }
      if (type == 2) continue;  // Bell
      REQUIRE(type == 0);
      const std::string h = read(3);
      const int n = u16(h, 1);
      for (int i = 0; i < n; ++i) {
        const std::string r = read(12);
        const int x = u16(r, 0), y = u16(r, 2), w = u16(r, 4), h2 = u16(r, 6);
        const int32_t enc = static_cast<int32_t>(u32(r, 8));
        if (enc == -239) {  // RichCursor: pixels, then a 1-bit mask
          read(static_cast<size_t>(w) * h2 * 4 + static_cast<size_t>((w + 7) / 8) * h2);
          cursor = {w, h2};
          ++rects;
          continue;
        }
        if (enc == 1) {  // CopyRect: from (sx, sy) in what the client has
          const std::string src = read(4);
          const int sx = u16(src, 0), sy = u16(src, 2);
          std::vector<uint8_t> copy(static_cast<size_t>(w) * h2 * 4);
          for (int row = 0; row < h2; ++row) {
            std::memcpy(copy.data() + static_cast<size_t>(row) * w * 4,
                        fb.data() + ((static_cast<size_t>(sy) + row) * width + sx) * 4,
                        static_cast<size_t>(w) * 4);
          }
          for (int row = 0; row < h2; ++row) {
            std::memcpy(fb.data() + ((static_cast<size_t>(y) + row) * width + x) * 4,
                        copy.data() + static_cast<size_t>(row) * w * 4, static_cast<size_t>(w) * 4);
          }
          ++copy_rects;
          ++rects;
          continue;
        }
        REQUIRE(enc == 0);  // Raw
        if (fb.size() != static_cast<size_t>(width) * height * 4) {
          fb.assign(static_cast<size_t>(width) * height * 4, 0);
        }
        const std::string px = read(static_cast<size_t>(w) * h2 * 4);
        for (int row = 0; row < h2; ++row) {
          std::memcpy(fb.data() + ((static_cast<size_t>(y) + row) * width + x) * 4,
                      px.data() + static_cast<size_t>(row) * w * 4, static_cast<size_t>(w) * 4);
        }
        ++rects;
      }
      return rects;
    }
  }

  uint32_t rgb(int x, int y) const {
    uint32_t p = 0;
    std::memcpy(&p, fb.data() + (static_cast<size_t>(y) * width + x) * 4, 4);
    return p & 0xffffff;
  }

  int width = 0;
  int height = 0;
  std::vector<uint8_t> fb;
  std::vector<std::string> cut_texts;
  int copy_rects = 0;
  Size cursor;  // the last cursor shape's size

 private:
  static uint16_t u16(const std::string& s, size_t at) {
    return static_cast<uint16_t>((static_cast<uint8_t>(s[at]) << 8) | static_cast<uint8_t>(s[at + 1]));
  }
  static uint32_t u32(const std::string& s, size_t at) {
    return (static_cast<uint32_t>(u16(s, at)) << 16) | u16(s, at + 2);
  }
  static void put16(std::string& s, uint16_t v) {
    s.push_back(static_cast<char>(v >> 8));
    s.push_back(static_cast<char>(v & 0xff));
  }
  static void put32(std::string& s, uint32_t v) {
    put16(s, static_cast<uint16_t>(v >> 16));
    put16(s, static_cast<uint16_t>(v & 0xffff));
  }
  std::string read(size_t n) {
    std::string out(n, '\0');
    size_t got = 0;
    while (got < n) {
      const ssize_t r = ::recv(fd_, out.data() + got, n - got, 0);
      REQUIRE(r > 0);
      got += static_cast<size_t>(r);
    }
    return out;
  }
  void write(const std::string& s) {
    REQUIRE(::send(fd_, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size()));
  }
  int fd_ = -1;
};

// The keysym on a key's unshifted level as the server maps it now (Xlib's own XKB cache is
// refreshed lazily and can lag behind a borrowed keycode's remap).
KeySym server_keysym(::Display* dpy, int keycode) {
  int per = 0;
  KeySym* syms = XGetKeyboardMapping(dpy, static_cast<KeyCode>(keycode), 1, &per);
  REQUIRE(syms != nullptr);
  const KeySym ks = syms[0];
  XFree(syms);
  return ks;
}

std::unique_ptr<RfbServer> start(const Xvfb& x) {
  auto s = RfbServer::start({.display = x.name(), .port = 0});
  REQUIRE(s.ok());
  return std::move(*s);
}

// Reads updates until pred() holds, asking for more each time (at most `tries` updates).
template <typename Pred>
bool update_until(RfbClient& c, Pred pred, int tries = 50) {
  for (int i = 0; i < tries; ++i) {
    if (pred()) return true;
    c.request(true);
    c.read_update();
  }
  return pred();
}

}  // namespace

TEST_CASE("RFB server sends the screen, then what changed", "[rfb]") {
  cabin::vnc::init_threads();
  Xvfb x(640, 480);
  Client xc(x.name());
  xc.fill_root(0, 0, 640, 480, 0x202020);
  xc.fill_root(100, 100, 50, 40, 0xff0000);
  xc.sync();
  auto server = start(x);
  CHECK(server->port() != 0);

  RfbClient c(server->port());
  CHECK(c.width == 640);
  CHECK(c.height == 480);
  c.set_encodings({0});
  c.request(false);
  c.read_update();
  CHECK(c.rgb(120, 120) == 0xff0000);
  CHECK(c.rgb(10, 400) == 0x202020);
  CHECK(c.rgb(99, 99) == 0x202020);

  // A change arrives as an incremental update covering only changed tiles.
  xc.fill_root(300, 300, 20, 20, 0x00ff00);
  xc.sync();
  REQUIRE(update_until(c, [&] { return c.rgb(310, 310) == 0x00ff00; }));
  CHECK(c.rgb(120, 120) == 0xff0000);
  CHECK(server->stats().clients == 1);
  CHECK(server->stats().frames >= 2);

  // Damage that changes no pixel costs one capture and sends nothing.
  const auto before = server->stats();
  xc.fill_root(0, 470, 5, 5, 0x202020);
  xc.sync();
  for (int i = 0; i < 500 && server->stats().captures == before.captures; ++i) ::usleep(10000);
  CHECK(server->stats().captures > before.captures);
  CHECK(server->stats().frames == before.frames);
}

TEST_CASE("RFB server sends a scrolled screen as CopyRect plus the new rows", "[rfb]") {
  cabin::vnc::init_threads();
  Xvfb x(320, 240);
  Client xc(x.name());
  // Every row its own colour, so a shift is unambiguous.
  for (int y = 0; y < 240; ++y) xc.fill_root(0, y, 320, 1, 0x10000u * (y % 256) + 0x100u * (255 - y % 256) + 7u);
  xc.sync();
  auto server = start(x);
  RfbClient c(server->port());
  c.set_encodings({1, 0});  // CopyRect, Raw
  c.request(false);
  c.read_update();
  REQUIRE(c.rgb(5, 100) == 0x10000u * 100 + 0x100u * 155 + 7u);
  // Scroll up by 24 px, then paint the uncovered rows.
  GC gc = XCreateGC(xc.dpy(), xc.root(), 0, nullptr);
  XCopyArea(xc.dpy(), xc.root(), xc.root(), gc, 0, 24, 320, 216, 0, 0);
  XFreeGC(xc.dpy(), gc);
  xc.fill_root(0, 216, 320, 24, 0x00ff00);
  xc.sync();
  REQUIRE(update_until(c, [&] { return c.rgb(5, 230) == 0x00ff00; }));
  CHECK(c.copy_rects >= 1);
  CHECK(server->stats().scroll_copies >= 1);
  for (int y : {0, 50, 100, 215}) {
    INFO("row " << y);
    CHECK(c.rgb(5, y) == 0x10000u * ((y + 24) % 256) + 0x100u * (255 - (y + 24) % 256) + 7u);
    CHECK(c.rgb(300, y) == c.rgb(5, y));
  }
}

TEST_CASE("RFB server applies pointer and key events with XTest", "[rfb]") {
  cabin::vnc::init_threads();
  Xvfb x(320, 240);
  Client xc(x.name());
  ::Window win = xc.make_input_window();
  (void)win;
  auto server = start(x);
  RfbClient c(server->port());
  c.set_encodings({0});
  c.pointer(0, 50, 60);
  c.pointer(1, 50, 60);
  c.pointer(0, 50, 60);
  XEvent ev;
  REQUIRE(xc.next_event(ev, [](const XEvent& e) { return e.type == ButtonPress; }));
  CHECK(ev.xbutton.button == 1);
  CHECK(ev.xbutton.x_root == 50);
  CHECK(ev.xbutton.y_root == 60);
  REQUIRE(xc.next_event(ev, [](const XEvent& e) { return e.type == ButtonRelease; }));

  c.key(true, 'q');
  c.key(false, 'q');
  REQUIRE(xc.next_event(ev, [](const XEvent& e) { return e.type == KeyPress; }));
  CHECK(server_keysym(xc.dpy(), static_cast<int>(ev.xkey.keycode)) == 'q');

  // A character the layout lacks is typed through a borrowed keycode.
  c.key(true, 0x1000416);  // U+0416 CYRILLIC CAPITAL ZHE
  c.key(false, 0x1000416);
  REQUIRE(xc.next_event(ev, [](const XEvent& e) { return e.type == KeyPress; }));
  CHECK(server_keysym(xc.dpy(), static_cast<int>(ev.xkey.keycode)) == 0x1000416);
  CHECK(server->stats().input_events >= 5);  // the last ones may still be counting
}

TEST_CASE("RFB server carries the clipboard both ways", "[rfb]") {
  cabin::vnc::init_threads();
  Xvfb x(320, 240);
  Client xc(x.name());
  auto server = start(x);
  RfbClient c(server->port());
  c.set_encodings({0});
  c.request(false);
  c.read_update();

  // Viewer -> X: an ordinary client pastes CLIPBOARD as UTF8_STRING.
  c.cut_text("caf\xe9");  // Latin-1
  ::Display* d = xc.dpy();
  const Atom clipboard = XInternAtom(d, "CLIPBOARD", False);
  const Atom utf8 = XInternAtom(d, "UTF8_STRING", False);
  const Atom prop = XInternAtom(d, "TEST_PASTE", False);
  ::Window w = XCreateSimpleWindow(d, xc.root(), 0, 0, 1, 1, 0, 0, 0);
  std::string pasted;
  for (int attempt = 0; attempt < 100 && pasted.empty(); ++attempt) {
    if (XGetSelectionOwner(d, clipboard) == None) {
      XSync(d, False);
      ::usleep(20000);  // the cut text travels asynchronously; poll the owner
      continue;
    }
    XConvertSelection(d, clipboard, utf8, prop, w, CurrentTime);
    XEvent ev;
    REQUIRE(xc.next_event(ev, [](const XEvent& e) { return e.type == SelectionNotify; }));
    if (ev.xselection.property == None) continue;
    Atom type = None;
    int format = 0;
    unsigned long items = 0, after = 0;
    unsigned char* data = nullptr;
    XGetWindowProperty(d, w, prop, 0, 1024, True, AnyPropertyType, &type, &format, &items, &after,
                       &data);
    if (data != nullptr) {
      pasted.assign(reinterpret_cast<char*>(data), items);
      XFree(data);
    }
  }
  CHECK(pasted == "caf\xc3\xa9");

  // X -> viewer: another client copies; the viewer gets ServerCutText.
  const std::string text = "copied in X";
  XSelectInput(d, w, PropertyChangeMask);
  XSetSelectionOwner(d, clipboard, w, CurrentTime);
  XSync(d, False);
  REQUIRE(XGetSelectionOwner(d, clipboard) == w);
  // Serve the server's paste request.
  XEvent ev;
  REQUIRE(xc.next_event(ev, [](const XEvent& e) { return e.type == SelectionRequest; }));
  const XSelectionRequestEvent& req = ev.xselectionrequest;
  XChangeProperty(d, req.requestor, req.property, utf8, 8, PropModeReplace,
                  reinterpret_cast<const unsigned char*>(text.data()),
                  static_cast<int>(text.size()));
  XSelectionEvent reply{};
  reply.type = SelectionNotify;
  reply.requestor = req.requestor;
  reply.selection = req.selection;
  reply.target = req.target;
  reply.property = req.property;
  reply.time = req.time;
  XSendEvent(d, req.requestor, False, NoEventMask, reinterpret_cast<XEvent*>(&reply));
  XSync(d, False);
  for (int i = 0; i < 50 && c.cut_texts.empty(); ++i) {
    c.request(true);
    xc.fill_root(i, 0, 1, 1, 0x010101 * static_cast<unsigned>(i + 1));  // forces an update
    xc.sync();
    c.read_update();
  }
  REQUIRE_FALSE(c.cut_texts.empty());
  CHECK(c.cut_texts.back() == text);
  CHECK(server->stats().cut_texts_in == 1);
  CHECK(server->stats().cut_texts_out == 1);
}

TEST_CASE("RFB server sends the pointer's shape to clients that ask for it", "[rfb]") {
  cabin::vnc::init_threads();
  Xvfb x(320, 240);
  auto server = start(x);
  RfbClient c(server->port());
  c.set_encodings({-239, 0});  // RichCursor, Raw
  REQUIRE(update_until(c, [&] { return c.cursor.width > 0; }));
  CHECK(c.cursor.width <= 64);
  CHECK(c.cursor.height > 0);
}

TEST_CASE("RFB server stops cleanly after its X server died with a viewer connected", "[rfb]") {
  cabin::vnc::init_threads();
  Xvfb x(320, 240);
  auto server = start(x);
  RfbClient c(server->port());
  c.set_encodings({0});
  c.request(false);
  c.read_update();
  x.kill();
  c.request(true);  // the server notices the dead display while serving
  server.reset();   // must return: closing a dead X connection must not wait forever
  SUCCEED();
}

TEST_CASE("RFB server listens where it is told and refuses a taken port", "[rfb]") {
  cabin::vnc::init_threads();
  Xvfb x(320, 240);
  auto first = start(x);
  auto second = RfbServer::start({.display = x.name(), .port = first->port()});
  REQUIRE_FALSE(second.ok());
  CHECK(second.error().code == "listen_failed");
  CHECK_FALSE(RfbServer::start({.display = x.name(), .listen_host = "nowhere", .port = 0}).ok());
  CHECK_FALSE(RfbServer::start({.display = ":65000", .port = 0}).ok());
}
