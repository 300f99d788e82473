// Capture, damage and cursor against a real Xvfb.
#include "vnc/capture.h"

#include <poll.h>

#include <catch2/catch.hpp>
#include <chrono>

#include "tests/unit/vnc/xvfb_fixture.h"
#include "vnc/damage.h"
#include "vnc/display.h"
#include "vnc/input.h"

using namespace cabin::vnc;
using cabin::vnc::testing::Client;
using cabin::vnc::testing::Xvfb;

namespace {

// BGRX bytes of 0xRRGGBB.
void check_rgb(const Image& img, int x, int y, uint32_t rgb) {
  INFO("pixel " << x << "," << y);
  const uint8_t* p = img.pixel(x, y);
  CHECK(p[0] == (rgb & 0xff));
  CHECK(p[1] == ((rgb >> 8) & 0xff));
  CHECK(p[2] == ((rgb >> 16) & 0xff));
}

void draw_scene(Client& c) {
  c.fill_root(0, 0, 640, 480, 0x202020);
  c.fill_root(0, 0, 100, 50, 0xff0000);
  c.fill_root(200, 100, 50, 50, 0x00ff00);
  c.fill_root(300, 300, 40, 20, 0x0000ff);
  c.fill_root(639, 479, 1, 1, 0x123456);
  c.sync();
}

}  // namespace

TEST_CASE("Display opens a named display and reports its size", "[capture]") {
  Xvfb x(640, 480);
  auto d = cabin::vnc::Display::open(x.name());
  REQUIRE(d.ok());
  CHECK(d->size() == Size{640, 480});
  CHECK(d->name() == x.name());
  CHECK(d->fd() >= 0);
  CHECK_FALSE(d->lost());
  CHECK(d->sync().ok());
  CHECK_FALSE(cabin::vnc::Display::open(":65000").ok());
}

TEST_CASE("capture reads drawn colours, whole screen and regions", "[capture]") {
  Xvfb x(640, 480);
  Client c(x.name());
  draw_scene(c);
  auto d = cabin::vnc::Display::open(x.name());
  REQUIRE(d.ok());
  const bool shm = GENERATE(true, false);
  INFO("shm " << shm);
  auto cap = Capturer::create(*d, {.use_shm = shm});
  REQUIRE(cap.ok());
  CHECK(cap->uses_shm() == shm);

  auto full = cap->grab();
  REQUIRE(full.ok());
  REQUIRE(full->size() == Size{640, 480});
  CHECK(full->stride == 640 * 4);
  CHECK(full->format == PixelFormat::kBgrx);
  check_rgb(*full, 0, 0, 0xff0000);
  check_rgb(*full, 99, 49, 0xff0000);
  check_rgb(*full, 100, 49, 0x202020);
  check_rgb(*full, 225, 125, 0x00ff00);
  check_rgb(*full, 339, 319, 0x0000ff);
  check_rgb(*full, 639, 479, 0x123456);

  auto region = cap->grab(Rect{190, 90, 70, 70});
  REQUIRE(region.ok());
  REQUIRE(region->size() == Size{70, 70});
  check_rgb(*region, 0, 0, 0x202020);
  check_rgb(*region, 10, 10, 0x00ff00);
  check_rgb(*region, 59, 59, 0x00ff00);
  check_rgb(*region, 60, 60, 0x202020);

  // Regions of different sizes in a row reuse one buffer; the corner pixel is exact.
  Image reused;
  REQUIRE(cap->grab(reused, Rect{639, 479, 1, 1}).ok());
  check_rgb(reused, 0, 0, 0x123456);
  REQUIRE(cap->grab(reused, Rect{0, 0, 640, 480}).ok());
  check_rgb(reused, 225, 125, 0x00ff00);

  CHECK(cap->grab(Rect{600, 0, 41, 10}).error().code == "bad_region");
  CHECK_FALSE(cap->grab(Rect{-1, 0, 10, 10}).ok());
  CHECK_FALSE(cap->grab(Rect{0, 0, 0, 10}).ok());
}

