// RfbClientFilter: the host-side reader of what RFB clients send (no X, no sockets).
#include "vnc/rfb_filter.h"

#include <catch2/catch.hpp>
#include <string>

using cabin::vnc::RfbAccess;
using cabin::vnc::RfbClientFilter;

namespace {

std::string be16(uint16_t v) { return {static_cast<char>(v >> 8), static_cast<char>(v & 0xff)}; }
std::string be32(uint32_t v) { return be16(static_cast<uint16_t>(v >> 16)) + be16(static_cast<uint16_t>(v)); }

const std::string kHandshake = std::string("RFB 003.008\n") + '\x01' + '\x01';
const std::string kPixelFormat =
    std::string("\x00\x00\x00\x00\x20\x18\x00\x01\x00\xff\x00\xff\x00\xff\x10\x08\x00\x00\x00\x00", 20);
const std::string kEncodings = std::string("\x02\x00", 2) + be16(2) + be32(7) + be32(0);
const std::string kUpdate = std::string("\x03\x01", 2) + be16(0) + be16(0) + be16(640) + be16(480);
const std::string kKey = std::string("\x04\x01\x00\x00", 4) + be32('a');
const std::string kPointer = std::string("\x05\x01", 2) + be16(10) + be16(20);
std::string cut(const std::string& text) {
  return std::string("\x06\x00\x00\x00", 4) + be32(static_cast<uint32_t>(text.size())) + text;
}

// Feeds `in` in pieces of `chunk` bytes; returns what passed, or "ERR".
std::string run(RfbClientFilter& f, const std::string& in, size_t chunk) {
  std::string out;
  for (size_t at = 0; at < in.size(); at += chunk) {
    const auto* p = reinterpret_cast<const uint8_t*>(in.data() + at);
    if (!f.feed({p, std::min(chunk, in.size() - at)}, out)) return "ERR";
  }
  return out;
}

}  // namespace

TEST_CASE("control clients pass every message, however the bytes are split", "[rfb_filter]") {
  const std::string stream =
      kHandshake + kPixelFormat + kEncodings + kUpdate + kKey + kPointer + cut("hello");
  const size_t chunk = GENERATE(1, 2, 3, 7, 13, 1000);
  RfbClientFilter f(RfbAccess::kControl);
  CHECK(run(f, stream, chunk) == stream);
  CHECK(f.messages() == 6);
  CHECK(f.dropped() == 0);
}

TEST_CASE("view-only clients lose keys, pointer and cut text, nothing else", "[rfb_filter]") {
  const size_t chunk = GENERATE(1, 5, 1000);
  RfbClientFilter f(RfbAccess::kView);
  const std::string stream =
      kHandshake + kPixelFormat + kKey + kEncodings + kPointer + kUpdate + cut("x") + kUpdate;
  CHECK(run(f, stream, chunk) == kHandshake + kPixelFormat + kEncodings + kUpdate + kUpdate);
  CHECK(f.messages() == 7);
  CHECK(f.dropped() == 3);
}

TEST_CASE("RFB 3.3 clients send no security choice", "[rfb_filter]") {
  RfbClientFilter f(RfbAccess::kControl);
  const std::string s = std::string("RFB 003.003\n") + '\x01' + kUpdate;
  CHECK(run(f, s, 1) == s);
}

TEST_CASE("extended clipboard cut text (negative length) is read by its magnitude",
          "[rfb_filter]") {
  RfbClientFilter f(RfbAccess::kControl);
  const std::string ext = std::string("\x06\x00\x00\x00", 4) + be32(static_cast<uint32_t>(-4)) +
                          std::string("\x00\x00\x00\x01", 4);
  CHECK(run(f, kHandshake + ext + kUpdate, 3) == kHandshake + ext + kUpdate);
  RfbClientFilter bad(RfbAccess::kControl);
  CHECK(run(bad, kHandshake + std::string("\x06\x00\x00\x00", 4) + be32(0x80000000u), 100) == "ERR");
}

TEST_CASE("SetDesktopSize is read and always dropped", "[rfb_filter]") {
  RfbClientFilter f(RfbAccess::kControl);
  const std::string resize = std::string("\xfb\x00", 2) + be16(800) + be16(600) +
                             std::string("\x01\x00", 2) + std::string(16, '\0');
  CHECK(run(f, kHandshake + resize + kUpdate, 4) == kHandshake + kUpdate);
  CHECK(f.dropped() == 1);
}

TEST_CASE("malformed client streams are errors, and stay errors", "[rfb_filter]") {
  struct Case {
    const char* what;
    std::string bytes;
  };
  const Case cases[] = {
      {"not RFB", "GET / HTTP/1.1\r\n\r\n"},
      {"unknown version", "RFB 004.000\n"},
      {"VNC authentication chosen", std::string("RFB 003.008\n") + '\x02'},
      {"unknown message type", kHandshake + std::string("\x07", 1)},
      {"QEMU message", kHandshake + std::string("\xff\x00", 2)},
      {"too many encodings", kHandshake + std::string("\x02\x00", 2) + be16(257)},
      {"huge cut text", kHandshake + std::string("\x06\x00\x00\x00", 4) + be32(1024 * 1024 + 1)},
      {"bad bits per pixel", kHandshake + std::string("\x00\x00\x00\x00\x18", 5) + std::string(15, '\0')},
      {"no screens", kHandshake + std::string("\xfb\x00", 2) + be32(0) + std::string("\x00\x00", 2)},
      {"too many screens", kHandshake + std::string("\xfb\x00", 2) + be32(0) + std::string("\x11\x00", 2)},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    RfbClientFilter f(RfbAccess::kControl);
    CHECK(run(f, c.bytes, 1) == "ERR");
    std::string out;
    const uint8_t ok[] = {3};
    CHECK_FALSE(f.feed(ok, out));
    CHECK(out.empty());
  }
}

TEST_CASE("a cut text at the limit passes and the buffer shrinks after it", "[rfb_filter]") {
  RfbClientFilter f(RfbAccess::kControl);
  const std::string big = cut(std::string(cabin::vnc::kMaxClientCutText, 'z'));
  const std::string out = run(f, kHandshake + big + kUpdate, 65536);
  CHECK(out.size() == kHandshake.size() + big.size() + kUpdate.size());
}

TEST_CASE("incomplete messages are held back until whole", "[rfb_filter]") {
  RfbClientFilter f(RfbAccess::kControl);
  std::string out;
  CHECK(run(f, kHandshake + kUpdate.substr(0, 9), 100) == kHandshake);
  const uint8_t last = static_cast<uint8_t>(kUpdate[9]);
  CHECK(f.feed({&last, 1}, out));
  CHECK(out == kUpdate);
}
