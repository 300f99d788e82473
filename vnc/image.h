// Plain pixel types shared by capture, scaling and encoding: sizes, rectangles, 32-bit images.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cabin::vnc {

struct Point {
  int x = 0;
  int y = 0;
  friend bool operator==(const Point&, const Point&) = default;
};

struct Size {
  int width = 0;
  int height = 0;
  friend bool operator==(const Size&, const Size&) = default;
};

struct Rect {
  int x = 0;
  int y = 0;
  int width = 0;
  int height = 0;
  friend bool operator==(const Rect&, const Rect&) = default;
};

// Byte order in memory, as X lays out a 24-bit TrueColor visual on a little-endian machine.
enum class PixelFormat : uint8_t {
  kBgrx,  // 4th byte undefined
  kBgra,  // 4th byte is straight (not premultiplied) alpha
};

inline constexpr int kBytesPerPixel = 4;

// A read-only window onto 32-bit pixels someone else owns.
struct ImageView {
  const uint8_t* data = nullptr;
  int width = 0;
  int height = 0;
  int stride = 0;  // bytes from one row to the next, >= width * 4
  PixelFormat format = PixelFormat::kBgrx;

  const uint8_t* row(int y) const { return data + static_cast<size_t>(y) * stride; }
  const uint8_t* pixel(int x, int y) const { return row(y) + static_cast<size_t>(x) * 4; }
};

// An owned 32-bit image. Rows are packed (stride == width * 4) unless a producer says otherwise.
struct Image {
  int width = 0;
  int height = 0;
  int stride = 0;
  PixelFormat format = PixelFormat::kBgrx;
  std::vector<uint8_t> pixels;

  // Resizes to width x height packed rows; keeps the allocation when it is big enough.
  void reset(int w, int h, PixelFormat f = PixelFormat::kBgrx) {
    width = w;
    height = h;
    stride = w * kBytesPerPixel;
    format = f;
    pixels.resize(static_cast<size_t>(stride) * h);
  }
  uint8_t* row(int y) { return pixels.data() + static_cast<size_t>(y) * stride; }
  const uint8_t* row(int y) const { return pixels.data() + static_cast<size_t>(y) * stride; }
  uint8_t* pixel(int x, int y) { return row(y) + static_cast<size_t>(x) * 4; }
  const uint8_t* pixel(int x, int y) const { return row(y) + static_cast<size_t>(x) * 4; }
  Size size() const { return {width, height}; }
  ImageView view() const { return {pixels.data(), width, height, stride, format}; }
};

}  // namespace cabin::vnc
