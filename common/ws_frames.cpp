#include "common/ws_frames.h"

#include <algorithm>

namespace cabin::ws {

size_t FrameTracker::header_size(const uint8_t* h) {
  const uint8_t len7 = h[1] & 0x7f;
  size_t n = 2;
  if (len7 == 126) n += 2;
  if (len7 == 127) n += 8;
  if (h[1] & 0x80) n += 4;
  return n;
}

bool FrameTracker::check_header() {
  const uint8_t opcode = header_[0] & 0x0f;
  const bool fin = header_[0] & 0x80;
  const uint8_t len7 = header_[1] & 0x7f;
  if ((opcode >= 3 && opcode <= 7) || opcode >= 0xb) return false;
  uint64_t len = len7;
  if (len7 == 126) {
    len = (uint64_t{header_[2]} << 8) | header_[3];
  } else if (len7 == 127) {
    len = 0;
    for (int i = 0; i < 8; ++i) len = (len << 8) | header_[2 + i];
    if (len >> 63) return false;
  }
  if (opcode >= 8 && (len > 125 || !fin)) return false;
  payload_left_ = len;
  return true;
}

size_t FrameTracker::advance(std::span<const uint8_t> in, bool stop_at_boundary) {
  size_t used = 0;
  while (used < in.size() && !broken_) {
    if (payload_left_ == 0) {
      // In a header: take what it still needs.
      const size_t want = header_len_ < 2 ? 2 : header_size(header_);
      const size_t take = std::min(want - header_len_, in.size() - used);
      std::copy_n(in.data() + used, take, header_ + header_len_);
      header_len_ += take;
      used += take;
      if (header_len_ < 2 || header_len_ < header_size(header_)) continue;
      if (!check_header()) {
        broken_ = true;
        break;
      }
      header_len_ = 0;
      if (payload_left_ > 0) continue;
    } else {
      const uint64_t skip = std::min<uint64_t>(payload_left_, in.size() - used);
      payload_left_ -= skip;
      used += static_cast<size_t>(skip);
      if (payload_left_ > 0) continue;
    }
    ++frames_;  // the frame ended here
    if (stop_at_boundary) break;
  }
  return used;
}

std::string close_frame(uint16_t code, std::string_view reason) {
  reason = reason.substr(0, kMaxCloseReason);
  std::string f;
  f.reserve(4 + reason.size());
  f.push_back(static_cast<char>(0x88));  // FIN, close
  f.push_back(static_cast<char>(2 + reason.size()));
  f.push_back(static_cast<char>(code >> 8));
  f.push_back(static_cast<char>(code & 0xff));
  f.append(reason);
  return f;
}

}  // namespace cabin::ws
