// Capture + encode timings on a busy screen. Hidden: run with `vnc_test "[.bench]"`.
// clang-format off
#include <catch2/catch.hpp>  // before Xlib, whose macros (None, Always) break it
// clang-format on

#include <X11/Xlib.h>
#include <X11/Xutil.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "tests/unit/vnc/xvfb_fixture.h"
#include "vnc/capture.h"
#include "vnc/display.h"
#include "vnc/encode.h"
#include "vnc/scale.h"

using namespace cabin::vnc;
using cabin::vnc::testing::Client;
using cabin::vnc::testing::Xvfb;

namespace {

// Something like a busy web page: dense text, coloured boxes, and a photo-like block.
void draw_busy(Client& c, int w, int h) {
  ::Display* dpy = c.dpy();
  std::mt19937 rng(42);
  c.fill_root(0, 0, w, h, 0xffffff);
  GC gc = XCreateGC(dpy, c.root(), 0, nullptr);
  XFontStruct* font = XLoadQueryFont(dpy, "fixed");
  if (font != nullptr) XSetFont(dpy, gc, font->fid);
  const char* words[] = {"lorem",       "ipsum",      "dolor",      "sit", "amet,",
                         "consectetur", "adipiscing", "elit",       "sed", "do",
                         "eiusmod",     "tempor",     "incididunt", "ut",  "labore"};
  for (int y = 14; y < h; y += 15) {
    std::string line;
    while (line.size() * 6 < static_cast<size_t>(w)) line += std::string(words[rng() % 15]) + " ";
    XSetForeground(dpy, gc, (rng() % 4 == 0) ? 0x1a0dab : 0x202124);
    XDrawString(dpy, c.root(), gc, 4, y, line.c_str(), static_cast<int>(line.size()));
  }
  for (int i = 0; i < 40; ++i) {
    c.fill_root(rng() % w, rng() % h, 40 + rng() % 160, 16 + rng() % 40, rng() & 0xffffff);
  }
  // Photo: smooth gradient plus noise, a third of the screen.
  const int pw = w / 3, ph = h / 3;
  std::vector<uint32_t> px(static_cast<size_t>(pw) * ph);
  for (int y = 0; y < ph; ++y) {
    for (int x = 0; x < pw; ++x) {
      const int n = static_cast<int>(rng() % 24);
      const uint32_t r = std::min(255, x * 255 / pw + n), g = std::min(255, y * 255 / ph + n),
                     b = std::min(255, 128 + n);
      px[static_cast<size_t>(y) * pw + x] = (r << 16) | (g << 8) | b;
    }
  }
  XImage* img = XCreateImage(dpy, DefaultVisual(dpy, 0), 24, ZPixmap, 0,
                             reinterpret_cast<char*>(px.data()), pw, ph, 32, pw * 4);
  XPutImage(dpy, c.root(), gc, img, 0, 0, w - pw - 20, h - ph - 20, pw, ph);
  img->data = nullptr;  // px owns the pixels
  XDestroyImage(img);
  if (font != nullptr) XFreeFont(dpy, font);
  XFreeGC(dpy, gc);
  c.sync();
}

template <typename F>
std::pair<double, double> p50_p90(int runs, F&& f) {
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms[ms.size() * 9 / 10]};
}

void bench_display(const std::string& name) {
  auto d = cabin::vnc::Display::open(name);
  REQUIRE(d.ok());
  const Size sz = d->size();
  auto cap = Capturer::create(*d);
  REQUIRE(cap.ok());
  REQUIRE(cap->uses_shm());
  Image img;
  size_t bytes = 0;
  constexpr int kRuns = 50;
  auto report = [&](const char* what, std::pair<double, double> t) {
    std::printf("%4dx%-4d %-34s p50 %6.2f ms  p90 %6.2f ms  %7zu bytes\n", sz.width, sz.height,
                what, t.first, t.second, bytes);
  };
  report("capture (shm)", p50_p90(kRuns, [&] { REQUIRE(cap->grab(img).ok()); }));
  report("capture + cursor", p50_p90(kRuns, [&] { REQUIRE(cap->grab(img, {}, true).ok()); }));
  report("capture + jpeg q80 4:2:0", p50_p90(kRuns, [&] {
           REQUIRE(cap->grab(img).ok());
           bytes = encode_jpeg(img.view(), {.quality = 80})->size();
         }));
  report("capture + png l1 sub", p50_p90(kRuns, [&] {
           REQUIRE(cap->grab(img).ok());
           bytes = encode_png(img.view(), {.compression_level = 1})->size();
         }));
  report("capture + png l1 none", p50_p90(kRuns, [&] {
           REQUIRE(cap->grab(img).ok());
           bytes =
               encode_png(img.view(), {.compression_level = 1, .filter = PngFilter::kNone})->size();
         }));
  report("capture + png l3 sub", p50_p90(kRuns, [&] {
           REQUIRE(cap->grab(img).ok());
           bytes = encode_png(img.view(), {.compression_level = 3})->size();
         }));
  const Size model = fit_within(sz, {1024, 768});
  report("capture + scale to fit 1024x768", p50_p90(kRuns, [&] {
           REQUIRE(cap->grab(img).ok());
           bytes = scale(img.view(), model)->pixels.size();
         }));
}

}  // namespace

// Draws its own busy screen; or, with CABIN_VNC_BENCH_DISPLAY=:N, measures whatever that display
// shows (a real Chromium, say).
TEST_CASE("capture + encode timings", "[.bench]") {
  if (const char* name = std::getenv("CABIN_VNC_BENCH_DISPLAY")) {
    bench_display(name);
    return;
  }
  for (Size sz : {Size{1280, 800}, Size{1920, 1080}}) {
    Xvfb x(sz.width, sz.height);
    Client c(x.name());
    draw_busy(c, sz.width, sz.height);
    bench_display(x.name());
  }
}