TEST_CASE("damage reports drawing and stays quiet when idle", "[capture]") {
  Xvfb x(320, 240);
  auto d = cabin::vnc::Display::open(x.name());
  REQUIRE(d.ok());
  auto damage = DamageTracker::create(*d);
  REQUIRE(damage.ok());
  // The server counts the whole screen as damaged when tracking starts: the first call says so.
  REQUIRE(d->sync().ok());
  CHECK(damage->take_damage());
  REQUIRE(d->sync().ok());
  CHECK_FALSE(damage->take_damage());

  Client c(x.name());
  auto wait_damage = [&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!damage->take_damage()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      pollfd p{damage->fd(), POLLIN, 0};
      ::poll(&p, 1, 100);
    }
    return true;
  };
  for (int round = 0; round < 3; ++round) {
    c.fill_root(10 * round, 10, 5, 5, 0xff00ff);
    c.sync();
    CHECK(wait_damage());
    // Idle: after a round trip every event the server sent is in; none may be damage.
    REQUIRE(d->sync().ok());
    CHECK_FALSE(damage->take_damage());
  }
}

TEST_CASE("the cursor is drawn in on request", "[capture]") {
  Xvfb x(320, 240);
  Client c(x.name());
  c.fill_root(0, 0, 320, 240, 0x000000);
  c.sync();
  auto d = cabin::vnc::Display::open(x.name());
  REQUIRE(d.ok());
  auto in = Input::create(*d);
  REQUIRE(in.ok());
  REQUIRE(in->move({160, 120}).ok());
  auto cap = Capturer::create(*d);
  REQUIRE(cap.ok());
  auto cursor = cap->cursor();
  REQUIRE(cursor.ok());
  REQUIRE(cursor->width > 0);

  auto plain = cap->grab(Rect{100, 60, 120, 120}, false);
  auto with = cap->grab(Rect{100, 60, 120, 120}, true);
  REQUIRE(plain.ok());
  REQUIRE(with.ok());
  int changed = 0;
  int outside = 0;
  for (int y = 0; y < 120; ++y) {
    for (int x = 0; x < 120; ++x) {
      CHECK(plain->pixel(x, y)[1] == 0);  // the server leaves the cursor out of captures
      if (with->pixel(x, y)[1] == 0) continue;
      ++changed;
      const int sx = x + 100, sy = y + 60;
      if (sx < cursor->origin.x || sy < cursor->origin.y ||
          sx >= cursor->origin.x + cursor->width || sy >= cursor->origin.y + cursor->height) {
        ++outside;
      }
    }
  }
  CHECK(changed > 10);
  CHECK(outside == 0);
}

TEST_CASE("draw_cursor blends premultiplied ARGB and clips", "[capture]") {
  Image img;
  img.reset(4, 4);
  std::fill(img.pixels.begin(), img.pixels.end(), 0);
  for (int y = 0; y < 4; ++y) {
    uint8_t* p = img.pixel(0, y);
    for (int x = 0; x < 4; ++x) p[4 * x + 2] = 200;  // red background
  }
  CursorImage c;
  c.origin = {9, 9};  // image at screen (8, 8): cursor covers image pixels 1..2
  c.width = 4;
  c.height = 4;
  c.argb.assign(16, 0);
  c.argb[0] = 0xff00ff00;  // opaque green
  c.argb[1] = 0x80008080;  // half-transparent, premultiplied cyan-ish
  draw_cursor(img, {8, 8}, c);
  CHECK(img.pixel(1, 1)[1] == 255);
  CHECK(img.pixel(1, 1)[2] == 0);
  CHECK(img.pixel(2, 1)[0] == 0x80);
  CHECK(img.pixel(2, 1)[1] == 0x80);
  CHECK(img.pixel(2, 1)[2] == (200 * 127 + 127) / 255);
  CHECK(img.pixel(0, 0)[2] == 200);  // untouched
  CHECK(img.pixel(3, 3)[2] == 200);  // transparent cursor pixels change nothing
}

TEST_CASE("a lost X server is an error, not an exit", "[capture]") {
  auto x = std::make_unique<Xvfb>(320, 240);
  auto d = cabin::vnc::Display::open(x->name());
  REQUIRE(d.ok());
  auto cap = Capturer::create(*d);
  REQUIRE(cap.ok());
  auto damage = DamageTracker::create(*d);
  REQUIRE(damage.ok());
  auto in = Input::create(*d);
  REQUIRE(in.ok());
  x->kill();
  auto grabbed = cap->grab();
  REQUIRE_FALSE(grabbed.ok());
  CHECK(grabbed.error().code == "display_lost");
  CHECK(d->lost());
  CHECK_FALSE(damage->take_damage());
  CHECK(in->move({1, 1}).error().code == "display_lost");
  CHECK(in->type_text("a").error().code == "display_lost");
  CHECK_FALSE(d->sync().ok());
}
