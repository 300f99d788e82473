#include "common/ws_frames.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

using cabin::ws::FrameTracker;

namespace {

std::vector<uint8_t> frame(uint8_t first, uint64_t len, bool masked = false) {
  std::vector<uint8_t> f{first};
  const uint8_t mask = masked ? 0x80 : 0;
  if (len < 126) {
    f.push_back(mask | static_cast<uint8_t>(len));
  } else if (len <= 0xffff) {
    f.push_back(mask | 126);
    f.push_back(static_cast<uint8_t>(len >> 8));
    f.push_back(static_cast<uint8_t>(len));
  } else {
    f.push_back(mask | 127);
    for (int i = 7; i >= 0; --i) f.push_back(static_cast<uint8_t>(len >> (8 * i)));
  }
  if (masked) f.insert(f.end(), {1, 2, 3, 4});
  f.resize(f.size() + len, 'x');
  return f;
}

std::span<const uint8_t> bytes(const std::vector<uint8_t>& v) { return {v.data(), v.size()}; }

}  // namespace

TEST_CASE("the tracker finds where each frame ends, whatever the length's encoding") {
  for (uint64_t len : {0ull, 1ull, 125ull, 126ull, 65535ull, 65536ull, 300000ull}) {
    for (bool masked : {false, true}) {
      auto f = frame(0x82, len, masked);
      FrameTracker t;
      CHECK(t.at_boundary());
      // All but the last byte: inside the frame.
      CHECK(t.advance({f.data(), f.size() - 1}) == f.size() - 1);
      CHECK_FALSE(t.at_boundary());
      CHECK(t.advance({f.data() + f.size() - 1, 1}) == 1);
      CHECK(t.at_boundary());
      CHECK(t.frames() == 1);
    }
  }
}

TEST_CASE("with stop_at_boundary the tracker stops just after the frame in progress") {
  auto a = frame(0x01, 200);  // text, not FIN: a fragmented message
  auto b = frame(0x89, 4);    // a ping between the fragments
  auto c = frame(0x80, 70000);
  std::vector<uint8_t> all = a;
  all.insert(all.end(), b.begin(), b.end());
  all.insert(all.end(), c.begin(), c.end());

  FrameTracker t;
  CHECK(t.advance(bytes(all).first(10)) == 10);  // header and part of the first payload
  CHECK(t.advance(bytes(all).subspan(10), true) == a.size() - 10);
  CHECK(t.at_boundary());
  CHECK(t.advance(bytes(all).subspan(a.size()), true) == b.size());
  CHECK(t.advance(bytes(all).subspan(a.size() + b.size()), true) == c.size());
  CHECK(t.frames() == 3);
}

TEST_CASE("a header split across reads is put together") {
  auto f = frame(0x82, 1ull << 33, true);  // 14-byte header
  FrameTracker t;
  for (size_t i = 0; i < 14; ++i) {
    CHECK(t.advance(bytes(f).subspan(i, 1)) == 1);
    CHECK_FALSE(t.at_boundary());
  }
  CHECK_FALSE(t.broken());
}

TEST_CASE("what is no WebSocket stream breaks the tracker, which then consumes nothing") {
  std::vector<std::vector<uint8_t>> bad = {
      frame(0x83, 1),                       // reserved data opcode
      frame(0x8b, 1),                       // reserved control opcode
      frame(0x88, 126),                     // a control frame over 125 bytes
      frame(0x09, 1),                       // a fragmented control frame
      {0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 0},  // a length above 2^63
      {'H', 'T', 'T', 'P', '/', '1', '.', '1'},
  };
  for (const auto& f : bad) {
    FrameTracker t;
    t.advance(bytes(f));
    CHECK(t.broken());
    CHECK_FALSE(t.at_boundary());
    CHECK(t.advance(bytes(f)) == 0);
  }
}

TEST_CASE("a close frame carries its code and a reason cut to fit a control frame") {
  const std::string f = cabin::ws::close_frame(1001, "server shutting down");
  CHECK(f.substr(0, 4) == std::string("\x88\x16\x03\xe9", 4));
  CHECK(f.substr(4) == "server shutting down");
  const std::string longer = cabin::ws::close_frame(1001, std::string(500, 'r'));
  CHECK(longer.size() == 2 + 125);
  FrameTracker t;
  CHECK(t.advance({reinterpret_cast<const uint8_t*>(longer.data()), longer.size()}) ==
        longer.size());
  CHECK(t.at_boundary());
}
