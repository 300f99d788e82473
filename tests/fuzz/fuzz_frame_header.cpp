// Fuzz target: cabind's reader of the agent's frame stream headers (the guest is hostile).
#include <cstdint>
#include <span>

#include "common/frame_stream.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cabin::frames;
  if (size < kFrameHeaderSize) return 0;
  auto h = decode_header(std::span<const uint8_t, kFrameHeaderSize>(data, kFrameHeaderSize));
  if (!h) return 0;
  if (h->length == 0 || h->length > kMaxFrameBytes || h->width < 1 || h->height < 1 ||
      h->width > kMaxFrameDim || h->height > kMaxFrameDim) {
    __builtin_trap();
  }
  // What passes encodes back to the same bytes.
  auto again = encode_header(*h);
  for (size_t i = 0; i < kFrameHeaderSize; ++i) {
    if (again[i] != data[i]) __builtin_trap();
  }
  return 0;
}
