// PNG and JPEG output decodes back to the right size and colours.
#include "vnc/encode.h"

#include <png.h>
#include <turbojpeg.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <vector>

#include "tests/unit/vnc/xvfb_fixture.h"
#include "vnc/capture.h"
#include "vnc/display.h"

using namespace cabin::vnc;
using cabin::vnc::testing::Client;
using cabin::vnc::testing::Xvfb;

namespace {

struct Decoded {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> bgrx;  // packed
  const uint8_t* pixel(int x, int y) const { return bgrx.data() + (y * width + x) * 4; }
};

Decoded decode_png(const std::vector<uint8_t>& data) {
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  REQUIRE(png_image_begin_read_from_memory(&img, data.data(), data.size()) != 0);
  CHECK((img.format & PNG_FORMAT_FLAG_ALPHA) == 0);  // written as RGB, no alpha
  CHECK((img.format & PNG_FORMAT_FLAG_COLOR) != 0);
  img.format = PNG_FORMAT_BGRA;
  Decoded out;
  out.width = img.width;
  out.height = img.height;
  out.bgrx.resize(PNG_IMAGE_SIZE(img));
  REQUIRE(png_image_finish_read(&img, nullptr, out.bgrx.data(), 0, nullptr) != 0);
  return out;
}

Decoded decode_jpeg(const std::vector<uint8_t>& data) {
  tjhandle tj = tjInitDecompress();
  REQUIRE(tj != nullptr);
  int w = 0, h = 0, samp = 0, cs = 0;
  REQUIRE(tjDecompressHeader3(tj, data.data(), data.size(), &w, &h, &samp, &cs) == 0);
  Decoded out;
  out.width = w;
  out.height = h;
  out.bgrx.resize(static_cast<size_t>(w) * h * 4);
  REQUIRE(tjDecompress2(tj, data.data(), data.size(), out.bgrx.data(), w, 0, h, TJPF_BGRX, 0) == 0);
  tjDestroy(tj);
  return out;
}

// Four flat quadrants, a distinct colour each.
Image quadrants(int w, int h) {
  Image img;
  img.reset(w, h);
  const uint32_t colours[4] = {0xff0000, 0x00ff00, 0x0000ff, 0xf0c080};
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const uint32_t c = colours[(y >= h / 2) * 2 + (x >= w / 2)];
      uint8_t* p = img.pixel(x, y);
      p[0] = c & 0xff;
      p[1] = (c >> 8) & 0xff;
      p[2] = (c >> 16) & 0xff;
      p[3] = 0x5a;  // garbage in the X byte must not matter
    }
  }
  return img;
}

bool near(const uint8_t* p, uint32_t rgb, int tol) {
  return std::abs(p[0] - static_cast<int>(rgb & 0xff)) <= tol &&
         std::abs(p[1] - static_cast<int>((rgb >> 8) & 0xff)) <= tol &&
         std::abs(p[2] - static_cast<int>((rgb >> 16) & 0xff)) <= tol;
}

}  // namespace

TEST_CASE("PNG round-trips exactly for every speed setting", "[encode]") {
  const Image img = quadrants(97, 61);  // odd sizes: no row alignment assumptions
  const int level = GENERATE(0, 1, 2, 3, 9);
  const PngFilter filter = GENERATE(PngFilter::kNone, PngFilter::kSub);
  auto png = encode_png(img.view(), {.compression_level = level, .filter = filter});
  REQUIRE(png.ok());
  const Decoded d = decode_png(*png);
  REQUIRE(d.width == 97);
  REQUIRE(d.height == 61);
  for (int y = 0; y < 61; ++y) {
    for (int x = 0; x < 97; ++x) {
      REQUIRE(std::equal(d.pixel(x, y), d.pixel(x, y) + 3, img.pixel(x, y)));
    }
  }
}

TEST_CASE("JPEG decodes to the right size and colours", "[encode]") {
  const Image img = quadrants(160, 96);
  const auto samp =
      GENERATE(ChromaSubsampling::k420, ChromaSubsampling::k422, ChromaSubsampling::k444);
  auto jpg = encode_jpeg(img.view(), {.quality = 90, .subsampling = samp});
  REQUIRE(jpg.ok());
  const Decoded d = decode_jpeg(*jpg);
  REQUIRE(d.width == 160);
  REQUIRE(d.height == 96);
  // Away from the edges between quadrants, flat colour survives within a small tolerance.
  CHECK(near(d.pixel(20, 20), 0xff0000, 8));
  CHECK(near(d.pixel(140, 20), 0x00ff00, 8));
  CHECK(near(d.pixel(20, 76), 0x0000ff, 8));
  CHECK(near(d.pixel(140, 76), 0xf0c080, 8));
  // Smaller at lower quality; every quality in range works.
  auto low = encode_jpeg(img.view(), {.quality = 1});
  REQUIRE(low.ok());
  CHECK(low->size() < jpg->size());
  CHECK(encode_jpeg(img.view(), {.quality = 100}).ok());
}

TEST_CASE("encoders reject bad arguments", "[encode]") {
  const Image img = quadrants(8, 8);
  CHECK(encode_jpeg(img.view(), {.quality = 0}).error().code == "bad_jpeg_quality");
  CHECK_FALSE(encode_jpeg(img.view(), {.quality = 101}).ok());
  CHECK_FALSE(encode_png(img.view(), {.compression_level = 10}).ok());
  Image empty;
  CHECK_FALSE(encode_png(empty.view()).ok());
  CHECK_FALSE(encode_jpeg(empty.view()).ok());
}

TEST_CASE("captured screens encode and decode to what was drawn", "[encode]") {
  Xvfb x(320, 200);
  Client c(x.name());
  c.fill_root(0, 0, 320, 200, 0xffffff);
  c.fill_root(16, 16, 64, 64, 0xc00000);
  c.fill_root(160, 96, 96, 64, 0x0040c0);
  c.sync();
  auto d = cabin::vnc::Display::open(x.name());
  REQUIRE(d.ok());
  auto cap = Capturer::create(*d);
  REQUIRE(cap.ok());
  auto img = cap->grab();
  REQUIRE(img.ok());

  auto png = encode_png(img->view());
  REQUIRE(png.ok());
  const Decoded p = decode_png(*png);
  REQUIRE(p.width == 320);
  REQUIRE(p.height == 200);
  CHECK(near(p.pixel(40, 40), 0xc00000, 0));
  CHECK(near(p.pixel(200, 120), 0x0040c0, 0));
  CHECK(near(p.pixel(5, 5), 0xffffff, 0));

  auto jpg = encode_jpeg(img->view(), {.quality = 80});
  REQUIRE(jpg.ok());
  const Decoded j = decode_jpeg(*jpg);
  REQUIRE(j.width == 320);
  REQUIRE(j.height == 200);
  CHECK(near(j.pixel(40, 40), 0xc00000, 12));
  CHECK(near(j.pixel(200, 120), 0x0040c0, 12));
  CHECK(near(j.pixel(5, 5), 0xffffff, 12));

  // A region, encoded from a view with the full screen's stride.
  ImageView sub = img->view();
  sub.data = img->pixel(160, 96);
  sub.width = 96;
  sub.height = 64;
  auto sub_png = encode_png(sub);
  REQUIRE(sub_png.ok());
  const Decoded s = decode_png(*sub_png);
  REQUIRE(s.width == 96);
  CHECK(near(s.pixel(0, 0), 0x0040c0, 0));
  CHECK(near(s.pixel(95, 63), 0x0040c0, 0));
}
