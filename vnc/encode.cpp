#include "vnc/encode.h"

#include <png.h>
#include <turbojpeg.h>

#include <climits>
#include <csetjmp>
#include <string>

namespace cabin::vnc {
namespace {

Result<void> check_image(const ImageView& image) {
  if (image.data == nullptr || image.width <= 0 || image.height <= 0 ||
      image.stride < image.width * kBytesPerPixel) {
    return make_error(Errc::kInvalidArgument, "bad_image", "empty or malformed image");
  }
  return {};
}

struct PngWriter {
  std::vector<uint8_t>* out;
  std::string error;
};

void png_write_to_vector(png_structp png, png_bytep data, png_size_t length) {
  auto* w = static_cast<PngWriter*>(png_get_io_ptr(png));
  w->out->insert(w->out->end(), data, data + length);
}

void png_flush_noop(png_structp) {}

[[noreturn]] void png_on_error(png_structp png, png_const_charp msg) {
  auto* w = static_cast<PngWriter*>(png_get_error_ptr(png));
  w->error = msg;
  png_longjmp(png, 1);
}

void png_on_warning(png_structp, png_const_charp) {}

// Owns the thread's TurboJPEG compressor and the buffer it compresses into.
struct TjState {
  tjhandle handle = nullptr;
  unsigned char* buf = nullptr;
  unsigned long buf_size = 0;
  ~TjState() {
    if (buf != nullptr) tjFree(buf);
    if (handle != nullptr) tjDestroy(handle);
  }
};

}  // namespace

Result<std::vector<uint8_t>> encode_png(const ImageView& image, const PngOptions& options) {
  if (auto c = check_image(image); !c) return c.error();
  if (options.compression_level < 0 || options.compression_level > 9) {
    return make_error(Errc::kInvalidArgument, "bad_png_level", "PNG level must be 0..9");
  }
  std::vector<uint8_t> out;
  // Rough guess for a screenshot at level 1; avoids most regrowth.
  out.reserve(static_cast<size_t>(image.width) * image.height / 4);
  PngWriter writer{&out, {}};
  png_structp png =
      png_create_write_struct(PNG_LIBPNG_VER_STRING, &writer, png_on_error, png_on_warning);
  if (png == nullptr) return make_error(Errc::kInternal, "png_failed", "png_create_write_struct");
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_write_struct(&png, nullptr);
    return make_error(Errc::kInternal, "png_failed", "png_create_info_struct");
  }
  // libpng reports errors by longjmp: nothing with a destructor may be created below this point.
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return make_error(Errc::kInternal, "png_failed", "libpng: " + writer.error);
  }
  png_set_write_fn(png, &writer, png_write_to_vector, png_flush_noop);
  png_set_compression_level(png, options.compression_level);
  png_set_filter(png, PNG_FILTER_TYPE_BASE,
                 options.filter == PngFilter::kNone ? PNG_FILTER_NONE : PNG_FILTER_SUB);
  png_set_IHDR(png, info, image.width, image.height, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_BASE, PNG_FILTER_TYPE_BASE);
  png_write_info(png, info);
  // Rows stay BGRX in memory: libpng swaps to RGB order and drops the 4th byte as it writes.
  png_set_bgr(png);
  png_set_filler(png, 0, PNG_FILLER_AFTER);
  for (int y = 0; y < image.height; ++y) {
    png_write_row(png, const_cast<png_bytep>(image.row(y)));  // libpng's API is not const
  }
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

Result<std::vector<uint8_t>> encode_jpeg(const ImageView& image, const JpegOptions& options) {
  if (auto c = check_image(image); !c) return c.error();
  if (options.quality < 1 || options.quality > 100) {
    return make_error(Errc::kInvalidArgument, "bad_jpeg_quality", "JPEG quality must be 1..100");
  }
  thread_local TjState tj;
  if (tj.handle == nullptr) {
    tj.handle = tjInitCompress();
    if (tj.handle == nullptr) {
      return make_error(Errc::kInternal, "jpeg_failed", "tjInitCompress failed");
    }
  }
  int samp = TJSAMP_420;
  switch (options.subsampling) {
    case ChromaSubsampling::k444:
      samp = TJSAMP_444;
      break;
    case ChromaSubsampling::k422:
      samp = TJSAMP_422;
      break;
    case ChromaSubsampling::k420:
      samp = TJSAMP_420;
      break;
  }
  const int pf = image.format == PixelFormat::kBgra ? TJPF_BGRA : TJPF_BGRX;
  // A worst-case buffer, kept for the next call; NOREALLOC because we track its size ourselves.
  const unsigned long need = tjBufSize(image.width, image.height, samp);
  if (need == static_cast<unsigned long>(-1) || need > static_cast<unsigned long>(INT_MAX)) {
    return make_error(Errc::kInvalidArgument, "bad_image", "image too large for JPEG");
  }
  if (tj.buf_size < need) {
    if (tj.buf != nullptr) tjFree(tj.buf);
    tj.buf = tjAlloc(static_cast<int>(need));
    tj.buf_size = tj.buf != nullptr ? need : 0;
    if (tj.buf == nullptr) return make_error(Errc::kInternal, "jpeg_failed", "tjAlloc failed");
  }
  unsigned long size = tj.buf_size;
  if (tjCompress2(tj.handle, image.data, image.width, image.stride, image.height, pf, &tj.buf,
                  &size, samp, options.quality, TJFLAG_FASTDCT | TJFLAG_NOREALLOC) != 0) {
    return make_error(Errc::kInternal, "jpeg_failed",
                      std::string("tjCompress2: ") + tjGetErrorStr2(tj.handle));
  }
  return std::vector<uint8_t>(tj.buf, tj.buf + size);
}

}  // namespace cabin::vnc
