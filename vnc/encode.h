// PNG and JPEG encoders for captured images, tuned for speed over size.
#pragma once

#include <cstdint>
#include <vector>

#include "common/result.h"
#include "vnc/image.h"

namespace cabin::vnc {

enum class PngFilter : uint8_t {
  kNone,  // fastest; screenshots of flat UI compress well without a filter
  kSub,   // small extra cost, helps gradients and photos
};

struct PngOptions {
  int compression_level = 1;  // zlib level, 0..9; 1..3 is the useful range for screenshots
  PngFilter filter = PngFilter::kSub;
};

// 8-bit RGB PNG (no alpha channel: a screen is opaque), written straight from BGRX rows.
Result<std::vector<uint8_t>> encode_png(const ImageView& image, const PngOptions& options = {});

enum class ChromaSubsampling : uint8_t { k444, k422, k420 };

struct JpegOptions {
  int quality = 80;  // 1..100
  ChromaSubsampling subsampling = ChromaSubsampling::k420;
};

// Baseline JPEG through TurboJPEG, reading BGRX/BGRA rows in place. Each thread keeps one
// compressor and its output buffer, so repeated calls allocate only the returned vector.
Result<std::vector<uint8_t>> encode_jpeg(const ImageView& image, const JpegOptions& options = {});

}  // namespace cabin::vnc
