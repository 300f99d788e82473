// Frame boundaries in a WebSocket byte stream that cabind relays without decoding (the CDP bridge,
// preview tunnels): enough of RFC 6455 to know where one frame ends, so that a close frame of
// cabind's own can go in between two of the other side's frames. Payloads are skipped, never
// held; at most one frame header (14 bytes) is.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace cabin::ws {

inline constexpr size_t kMaxFrameHeader = 14;  // 2 + 8 (length) + 4 (mask)
// RFC 6455 5.5: a control frame's payload fits in 125 bytes, so a close reason in 123.
inline constexpr size_t kMaxCloseReason = 123;

// What cabind's WebSocket clients hear when it shuts down, and how long they have to answer (and
// a relayed server to finish the frame it is in) before their connection is cut.
inline constexpr uint16_t kCloseGoingAway = 1001;
inline constexpr std::string_view kGoingAwayReason = "server shutting down";
inline constexpr std::chrono::seconds kGoingAwayGrace{3};

class FrameTracker {
 public:
  // Consumes bytes of the stream from the start of `in`. With `stop_at_boundary`, stops just
  // after the first frame that ends within them. Returns the bytes consumed; less than
  // `in.size()` only when it stopped at a boundary or the stream is broken.
  size_t advance(std::span<const uint8_t> in, bool stop_at_boundary = false);

  // Between two frames: nothing of a frame has been seen that is not complete.
  bool at_boundary() const { return !broken_ && header_len_ == 0 && payload_left_ == 0; }
  // Not a WebSocket stream (a reserved opcode, a control frame longer than 125 bytes or
  // fragmented, a length above 2^63): nothing more is tracked.
  bool broken() const { return broken_; }
  uint64_t frames() const { return frames_; }

 private:
  // The header's size once its first two bytes are known.
  static size_t header_size(const uint8_t* h);
  bool check_header();

  uint8_t header_[kMaxFrameHeader] = {};
  size_t header_len_ = 0;
  uint64_t payload_left_ = 0;
  uint64_t frames_ = 0;
  bool broken_ = false;
};

// An unmasked close frame (a server's): `code`, then the reason cut to kMaxCloseReason bytes.
std::string close_frame(uint16_t code, std::string_view reason);

}  // namespace cabin::ws
