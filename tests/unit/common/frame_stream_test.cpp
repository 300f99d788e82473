#include "common/frame_stream.h"

#include <catch2/catch.hpp>

using namespace cabin::frames;

TEST_CASE("frame headers round-trip and every field is range-checked") {
  const FrameHeader h{123456, 1920, 1080};
  const auto bytes = encode_header(h);
  CHECK(bytes == std::array<uint8_t, 8>{0x00, 0x01, 0xe2, 0x40, 0x07, 0x80, 0x04, 0x38});
  auto back = decode_header(bytes);
  REQUIRE(back);
  CHECK(back->length == 123456);
  CHECK(back->width == 1920);
  CHECK(back->height == 1080);

  for (const auto& bad : std::vector<std::array<uint8_t, 8>>{
           {0, 0, 0, 0, 0, 1, 0, 1},              // empty image
           {0x02, 0x00, 0x00, 0x01, 0, 1, 0, 1},  // one byte over kMaxFrameBytes
           {0, 0, 0, 1, 0, 0, 0, 1},              // width 0
           {0, 0, 0, 1, 0, 1, 0, 0},              // height 0
           {0, 0, 0, 1, 0x20, 0x01, 0, 1},        // width 8193
       }) {
    auto r = decode_header(bad);
    CHECK_FALSE(r);
    if (!r) CHECK(r.error().errc == cabin::Errc::kBadGateway);
  }
  CHECK(decode_header(encode_header({kMaxFrameBytes, kMaxFrameDim, kMaxFrameDim})));
}
