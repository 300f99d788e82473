// Resampling and the model <-> screen coordinate mapping.
#include "vnc/scale.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <vector>

using namespace cabin::vnc;

namespace {

Image checkerboard(int w, int h, int cell) {
  Image img;
  img.reset(w, h);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const uint8_t v = ((x / cell + y / cell) % 2) == 0 ? 0 : 255;
      uint8_t* p = img.pixel(x, y);
      p[0] = p[1] = p[2] = v;
      p[3] = 255;
    }
  }
  return img;
}

}  // namespace

TEST_CASE("map_coord stays on the target and round-trips as documented", "[scale]") {
  const int sizes[] = {1, 2, 3, 5, 7, 100, 640, 768, 800, 1024, 1080, 1280, 1366, 1920, 2560};
  for (int screen : sizes) {
    for (int model : sizes) {
      INFO("screen " << screen << " model " << model);
      for (int m = 0; m < model; ++m) {
        const int s = map_coord(m, model, screen);
        REQUIRE(s >= 0);
        REQUIRE(s < screen);
        // model -> screen -> model is exact when the screen is at least the model's size.
        if (screen >= model) REQUIRE(map_coord(s, screen, model) == m);
      }
      for (int s = 0; s < screen; ++s) {
        const int m = map_coord(s, screen, model);
        REQUIRE(m >= 0);
        REQUIRE(m < model);
        // screen -> model -> screen within one pixel when the model is at least half the screen.
        if (2 * model >= screen) REQUIRE(std::abs(map_coord(m, model, screen) - s) <= 1);
      }
    }
  }
  // Out-of-range inputs clamp onto the edge.
  CHECK(map_coord(-5, 1024, 1280) == 0);
  CHECK(map_coord(5000, 1024, 1280) == 1279);
  CHECK(map_coord(0, 0, 10) == 0);
}

TEST_CASE("CoordMap maps both ways", "[scale]") {
  const CoordMap map({1280, 800}, {1024, 640});
  CHECK(map.to_screen({0, 0}) == Point{0, 0});
  CHECK(map.to_screen({1023, 639}) == Point{1279, 799});
  CHECK(map.to_screen({512, 320}) == Point{640, 400});
  CHECK(map.to_model({640, 400}) == Point{512, 320});
  CHECK(map.to_model(map.to_screen({100, 200})) == Point{100, 200});
}

TEST_CASE("fit_within keeps the aspect ratio", "[scale]") {
  CHECK(fit_within({1920, 1080}, {1280, 800}) == Size{1280, 720});
  CHECK(fit_within({1280, 800}, {1024, 768}) == Size{1024, 640});
  CHECK(fit_within({800, 1280}, {1024, 768}) == Size{480, 768});
  CHECK(fit_within({640, 480}, {1024, 768}) == Size{640, 480});
  CHECK(fit_within({10000, 1}, {100, 100}) == Size{100, 1});
  CHECK(fit_within({0, 0}, {100, 100}) == Size{1, 1});
}

TEST_CASE("box downscale of a checkerboard averages whole cells", "[scale]") {
  const Image board = checkerboard(640, 480, 8);
  SECTION("by 2: every 4x4 cell keeps its exact colour") {
    auto half = scale(board.view(), {320, 240});
    REQUIRE(half.ok());
    REQUIRE(half->size() == Size{320, 240});
    for (int y = 0; y < 240; ++y) {
      for (int x = 0; x < 320; ++x) {
        const uint8_t want = ((x / 4 + y / 4) % 2) == 0 ? 0 : 255;
        REQUIRE(half->pixel(x, y)[0] == want);
        REQUIRE(half->pixel(x, y)[2] == want);
      }
    }
  }
  SECTION("by 16: every output pixel is the mean grey") {
    auto tiny = scale(board.view(), {40, 30});
    REQUIRE(tiny.ok());
    for (int y = 0; y < 30; ++y) {
      for (int x = 0; x < 40; ++x) {
        REQUIRE(std::abs(tiny->pixel(x, y)[1] - 128) <= 1);
      }
    }
  }
  SECTION("non-integer ratio keeps the mean and stays within range") {
    auto odd = scale(board.view(), {427, 333});
    REQUIRE(odd.ok());
    REQUIRE(odd->size() == Size{427, 333});
    double sum = 0;
    for (int y = 0; y < 333; ++y) {
      for (int x = 0; x < 427; ++x) sum += odd->pixel(x, y)[0];
    }
    CHECK(std::abs(sum / (427.0 * 333.0) - 127.5) < 1.5);
  }
}

TEST_CASE("a one-pixel line survives a 2x downscale as grey, not dropped", "[scale]") {
  Image img;
  img.reset(100, 10);
  std::fill(img.pixels.begin(), img.pixels.end(), 255);
  for (int y = 0; y < 10; ++y) {
    uint8_t* p = img.pixel(41, y);  // odd column: a point sampler at even columns would miss it
    p[0] = p[1] = p[2] = 0;
  }
  auto out = scale(img.view(), {50, 5});
  REQUIRE(out.ok());
  for (int y = 0; y < 5; ++y) {
    CHECK(std::abs(out->pixel(20, y)[0] - 128) <= 1);
    CHECK(out->pixel(19, y)[0] == 255);
    CHECK(out->pixel(21, y)[0] == 255);
  }
}

TEST_CASE("same size copies, upscaling is bilinear and monotone", "[scale]") {
  const Image board = checkerboard(64, 48, 8);
  auto same = scale(board.view(), {64, 48});
  REQUIRE(same.ok());
  CHECK(same->pixels == board.pixels);

  Image ramp;
  ramp.reset(2, 1);
  ramp.pixels = {0, 0, 0, 255, 200, 200, 200, 255};
  auto up = scale(ramp.view(), {8, 1});
  REQUIRE(up.ok());
  CHECK(up->pixel(0, 0)[0] == 0);
  CHECK(up->pixel(7, 0)[0] == 200);
  for (int x = 1; x < 8; ++x) CHECK(up->pixel(x, 0)[0] >= up->pixel(x - 1, 0)[0]);

  auto mixed = scale(board.view(), {128, 24});  // up in x, down in y
  REQUIRE(mixed.ok());
  CHECK(mixed->size() == Size{128, 24});
}

TEST_CASE("scale rejects bad input", "[scale]") {
  Image empty;
  CHECK_FALSE(scale(empty.view(), {10, 10}).ok());
  const Image board = checkerboard(8, 8, 2);
  CHECK_FALSE(scale(board.view(), {0, 10}).ok());
  CHECK_FALSE(scale(board.view(), {10, 20000}).ok());
}
