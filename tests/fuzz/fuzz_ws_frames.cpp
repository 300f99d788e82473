// Fuzz target: the frame-boundary tracker of relayed WebSocket streams (Chromium's, and a preview
// app's, which is hostile). Fed in pieces that the input itself chooses, stopping at boundaries or
// not, it must find the same frame ends as a reading of the whole stream at once.
#include <cstdint>
#include <span>
#include <vector>

#include "common/ws_frames.h"

namespace {

// The frame ends in `s`, by a plain reading of RFC 6455; `broken` when a header is invalid.
std::vector<size_t> reference(std::span<const uint8_t> s, bool& broken) {
  std::vector<size_t> ends;
  size_t at = 0;
  broken = false;
  while (at + 2 <= s.size()) {
    const uint8_t op = s[at] & 0x0f;
    const bool fin = s[at] & 0x80;
    const bool masked = s[at + 1] & 0x80;
    const uint8_t len7 = s[at + 1] & 0x7f;
    uint64_t len = len7;
    size_t head = 2;
    if (len7 == 126) head = 4;
    if (len7 == 127) head = 10;
    if (masked) head += 4;
    if (at + head > s.size()) break;
    if (len7 == 126) len = (uint64_t{s[at + 2]} << 8) | s[at + 3];
    if (len7 == 127) {
      len = 0;
      for (int i = 0; i < 8; ++i) len = (len << 8) | s[at + 2 + i];
    }
    if ((op >= 3 && op <= 7) || op >= 0xb || (len >> 63) || (op >= 8 && (len > 125 || !fin))) {
      broken = true;
      break;
    }
    if (len > s.size() - at - head) break;
    at += head + static_cast<size_t>(len);
    ends.push_back(at);
  }
  return ends;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t pieces = data[0];
  std::span<const uint8_t> s(data + 1, size - 1);
  bool broken = false;
  const auto want = reference(s, broken);

  for (bool stop : {false, true}) {
    cabin::ws::FrameTracker t;
    std::vector<size_t> ends;
    size_t at = 0;
    size_t step = 1;
    while (at < s.size()) {
      // Pieces of 1 to 16 bytes, in a pattern the first byte picks.
      const size_t len = std::min<size_t>(s.size() - at, 1 + ((pieces * step++) & 15));
      size_t fed = 0;
      while (fed < len) {
        const uint64_t before = t.frames();
        const size_t used = t.advance(s.subspan(at + fed, len - fed), stop);
        if (used > len - fed) __builtin_trap();
        fed += used;
        if (stop && t.frames() > before) {
          if (t.frames() != before + 1 || !t.at_boundary()) __builtin_trap();
          ends.push_back(at + fed);
        }
        if (used == 0 || t.broken()) break;
        if (!stop && fed < len) __builtin_trap();  // without stopping it takes all it is given
      }
      if (t.broken()) break;
      at += len;
    }
    if (t.broken() != broken) __builtin_trap();
    if (t.frames() != want.size()) __builtin_trap();
    if (stop && ends != want) __builtin_trap();
    if (!broken && t.at_boundary() != (want.empty() ? s.empty() : want.back() == s.size()))
      __builtin_trap();
  }
  return 0;
}
