#include "vnc/scale.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace cabin::vnc {
namespace {

constexpr int kWeightBits = 14;
constexpr int32_t kWeightOne = 1 << kWeightBits;

// Per destination index: the first source index and fixed-point weights that sum to kWeightOne.
struct Taps {
  int max_taps = 0;
  std::vector<int> first;
  std::vector<int> count;
  std::vector<int32_t> weights;  // dst * max_taps + k

  const int32_t* w(int i) const { return weights.data() + static_cast<size_t>(i) * max_taps; }
};

Taps make_taps(int src, int dst) {
  Taps t;
  t.first.resize(dst);
  t.count.resize(dst);
  const double ratio = static_cast<double>(src) / dst;
  t.max_taps = src > dst ? static_cast<int>(std::ceil(ratio)) + 1 : 2;
  t.weights.assign(static_cast<size_t>(dst) * t.max_taps, 0);
  std::vector<double> w(t.max_taps);
  for (int i = 0; i < dst; ++i) {
    int first = 0;
    int n = 0;
    if (src > dst) {
      // Box: the source span [a, b) this destination pixel covers, weighted by overlap.
      const double a = i * ratio;
      const double b = std::min<double>(src, (i + 1) * ratio);
      first = static_cast<int>(std::floor(a));
      for (int j = first; j < b && n < t.max_taps; ++j, ++n) {
        w[n] = (std::min<double>(b, j + 1) - std::max<double>(a, j)) / (b - a);
      }
    } else if (src < dst) {
      // Bilinear between the two source pixels around this pixel's centre.
      const double c = std::clamp((i + 0.5) * ratio - 0.5, 0.0, src - 1.0);
      first = static_cast<int>(std::floor(c));
      const double f = c - first;
      w[n++] = 1.0 - f;
      if (first + 1 < src) w[n++] = f;
    } else {
      first = i;
      w[n++] = 1.0;
    }
    int32_t* out = t.weights.data() + static_cast<size_t>(i) * t.max_taps;
    int32_t sum = 0;
    int biggest = 0;
    for (int k = 0; k < n; ++k) {
      out[k] = static_cast<int32_t>(std::lround(w[k] * kWeightOne));
      sum += out[k];
      if (out[k] > out[biggest]) biggest = k;
    }
    out[biggest] += kWeightOne - sum;  // rounding leftovers: the weights must sum to one exactly
    t.first[i] = first;
    t.count[i] = n;
  }
  return t;
}

}  // namespace

Result<Image> scale(const ImageView& src, Size target) {
  if (src.data == nullptr || src.width <= 0 || src.height <= 0 ||
      src.stride < src.width * kBytesPerPixel) {
    return make_error(Errc::kInvalidArgument, "bad_image", "empty or malformed image");
  }
  if (target.width <= 0 || target.height <= 0 || target.width > 16384 || target.height > 16384) {
    return make_error(Errc::kInvalidArgument, "bad_scale", "target size must be 1..16384");
  }
  const Taps tx = make_taps(src.width, target.width);
  const Taps ty = make_taps(src.height, target.height);

  // Horizontal pass into 16-bit intermediates carrying 6 extra bits of precision.
  const size_t mid_row = static_cast<size_t>(target.width) * 4;
  std::vector<uint16_t> mid(mid_row * src.height);
  for (int y = 0; y < src.height; ++y) {
    const uint8_t* s = src.row(y);
    uint16_t* m = mid.data() + mid_row * y;
    for (int x = 0; x < target.width; ++x) {
      const int32_t* w = tx.w(x);
      const uint8_t* p = s + static_cast<size_t>(tx.first[x]) * 4;
      uint32_t acc[4] = {0, 0, 0, 0};
      for (int k = 0; k < tx.count[x]; ++k, p += 4) {
        const uint32_t wk = static_cast<uint32_t>(w[k]);
        acc[0] += p[0] * wk;
        acc[1] += p[1] * wk;
        acc[2] += p[2] * wk;
        acc[3] += p[3] * wk;
      }
      for (int c = 0; c < 4; ++c) {
        m[x * 4 + c] = static_cast<uint16_t>((acc[c] + (1u << 7)) >> (kWeightBits - 6));
      }
    }
  }

  Image out;
  out.reset(target.width, target.height, src.format);
  std::vector<uint32_t> acc(mid_row);
  for (int y = 0; y < target.height; ++y) {
    std::fill(acc.begin(), acc.end(), 0u);
    const int32_t* w = ty.w(y);
    for (int k = 0; k < ty.count[y]; ++k) {
      const uint16_t* m = mid.data() + mid_row * (ty.first[y] + k);
      const uint32_t wk = static_cast<uint32_t>(w[k]);
      for (size_t i = 0; i < mid_row; ++i) acc[i] += m[i] * wk;
    }
    uint8_t* d = out.row(y);
    constexpr int kShift = kWeightBits + 6;
    for (size_t i = 0; i < mid_row; ++i) {
      d[i] =
          static_cast<uint8_t>(std::min<uint32_t>(255, (acc[i] + (1u << (kShift - 1))) >> kShift));
    }
  }
  return out;
}

Size fit_within(Size src, Size box) {
  if (src.width <= 0 || src.height <= 0) return {1, 1};
  if (src.width <= box.width && src.height <= box.height) return src;
  // Compare ratios in integers: which side of the box binds first.
  const int64_t lhs = static_cast<int64_t>(src.width) * box.height;
  const int64_t rhs = static_cast<int64_t>(box.width) * src.height;
  Size out;
  if (lhs >= rhs) {  // width binds
    out.width = box.width;
    out.height = static_cast<int>((static_cast<int64_t>(src.height) * box.width) / src.width);
  } else {
    out.height = box.height;
    out.width = static_cast<int>((static_cast<int64_t>(src.width) * box.height) / src.height);
  }
  out.width = std::max(1, out.width);
  out.height = std::max(1, out.height);
  return out;
}

int map_coord(int v, int from, int to) {
  if (from <= 0 || to <= 0) return 0;
  v = std::clamp(v, 0, from - 1);
  return static_cast<int>((2 * static_cast<int64_t>(v) + 1) * to /
                          (2 * static_cast<int64_t>(from)));
}

}  // namespace cabin::vnc
