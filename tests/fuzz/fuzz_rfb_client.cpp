// Fuzz target: the host-side reader of RFB client messages, fed in random-sized pieces.
#include <cstdint>
#include <string>

#include "vnc/rfb_filter.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using cabin::vnc::RfbAccess;
  using cabin::vnc::RfbClientFilter;
  // The first byte picks the access and the piece size; the rest is the stream.
  if (size == 0) return 0;
  const RfbAccess access = (data[0] & 1) != 0 ? RfbAccess::kControl : RfbAccess::kView;
  const size_t piece = 1 + (data[0] >> 1);
  RfbClientFilter whole(access);
  RfbClientFilter split(access);
  std::string out_whole, out_split;
  const bool ok_whole = whole.feed({data + 1, size - 1}, out_whole).ok();
  bool ok_split = true;
  for (size_t at = 1; at < size && ok_split; at += piece) {
    ok_split = split.feed({data + at, std::min(piece, size - at)}, out_split).ok();
  }
  // Splitting never changes the verdict or the bytes that pass, and nothing passes that was not
  // sent; view-only output never holds more than was sent.
  if (ok_whole != ok_split) __builtin_trap();
  if (ok_whole && out_whole != out_split) __builtin_trap();
  if (out_whole.size() > size - 1) __builtin_trap();
  return 0;
}
