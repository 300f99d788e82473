#include "common/frame_stream.h"

namespace cabin::frames {

std::array<uint8_t, kFrameHeaderSize> encode_header(const FrameHeader& h) {
  const auto w = static_cast<uint16_t>(h.width);
  const auto ht = static_cast<uint16_t>(h.height);
  return {static_cast<uint8_t>(h.length >> 24), static_cast<uint8_t>(h.length >> 16),
          static_cast<uint8_t>(h.length >> 8),  static_cast<uint8_t>(h.length),
          static_cast<uint8_t>(w >> 8),         static_cast<uint8_t>(w),
          static_cast<uint8_t>(ht >> 8),        static_cast<uint8_t>(ht)};
}

Result<FrameHeader> decode_header(std::span<const uint8_t, kFrameHeaderSize> b) {
  FrameHeader h;
  h.length = (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
  h.width = (b[4] << 8) | b[5];
  h.height = (b[6] << 8) | b[7];
  if (h.length == 0 || h.length > kMaxFrameBytes) {
    return make_error(Errc::kBadGateway, "agent_error",
                      "frame length " + std::to_string(h.length) + " is out of range");
  }
  if (h.width < 1 || h.height < 1 || h.width > kMaxFrameDim || h.height > kMaxFrameDim) {
    return make_error(Errc::kBadGateway, "agent_error", "frame size is out of range");
  }
  return h;
}

}  // namespace cabin::frames
