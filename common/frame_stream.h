// The agent's frame stream on the wire (GET /agent/v1/frames): after the HTTP response header,
// one record per frame, each an 8-byte header and the encoded image.
//
//   u32 BE  image length in bytes (1..kMaxFrameBytes)
//   u16 BE  image width   (1..kMaxFrameDim)
//   u16 BE  image height  (1..kMaxFrameDim)
//   image   PNG or JPEG bytes, as the stream was asked for
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "common/result.h"

namespace cabin::frames {

inline constexpr size_t kFrameHeaderSize = 8;
inline constexpr uint32_t kMaxFrameBytes = 32u << 20;  // a 4096x4096 PNG of noise fits
inline constexpr int kMaxFrameDim = 8192;
inline constexpr int kMaxFps = 60;
inline constexpr int kDefaultFps = 15;

struct FrameHeader {
  uint32_t length = 0;
  int width = 0;
  int height = 0;
};

std::array<uint8_t, kFrameHeaderSize> encode_header(const FrameHeader& h);

// Checks every field; the sender is the guest, so nothing in it is trusted.
Result<FrameHeader> decode_header(std::span<const uint8_t, kFrameHeaderSize> bytes);

}  // namespace cabin::frames
